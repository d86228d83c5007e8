"""A topic that closes (unloaded, moved to another broker) while its keys are claimed or
its writes in flight leaves no key held on this broker: another topic of the scope that
repeats one of them gets an answer, it does not wait forever."""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any, cast

import pytest

from dedup_broker.domain_base.outcomes import PublishOutcome, PublishResult
from dedup_broker.key_dedup import topic as topic_module
from dedup_broker.key_dedup.claims import GroupKeys
from dedup_broker.key_dedup.scope import KeyScope
from dedup_broker.key_dedup.sends import Written
from dedup_broker.key_dedup.store import KeyStore
from dedup_broker.key_dedup.topic import TopicKeyDedup
from dedup_broker.key_dedup.window import KeyDedupPolicy
from dedup_broker.protocol import pulsar_api_pb2 as pb
from tests.unit.key_dedup.test_all_new_groups import FakeLedger, FakeProducer, _send
from tests.unit.key_dedup.test_single_writer import FakeService, FakeStore, _no_members

WINDOW = 60_000


def _key(name: str) -> bytes:
    return hashlib.sha256(name.encode()).digest()[:16]


class SlowStore(FakeStore):
    """Redis that has not answered yet: claims wait until released."""

    def __init__(self) -> None:
        super().__init__()
        self.asked = asyncio.Event()
        self.answer = asyncio.Event()

    async def claim(self, *args: Any) -> dict[int, bytes]:
        self.asked.set()
        await self.answer.wait()
        return {}


def _scope(store: FakeStore, single_writer: bool) -> KeyScope:
    scope = KeyScope(
        "c|namespace:public/ns|content|60000",
        KeyDedupPolicy(enabled=True, window_ms=WINDOW),
        cast(KeyStore, store),
        1_000,
        _no_members,
        single_writer=single_writer,
    )
    scope.ready.set()
    return scope


def test_a_claim_cut_short_by_the_close_frees_its_keys() -> None:
    """(A single writer decides from memory without waiting: nothing to cut short.)"""

    async def scenario() -> None:
        store = SlowStore()
        scope = _scope(store, single_writer=False)
        group = GroupKeys(scope, scope.policy, cast(Any, FakeService(store)), b"owner")
        key = _key("a")
        asking = asyncio.get_running_loop().create_task(group.lookup([[key]]))
        await store.asked.wait()
        waiter = scope.in_flight.get(key)  # a repeat on another topic of the scope
        assert waiter is not None and not waiter.done()
        asking.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asking
        assert waiter.done() and waiter.result() is False
        assert key not in scope.in_flight

    asyncio.run(scenario())


class ClosingService(FakeService):
    def scope_released(self, scope: KeyScope) -> None:
        """The last topic of a scope left (nothing to close here)."""


class PendingAppends:
    """The topic's publish path with every write still in flight."""

    def __init__(self) -> None:
        self.results: list[PublishResult] = []

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
        if then is not None:
            stamped = timestamp or 0
            result.add_done_callback(lambda done: then(done.result(), stamped))
        self.results.append(result)
        return result


def test_a_write_that_fails_after_the_close_frees_its_keys(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def scenario() -> None:
        store = FakeStore()
        scope = _scope(store, single_writer=False)
        appends = PendingAppends()
        topic = TopicKeyDedup(
            cast(Any, "t"), cast(Any, FakeLedger()), cast(Any, ClosingService(store)), appends
        )
        topic.policy, topic.scope = scope.policy, scope
        topic._ready.set()
        key = _key("b")
        monkeypatch.setattr(topic_module, "entry_keys", lambda entry, source, metadata=None: [key])
        item = _send(b"e1", FakeProducer())
        await topic._process([item])
        assert len(appends.results) == 1 and key in scope.in_flight
        waiter = scope.in_flight.get(key)
        assert waiter is not None
        await topic.close()
        # The ledger closed under the write: its outcome reaches the closed topic.
        appends.results[0].set_result(PublishOutcome.failed(RuntimeError("ledger closed")))
        await asyncio.sleep(0)
        assert waiter.done() and waiter.result() is False
        assert key not in scope.in_flight

    asyncio.run(scenario())
