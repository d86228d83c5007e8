"""A topic's subscriptions managed by name, apart from its consumers: created ahead of
them (``pulsar-admin topics create-subscription``, a producer's initial subscription) and
deleted (``unsubscribe``, ``pulsar-admin topics unsubscribe``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from dedup_broker.domain.consumer import SubscriptionType
from dedup_broker.domain.subscription import Subscription
from dedup_broker.domain.subscription_errors import (
    ConsumerStillConnectedError,
    SubscriptionExistsError,
    SubscriptionNotFoundError,
    check_not_reserved,
)
from dedup_broker.storage.api import Position

if TYPE_CHECKING:
    from dedup_broker.domain_base.names import TopicName
    from dedup_broker.storage.api import ManagedCursor, ManagedLedger

LATEST_LEDGER_ID = (1 << 63) - 1
"""Ledger id of ``MessageId.latest`` as the clients send it."""


class Topic(Protocol):
    """What of a topic these need."""

    @property
    def name(self) -> TopicName: ...
    @property
    def subscriptions(self) -> dict[str, Subscription]: ...
    @property
    def managed_ledger(self) -> ManagedLedger: ...
    def check_open(self) -> None: ...
    def new_subscription(
        self, name: str, cursor: ManagedCursor, sub_type: SubscriptionType, durable: bool
    ) -> Subscription: ...


async def create_subscription(topic: Topic, name: str, start: Position | None) -> None:
    """A durable subscription with no consumer yet: from ``start`` (None: the end of the
    topic)."""
    topic.check_open()
    check_not_reserved(name)
    cursors = topic.managed_ledger.cursors
    if name in topic.subscriptions or cursors.exists(name):
        raise SubscriptionExistsError(f"Subscription {name} already exists for {topic.name}")
    earliest = start is not None and start.ledger_id < 0
    cursor = await cursors.open(name, "earliest" if earliest else "latest")
    if start is not None and not earliest and start.ledger_id != LATEST_LEDGER_ID:
        await cursor.reset(start)
    topic.subscriptions[name] = topic.new_subscription(
        name, cursor, SubscriptionType.EXCLUSIVE, True
    )


async def ensure_subscription(topic: Topic, name: str) -> None:
    """A producer's ``initial_subscription_name`` (dead-letter topics rely on it): a
    durable subscription from the earliest message, unless it exists already."""
    if name in topic.subscriptions or topic.managed_ledger.cursors.exists(name):
        return
    await create_subscription(topic, name, Position(-1, -1))


async def unsubscribe(topic: Topic, name: str) -> None:
    """The subscription and its cursor deleted; refused while consumers are connected."""
    subscription = topic.subscriptions.get(name)
    cursors = topic.managed_ledger.cursors
    if subscription is None:
        if cursors.exists(name):
            await cursors.delete(name)
            return
        raise SubscriptionNotFoundError(f"subscription {name!r} not found on {topic.name}")
    if subscription.consumers:
        raise ConsumerStillConnectedError(
            f"subscription {name!r} has {len(subscription.consumers)} connected consumer(s)"
        )
    del topic.subscriptions[name]
    await subscription.close()
    if subscription.durable:
        await cursors.delete(name)
