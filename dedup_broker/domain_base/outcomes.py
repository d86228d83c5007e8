"""What a publish came to, as a value; the session decides what the client hears.

Pulsar's split: ``PersistentTopic`` + ``PublishContext`` decide, ``ServerCnx`` answers. A
producer's SEND ends in exactly one outcome: stored at a position, a duplicate of what is
already stored, unknown (an earlier copy is still being written, so the client must resend
later), or failed (the error says whether retrying may succeed).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from enum import Enum

from dedup_broker.errors import BrokerError, RetriableError
from dedup_broker.storage.api import Position


class PublishStatus(Enum):
    STORED = "stored"
    DUPLICATE = "duplicate"
    UNKNOWN = "unknown"
    FAILED = "failed"


class EarlierCopyInFlightError(RetriableError):
    """An earlier copy of the message is still being written; resend after it settled."""


class EarlierSendFailedError(RetriableError):
    """An earlier SEND of the producer failed: this one is not stored either, so that the
    client's resend, from the failed one on, stores them in order."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(f"an earlier message of this producer failed ({cause}); resend from it")


@dataclass(frozen=True, slots=True)
class PublishOutcome:
    status: PublishStatus
    position: Position | None = None
    error: BaseException | None = None

    @property
    def retriable(self) -> bool:
        """A failure the client may retry (everything but a permanent error)."""
        if self.status is not PublishStatus.FAILED:
            return True
        return not isinstance(self.error, BrokerError) or self.error.retriable

    @staticmethod
    def stored(position: Position) -> PublishOutcome:
        return PublishOutcome(PublishStatus.STORED, position)

    @staticmethod
    def duplicate(stored_at: Position | None = None) -> PublishOutcome:
        """Stored before: the receipt has no position (-1:-1), as Pulsar answers, unless
        the copy stored is known (a resent chunk of a chunked message)."""
        return (
            DUPLICATE if stored_at is None else PublishOutcome(PublishStatus.DUPLICATE, stored_at)
        )

    @staticmethod
    def failed(error: BaseException) -> PublishOutcome:
        return PublishOutcome(PublishStatus.FAILED, error=error)


DUPLICATE = PublishOutcome(PublishStatus.DUPLICATE)
UNKNOWN = PublishOutcome(
    PublishStatus.UNKNOWN,
    error=EarlierCopyInFlightError(
        "an earlier copy of this message is still being written; resend later"
    ),
)

PublishResult = asyncio.Future[PublishOutcome]
"""The outcome of one SEND, once it is known."""


def settled(outcome: PublishOutcome) -> PublishResult:
    """A result that is known at once (a duplicate, a refused SEND)."""
    future: PublishResult = asyncio.get_running_loop().create_future()
    future.set_result(outcome)
    return future
