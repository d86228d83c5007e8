"""A SEND on its way through key deduplication: what is queued, why it may be refused,
and how its answer waits for the writes it depends on."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from dedup_broker.domain_base.outcomes import (
    DUPLICATE,
    PublishOutcome,
    PublishResult,
    PublishStatus,
)
from dedup_broker.errors import ManagedLedgerClosedError, RetriableError
from dedup_broker.protocol import pulsar_api_pb2 as pb
from dedup_broker.protocol.batch import batch_sequence_range
from dedup_broker.protocol.commands import as_signed64

if TYPE_CHECKING:
    from dedup_broker.domain_base.producer import Producer


READY_WAIT_SECONDS = 5.0
"""How long a SEND waits for a recovery, a rebuild or a Redis that cannot be reached
before it fails (a Redis restart takes about a second)."""
REDIS_ASK_AGAIN_SECONDS = 0.1


class KeyDedupNotReadyError(RetriableError):
    """Key deduplication cannot decide now (Redis unreachable, window being rebuilt)."""


class RepeatOfLostWriteError(RetriableError):
    """A message was dropped as a repeat of a write that then failed: resend it."""


class ProducerGoneError(RetriableError):
    """The producer closed before its SEND was decided; its client resends elsewhere."""


Written = Callable[[PublishOutcome, int], None]
"""Hears an appended write's outcome, with its anchor (the timestamp it was written with)."""


class CheckedAppends(Protocol):
    """The topic's publish path after key deduplication (PIP-6 verdict, then the append)."""

    def append_checked(
        self,
        producer: Producer,
        send: pb.CommandSend,
        entry: bytes,
        metadata: pb.MessageMetadata,
        timestamp: int | None = None,
        then: Written | None = None,
    ) -> PublishResult:
        """``then`` hears the append's outcome as it is set (not a refusal answered at
        once)."""


@dataclass(eq=False, slots=True)
class QueuedSend:
    producer: Producer
    send: pb.CommandSend
    entry: bytes
    metadata: pb.MessageMetadata
    _result: PublishResult | None = field(default=None, init=False, repr=False)

    direct: bool = False
    """Decided as it arrived, before its answer was handed out: that answer may be the
    append's own result (no future made or chained, no turn of the loop)."""

    @property
    def result(self) -> PublishResult:
        """The SEND's answer, made when first asked for."""
        if self._result is None:
            self._result = asyncio.get_running_loop().create_future()
        return self._result

    @property
    def answered(self) -> bool:
        return self._result is not None and self._result.done()

    def answer_with(self, result: PublishResult, after: list[asyncio.Future[bool]]) -> None:
        """The append's outcome answers the SEND (once the writes in ``after`` settled)."""
        if self.direct and not after and self._result is None:
            self._result = result
        else:
            complete_after(result, after, self.result)

    def finish(self, outcome: PublishOutcome) -> None:
        result = self.result
        if not result.done():
            result.set_result(outcome)


@dataclass(eq=False)
class PreparedSend:
    item: QueuedSend
    keys: list[bytes | None] | None
    """One per message, in order; None when the entry's messages cannot be keyed."""


def topic_closed() -> ManagedLedgerClosedError:
    return ManagedLedgerClosedError("the topic closed before the message was decided")


def complete_after(
    result: PublishResult, after: list[asyncio.Future[bool]], target: PublishResult
) -> None:
    """``target`` gets ``result``'s outcome once every write in ``after`` settled; a stored
    or duplicate outcome becomes a retriable failure if any of those writes was lost."""

    def finish() -> None:
        outcome = result.result()
        lost = any(f.cancelled() or not f.result() for f in after)
        if lost and outcome.status in (PublishStatus.STORED, PublishStatus.DUPLICATE):
            outcome = PublishOutcome.failed(
                RepeatOfLostWriteError(
                    "a message of this batch was dropped as a repeat of a write that then "
                    "failed; resend"
                )
            )
        if not target.done():
            target.set_result(outcome)

    waiting: list[asyncio.Future[Any]] = [result, *(f for f in after if not f.done())]
    remaining = len(waiting)

    def one_done(_: asyncio.Future[Any]) -> None:
        nonlocal remaining
        remaining -= 1
        if remaining == 0:
            finish()

    for future in waiting:
        future.add_done_callback(one_done)


def highest_sequence_id(
    send: pb.CommandSend, metadata: pb.MessageMetadata, payload: bytes
) -> int | None:
    """The highest sequence id the SEND covers, kept by the rewritten entry."""
    lowest = as_signed64(send.sequence_id)
    if send.HasField("highest_sequence_id") and as_signed64(send.highest_sequence_id) >= lowest:
        return as_signed64(send.highest_sequence_id)
    return max(lowest, batch_sequence_range(metadata, payload)[1])


def finish_duplicate(item: QueuedSend, after: list[asyncio.Future[bool]]) -> None:
    """Every message of the SEND was a repeat: accepted, not stored (answered once the
    writes it depends on settled)."""
    done: PublishResult = asyncio.get_running_loop().create_future()
    done.set_result(DUPLICATE)
    complete_after(done, after, item.result)
