"""Which keys of a group a later SEND of the same group may repeat."""

from __future__ import annotations

from dedup_broker.key_dedup.claims import repeated_keys


def test_only_keys_of_more_than_one_send_are_repeated() -> None:
    # b"a" twice in one SEND is that SEND's own repeat (verdicts handle it), not the
    # group's; keyless messages (None) never count.
    key_lists: list[list[bytes | None]] = [[b"a", b"a", b"b", None], [b"c", None], [b"b", b"d"]]
    assert repeated_keys(key_lists) == {b"b"}
    assert repeated_keys([[b"x"], [b"y", b"x"], [b"x"]]) == {b"x"}
    assert repeated_keys([]) == set()
