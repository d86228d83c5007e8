"""A persistent topic (or one partition): producers, subscriptions, the publish path."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from dedup_broker.domain.names import TopicName
from dedup_broker.domain.producer import Producer
from dedup_broker.domain.subscription import Subscription, SubscriptionType
from dedup_broker.errors import BrokerError, ProtocolError, RetriableError
from dedup_broker.key_dedup.topic import TopicKeyDedup
from dedup_broker.pip6.state import Verdict
from dedup_broker.pip6.topic_dedup import TopicDeduplication
from dedup_broker.protocol import commands
from dedup_broker.protocol import pulsar_api_pb2 as pb
from dedup_broker.protocol.framing import parse_metadata_only
from dedup_broker.retention.policy import topic_retention
from dedup_broker.storage.position import Position
from dedup_broker.tiered.policy import offload_threshold

if TYPE_CHECKING:
    from dedup_broker.domain.broker import BrokerService
    from dedup_broker.domain.consumer import Consumer
    from dedup_broker.storage.managed_ledger import ManagedLedger

log = logging.getLogger(__name__)

LATEST_LEDGER_ID = (1 << 63) - 1
"""Ledger id of ``MessageId.latest`` as the clients send it."""

SYSTEM_CURSOR_PREFIX = "pulsar."
"""Cursors the broker keeps for itself (``pulsar.dedup``); never shown as subscriptions."""


class ProducerBusyError(BrokerError):
    """A live producer with that name is already attached to the topic."""


class Topic:
    def __init__(self, broker: BrokerService, name: TopicName, ledger: ManagedLedger) -> None:
        self.broker = broker
        self.name = name
        self.managed_ledger = ledger
        self.producers: dict[str, Producer] = {}
        self.subscriptions: dict[str, Subscription] = {}
        self.msgs_in = 0
        self.bytes_in = 0
        self._last_entry_batch: tuple[Position, int] | None = None
        self.dedup = TopicDeduplication(self)
        self.key_dedup = TopicKeyDedup(self)
        self.closed = False

    @classmethod
    async def load(cls, broker: BrokerService, name: TopicName, create: bool) -> Topic:
        ledger = await broker.storage.open_managed_ledger(name.managed_ledger_name, create=create)
        topic = cls(broker, name, ledger)
        ledger.retention = lambda: topic_retention(broker, name, ledger)
        ledger.offloads.threshold = lambda: offload_threshold(broker, name)
        for cursor_name in ledger.stored_cursor_names():
            if cursor_name.startswith(SYSTEM_CURSOR_PREFIX):
                continue
            cursor = await ledger.open_cursor(cursor_name)
            topic.subscriptions[cursor_name] = Subscription(
                topic, cursor_name, cursor, SubscriptionType.EXCLUSIVE, durable=True
            )
        await topic.dedup.apply_policy()
        await topic.key_dedup.apply_policy()
        return topic

    # --- producers ----------------------------------------------------------------
    def add_producer(self, producer: Producer) -> None:
        existing = self.producers.get(producer.name)
        if existing is not None and not existing.closed:
            raise ProducerBusyError(
                f"producer {producer.name!r} is already connected to topic {self.name}"
            )
        self.producers[producer.name] = producer
        self.dedup.producer_connected(producer.name)

    def remove_producer(self, producer: Producer) -> None:
        producer.closed = True
        if self.producers.get(producer.name) is producer:
            del self.producers[producer.name]
            self.dedup.producer_disconnected(producer.name)

    def last_sequence_id(self, producer_name: str) -> int:
        return self.dedup.last_sequence_id(producer_name)

    def publish(
        self,
        producer: Producer,
        send: pb.CommandSend,
        entry: bytes,
        metadata: pb.MessageMetadata,
    ) -> None:
        """Append one SEND's entry; the receipt goes out once Kafka acknowledged it."""
        if self.key_dedup.intercepts:
            self.key_dedup.submit(producer, send, entry, metadata)
            return
        self.append_entry(producer, send, entry, metadata)

    def append_entry(
        self,
        producer: Producer,
        send: pb.CommandSend,
        entry: bytes,
        metadata: pb.MessageMetadata,
        timestamp: int | None = None,
        answer: Callable[[pb.BaseCommand], None] | None = None,
    ) -> asyncio.Future[Position] | None:
        """PIP-6 verdict and append; None when nothing was appended (already answered).

        ``answer`` takes the receipt or error instead of the connection (for callers
        that order answers themselves)."""
        sequence_id = send.sequence_id
        highest = send.highest_sequence_id if send.HasField("highest_sequence_id") else None
        in_batch = batch_size(metadata)
        count = max(in_batch, 1)
        started = time.monotonic()
        if timestamp is None:
            timestamp = metadata.publish_time or int(time.time() * 1000)
        try:
            verdict, dedup_name, highest_seen = self.dedup.check(send, entry, metadata)
        except BrokerError as exc:
            self._send_error(producer, sequence_id, exc, answer)
            return None
        if verdict is not Verdict.NOT_DUP:
            self._answer_duplicate(producer, sequence_id, highest, verdict, answer)
            return None
        try:
            future = self.managed_ledger.append(entry, timestamp)
        except BrokerError as exc:
            self.dedup.write_failed()
            self._send_error(producer, sequence_id, exc, answer)
            return None
        producer.pending_sends += 1
        producer.connection.publish_started()

        def written(done: asyncio.Future[Position]) -> None:
            producer.pending_sends -= 1
            producer.connection.publish_finished()
            exc = done.exception() if not done.cancelled() else RetriableError("cancelled")
            if exc is not None:
                self.broker.metrics.kafka_write_errors.inc()
                self.dedup.write_failed()
                self._send_error(producer, sequence_id, exc, answer)
                return
            position = done.result()
            self.dedup.persisted(dedup_name, highest_seen, position)
            self._last_entry_batch = (position, in_batch)
            self.msgs_in += count
            self.bytes_in += len(entry)
            producer.msgs_in += count
            producer.bytes_in += len(entry)
            self.broker.metrics.record_publish(count, len(entry), time.monotonic() - started)
            receipt = commands.send_receipt(
                producer.producer_id,
                sequence_id,
                position.ledger_id,
                position.entry_id,
                highest_sequence_id=highest,
            )
            if answer is not None:
                answer(receipt)
            elif not producer.closed:
                producer.connection.send_command(receipt)

        future.add_done_callback(written)
        return future

    def _answer_duplicate(
        self,
        producer: Producer,
        sequence_id: int,
        highest: int | None,
        verdict: Verdict,
        answer: Callable[[pb.BaseCommand], None] | None = None,
    ) -> None:
        """Dup: a normal receipt with id -1:-1. Unknown: an error the client resends after."""
        self.broker.metrics.dedup_verdicts.labels(verdict=verdict.value).inc()
        if verdict is Verdict.DUP:
            command = commands.send_receipt(
                producer.producer_id, sequence_id, -1, -1, highest_sequence_id=highest
            )
        else:
            command = commands.send_error(
                producer.producer_id,
                sequence_id,
                pb.PersistenceError,
                "an earlier copy of this message is still being written; resend later",
            )
        if answer is not None:
            answer(command)
        elif not producer.closed:
            producer.connection.send_command(command)

    def _send_error(
        self,
        producer: Producer,
        sequence_id: int,
        exc: BaseException,
        answer: Callable[[pb.BaseCommand], None] | None = None,
    ) -> None:
        if isinstance(exc, ProtocolError):
            code = pb.ChecksumError if "checksum" in str(exc).lower() else pb.UnknownError
        else:
            code = pb.PersistenceError
        log.warning("publish on %s failed (seq %d): %s", self.name, sequence_id, exc)
        command = commands.send_error(producer.producer_id, sequence_id, code, str(exc))
        if answer is not None:
            answer(command)
        elif not producer.closed:
            producer.connection.send_command(command)

    # --- subscriptions ------------------------------------------------------------
    async def subscribe(
        self,
        consumer: Consumer,
        sub_type: SubscriptionType,
        durable: bool,
        initial_position: str,
        start: Position | None,
        start_inclusive: bool,
    ) -> Subscription:
        name = consumer.subscription_name
        if name.startswith(SYSTEM_CURSOR_PREFIX):
            raise BrokerError(
                f"subscription names starting with {SYSTEM_CURSOR_PREFIX!r} are reserved"
            )
        subscription = self.subscriptions.get(name)
        if subscription is not None and subscription.durable != durable:
            raise BrokerError(f"subscription {name!r} exists with another durability")
        if start is not None and start.ledger_id == LATEST_LEDGER_ID:
            start = None
        if subscription is None:
            if durable:
                cursor = await self.managed_ledger.open_cursor(name, initial_position)
            else:
                if start is None and initial_position == "earliest":
                    start = Position(-1, -1)
                cursor = self.managed_ledger.new_non_durable_cursor(
                    start, inclusive=start_inclusive, name=name
                )
            subscription = self.subscriptions.get(name) or Subscription(
                self, name, cursor, sub_type, durable
            )
            self.subscriptions[name] = subscription
        consumer.subscription = subscription
        subscription.add_consumer(consumer, sub_type)
        return subscription

    def consumer_closed(self, consumer: Consumer) -> None:
        subscription = consumer.subscription
        subscription.remove_consumer(consumer)
        if (
            subscription.should_expire()
            and self.subscriptions.get(subscription.name) is subscription
        ):
            del self.subscriptions[subscription.name]
            asyncio.get_running_loop().create_task(subscription.close())

    async def unsubscribe(self, name: str) -> None:
        subscription = self.subscriptions.get(name)
        if subscription is None:
            if self.managed_ledger.cursor_exists(name):
                await self.managed_ledger.delete_cursor(name)
                return
            raise SubscriptionNotFoundError(f"subscription {name!r} not found on {self.name}")
        if subscription.consumers:
            raise ConsumerStillConnectedError(
                f"subscription {name!r} has {len(subscription.consumers)} connected consumer(s)"
            )
        del self.subscriptions[name]
        await subscription.close()
        if subscription.durable:
            await self.managed_ledger.delete_cursor(name)

    # --- last message id ------------------------------------------------------------
    async def last_message_id(self) -> tuple[Position, int]:
        """The last stored position and the batch index of its last message (-1 if none)."""
        last = self.managed_ledger.last_confirmed
        if last.entry_id < 0:
            return last, -1
        known = self._last_entry_batch
        if known is None or known[0] != last:
            entry = await self.managed_ledger.read_entry(last)
            known = (last, batch_size(parse_metadata_only(entry.data)))
            self._last_entry_batch = known
        return last, known[1] - 1 if known[1] > 0 else -1

    # --- lifecycle and stats --------------------------------------------------------
    async def close(self) -> None:
        self.closed = True
        await self.key_dedup.close()
        await self.dedup.close()
        for producer in list(self.producers.values()):
            producer.connection.close_producer_by_broker(producer)
        for subscription in list(self.subscriptions.values()):
            for consumer in list(subscription.consumers):
                consumer.connection.close_consumer_by_broker(consumer)
            await subscription.close()
        await self.managed_ledger.close()

    def stats(self) -> dict[str, object]:
        return {
            "msgInCounter": self.msgs_in,
            "bytesInCounter": self.bytes_in,
            "msgOutCounter": sum(s.msgs_out for s in self.subscriptions.values()),
            "bytesOutCounter": sum(s.bytes_out for s in self.subscriptions.values()),
            "storageSize": self.managed_ledger.total_size,
            "deduplicationStatus": self.dedup.status,
            "keyDeduplication": self.key_dedup.stats(),
            "publishers": [p.stats() for p in self.producers.values()],
            "subscriptions": {n: s.stats() for n, s in self.subscriptions.items()},
        }

    def internal_stats(self) -> dict[str, object]:
        ledger = self.managed_ledger
        cursors: dict[str, object] = {}
        for name, cursor in ledger.cursors().items():
            cursors[name] = {
                "markDeletePosition": str(cursor.mark_delete_position),
                "readPosition": str(cursor.read_position),
                "persistedMarkDeletePosition": str(cursor.persisted_mark_delete_position),
                "individuallyDeletedMessages": [
                    f"[{a}..{b}]" for a, b in cursor.individually_deleted_ranges()
                ],
                "properties": dict(cursor.properties),
                "messagesConsumedCounter": ledger.number_of_entries() - cursor.backlog(),
                "numberOfEntriesSinceFirstNotAckedMessage": cursor.backlog(),
            }
        return {
            "entriesAddedCounter": ledger.entries_added,
            "numberOfEntries": ledger.number_of_entries(),
            "totalSize": ledger.total_size,
            "state": ledger.state,
            "lastConfirmedEntry": str(ledger.last_confirmed),
            "ledgers": [
                {
                    "ledgerId": info.ledger_id,
                    "entries": info.entries,
                    "size": info.size,
                    "timestamp": info.timestamp_ms,
                    "offloaded": info.offloaded,
                }
                for info in ledger.ledgers()
            ],
            "cursors": cursors,
            "deduplication": self.dedup.stats(),
        }


class ConsumerStillConnectedError(BrokerError):
    """Unsubscribe refused: other consumers are still attached."""


class SubscriptionNotFoundError(BrokerError):
    """No subscription of that name exists on the topic."""


def batch_size(metadata: pb.MessageMetadata) -> int:
    """Messages in a batched entry, 0 for an entry holding a single plain message."""
    if metadata.HasField("num_messages_in_batch"):
        return metadata.num_messages_in_batch
    return 0
