"""The client side of producers and consumers as the domain sees it (``ProducerLink``,
``ConsumerLink``), recording what the domain asks of it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import count
from typing import Any

from dedup_broker.domain.consumer import Consumer, Delivery, SubscriptionType
from dedup_broker.domain.key_hash import KeySharedSettings
from dedup_broker.domain.topic import Topic
from dedup_broker.domain_base.handover import Destination
from dedup_broker.domain_base.outcomes import PublishOutcome
from dedup_broker.domain_base.producer import Producer
from dedup_broker.protocol import pulsar_api_pb2 as pb
from dedup_broker.protocol.framing import parse_metadata_only
from dedup_broker.storage.values import Position
from harness.client_commands import message_block

_consumer_ids = count(1)


@dataclass
class ProducerSide:
    remote_address: str = "127.0.0.1:40001"
    closed: list[str] = field(default_factory=list)

    def close_producer(self, producer: Producer, destination: Destination | None = None) -> None:
        self.closed.append(producer.name)


@dataclass
class ConsumerSide:
    """Every consumer of a test may share one: what it records names the consumer."""

    remote_address: str = "127.0.0.1:40002"
    writable: bool = True
    delivered: list[tuple[str, Position, int]] = field(default_factory=list)
    """(consumer, position, redelivery count) in delivery order."""
    closed: list[str] = field(default_factory=list)
    active_changes: list[tuple[str, bool]] = field(default_factory=list)
    ended: list[str] = field(default_factory=list)

    def deliver(self, consumer: Consumer, deliveries: Sequence[Delivery]) -> None:
        for delivery in deliveries:
            self.delivered.append(
                (consumer.name, delivery.entry.position, delivery.redelivery_count)
            )

    def close_consumer(self, consumer: Consumer, destination: Destination | None = None) -> None:
        self.closed.append(consumer.name)

    def active_consumer_changed(self, consumer: Consumer, active: bool) -> None:
        self.active_changes.append((consumer.name, active))

    def reached_end_of_topic(self, consumer: Consumer) -> None:
        self.ended.append(consumer.name)

    def positions_of(self, name: str) -> list[Position]:
        return [position for who, position, _ in self.delivered if who == name]

    def take(self) -> list[tuple[str, Position, int]]:
        """What was delivered since the last call."""
        delivered, self.delivered = self.delivered, []
        return delivered


def new_producer(name: str, producer_id: int = 1, side: ProducerSide | None = None) -> Producer:
    return Producer(side or ProducerSide(), producer_id, name, user_provided_name=True)


async def publish(
    topic: Topic, producer: Producer, sequence_id: int, **fields: Any
) -> PublishOutcome:
    """One SEND of a single message (or a batch, with ``num_messages_in_batch``)."""
    entry = message_block(producer.name, sequence_id, **fields)
    send = pb.CommandSend(producer_id=producer.producer_id, sequence_id=sequence_id)
    return await topic.publish(producer, send, entry, parse_metadata_only(entry))


async def subscribe(
    topic: Topic,
    side: ConsumerSide,
    name: str,
    subscription: str = "sub",
    sub_type: SubscriptionType = SubscriptionType.EXCLUSIVE,
    priority_level: int = 0,
    initial_position: str = "earliest",
    key_shared: KeySharedSettings | None = None,
) -> Consumer:
    consumer = Consumer(
        side,
        next(_consumer_ids),
        name,
        subscription,
        priority_level=priority_level,
        key_shared=key_shared,
    )
    await topic.subscribe(
        consumer,
        sub_type,
        durable=True,
        initial_position=initial_position,
        start=None,
        start_inclusive=True,
    )
    return consumer
