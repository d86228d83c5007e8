"""The checker's rules: what counts as lost, duplicated, out of order, for each kind of
reading path, and the failover gaps; and a kept history checked again from its files."""

from __future__ import annotations

from pathlib import Path

from verify.check import (
    Acked,
    Delivery,
    Fault,
    Mode,
    PathSpec,
    check_path,
    failover_gaps,
    out_of_order,
)
from verify.history import History, chunks_dropped_by_client, recheck, send_errors_seen

READER = PathSpec("reader", "t", Mode.EXACTLY_ONCE, True)
LIVE = PathSpec("exclusive", "t", Mode.AT_LEAST_ONCE, True)
LATEST = PathSpec("tableview", "t", Mode.LATEST_PER_KEY, True)


def acked(*ids: int) -> list[Acked]:
    return [Acked(i) for i in ids]


def delivered(*ids: int, consumer: int = 0, group: str = "") -> list[Delivery]:
    return [Delivery(i, consumer, group) for i in ids]


def test_a_reader_that_skips_a_stretch_has_lost_it() -> None:
    result = check_path(READER, acked(*range(10)), range(10), delivered(0, 1, 2, 7, 8, 9))
    assert (result.lost, result.duplicated, result.out_of_order) == (4, 0, 0)
    assert not result.ok


def test_a_reader_that_delivers_twice_or_late_fails() -> None:
    result = check_path(READER, acked(0, 1, 2, 3), range(4), delivered(0, 1, 1, 3, 2))
    assert (result.lost, result.duplicated, result.out_of_order) == (0, 1, 1)


def test_a_live_subscription_may_redeliver_until_acknowledgements_settle() -> None:
    during = delivered(0, 1, 2, 1, 2, 3)  # a failover: 1 and 2 again, in order from there
    result = check_path(LIVE, acked(0, 1, 2, 3), range(4), during)
    assert result.ok and result.redelivered == 2
    settled = check_path(LIVE, acked(0, 1, 2, 3), range(4), during, delivered(3))
    assert settled.duplicated == 1 and not settled.ok


def test_order_is_per_consumer_and_group_and_ignores_redeliveries() -> None:
    deliveries = [
        *delivered(0, 2, consumer=0, group="a"),
        *delivered(1, 3, consumer=1, group="a"),
        *delivered(5, 4, consumer=0, group="b"),
        *delivered(2, 0, 2, 6, consumer=0, group="a"),
    ]
    assert out_of_order(deliveries) == 1  # 4 after 5 in (0, "b")


def test_a_chunked_message_the_client_dropped_may_come_late_and_only_that_one(
    tmp_path: Path,
) -> None:
    log = tmp_path / "client.log"
    log.write_text(
        "2026-11-26 20:08:30.183 ERROR [1] ConsumerImpl:532 | Received a chunk whose chunk id"
        " is invalid (uuid: verify-chunked-0-5 chunkId: 0, messageId: (2128,110,-1,-1))\n"
        "2026-11-26 20:08:30.183 ERROR [1] ConsumerImpl:529 | Received an uncached chunk"
        " (uuid: verify-chunked-0-5 chunkId: 1, messageId: (2128,111,-1,-1))\n"
    )
    dropped = chunks_dropped_by_client(log)
    assert dropped == {"chunked-0": {5}}
    history = delivered(4, 6, 7, 5)
    excused = check_path(LIVE, acked(4, 5, 6, 7), range(8), history, (), dropped["chunked-0"])
    assert (excused.out_of_order, excused.ok) == (0, True)
    assert excused.notes == ["1 late after the client dropped their partly received chunks"]
    other = check_path(LIVE, acked(4, 5, 6, 7), range(8), delivered(5, 7, 6), (), {5})
    assert other.out_of_order == 1
    # Never brought back during the run: the next consumer of the subscription gets it,
    # once; twice, or an id the client did not drop, is still a duplicate and a loss.
    late = check_path(LIVE, acked(4, 5, 6, 7), range(8), delivered(4, 6, 7), delivered(5), {5})
    assert (late.lost, late.duplicated, late.ok) == (0, 0, True)
    assert late.notes == ["1 dropped by the client, received after the run once"]
    twice = check_path(LIVE, acked(4, 5, 6, 7), range(8), delivered(4, 6, 7), delivered(5, 5), {5})
    assert (twice.lost, twice.duplicated) == (1, 2)
    undropped = check_path(LIVE, acked(4, 5, 6, 7), range(8), delivered(4, 6, 7), delivered(5))
    assert (undropped.lost, undropped.duplicated) == (1, 1)


def test_send_errors_the_client_dropped_its_connection_for_are_counted_by_kind(
    tmp_path: Path,
) -> None:
    log = tmp_path / "client.log"
    prefix = "2026-11-27 04:49:43.763 WARN  [1] ClientConnection:1521 | [127.0.0.1:38176 ->"
    log.write_text(
        f"{prefix} 127.0.0.1:45581] Received send error from server: an earlier copy\n"
        f"{prefix} 127.0.0.1:45581] Received send error from server: Redis at 127.0.0.1:1\n"
        f"{prefix} 127.0.0.1:45582] Received send error from server: Redis at 127.0.0.1:2\n"
        f"{prefix} 127.0.0.1:45581] Connection disconnected (refCnt: 4)\n"
    )
    seen = send_errors_seen(log)
    assert seen == {"Redis at N.N.N.N:N": 2, "an earlier copy": 1}
    assert send_errors_seen(tmp_path / "none.log") == {}


def test_ids_no_producer_sent_are_unexpected() -> None:
    result = check_path(READER, acked(0, 1), range(2), delivered(0, 1, 7))
    assert result.unexpected == 1 and not result.ok


def test_unacknowledged_but_stored_messages_are_noted_not_failed() -> None:
    result = check_path(READER, acked(0, 1), range(3), delivered(0, 1, 2))
    assert result.ok and result.notes == ["1 stored without an acknowledgement"]


def test_latest_per_key_wants_each_keys_last_value() -> None:
    history = [Acked(0, "a"), Acked(1, "b"), Acked(2, "a"), Acked(3, "b")]
    good = [Delivery(0, 0, "a"), Delivery(2, 0, "a"), Delivery(3, 0, "b")]
    assert check_path(LATEST, history, range(4), good).ok
    stale = [Delivery(2, 0, "a"), Delivery(1, 0, "b")]
    assert check_path(LATEST, history, range(4), stale).lost == 1
    backwards = [Delivery(2, 0, "a"), Delivery(0, 0, "a"), Delivery(3, 0, "b")]
    result = check_path(LATEST, history, range(4), backwards)
    assert result.out_of_order == 1 and result.lost == 1


def test_failover_gap_is_the_slowest_producers_first_ack_after_the_fault() -> None:
    times = {"a": [1.0, 2.0, 9.0, 10.0], "b": [1.5, 3.5, 4.0]}
    assert failover_gaps([Fault("kill-9", "broker-0", 2.5, 3.0)], times) == [6.5]
    # Some producer never acknowledged again: no gap to report.
    assert failover_gaps([Fault("kill-9", "broker-0", 9.5, 9.6)], times) == []


def test_a_kept_history_is_checked_again_from_its_files(tmp_path: Path) -> None:
    history = History(tmp_path)
    history.topic("t", "persistent://public/default/t")
    for i in range(5):
        history.acked("t", i)
    history.sent("t", 5)
    history.path(READER)
    for i in (0, 1, 3, 4):
        history.delivered(READER, i)
    history.path(LIVE)
    for i in range(5):
        history.delivered(LIVE, i)
    history.delivered(LIVE, 4, settle=True)
    history.close()
    results, times = recheck(tmp_path)
    assert [(r.path, r.lost, r.duplicated) for r in results] == [
        ("reader", 1, 0),
        ("exclusive", 0, 1),
    ]
    assert len(times["t"]) == 5
