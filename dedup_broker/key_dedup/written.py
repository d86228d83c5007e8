"""What a topic's appended writes settle under key deduplication: their keys stored,
freed, or in doubt until the ledger learns what a failed write left (the log is the
truth: what landed is stored, the rest is free again)."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Protocol

from dedup_broker.domain_base.outcomes import PublishOutcome, PublishStatus
from dedup_broker.errors import BrokerError
from dedup_broker.key_dedup import recovery
from dedup_broker.key_dedup.sends import Written
from dedup_broker.key_dedup.sole import HeldWrite, SoleWrites, settle_landed
from dedup_broker.key_dedup.store import KeyStoreUnavailableError
from dedup_broker.key_dedup.window import KeyDedupPolicy, now_ms
from dedup_broker.lazy import LazyDeque

if TYPE_CHECKING:
    from dedup_broker.key_dedup.scope import KeyScope
    from dedup_broker.key_dedup.service import KeyDedupService
    from dedup_broker.storage.api import ManagedLedger, Position

log = logging.getLogger(__name__)


class WritingTopic(Protocol):
    """The topic whose writes these are (its key deduplication)."""

    closed: bool
    ledger: ManagedLedger
    service: KeyDedupService
    scope: KeyScope | None
    policy: KeyDedupPolicy | None

    @property
    def owner(self) -> bytes: ...


class WriteOutcomes:
    """One topic's writes whose outcome decides what becomes of their keys."""

    def __init__(self, topic: WritingTopic) -> None:
        self._topic = topic
        self.failed: LazyDeque[list[bytes] | HeldWrite] = LazyDeque()
        """Keys (several writers) or writes (a single writer) of failed writes in doubt."""

    def claimed(self, scope: KeyScope, keys: list[bytes]) -> Written:
        """Several writers: the keys a write claimed are stored, or wait for what the
        ledger learns of a failure."""
        ledger = self._topic.ledger.name

        def written(outcome: PublishOutcome, anchor: int) -> None:
            if outcome.status is not PublishStatus.STORED or outcome.position is None:
                if self._topic.closed:
                    # Never resolved here: a repeat on another topic of the scope
                    # asks Redis (where the claim stays) instead of waiting forever.
                    scope.in_flight.settle_all(keys, False)
                    return
                self.failed.append(keys)
                scope.hold_checkpoint(ledger, True)
                return
            scope.stored(keys, anchor, ledger, str(outcome.position))

        return written

    def alone(self, scope: KeyScope, writes: SoleWrites, write: HeldWrite, anchor: int) -> Written:
        """A single writer: a stored write's keys stay (and go to Redis's copy)."""
        ledger = self._topic.ledger.name

        def written(outcome: PublishOutcome, _: int) -> None:
            if outcome.status is not PublishStatus.STORED or outcome.position is None:
                if self._topic.closed:  # the next load reads the log
                    writes.settle(write, False)
                    return
                self.failed.append(write)
                scope.hold_checkpoint(ledger, True)
                return
            writes.settle(write, True)
            scope.stored_packed(write.packed, anchor, ledger, str(outcome.position))

        return written

    def release(self, keys: list[bytes]) -> None:
        """Keys claimed for writes that did not happen are free again, here and in Redis."""
        scope = self._topic.scope
        if not keys or scope is None:
            return
        scope.in_flight.settle_all(keys, False)
        if scope.single_writer:  # nothing was claimed in Redis
            return
        store = self._topic.service.store

        async def release() -> None:
            try:
                await store.release(
                    scope.keys, keys, self._topic.owner, now_ms(), scope.policy.window_ms
                )
            except KeyStoreUnavailableError as exc:
                log.debug("release of %d claim(s) failed (they expire): %s", len(keys), exc)

        asyncio.get_running_loop().create_task(release())

    async def resolve_failure(self, told: Position, truth: Position) -> None:
        """What landed is stored (keys remembered); what did not is free again."""
        scope, policy = self._topic.scope, self._topic.policy
        if scope is None or policy is None:
            return
        ledger = self._topic.ledger
        try:
            landed = await recovery.landed_keys(ledger, told, truth, policy.key_source)
        except BrokerError as exc:
            log.error("%s: %s; their keys stay claimed until the topic reloads", ledger.name, exc)
            return
        failed, self.failed = self.failed, LazyDeque()
        if scope.writes is not None:
            alone = [w for w in failed if isinstance(w, HeldWrite)]
            for write, anchor, at in settle_landed(scope.writes, alone, landed):
                scope.stored_packed(write.packed, anchor, ledger.name, str(at))
            scope.hold_checkpoint(ledger.name, False)
            return
        claimed = [keys for keys in failed if not isinstance(keys, HeldWrite)]
        self.release(recovery.store_landed(scope, ledger.name, claimed, landed))

    def close(self, scope: KeyScope) -> None:
        """The topic closed: writes in doubt free their keys (the next load replays the
        log)."""
        for failed in self.failed:
            if not isinstance(failed, HeldWrite):
                scope.in_flight.settle_all(failed, False)
            elif scope.writes is not None:
                scope.writes.settle(failed, False)
        self.failed.clear()
