"""A group whose keys are all new and distinct takes a shorter path (no verdict per
message, states written only when asked for): it must decide exactly as the general one.
A single writer's memory (no claim) decides as claims do."""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any, cast

import pytest

from dedup_broker.domain_base.outcomes import PublishOutcome, PublishResult, PublishStatus
from dedup_broker.key_dedup import claimed
from dedup_broker.key_dedup import topic as topic_module
from dedup_broker.key_dedup.claims import GroupKeys
from dedup_broker.key_dedup.memory import InFlightKeys
from dedup_broker.key_dedup.scope import KeyScope
from dedup_broker.key_dedup.sends import ProducerGoneError, QueuedSend, Written
from dedup_broker.key_dedup.store import KeyStore, unpack_runs
from dedup_broker.key_dedup.topic import TopicKeyDedup
from dedup_broker.key_dedup.window import KeyDedupPolicy, KeyState, PackedKeys, now_ms
from dedup_broker.protocol import pulsar_api_pb2 as pb
from dedup_broker.storage.api import Position
from tests.unit.key_dedup.test_single_writer import FakeService, FakeStore, _no_members

WINDOW = 60_000


def _key(name: str) -> bytes:
    return hashlib.sha256(name.encode()).digest()[:16]


class FakeProducer:
    def __init__(self, closed: bool = False) -> None:
        self.closed = closed


class FakeLedger:
    name = "ledger-1"


class FakeAppends:
    """The topic's publish path: stores every entry at the next position, except those
    whose first byte says otherwise."""

    def __init__(self) -> None:
        self.appended: list[bytes] = []

    def append_checked(
        self,
        producer: Any,
        send: pb.CommandSend,
        entry: bytes,
        metadata: pb.MessageMetadata,
        timestamp: int | None = None,
        then: Written | None = None,
    ) -> PublishResult:
        result: PublishResult = asyncio.get_running_loop().create_future()
        if entry.startswith(b"dup"):  # refused at once: ``then`` hears nothing
            result.set_result(PublishOutcome(PublishStatus.DUPLICATE))
            return result
        self.appended.append(entry)
        outcome = PublishOutcome.stored(Position(1, len(self.appended)))
        result.set_result(outcome)
        if then is not None:  # as Kafka's acknowledgement: on a later turn of the loop
            asyncio.get_running_loop().call_soon(then, outcome, timestamp or 0)
        return result


def _topic(single_writer: bool) -> tuple[TopicKeyDedup, KeyScope, FakeAppends, FakeStore]:
    store = FakeStore()
    service = FakeService(store)
    policy = KeyDedupPolicy(enabled=True, window_ms=WINDOW)
    scope = KeyScope(
        "c|topic:t|content|60000",
        policy,
        cast(KeyStore, store),
        1_000,
        _no_members,
        single_writer=single_writer,
    )
    scope.ready.set()
    appends = FakeAppends()
    topic = TopicKeyDedup(cast(Any, "t"), cast(Any, FakeLedger()), cast(Any, service), appends)
    topic.policy, topic.scope = policy, scope
    topic._ready.set()
    return topic, scope, appends, store


def _send(entry: bytes, producer: FakeProducer | None = None) -> QueuedSend:
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=now_ms())
    return QueuedSend(cast(Any, producer or FakeProducer()), pb.CommandSend(), entry, metadata)


GROUPS: dict[str, list[tuple[bytes, list[bytes | None] | None, bool]]] = {
    # (entry, its keys, producer closed)
    "all new": [(b"e1", [_key("a"), _key("b")], False), (b"e2", [_key("c")], False)],
    "a closed producer": [(b"e1", [_key("a")], True), (b"e2", [_key("b")], False)],
    "an unkeyed entry": [(b"e1", None, False), (b"e2", [_key("b")], False)],
    "an entry not appended": [(b"dup1", [_key("a")], False), (b"e2", [_key("b")], False)],
    "a repeat inside the group": [(b"e1", [_key("a")], False), (b"e2", [_key("a")], False)],
    "a message without a key": [(b"e1", [_key("a"), None], False)],
}


async def _run(
    single_writer: bool,
    group: list[tuple[bytes, list[bytes | None] | None, bool]],
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[object, ...]:
    topic, scope, appends, store = _topic(single_writer)
    scope.stored([_key("old")], now_ms(), "ledger-1", "1:0")
    keys = {entry: keys for entry, keys, _ in group}
    monkeypatch.setattr(
        topic_module, "entry_keys", lambda entry, source, metadata=None: keys[entry]
    )
    monkeypatch.setattr(
        topic_module, "entry_keys_packed", lambda entry, source, metadata: packed(keys[entry])
    )
    items = [_send(entry, FakeProducer(closed)) for entry, _, closed in group]
    await topic._process(items)
    await asyncio.sleep(0)
    results = [await item.result for item in items]
    outcomes = [(o.status, type(o.error).__name__ if o.error else None) for o in results]
    stats = scope.stats()
    await scope.close()  # what is still on its way goes to Redis
    return (
        outcomes,
        appends.appended,
        stats["keysInFlight"],
        scope.kept,
        scope.dropped,
        scope.unchecked,
        sorted(
            bytes(keys[at : at + 16])
            for value in store.confirmations
            for _, keys in unpack_runs(value)
            for at in range(0, len(keys), 16)
        ),
    )


KEPT_WHOLE = {  # SENDs the short path appends whole, per group
    "all new": 2,
    "a closed producer": 1,
    "an unkeyed entry": 1,
    "an entry not appended": 2,
    "a repeat inside the group": 0,
    "a message without a key": 0,
}


@pytest.mark.parametrize("name", list(GROUPS))
def test_the_short_path_decides_as_the_general_one(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    group = GROUPS[name]
    whole: list[bool] = []
    kept_whole = claimed._kept_whole

    def counted(*args: Any) -> bool:
        whole.append(kept_whole(*args))
        return whole[-1]

    monkeypatch.setattr(claimed, "_kept_whole", counted)
    short = asyncio.run(_run(False, group, monkeypatch))
    assert sum(whole) == KEPT_WHOLE[name]
    # The general path: every group looks as if a key might be held, every SEND gets a
    # verdict per message.
    monkeypatch.setattr(InFlightKeys, "none_held", lambda self, keys: False)
    monkeypatch.setattr(claimed, "_kept_whole", lambda *args: False)
    general = asyncio.run(_run(False, group, monkeypatch))
    assert short == general
    if name == "a closed producer":
        assert cast(list[Any], short[0])[0] == (
            PublishStatus.FAILED,
            ProducerGoneError.__name__,
        )


@pytest.mark.parametrize("name", list(GROUPS))
def test_a_single_writer_decides_as_claims_do(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    alone = asyncio.run(_run(True, GROUPS[name], monkeypatch))
    claimed = asyncio.run(_run(False, GROUPS[name], monkeypatch))
    assert alone == claimed


def test_only_groups_of_distinct_new_keys_take_the_short_path() -> None:
    async def scenario() -> None:
        store = FakeStore()
        _, scope, _, _ = _topic(False)
        service = cast(Any, FakeService(store))
        a, b, c = _key("a"), _key("b"), _key("c")

        async def all_new(key_lists: list[list[bytes | None]]) -> bool:
            group = GroupKeys(scope, scope.policy, service, b"owner")
            await group.lookup(key_lists)
            scope.in_flight.settle_all(list(group.owned), False)
            return group.all_new

        assert await all_new([[a, b], [c]])
        assert not await all_new([[a], [a]])  # a repeat inside the group
        assert not await all_new([[a, None]])  # a message without a key
        scope.cache.add(c, now_ms())
        assert not await all_new([[a, c]])  # a key the cache holds
        scope.in_flight.claim_new([b])
        assert not await all_new([[a, b]])  # a key a write in flight holds
        group = GroupKeys(scope, scope.policy, service, b"owner")
        await group.lookup([[a]])
        assert group.all_new and group.states == {a: KeyState.NEW}

    asyncio.run(scenario())


def packed(keys: list[bytes | None] | None) -> PackedKeys | None:
    return None if keys is None else PackedKeys.of(keys)
