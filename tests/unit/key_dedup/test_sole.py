"""A single writer decides from its own memory: a repeat of a write in flight waits for
that write's outcome, a lost write frees its keys, and with ``reject`` SENDs fail while
Redis does not take the stored keys."""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any, cast

import pytest

from dedup_broker.domain_base.outcomes import PublishOutcome, PublishStatus
from dedup_broker.key_dedup import topic as topic_module
from dedup_broker.key_dedup.scope import KeyScope
from dedup_broker.key_dedup.sends import RepeatOfLostWriteError
from dedup_broker.key_dedup.store import KeyStore, KeyStoreUnavailableError
from dedup_broker.key_dedup.topic import TopicKeyDedup
from dedup_broker.key_dedup.window import KeyDedupPolicy, OnRedisUnavailable, now_ms
from dedup_broker.storage.api import Position
from tests.unit.key_dedup.test_all_new_groups import FakeLedger, _send, packed
from tests.unit.key_dedup.test_closing_topic import ClosingService, PendingAppends
from tests.unit.key_dedup.test_single_writer import FakeStore, _no_members

WINDOW = 60_000


def _key(name: str) -> bytes:
    return hashlib.sha256(name.encode()).digest()[:16]


def _topic(
    monkeypatch: pytest.MonkeyPatch,
    keys: dict[bytes, list[bytes | None]],
    on_redis_unavailable: OnRedisUnavailable = OnRedisUnavailable.REJECT,
) -> tuple[TopicKeyDedup, KeyScope, PendingAppends]:
    store = FakeStore()
    policy = KeyDedupPolicy(
        enabled=True, window_ms=WINDOW, on_redis_unavailable=on_redis_unavailable
    )
    scope = KeyScope(
        "c|topic:t|content|60000", policy, cast(KeyStore, store), 1_000, _no_members, True
    )
    scope.ready.set()
    appends = PendingAppends()
    topic = TopicKeyDedup(
        cast(Any, "t"), cast(Any, FakeLedger()), cast(Any, ClosingService(store)), appends
    )
    topic.policy, topic.scope = policy, scope
    topic._ready.set()
    monkeypatch.setattr(
        topic_module, "entry_keys", lambda entry, source, metadata=None: keys[entry]
    )
    monkeypatch.setattr(
        topic_module, "entry_keys_packed", lambda entry, source, metadata: packed(keys[entry])
    )
    return topic, scope, appends


@pytest.mark.parametrize("stored", [True, False])
def test_a_repeat_of_a_write_in_flight_waits_for_its_outcome(
    stored: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def scenario() -> None:
        a = _key("a")
        topic, scope, appends = _topic(monkeypatch, {b"e1": [a], b"e2": [a], b"e3": [a]})
        first, repeat = _send(b"e1"), _send(b"e2")
        await topic._process([first, repeat])
        assert len(appends.results) == 1 and scope.stats()["keysInFlight"] == 1
        await asyncio.sleep(0)
        assert not repeat.result.done()  # waits for the first write
        if stored:
            appends.results[0].set_result(PublishOutcome.stored(Position(1, 0)))
        else:  # the ledger then learns nothing landed after it: the key is free again
            appends.results[0].set_result(PublishOutcome.failed(RuntimeError("lost")))
            await asyncio.sleep(0)
            assert not repeat.result.done()  # in doubt until then
            await topic.outcomes.resolve_failure(Position(1, 0), Position(1, 0))
        outcome = await asyncio.wait_for(repeat.result, 5)
        if stored:
            assert outcome.status is PublishStatus.DUPLICATE
        else:
            assert isinstance(outcome.error, RepeatOfLostWriteError)
        assert scope.dropped == 1
        later = _send(b"e3")
        await topic._process([later])
        # Stored: a repeat again. Lost: the key was free, so the copy is kept.
        assert len(appends.results) == (1 if stored else 2)
        assert scope.dropped == (2 if stored else 1)
        assert scope.stats()["keysInFlight"] == (0 if stored else 1)
        if stored:
            assert (await later.result).status is PublishStatus.DUPLICATE

    asyncio.run(scenario())


def test_a_write_lost_after_the_close_frees_its_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    async def scenario() -> None:
        a = _key("a")
        topic, scope, appends = _topic(monkeypatch, {b"e1": [a]})
        await topic._process([_send(b"e1")])
        assert scope.window is not None and scope.window.anchors([a], now_ms()) != {}
        await topic.close()
        appends.results[0].set_result(PublishOutcome.failed(RuntimeError("ledger closed")))
        await asyncio.sleep(0)
        assert scope.window.anchors([a], now_ms()) == {}
        assert scope.stats()["keysInFlight"] == 0

    asyncio.run(scenario())


@pytest.mark.parametrize("mode", list(OnRedisUnavailable))
def test_reject_fails_sends_while_redis_does_not_take_the_keys(
    mode: OnRedisUnavailable, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def scenario() -> None:
        monkeypatch.setattr(topic_module, "READY_WAIT_SECONDS", 0.2)
        topic, scope, appends = _topic(monkeypatch, {b"e1": [_key("a")]}, mode)
        scope.redis_failing_since = now_ms()
        item = _send(b"e1")
        await topic._process([item])
        if mode is OnRedisUnavailable.REJECT:
            assert isinstance((await item.result).error, KeyStoreUnavailableError)
            assert appends.results == [] and scope.stats()["keysInFlight"] == 0
        else:
            assert len(appends.results) == 1

    asyncio.run(scenario())


def test_a_ready_single_writer_decides_each_send_as_it_arrives(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def scenario() -> None:
        a, b = _key("a"), _key("b")
        topic, scope, appends = _topic(monkeypatch, {b"e1": [a], b"e2": [a], b"e3": [b]})
        first = _send(b"e1")
        answer = topic.submit(first.producer, first.send, first.entry, first.metadata)
        assert len(appends.results) == 1  # appended before any turn of the loop
        assert answer is appends.results[0]  # the append's own answer, nothing chained
        repeat = _send(b"e2")
        repeated = topic.submit(repeat.producer, repeat.send, repeat.entry, repeat.metadata)
        assert len(appends.results) == 1 and not repeated.done()  # waits for the first
        # While the topic is not ready, SENDs queue, and keep their order once it is.
        topic._ready.clear()
        later = _send(b"e3")
        queued = topic.submit(later.producer, later.send, later.entry, later.metadata)
        await asyncio.sleep(0.05)
        assert len(appends.results) == 1
        topic._ready.set()
        for _ in range(100):
            await asyncio.sleep(0.01)
            if len(appends.results) == 2:
                break
        assert len(appends.results) == 2 and not queued.done()
        appends.results[0].set_result(PublishOutcome.stored(Position(1, 0)))
        appends.results[1].set_result(PublishOutcome.stored(Position(1, 1)))
        assert (await asyncio.wait_for(repeated, 5)).status is PublishStatus.DUPLICATE
        assert (await asyncio.wait_for(queued, 5)).status is PublishStatus.STORED
        assert scope.kept == 2 and scope.dropped == 1
        await topic.close()

    asyncio.run(scenario())
