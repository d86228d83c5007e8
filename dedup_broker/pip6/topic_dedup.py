"""PIP-6 on one topic: turns a SEND into a verdict and keeps the state machine fed.

The state machine itself (pushed/persisted maps, snapshots, recovery) lives in
``dedup_broker.pip6.state``; this module knows the protocol side: where a SEND's
sequence range comes from, chunked messages, and reading back what landed after a
failed Kafka write.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dedup_broker.errors import BrokerError, PermanentError, ProtocolError
from dedup_broker.lazy import LazyLock
from dedup_broker.pip6.chunks import Chunk
from dedup_broker.pip6.policy import deduplication_enabled, snapshot_interval_seconds
from dedup_broker.pip6.state import MessageDeduplication
from dedup_broker.pip6.stored import SequenceRun, sequence_run
from dedup_broker.pip6.verdicts import DedupStatus, Verdict
from dedup_broker.protocol import pulsar_api_pb2 as pb
from dedup_broker.protocol.batch_rewrite import rewrite_batch
from dedup_broker.protocol.commands import as_signed64
from dedup_broker.protocol.framing import parse_message

if TYPE_CHECKING:
    from collections.abc import Mapping

    from dedup_broker.config import BrokerConfig
    from dedup_broker.domain_base.names import TopicName
    from dedup_broker.domain_base.policies import Policies
    from dedup_broker.storage.api import ManagedLedger, Position

log = logging.getLogger(__name__)

FAILURE_READ_CHUNK = 500


class BatchNotSplittableError(PermanentError):
    """A batch is partly stored already, and its messages cannot be told apart (an
    encrypted payload): storing it whole would store some twice, so it is refused."""


@dataclass(slots=True)
class Admission:
    """A SEND's verdict and what its write is recorded as once stored (not frozen: one
    is made per SEND, and a frozen dataclass sets each field through a slow path)."""

    verdict: Verdict
    producer_name: str
    lowest: int
    highest: int
    ids: tuple[int, ...] | None = None
    """The ids written, when they are not exactly ``lowest..highest``."""
    rewritten: tuple[pb.MessageMetadata, bytes] | None = None
    """Admitted in part: the entry to write instead, holding only the new messages."""
    chunk: Chunk | None = None
    """An early chunk of a chunked message (recorded as a chunk, not as a mark)."""
    stored_at: Position | None = None
    """A duplicate chunk's stored position (its receipt names it)."""


class TopicDeduplication:
    __slots__ = (
        "_change",
        "_connected",
        "config",
        "ledger",
        "name",
        "policies",
        "state",
        "verdicts",
    )

    def __init__(
        self,
        name: TopicName,
        ledger: ManagedLedger,
        config: BrokerConfig,
        policies: Policies,
        connected: Mapping[str, object],
    ) -> None:
        """``connected``: the topic's producers by name, as they come and go (told to the
        state when deduplication is enabled while they are connected)."""
        self.name = name
        self.ledger = ledger
        self.config = config
        self.policies = policies
        self.state: MessageDeduplication | None = None
        self._connected = connected
        self._change = LazyLock()
        self.verdicts: dict[str, int] = {}
        """Verdicts given but NotDup, by their value (PartlyDup included): ``/metrics``."""

    @property
    def enabled(self) -> bool:
        return self.state is not None

    @property
    def status(self) -> DedupStatus:
        return self.state.status if self.state else DedupStatus.DISABLED

    async def apply_policy(self) -> None:
        """Enable (recovering first) or disable according to the effective policy."""
        async with self._change:
            wanted = deduplication_enabled(self.policies, self.config, self.name)
            interval = snapshot_interval_seconds(self.policies, self.config, self.name)
            if self.state is not None:
                self.state.snapshot_interval_seconds = interval
            if wanted and self.state is None:
                state = MessageDeduplication(self.config, self.ledger)
                state.snapshot_interval_seconds = interval
                self.state = state
                for name in self._connected:
                    state.producer_connected(name)
                await state.enable()
                log.debug("deduplication enabled on %s: %s", self.name, state.stats())
            elif wanted and self.state is not None and self.state.status == DedupStatus.FAILED:
                await self.state.enable()
            elif not wanted and self.state is not None:
                state, self.state = self.state, None
                await state.disable()
                log.info("deduplication disabled on %s", self.name)

    def check(self, send: pb.CommandSend, entry: bytes, metadata: pb.MessageMetadata) -> Admission:
        """The verdict for one SEND, with what ``persisted`` needs once it is stored;
        counted unless NotDup (an Unknown each time a waiting SEND asks again)."""
        admission = self._verdict(send, entry, metadata)
        verdict = Verdict.PARTLY_DUP if admission.rewritten is not None else admission.verdict
        if verdict is not Verdict.NOT_DUP:
            self.verdicts[verdict.value] = self.verdicts.get(verdict.value, 0) + 1
        return admission

    def _verdict(
        self, send: pb.CommandSend, entry: bytes, metadata: pb.MessageMetadata
    ) -> Admission:
        state = self.state
        name = metadata.producer_name
        lowest = as_signed64(send.sequence_id)
        if state is None:
            return Admission(Verdict.NOT_DUP, name, lowest, lowest)
        chunk = Chunk.of(metadata)
        if chunk is not None and not chunk.is_last:
            verdict, stored_at = state.check_chunk(chunk)
            return Admission(verdict, "", lowest, lowest, chunk=chunk, stored_at=stored_at)
        low, high, ids = self._sequence(send, entry, metadata, lowest)
        verdict = state.check(name, low, high, holes=chunk is None)
        if verdict is not Verdict.PARTLY_DUP:
            return Admission(verdict, name, low, high, ids)
        every = list(ids) if ids is not None else list(range(low, high + 1))
        return self._admit_part(state, name, metadata, entry, (low, high, every))

    @staticmethod
    def _admit_part(
        state: MessageDeduplication,
        name: str,
        metadata: pb.MessageMetadata,
        entry: bytes,
        run: tuple[int, int, list[int]],
    ) -> Admission:
        """A SEND partly stored already (``run``: its range and every message's id):
        only its new messages are written."""
        low, high, ids = run
        keep = state.marks.keep_of(name, ids)
        if not any(keep):
            return Admission(Verdict.DUP, name, low, high)
        if all(keep):
            state.marks.admit_part(name, high)
            whole = None if ids == list(range(low, high + 1)) else tuple(ids)
            return Admission(Verdict.NOT_DUP, name, low, high, whole)
        kept = [i for i, new in zip(ids, keep, strict=True) if new]
        try:  # the entry keeps the SEND's range (its holes are opened from it again)
            rewritten = rewrite_batch(metadata, parse_message(entry).payload, keep, high)
        except ProtocolError as exc:
            raise BatchNotSplittableError(
                f"a batch of producer {name!r} holds messages stored already and new ones, "
                f"and cannot be split to store only the new ones: {exc}"
            ) from exc
        state.marks.admit_part(name, max(kept))
        return Admission(Verdict.NOT_DUP, name, low, high, tuple(kept), rewritten)

    @staticmethod
    def _sequence(
        send: pb.CommandSend, entry: bytes, metadata: pb.MessageMetadata, lowest: int
    ) -> SequenceRun:
        """The SEND's ids (``sequence_run``), the highest the client gave taken from the
        command first, as Pulsar does."""
        given: int | None = None
        if send.HasField("highest_sequence_id"):
            given = as_signed64(send.highest_sequence_id)
        elif metadata.HasField("highest_sequence_id"):
            given = as_signed64(metadata.highest_sequence_id)
        return sequence_run(metadata, lowest, given, entry)

    def persisted(self, admission: Admission, position: Position) -> None:
        if self.state is None:
            return
        if admission.chunk is not None:
            self.state.on_chunk_persisted(admission.chunk, position)
        elif admission.producer_name:
            self.state.on_persisted(
                admission.producer_name,
                admission.highest,
                position,
                admission.lowest,
                admission.ids,
            )

    def write_failed(self) -> None:
        if self.state is not None:
            self.state.on_write_failed()

    def last_sequence_id(self, name: str) -> int:
        return self.state.last_sequence_id(name) if self.state is not None else -1

    def producer_connected(self, name: str) -> None:
        if self.state is not None:
            self.state.producer_connected(name)

    def producer_disconnected(self, name: str) -> None:
        if self.state is not None:
            self.state.producer_disconnected(name)

    async def housekeeping(self) -> None:
        """Periodic: a snapshot of a quiet topic, idle producers, a failed recovery retried."""
        if self.state is None:
            return
        self.state.maybe_snapshot_on_timer()
        if self.state.status is DedupStatus.FAILED:
            await self.apply_policy()

    def stats(self) -> dict[str, object]:
        if self.state is None:
            return {"status": DedupStatus.DISABLED.value}
        return self.state.stats()

    async def close(self) -> None:
        if self.state is not None:
            await self.state.close()

    # --- after a failed Kafka write -------------------------------------------------
    def write_failure_resolved(self, told: Position, truth: Position) -> None:
        """The ledger learnt what a failed write left: replay what landed."""
        if self.state is not None:
            asyncio.get_running_loop().create_task(self._replay_landed(told, truth))

    async def _replay_landed(self, told: Position, truth: Position) -> None:
        """Feed the state machine what Kafka really stored beyond what we were told."""
        state = self.state
        if state is None:
            return
        ledger = self.ledger
        landed = []
        position = ledger.next_position(told)
        try:
            while told < truth and position <= truth:
                chunk = await ledger.read_entries(position, FAILURE_READ_CHUNK)
                chunk = [e for e in chunk if e.position <= truth]
                if not chunk:
                    break
                landed.extend(chunk)
                position = ledger.next_position(chunk[-1].position)
            await state.resolve_after_failure(landed)
            log.info(
                "%s: after a failed write, %d entr(ies) had landed up to %s",
                self.name,
                len(landed),
                truth,
            )
        except BrokerError as exc:
            log.warning("%s: cannot read back landed entries yet (%s); retrying", ledger.name, exc)
            asyncio.get_running_loop().call_later(
                1.0, lambda: self.write_failure_resolved(told, truth)
            )
