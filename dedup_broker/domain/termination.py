"""Terminated topics (``POST .../terminate``): no more messages are taken, consumers hear
when they have read everything (``REACHED_END_OF_TOPIC``).

The last position is stored with the managed ledger, so a topic stays terminated across
restarts and handovers, as Pulsar keeps ``terminatedPosition`` in its ledger info.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

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


def tell_end_of_topic(
    ledger: ManagedLedger, cursor: ManagedCursor, consumers: Iterable[Consumer]
) -> None:
    """On a terminated topic whose subscription has nothing left to read, each consumer
    hears it once (``REACHED_END_OF_TOPIC``)."""
    if terminated_position(ledger.properties) is None or cursor.has_more_entries():
        return
    for consumer in consumers:
        if not consumer.told_end_of_topic:
            consumer.told_end_of_topic = True
            consumer.link.reached_end_of_topic(consumer)
