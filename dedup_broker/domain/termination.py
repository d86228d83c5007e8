"""Terminated topics (``POST .../terminate``): no more messages are taken, consumers hear
when everything is acknowledged (``REACHED_END_OF_TOPIC``).

The last position is stored with the managed ledger, so a topic stays terminated across
restarts and handovers, as Pulsar keeps ``terminatedPosition`` in its ledger info.

Producers learn it as on Pulsar: the broker closes them (CLOSE_PRODUCER) and refuses them
with ``TopicTerminatedError`` when they come back, which makes the clients fail their
pending messages with it. A SEND met while the topic is being terminated waits,
unanswered, for that close (:class:`TerminationGate`): a SEND_ERROR would make the Go
client forget the producer without failing its pending messages, which then time out.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import TYPE_CHECKING

from dedup_broker.domain_base.names import TopicName
from dedup_broker.domain_base.outcomes import PublishOutcome, PublishResult, settled
from dedup_broker.errors import PermanentError
from dedup_broker.storage.api import ManagedCursor, ManagedLedger, Position

if TYPE_CHECKING:
    from dedup_broker.domain.consumer import Consumer

TERMINATED_PROPERTY = "pulsar.terminated.position"


class TopicTerminatedError(PermanentError):
    """The topic was terminated: it takes no producer and no message any more."""


def terminated_position(properties: Mapping[str, str]) -> Position | None:
    """The last position of a terminated topic (its managed ledger's properties)."""
    stored = properties.get(TERMINATED_PROPERTY)
    if not stored:
        return None
    ledger_id, _, entry_id = stored.partition(":")
    return Position(int(ledger_id), int(entry_id))


def terminated_property(position: Position) -> str:
    return f"{position.ledger_id}:{position.entry_id}"


class TerminationGate:
    """What a terminated topic answers a SEND: ``TopicTerminatedError``, once its
    producers are closed; while they are being closed, after that."""

    __slots__ = ("_closing",)

    def __init__(self) -> None:
        self._closing: asyncio.Future[None] | None = None

    def refuse(self, name: TopicName) -> PublishResult:
        refusal = TopicTerminatedError(f"Topic {name} is terminated")
        closing = self._closing
        if closing is None or closing.done():
            return settled(PublishOutcome.failed(refusal))
        result: PublishResult = asyncio.get_running_loop().create_future()

        def closed(_: asyncio.Future[None]) -> None:
            if not result.done():
                result.set_result(PublishOutcome.failed(refusal))

        closing.add_done_callback(closed)
        return result

    @contextlib.asynccontextmanager
    async def closing_producers(self) -> AsyncIterator[None]:
        """Around a termination, until its producers are closed."""
        closing: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._closing = closing
        try:
            yield
        finally:
            closing.set_result(None)


def tell_end_of_topic(
    ledger: ManagedLedger, cursor: ManagedCursor, consumers: Iterable[Consumer]
) -> None:
    """On a terminated topic whose subscription acknowledged everything, each consumer
    hears it once (``REACHED_END_OF_TOPIC``). Pulsar tells only then, not when a consumer
    merely read everything: the Go client drops its connection on that command, so telling
    a consumer with unacknowledged messages would cut every producer and consumer sharing
    its connection."""
    if terminated_position(ledger.properties) is None or cursor.backlog() > 0:
        return
    for consumer in consumers:
        if not consumer.told_end_of_topic:
            consumer.told_end_of_topic = True
            consumer.link.reached_end_of_topic(consumer)
