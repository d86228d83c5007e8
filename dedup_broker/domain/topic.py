"""A persistent topic (or one partition): producers, subscriptions, the publish path.

``publish`` returns the SEND's outcome as a value (a future of ``PublishOutcome``); the
session turns it into the receipt or error the client hears.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dedup_broker.compaction.policy import compaction_threshold
from dedup_broker.compaction.topic import CompanionTopics, TopicCompaction
from dedup_broker.config import BrokerConfig
from dedup_broker.domain import subscription_admin, topic_stats
from dedup_broker.domain.consumer import SubscriptionType, check_consumer_limits, let_acks_arrive
from dedup_broker.domain.ledger_limits import LedgerLimits
from dedup_broker.domain.metrics import BrokerMetrics
from dedup_broker.domain.producer_access import TOPIC_EPOCH_PROPERTY, ProducerHost
from dedup_broker.domain.send_order import WriteEnds, publish_in_turn
from dedup_broker.domain.subscription import Subscription, trigger_all
from dedup_broker.domain.subscription_admin import LATEST_LEDGER_ID
from dedup_broker.domain.subscription_errors import (
    ReadCompactedNotAllowedError,
    ReservedSubscriptionError,
    SubscriptionNotFoundError,
    check_not_reserved,
)
from dedup_broker.domain.termination import (
    TERMINATED_PROPERTY,
    TerminationGate,
    terminated_position,
    terminated_property,
)
from dedup_broker.domain.transactional_acks import TopicPendingAcks
from dedup_broker.domain.write_stats import WriteStats
from dedup_broker.domain_base import topic_policies
from dedup_broker.domain_base.handover import Destination
from dedup_broker.domain_base.names import TopicName
from dedup_broker.domain_base.outcomes import UNKNOWN, PublishOutcome, PublishResult, settled
from dedup_broker.domain_base.policies import Policies
from dedup_broker.domain_base.producer import Producer
from dedup_broker.domain_base.topic_policies import ConsumerLimits, limit
from dedup_broker.errors import BrokerError, RetriableError, ServiceNotReadyError
from dedup_broker.key_dedup.sends import Written
from dedup_broker.key_dedup.service import KeyDedupService
from dedup_broker.key_dedup.topic import TopicKeyDedup
from dedup_broker.lazy import LazyEvent
from dedup_broker.pip6.topic_dedup import TopicDeduplication
from dedup_broker.pip6.verdicts import Verdict
from dedup_broker.protocol import pulsar_api_pb2 as pb
from dedup_broker.protocol.batch import batch_size
from dedup_broker.protocol.framing import parse_metadata_only
from dedup_broker.storage.api import Position, is_system_cursor
from dedup_broker.tiered.policy import offload_threshold_in_seconds
from dedup_broker.transactions.buffer import TransactionBuffer, sent_in

if TYPE_CHECKING:
    from dedup_broker.domain.consumer import Consumer
    from dedup_broker.domain_base.rates import SampledRates
    from dedup_broker.storage.api import ManagedCursor, ManagedLedger, StorageService, WriteFence

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class TopicServices:
    """What every topic of one broker shares."""

    config: BrokerConfig
    policies: Policies
    metrics: BrokerMetrics
    key_dedup: KeyDedupService


class Topic(ProducerHost):
    __slots__ = (
        "_appends_in_flight",
        "_appends_settled",
        "_compaction",
        "_companions",
        "_last_entry_batch",
        "_termination",
        "_write_ends",
        "bytes_in",
        "dedup",
        "entries_read",
        "last_publish_ms",
        "loaded_ms",
        "made_key_dedup",
        "managed_ledger",
        "msgs_in",
        "pending_acks",
        "services",
        "storage_rates",
        "subscriptions",
        "transactions",
        "write_stats",
    )

    def __init__(
        self,
        services: TopicServices,
        name: TopicName,
        ledger: ManagedLedger,
        companions: CompanionTopics,
    ) -> None:
        stored_epoch = ledger.properties.get(TOPIC_EPOCH_PROPERTY)
        super().__init__(name, services.config, int(stored_epoch) if stored_epoch else None)
        self.services = services
        self.producer_limit = functools.partial(  # the topic's, its namespace's or the broker's
            limit, services.policies, services.config, name, "max_producers_per_topic"
        )
        self.managed_ledger = ledger
        self.write_stats = WriteStats()  # Pulsar's write latency and entry size buckets
        self.entries_read = 0  # by its subscriptions' dispatchers
        self.storage_rates: SampledRates | None = None
        """Entries written (``ledger.entries_added``) and read per second (``topic_rates``)."""
        self.subscriptions: dict[str, Subscription] = {}
        self.msgs_in = self.bytes_in = self.last_publish_ms = 0
        self.loaded_ms = int(time.time() * 1000)
        self._last_entry_batch: tuple[Position, int] | None = None
        self.dedup = TopicDeduplication(
            name, ledger, services.config, services.policies, self.producers
        )
        self.transactions = TransactionBuffer(
            ledger, services.config, functools.partial(trigger_all, self.subscriptions)
        )
        self.pending_acks: TopicPendingAcks | None = None
        """Acknowledgements in transactions (made when the topic is loaded)."""
        self.made_key_dedup: TopicKeyDedup | None = None
        """Made when a policy turns key deduplication on (most topics never have it)."""
        ledger.on_write_failure_resolved = self._write_failure_resolved
        self._companions = companions
        self._compaction: TopicCompaction | None = None
        """Made on first use: a compaction, a compacted read, its stats."""
        self._appends_in_flight = 0
        self._appends_settled = LazyEvent(True)
        self._write_ends = WriteEnds()
        self.terminated_at = terminated_position(ledger.properties)
        self._termination = TerminationGate()

    @classmethod
    async def load(
        cls,
        services: TopicServices,
        storage: StorageService,
        name: TopicName,
        create: bool,
        fence: WriteFence | None = None,
    ) -> Topic:
        ledger = await storage.open_managed_ledger(
            name.managed_ledger_name, create=create, fence=fence
        )
        topic = cls(services, name, ledger, storage.compacted_topics)
        ledger.policies = LedgerLimits(services.policies, services.config, name, ledger)
        for cursor_name in ledger.cursors.stored_names():
            if is_system_cursor(cursor_name):
                continue
            cursor = await ledger.cursors.open(cursor_name)
            topic.subscriptions[cursor_name] = topic.new_subscription(
                cursor_name, cursor, SubscriptionType.EXCLUSIVE, durable=True
            )
        await topic.transactions.recover()
        topic.pending_acks = TopicPendingAcks(storage, name, fence, topic.subscriptions)
        await topic.pending_acks.recover()
        await topic.dedup.apply_policy()
        await apply_key_dedup_policy(topic)
        return topic

    @property
    def key_dedup(self) -> TopicKeyDedup:
        if self.made_key_dedup is None:
            self.made_key_dedup = TopicKeyDedup(
                self.name, self.managed_ledger, self.services.key_dedup, self
            )
        return self.made_key_dedup

    @property
    def compaction(self) -> TopicCompaction:
        if self._compaction is None:
            self._compaction = TopicCompaction(
                self.managed_ledger,
                self._companions,
                self.services.config.topic_compaction_retain_null_key,
                self.transactions.hidden,
            )
        return self._compaction

    def new_subscription(
        self, name: str, cursor: ManagedCursor, sub_type: SubscriptionType, durable: bool
    ) -> Subscription:
        return Subscription(
            name,
            cursor,
            sub_type,
            durable,
            ledger=self.managed_ledger,
            partition_index=self.name.partition_index,
            config=self.config,
            owner=self,
        )

    # --- producers ----------------------------------------------------------------
    def _producer_connected(self, producer: Producer) -> None:
        self.dedup.producer_connected(producer.name)

    def _producer_disconnected(self, producer: Producer) -> None:
        self.dedup.producer_disconnected(producer.name)

    async def _store_epoch(self, epoch: int) -> None:
        """The epoch outlives the topic's loading (a fenced producer stays fenced after a
        handover): stored with the managed ledger, as Pulsar does."""
        properties = self.managed_ledger.properties
        if properties.get(TOPIC_EPOCH_PROPERTY) != str(epoch):
            properties[TOPIC_EPOCH_PROPERTY] = str(epoch)
            await self.managed_ledger.set_properties(properties)

    async def wait_writable(self) -> None:
        """Until the managed ledger takes writes (after a failed write it is fenced until
        it has read the ledger's real end)."""
        await self.managed_ledger.wait_writable()

    def last_sequence_id(self, producer_name: str) -> int:
        return self.dedup.last_sequence_id(producer_name)

    def publish(
        self,
        producer: Producer,
        send: pb.CommandSend,
        entry: bytes,
        metadata: pb.MessageMetadata,
    ) -> PublishResult:
        """Publish one SEND's entry: key-window verdicts (when on), PIP-6, the append, in
        the producer's turn (:mod:`send_order`)."""

        def now() -> PublishResult:
            key_dedup = self.made_key_dedup
            if key_dedup is not None and key_dedup.intercepts:
                return key_dedup.submit(producer, send, entry, metadata)
            return self.append_checked(producer, send, entry, metadata)

        return publish_in_turn(producer, now, self._write_ends.next)

    def _write_failure_resolved(self, told: Position, truth: Position) -> None:
        """A failed write's outcome is known: both deduplications settle what was in doubt."""
        self.dedup.write_failure_resolved(told, truth)
        if self.made_key_dedup is not None:
            self.made_key_dedup.write_failure_resolved(told, truth)

    def append_checked(
        self,
        producer: Producer,
        send: pb.CommandSend,
        entry: bytes,
        metadata: pb.MessageMetadata,
        timestamp: int | None = None,
        then: Written | None = None,
    ) -> PublishResult:
        """The PIP-6 verdict, then the append; stored once Kafka acknowledged it.
        ``then`` hears an append's outcome with its timestamp as the outcome is set (not
        a refusal answered at once), with no further callback scheduled."""
        if self.terminated_at is not None:
            return self._termination.refuse(self.name)
        txn_id = sent_in(send)
        started = time.monotonic()
        if timestamp is None:
            timestamp = metadata.publish_time or int(time.time() * 1000)
        try:
            if txn_id is not None and not self.transactions.admit(txn_id):
                return settled(UNKNOWN)  # asked again once the buffer is ready
            admission = self.dedup.check(send, entry, metadata)
        except BrokerError as exc:
            return _refused(self.name, send, exc)
        verdict = admission.verdict
        if verdict is not Verdict.NOT_DUP:
            if verdict is Verdict.DUP:
                return settled(PublishOutcome.duplicate(admission.stored_at))
            return settled(UNKNOWN)
        if admission.rewritten is not None:  # a resend in part: only its new messages
            metadata, entry = admission.rewritten
        in_batch = batch_size(metadata)
        count = max(in_batch, 1)
        appended = self.transactions.append(txn_id, entry, timestamp)
        stamped = timestamp
        result: PublishResult = asyncio.get_running_loop().create_future()
        producer.pending_sends += 1
        self._appends_in_flight += 1
        self._appends_settled.clear()

        def written(done: asyncio.Future[Position]) -> None:
            try:
                record(done)
            finally:
                self._write_ends.ended()

        def record(done: asyncio.Future[Position]) -> None:
            producer.pending_sends -= 1
            self._appends_in_flight -= 1
            if self._appends_in_flight == 0:
                self._appends_settled.set()
            exc = done.exception() if not done.cancelled() else RetriableError("cancelled")
            if exc is not None:
                self.services.metrics.kafka_write_errors.inc()
                self.dedup.write_failed()
                producer.write_failed = exc
                log.warning("publish on %s failed (seq %d): %s", self.name, send.sequence_id, exc)
                outcome = PublishOutcome.failed(exc)
                result.set_result(outcome)
                if then is not None:
                    then(outcome, stamped)
                return
            position = done.result()
            self.dedup.persisted(admission, position)
            self._last_entry_batch = (position, in_batch)
            self.last_publish_ms = int(time.time() * 1000)
            self.msgs_in += count
            self.bytes_in += len(entry)
            producer.msgs_in += count
            producer.bytes_in += len(entry)
            self.services.metrics.record_publish(self, len(entry), time.monotonic() - started)
            outcome = PublishOutcome.stored(position)
            result.set_result(outcome)
            if then is not None:
                then(outcome, stamped)

        appended.add_done_callback(written)
        return result

    async def terminate(self) -> Position:
        """Take no more messages (appends in flight settle first) and store the last
        position; producers are closed (they come back to ``TopicTerminatedError``; their
        SENDs meanwhile wait for that), subscriptions tell their consumers once everything
        is acknowledged."""
        if self.terminated_at is None:
            self.terminated_at = self.managed_ledger.last_confirmed
            async with self._termination.closing_producers():
                await self._appends_settled.wait()
                self.terminated_at = self.managed_ledger.last_confirmed
                properties = self.managed_ledger.properties
                properties[TERMINATED_PROPERTY] = terminated_property(self.terminated_at)
                await self.managed_ledger.set_properties(properties)
                for producer in list(self.producers.values()):
                    self.remove_producer(producer)
                    producer.link.close_producer(producer)
            for subscription in self.subscriptions.values():
                subscription.trigger()
        return self.terminated_at

    # --- subscriptions ------------------------------------------------------------
    async def subscribe(
        self,
        consumer: Consumer,
        sub_type: SubscriptionType,
        durable: bool,
        initial_position: str,
        start: Position | None,
        start_inclusive: bool,
        read_compacted: bool = False,
    ) -> Subscription:
        self.check_open()
        name = consumer.subscription_name
        if read_compacted and sub_type not in (
            SubscriptionType.EXCLUSIVE,
            SubscriptionType.FAILOVER,
        ):
            raise ReadCompactedNotAllowedError(
                "read_compacted is only allowed on Exclusive and Failover subscriptions "
                f"(and readers), not {sub_type.name}"
            )
        limits = ConsumerLimits.of(self.services.policies, self.config, self.name)
        check_consumer_limits(limits, self.name, self.subscriptions, name)
        check_not_reserved(name)
        subscription = self.subscriptions.get(name)
        if subscription is not None and subscription.durable != durable:
            raise ReservedSubscriptionError(f"subscription {name!r} exists with another durability")
        if start is not None and start.ledger_id == LATEST_LEDGER_ID:
            start = None
        if subscription is None:
            policies = self.services.policies
            if durable and not topic_policies.creates_subscriptions(
                policies, self.config, self.name
            ):
                raise SubscriptionNotFoundError(f"Subscription does not exist: {name}")
            cursor: ManagedCursor
            if durable:
                cursor = await self.managed_ledger.cursors.open(name, initial_position)
            else:
                if start is None and initial_position == "earliest":
                    start = Position(-1, -1)
                cursor = self.managed_ledger.cursors.new_non_durable(
                    start, inclusive=start_inclusive, name=name
                )
            subscription = self.subscriptions.get(name) or self.new_subscription(
                name, cursor, sub_type, durable
            )
            self.subscriptions[name] = subscription
        consumer.subscription = subscription
        consumer.max_unacked_messages = limits.unacked_messages
        subscription.add_consumer(consumer, sub_type)
        if read_compacted:
            subscription.read_compacted(self.compaction.view, None if durable else start)
        return subscription

    def consumer_closed(self, consumer: Consumer) -> None:
        """The consumer's client closed it, or its connection went away."""
        consumer.subscription.consumer_left(consumer)

    async def unsubscribe(self, name: str) -> None:
        await subscription_admin.unsubscribe(self, name)

    def subscription_expired(self, subscription: Subscription) -> None:
        if self.subscriptions.get(subscription.name) is subscription:
            del self.subscriptions[subscription.name]
            asyncio.get_running_loop().create_task(subscription.close())

    def delays_delivery(self) -> bool:
        return topic_policies.delays_delivery(self.services.policies, self.config, self.name)

    # --- last message id ------------------------------------------------------------
    async def last_message_id(self) -> tuple[Position, int]:
        """The last stored position and the batch index of its last message (-1 if none)."""
        last = await self.transactions.last_visible()
        if last.entry_id < 0:
            return last, -1
        known = self._last_entry_batch
        if known is None or known[0] != last:
            entry = await self.managed_ledger.read_entry(last)
            known = (last, batch_size(parse_metadata_only(entry.data)))
            self._last_entry_batch = known
        return last, known[1] - 1 if known[1] > 0 else -1

    # --- lifecycle and stats --------------------------------------------------------
    async def housekeeping(self) -> None:
        """Periodic: quiet-topic snapshots, idle producers, failed recoveries, compaction
        past its threshold, ledgers past the offload age."""
        await self.dedup.housekeeping()
        await self.transactions.snapshot()
        if offload_threshold_in_seconds(self.services.policies, self.config, self.name) >= 0:
            self.managed_ledger.offloads.check_soon()
        threshold = compaction_threshold(self.services.policies, self.config, self.name)
        if threshold > 0 or self._compaction is not None:
            await self.compaction.check_threshold(threshold)

    async def close(self, destination: Destination | None = None) -> None:
        """Unload: dispatch stops, producers are told to go (their clients reconnect and
        resend, at ``destination`` when given), the writes in flight settle, the PIP-6
        snapshot covers all of them, then consumers go once what they received lately
        could be acknowledged, and cursors are stored."""
        self.closed = True
        self.access.fail_waiting(ServiceNotReadyError(f"topic {self.name} was unloaded"))
        # Nothing more goes out: what consumers got before can be acknowledged meanwhile.
        for subscription in list(self.subscriptions.values()):
            await subscription.close()
        for producer in list(self.producers.values()):
            self.remove_producer(producer)
            producer.link.close_producer(producer, destination)
        if self.made_key_dedup is not None:
            await self.made_key_dedup.close()
        if self._compaction is not None:
            await self._compaction.close()
        await self._appends_settled.wait()
        await self.dedup.close()
        await self.transactions.close()
        if self.pending_acks is not None:
            await self.pending_acks.close()
        await let_acks_arrive(c for s in self.subscriptions.values() for c in s.consumers)
        for subscription in list(self.subscriptions.values()):
            for consumer in list(subscription.consumers):
                subscription.disconnect(consumer, destination)
        await self.managed_ledger.close()

    def stats(self) -> dict[str, object]:
        return topic_stats.stats(self)


def _refused(name: TopicName, send: pb.CommandSend, exc: BrokerError) -> PublishResult:
    log.warning("publish on %s refused (seq %d): %s", name, send.sequence_id, exc)
    return settled(PublishOutcome.failed(exc))


async def apply_key_dedup_policy(topic: Topic) -> None:
    """Key deduplication as the topic's policy says; nothing is made while it is off."""
    policy = topic.services.key_dedup.policy_for(topic.name)
    if topic.made_key_dedup is not None or policy.enabled:
        await topic.key_dedup.apply_policy()
