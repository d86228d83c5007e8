"""Key-window deduplication on one topic: the ordered path from SEND to append.

While the topic's policy has it on, every SEND goes through a queue worked in arrival
order. The worker takes what has queued up, decides its keys (a single writer from its
own memory, ``sole.py``; else by one claim round trip to Redis for the group,
``claims.py``), then for each SEND in order drops the repeats, rewrites a batch that lost
some messages, and hands the entry to the topic's normal publish path (PIP-6 included).
Receipts keep each producer's order, since the official clients require it.

Only keys of entries Kafka acknowledged are remembered; a key held by a write in flight
makes a repeat wait for that write's outcome (``written.py``). After a restart (or when
Redis lost its data) the log is the source of truth: the entries of the last window are
read back before this topic accepts any message. A queued SEND, the errors it may be
answered with and how its answer waits for earlier writes: ``sends.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from typing import TYPE_CHECKING

from dedup_broker.domain_base.outcomes import PublishOutcome, PublishResult, PublishStatus
from dedup_broker.errors import BrokerError, ProtocolError, RetriableError
from dedup_broker.key_dedup import recovery
from dedup_broker.key_dedup.claimed import decide_claimed
from dedup_broker.key_dedup.sends import (
    READY_WAIT_SECONDS,
    REDIS_ASK_AGAIN_SECONDS,
    CheckedAppends,
    KeyDedupNotReadyError,
    PreparedSend,
    ProducerGoneError,
    QueuedSend,
    Written,
    finish_duplicate,
    highest_sequence_id,
    topic_closed,
)
from dedup_broker.key_dedup.sole import SoleWrites
from dedup_broker.key_dedup.store import KeyStoreUnavailableError, ScopeLostError
from dedup_broker.key_dedup.window import (
    KeyDedupPolicy,
    OnRedisUnavailable,
    entry_keys,
    entry_keys_packed,
    kept_records_compiled,
    now_ms,
)
from dedup_broker.key_dedup.written import WriteOutcomes
from dedup_broker.lazy import LazyDeque, LazyEvent, LazyLock
from dedup_broker.protocol import pulsar_api_pb2 as pb
from dedup_broker.protocol.batch_rewrite import rewrite_batch
from dedup_broker.protocol.framing import parse_message
from dedup_broker.storage.api import Position

if TYPE_CHECKING:
    from dedup_broker.domain_base.names import TopicName
    from dedup_broker.domain_base.producer import Producer
    from dedup_broker.key_dedup.scope import KeyScope
    from dedup_broker.key_dedup.service import KeyDedupService
    from dedup_broker.storage.api import ManagedLedger

log = logging.getLogger(__name__)

GROUP_MAX_SENDS = 256
"""SENDs decided together (one Redis round trip for all their new keys)..."""
GROUP_MAX_MESSAGES = 4096
"""...and at most about this many messages: a group's messages are parsed on the event
loop and its keys claimed in one Redis script, so an unbounded group (a client's whole
window of 1000-message batches) would hold the loop and Redis for seconds."""


class TopicKeyDedup:
    __slots__ = (
        "_appends",
        "_busy",
        "_change",
        "_owner",
        "_queue",
        "_ready",
        "_recovering",
        "_wake",
        "_worker",
        "closed",
        "errors",
        "ledger",
        "name",
        "outcomes",
        "policy",
        "scope",
        "service",
    )

    def __init__(
        self,
        name: TopicName,
        ledger: ManagedLedger,
        service: KeyDedupService,
        appends: CheckedAppends,
    ) -> None:
        self.name = name
        self.ledger = ledger
        self.service = service
        self._appends = appends
        self.closed = False
        self.policy: KeyDedupPolicy | None = None
        self.scope: KeyScope | None = None
        self._owner: bytes | None = None
        self._queue: LazyDeque[QueuedSend] = LazyDeque()
        self._wake = LazyEvent()
        self._worker: asyncio.Task[None] | None = None
        self._busy = False
        self._ready = LazyEvent()
        self._recovering: asyncio.Task[None] | None = None
        self.outcomes = WriteOutcomes(self)
        self._change = LazyLock()
        self.errors = 0

    @property
    def owner(self) -> bytes:
        """This load's mark on the keys it claims (``load id:ledger``), made on first use."""
        if self._owner is None:
            self._owner = f"{uuid.uuid4().hex[:12]}:{self.ledger.name}".encode()
        return self._owner

    @property
    def recovered(self) -> bool:
        return self._ready.is_set()

    def write_failure_resolved(self, told: Position, truth: Position) -> None:
        """The ledger learnt what a failed write left: settle the keys in doubt."""
        if self.scope is not None:
            asyncio.get_running_loop().create_task(self.outcomes.resolve_failure(told, truth))

    # --- policy -----------------------------------------------------------------------
    @property
    def intercepts(self) -> bool:
        """True while SENDs must go through the ordered queue."""
        return self.policy is not None or self._busy or bool(self._queue)

    async def apply_policy(self) -> None:
        async with self._change:
            service = self.service
            policy = service.policy_for(self.name)
            if not policy.enabled:
                if self.scope is not None:
                    self._detach()
                    log.info("key deduplication disabled on %s", self.name)
                self.policy = None
                return
            scope = service.scope_for(self.name, policy)
            if scope is self.scope and policy == self.policy:
                return
            if self.scope is not None:
                self._detach()
            self.policy = policy
            self.scope = scope
            scope.members.add(self)
            self._ready.clear()
            self._recovering = asyncio.get_running_loop().create_task(self._recover(scope))
            log.info("key deduplication on %s: %s", self.name, policy.to_json())

    def _detach(self) -> None:
        scope, self.scope = self.scope, None
        if self._recovering is not None:
            self._recovering.cancel()
        if scope is not None:
            scope.members.discard(self)
            self.service.scope_released(scope)

    async def _recover(self, scope: KeyScope) -> None:
        """Keys of entries written since the last checkpoint (a crash) go to Redis first."""
        scope.start()
        store = self.service.store
        while not self.closed and self.scope is scope:
            await scope.ready.wait()
            try:
                checkpoint = (await store.checkpoints(scope.keys)).get(self.ledger.name)
                # After the checkpoint was read: a key Redis gets later is replayed too.
                await scope.load_window()
                await self.replay(Position.parse(checkpoint) if checkpoint else None)
                if scope.ready.is_set():
                    self._ready.set()
                    return
            except ScopeLostError:  # Redis's copy cannot be read: rebuilt from the log
                scope.lost()
                await asyncio.sleep(0.5)
            except BrokerError as exc:
                log.warning("%s: key deduplication recovery: %s; retrying", self.name, exc)
                await asyncio.sleep(0.5)

    async def replay(self, after: Position | None) -> str | None:
        """Keys of stored entries to Redis; answers the topic's new checkpoint."""
        if self.scope is None or self.policy is None:
            return None
        return await recovery.replay(self.scope.write_now, self.policy, self.ledger, after)

    # --- the publish path ---------------------------------------------------------
    def submit(
        self,
        producer: Producer,
        send: pb.CommandSend,
        entry: bytes,
        metadata: pb.MessageMetadata,
    ) -> PublishResult:
        item = QueuedSend(producer, send, entry, metadata)
        writes = self._deciding_now()
        if writes is not None:
            self._decide_now(item, writes)
            return item.result
        self._queue.append(item)
        if self._worker is None or self._worker.done():
            self._worker = asyncio.get_running_loop().create_task(self._run())
        self._wake.set()
        return item.result

    def _deciding_now(self) -> SoleWrites | None:
        """A single writer's SEND is decided as it arrives, with no turn of the loop
        given up, when nothing waits before it and memory can decide: its writes in
        flight then; None when the SEND must queue."""
        scope, policy = self.scope, self.policy
        if self._queue or self._busy or self.closed or scope is None or policy is None:
            return None
        if scope.writes is None or not (self._ready.is_set() and scope.ready.is_set()):
            return None
        if scope.redis_failing_since is not None and (
            policy.on_redis_unavailable is not OnRedisUnavailable.ACCEPT
        ):
            return None
        return scope.writes

    def _decide_now(self, item: QueuedSend, writes: SoleWrites) -> None:
        scope, policy = self.scope, self.policy
        assert scope is not None and policy is not None
        item.direct = True  # its answer may be the append's own
        try:
            self._decide_alone(item, scope, writes, policy)
        except Exception as exc:  # keep the topic serving
            log.exception("%s: key deduplication failed on a SEND", self.name)
            if not item.answered:
                self.refuse(item, RetriableError(f"key deduplication failed: {exc}"))
        finally:
            item.direct = False

    def _prepare(self, item: QueuedSend, policy: KeyDedupPolicy) -> PreparedSend | None:
        """A SEND with its messages' keys; None when it was answered already."""
        if item.producer.closed:  # the client resends it on its new connection
            item.finish(PublishOutcome.failed(ProducerGoneError("the producer closed")))
            return None
        try:
            return PreparedSend(item, entry_keys(item.entry, policy.key_source, item.metadata))
        except ProtocolError as exc:
            self.refuse(item, exc)
            return None

    async def _run(self) -> None:
        while not self.closed:
            if not self._queue:
                self._wake.clear()
                await self._wake.wait()
                continue
            group: list[QueuedSend] = []
            messages = 0
            while self._queue and len(group) < GROUP_MAX_SENDS and messages < GROUP_MAX_MESSAGES:
                item = self._queue.popleft()
                group.append(item)
                messages += max(item.metadata.num_messages_in_batch, 1)
            self._busy = True
            try:
                await self._process(group)
            except asyncio.CancelledError:
                for item in group:
                    item.finish(PublishOutcome.failed(topic_closed()))
                raise
            except Exception as exc:  # keep the topic serving; answer what is left
                log.exception("%s: key deduplication failed on a group", self.name)
                for item in group:
                    if not item.answered:
                        self.refuse(item, RetriableError(f"key deduplication failed: {exc}"))
            finally:
                self._busy = False

    async def _process(self, group: list[QueuedSend]) -> None:
        policy, scope = self.policy, self.scope
        if policy is None or scope is None:
            for item in group:
                self.append_entry(item, item.entry, item.metadata, [], None)
            return
        accept = policy.on_redis_unavailable is OnRedisUnavailable.ACCEPT
        if scope.writes is not None:
            refusal = await self._alone_refusal(scope, accept)
            for item in group:
                if refusal is not None:
                    self.refuse(item, refusal)
                else:
                    self._decide_alone(item, scope, scope.writes, policy)
            return
        prepared = [p for p in (self._prepare(item, policy) for item in group) if p]
        if not prepared:
            return
        if not await self.wait_ready() and not accept:
            for p in prepared:
                self.refuse(p.item, KeyDedupNotReadyError("key deduplication is recovering"))
            return
        await decide_claimed(self, prepared, scope, policy)

    async def wait_ready(self) -> bool:
        """Both this topic's replay and the scope (marker, rebuild) done, within a bound."""
        scope = self.scope
        if scope is None:
            return False
        if self._ready.is_set() and scope.ready.is_set():
            return True  # the common case: no task made, no turn of the loop given up

        async def both() -> None:
            await self._ready.wait()
            await scope.ready.wait()

        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(both(), READY_WAIT_SECONDS)
        return self._ready.is_set() and scope.ready.is_set()

    def _decide_alone(
        self, item: QueuedSend, scope: KeyScope, writes: SoleWrites, policy: KeyDedupPolicy
    ) -> None:
        """One SEND of a single writer's scope: its keys claimed in memory, its repeats
        dropped, the rest appended (an answer waits for the writes it repeats keys of)."""
        if item.producer.closed:  # the client resends it on its new connection
            item.finish(PublishOutcome.failed(ProducerGoneError("the producer closed")))
            return
        entry, metadata = item.entry, item.metadata
        try:
            keys = entry_keys_packed(entry, policy.key_source, metadata)
        except ProtocolError as exc:
            self.refuse(item, exc)
            return
        if keys is None:
            scope.unchecked += max(metadata.num_messages_in_batch, 1)
            self.append_entry(item, entry, metadata, [], None)
            return
        anchor = metadata.publish_time or now_ms()
        sorting = writes.sort(keys, anchor)
        scope.unchecked += sorting.unchecked
        scope.dropped += sorting.dropped
        keep, write = sorting.keep, sorting.write
        if keep is not None:
            if not any(keep):
                finish_duplicate(item, sorting.after)
                return
            payload = parse_message(entry).payload
            highest = highest_sequence_id(item.send, metadata, payload)
            raw = kept_records_compiled(metadata, payload, keep)
            metadata, entry = rewrite_batch(metadata, payload, keep, highest, raw)
        written = None
        if write is not None:
            writes.flying(write)  # before the append: its outcome may be heard at once
            written = self.outcomes.alone(scope, writes, write, anchor)
        if self.append_entry(item, entry, metadata, sorting.after, written, anchor):
            scope.kept += (write.count if write is not None else 0) + sorting.unchecked
        elif write is not None:
            writes.settle(write, False)

    async def _alone_refusal(self, scope: KeyScope, accept: bool) -> BrokerError | None:
        """Why a single writer's queued SENDs are refused (None: they are decided)."""
        ready = await self.wait_ready()
        if accept:
            return None
        if not ready:
            return KeyDedupNotReadyError("key deduplication is recovering")
        if not await self._redis_takes(scope):
            return KeyStoreUnavailableError("Redis does not take keys")
        return None

    async def _redis_takes(self, scope: KeyScope) -> bool:
        """A single writer's memory still decides right while Redis is down, but Redis's
        copy (and the checkpoint a restart replays from) stops moving: with ``reject``,
        SENDs wait for it up to ``READY_WAIT_SECONDS``, as a claim would, then fail."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + READY_WAIT_SECONDS
        while scope.redis_failing_since is not None:
            if loop.time() >= deadline or self.closed:
                return False
            await asyncio.sleep(REDIS_ASK_AGAIN_SECONDS)
        return True

    def append_entry(
        self,
        item: QueuedSend,
        entry: bytes,
        metadata: pb.MessageMetadata,
        after: list[asyncio.Future[bool]],
        written: Written | None,
        anchor: int | None = None,
    ) -> bool:
        """Hand the (rewritten) entry to the topic; False if nothing was appended.
        ``written`` hears the write's outcome with its anchor (the publish time)."""
        anchor = anchor or metadata.publish_time or now_ms()
        result = self._appends.append_checked(
            item.producer, item.send, entry, metadata, anchor, written
        )
        item.answer_with(result, after)
        return not result.done() or result.result().status is PublishStatus.STORED

    def refuse(self, item: QueuedSend, exc: BaseException) -> None:
        self.errors += 1
        log.debug("%s: SEND %d not accepted: %s", self.name, item.send.sequence_id, exc)
        item.finish(PublishOutcome.failed(exc))

    # --- lifecycle and stats --------------------------------------------------------
    async def close(self) -> None:
        self.closed = True
        if self._worker is not None:
            self._worker.cancel()
        while self._queue:
            self._queue.popleft().finish(PublishOutcome.failed(topic_closed()))
        scope = self.scope
        if scope is not None:
            self.outcomes.close(scope)
            self._detach()

    def stats(self) -> dict[str, object]:
        if self.policy is None or self.scope is None:
            return {"enabled": False}
        return {
            "enabled": True,
            "ready": self._ready.is_set(),
            "queuedSends": len(self._queue),
            "errors": self.errors,
            **self.scope.stats(),
        }
