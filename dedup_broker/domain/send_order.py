"""A SEND whose earlier copy is still being written waits for that write, in its turn.

PIP-6 cannot tell whether such a SEND is a duplicate until the earlier copy's write ends
(Kafka acknowledges it, or the ledger's recovery finds what landed): its verdict is
Unknown. Pulsar answers Unknown with a send error at once, and the official clients
answer any send error but a checksum mismatch by dropping the connection, with every
producer and consumer on it: acknowledgements flushed into it are lost, and a client
resending after a reconnect, while the earlier copies wait for a Kafka that is down,
drops its connection every 100 ms. So the SEND waits instead, looking again when a write
of the topic ends (or after ``LOOK_AGAIN_S``), and is answered by its real outcome (a
duplicate once the copy is stored, written once it is known lost); only after
``WAIT_LIMIT_S`` does the client hear Unknown's error.

The producer's later SENDs wait behind it: written before it, one would raise the
persisted sequence id past it, and its resend would pass for a duplicate. For the same
reason a waiting SEND gives up once a write of its producer failed: the client resends
from the failed one on.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from dedup_broker.domain_base.outcomes import (
    EarlierSendFailedError,
    PublishOutcome,
    PublishResult,
    PublishStatus,
    settled,
)
from dedup_broker.domain_base.producer import Producer

LOOK_AGAIN_S = 0.05
WAIT_LIMIT_S = 10.0

PublishNow = Callable[[], PublishResult]
"""One attempt at a SEND: its verdict and, when admitted, its write."""
WriteEnd = Callable[[], "asyncio.Future[None]"]
"""A future resolved when the topic's next write ends."""


class WriteEnds:
    """Tells the SENDs that wait for an earlier copy that a write of the topic ended, so
    they look again at once (a key-based batch waits so for the batch before it)."""

    __slots__ = ("_next",)

    def __init__(self) -> None:
        self._next: asyncio.Future[None] | None = None

    def next(self) -> asyncio.Future[None]:
        if self._next is None:
            self._next = asyncio.get_running_loop().create_future()
        return self._next

    def ended(self) -> None:
        ends, self._next = self._next, None
        if ends is not None and not ends.done():
            ends.set_result(None)


def publish_in_turn(
    producer: Producer, publish: PublishNow, write_end: WriteEnd | None = None
) -> PublishResult:
    """``publish`` at once, unless an earlier SEND of ``producer`` still waits; a SEND
    whose verdict is Unknown waits for its earlier copy (see the module), looking again
    when ``write_end`` says a write ended."""
    ahead = producer.turn
    first: PublishResult | None = None
    if ahead is None:
        first = publish()
        if not _unknown(first):
            return first
    loop = asyncio.get_running_loop()
    turn: Turn = loop.create_future()
    producer.turn = turn
    turn.add_done_callback(lambda done: _turn_passed(producer, done))
    outcome: PublishResult = loop.create_future()
    task = loop.create_task(
        _wait_then_publish(producer, ahead, first, publish, turn, outcome, write_end)
    )
    _waiting.add(task)
    task.add_done_callback(_waiting.discard)
    return outcome


Turn = asyncio.Future[BaseException | None]
"""Resolves once a waiting SEND is past its wait: None when it was written or answered
without an error (the next SEND may go), else why it failed (every SEND behind it fails
too, for the client to resend them in order)."""

_waiting: set[asyncio.Task[None]] = set()


def _unknown(result: PublishResult) -> bool:
    return result.done() and result.result().status is PublishStatus.UNKNOWN


def _turn_passed(producer: Producer, turn: Turn) -> None:
    if producer.turn is turn:
        producer.turn = None


async def _wait_then_publish(
    producer: Producer,
    ahead: Turn | None,
    result: PublishResult | None,
    publish: PublishNow,
    turn: Turn,
    outcome: PublishResult,
    write_end: WriteEnd | None,
) -> None:
    try:
        failed_ahead = await ahead if ahead is not None else None
        if failed_ahead is not None:
            result = settled(PublishOutcome.failed(EarlierSendFailedError(failed_ahead)))
        else:
            deadline = time.monotonic() + WAIT_LIMIT_S
            if result is None:
                result = publish()
            while _unknown(result) and not producer.closed and time.monotonic() < deadline:
                if producer.write_failed is not None:
                    refusal = EarlierSendFailedError(producer.write_failed)
                    result = settled(PublishOutcome.failed(refusal))
                    break
                if write_end is None:
                    await asyncio.sleep(LOOK_AGAIN_S)
                else:
                    await asyncio.wait([write_end()], timeout=LOOK_AGAIN_S)
                result = publish()
    finally:
        turn.set_result(_why_failed(result))
    _chain(result, outcome)


def _why_failed(result: PublishResult | None) -> BaseException | None:
    """What the SENDs behind a waiting one hear of it: None if it went on (written, or
    answered without an error)."""
    if result is None:
        return RuntimeError("cancelled while waiting")
    return result.result().error if result.done() else None


def _chain(source: PublishResult, target: PublishResult) -> None:
    def copy(done: PublishResult) -> None:
        target.set_result(done.result())

    if source.done():
        copy(source)
    else:
        source.add_done_callback(copy)
