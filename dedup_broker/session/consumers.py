"""Consumers on one connection: subscribe, flow, acks, redelivery, seek, and the MESSAGE
frames that carry entries to the client."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Sequence
from typing import TYPE_CHECKING

from dedup_broker.domain.consumer import Consumer, Delivery, SubscriptionType
from dedup_broker.domain.key_hash import KeySharedMode, KeySharedSettings
from dedup_broker.domain.non_persistent.topic import NonPersistentTopic
from dedup_broker.domain.subscription_admin import LATEST_LEDGER_ID
from dedup_broker.domain_base.handover import Destination, outcome
from dedup_broker.domain_base.producer import NO_METADATA
from dedup_broker.errors import PermanentError, ProtocolError, ServiceNotReadyError
from dedup_broker.protocol import commands
from dedup_broker.protocol import pulsar_api_pb2 as pb
from dedup_broker.protocol.framing import Frame, encode_payload_command
from dedup_broker.schema.compatibility import SchemaInfo
from dedup_broker.security.authorization import AuthAction
from dedup_broker.session.lookups import topic_name
from dedup_broker.session.replies import CreationInProgressError, UnknownIdError
from dedup_broker.session.transactions import acknowledge_in_transaction
from dedup_broker.storage.api import Position

if TYPE_CHECKING:
    from dedup_broker.domain.registry import ServedTopic
    from dedup_broker.session.context import Handler, Session

log = logging.getLogger(__name__)

_INITIAL_POSITION = {0: "latest", 1: "earliest"}


class SubscriptionRefusedError(PermanentError):
    """A SUBSCRIBE this broker cannot serve (no name, an unsupported type)."""


class OtherConsumersError(PermanentError):
    """Unsubscribe refused: the subscription has other consumers."""


class ConsumerCommands:
    """The consumer side of one connection; also each consumer's link back to its client."""

    def __init__(self, connection: Session) -> None:
        self.connection = connection
        self.broker = connection.broker
        self.consumers: dict[int, Consumer] = {}
        self._topics: dict[int, ServedTopic] = {}
        self._creating: dict[int, asyncio.Future[None]] = {}
        self._moving: set[int] = set()
        """Consumers closed by the broker whose CLOSE_CONSUMER waits for the address of the
        topic's next broker: their flow and redelivery requests are dropped meanwhile."""

    def handlers(self) -> dict[int, Handler]:
        base = pb.BaseCommand
        return {
            base.SUBSCRIBE: self._on_subscribe,
            base.FLOW: self._on_flow,
            base.ACK: self._on_ack,
            base.REDELIVER_UNACKNOWLEDGED_MESSAGES: self._on_redeliver,
            base.SEEK: self._on_seek,
            base.GET_LAST_MESSAGE_ID: self._on_get_last_message_id,
            base.UNSUBSCRIBE: self._on_unsubscribe,
            base.CLOSE_CONSUMER: self._on_close_consumer,
            base.CONSUMER_STATS: self._on_consumer_stats,
        }

    # --- ConsumerLink ---------------------------------------------------------------
    @property
    def remote_address(self) -> str:
        return self.connection.remote_address

    @property
    def writable(self) -> bool:
        return self.connection.writable

    def deliver(self, consumer: Consumer, deliveries: Sequence[Delivery]) -> None:
        frames = []
        for delivery in deliveries:
            position = delivery.entry.position
            command = commands.message(
                consumer.consumer_id,
                position.ledger_id,
                position.entry_id,
                redelivery_count=delivery.redelivery_count,
                ack_set=delivery.ack_set or None,
                # As Pulsar does: ids then match GET_LAST_MESSAGE_ID's, which the client
                # compares them with (hasMessageAvailable on a partition's reader).
                partition=consumer.partition_index,
                consumer_epoch=consumer.epoch if consumer.epoch else None,
            )
            frames.append(encode_payload_command(command, delivery.entry.data))
        self.connection.write_bytes(b"".join(frames))

    def close_consumer(self, consumer: Consumer, destination: Destination | None = None) -> None:
        """The broker closed the consumer (seek, unload): the client resubscribes, at
        ``destination`` once known."""
        consumer_id = consumer.consumer_id
        if self.consumers.get(consumer_id) is not consumer:
            return
        self._forget(consumer_id)
        if destination is None or destination.done():
            self._send_close(consumer_id, destination)
            return
        self._moving.add(consumer_id)
        destination.add_done_callback(lambda done: self._moved(consumer_id, done))

    def _moved(self, consumer_id: int, destination: Destination) -> None:
        if consumer_id in self._moving:
            self._moving.discard(consumer_id)
            self._send_close(consumer_id, destination)

    def _send_close(self, consumer_id: int, destination: Destination | None) -> None:
        urls = outcome(destination) if destination is not None else None
        self.connection.send_command(
            commands.close_consumer(
                consumer_id,
                assigned_broker_service_url=urls.service_url if urls else None,
                assigned_broker_service_url_tls=urls.service_url_tls if urls else None,
            )
        )

    def active_consumer_changed(self, consumer: Consumer, active: bool) -> None:
        if self.consumers.get(consumer.consumer_id) is not consumer:
            # Its SUBSCRIBE is still being answered: the answer tells it, once, after SUCCESS.
            return
        self.connection.send_command(commands.active_consumer_change(consumer.consumer_id, active))

    def reached_end_of_topic(self, consumer: Consumer) -> None:
        if self.consumers.get(consumer.consumer_id) is consumer:
            self.connection.send_command(commands.reached_end_of_topic(consumer.consumer_id))

    def resume_dispatch(self) -> None:
        """The socket drained: dispatch what waited for it."""
        for consumer in self.consumers.values():
            consumer.subscription.trigger()

    # --- subscribing ----------------------------------------------------------------
    def _on_subscribe(self, frame: Frame) -> Awaitable[None]:
        return self._subscribe(frame.command.subscribe)

    async def _subscribe(self, request: pb.CommandSubscribe) -> None:
        name = topic_name(self.connection, request.topic)
        authorizer, role = self.connection.authorizer, self.connection.role
        authorizer.check_topic(role, name, AuthAction.CONSUME)
        authorizer.check_subscription(role, name, request.subscription)
        if request.consumer_id in self.consumers:
            self.connection.send_command(commands.success(request.request_id))
            return
        if request.consumer_id in self._creating:
            raise CreationInProgressError(f"consumer {request.consumer_id} is being created")
        self._creating[request.consumer_id] = asyncio.get_running_loop().create_future()
        try:
            sub_type = SubscriptionType(request.subType)
            if not request.subscription:
                raise SubscriptionRefusedError("a subscription name is required")
            topic = await self.broker.topic_registry.serve(name)
            if request.HasField("schema"):
                schema = SchemaInfo.of_wire(request.schema)
                await self.broker.schemas.for_consumer(name, schema)
            start = None
            if request.HasField("start_message_id"):
                # As Pulsar does: the reader's start entry itself is sent, and the client
                # drops what lies at or before its start id (batch index, exclusivity).
                start = message_position(request.start_message_id)
            consumer = Consumer(
                link=self,
                consumer_id=request.consumer_id,
                name=request.consumer_name or f"consumer-{request.consumer_id}",
                subscription_name=request.subscription,
                priority_level=request.priority_level,
                partition_index=name.partition_index,
                key_shared=_key_shared_settings(request)
                if sub_type == SubscriptionType.KEY_SHARED
                else None,
                metadata={kv.key: kv.value for kv in request.metadata} or NO_METADATA,
                client_version=self.connection.client_version,
            )
            durable = request.durable if request.HasField("durable") else True
            await topic.subscribe(
                consumer,
                sub_type,
                durable=durable,
                initial_position=_INITIAL_POSITION.get(request.initialPosition, "latest"),
                start=start,
                start_inclusive=True,
                read_compacted=request.read_compacted,
            )
            if self.connection.closed:
                topic.consumer_closed(consumer)
                return
            self.consumers[request.consumer_id] = consumer
            self._topics[request.consumer_id] = topic
            self.connection.send_command(commands.success(request.request_id))
            if sub_type == SubscriptionType.FAILOVER:
                active = consumer.subscription.active_consumer is consumer
                self.active_consumer_changed(consumer, active)
        finally:
            self._creating.pop(request.consumer_id).set_result(None)

    def _consumer(self, consumer_id: int) -> Consumer:
        consumer = self.consumers.get(consumer_id)
        if consumer is None and consumer_id in self._moving:
            raise ServiceNotReadyError("the topic is moving to another broker")
        if consumer is None:
            raise UnknownIdError(f"no consumer with id {consumer_id} on this connection")
        return consumer

    # --- flow, acks, redelivery ---------------------------------------------------------
    def _on_flow(self, frame: Frame) -> None:
        flow = frame.command.flow
        if flow.consumer_id in self._moving:
            return
        consumer = self._consumer(flow.consumer_id)
        consumer.last_flow_ms = int(time.time() * 1000)
        consumer.subscription.on_flow(consumer, flow.messagePermits)

    def _on_ack(self, frame: Frame) -> Awaitable[None] | None:
        ack = frame.command.ack
        consumer = self.consumers.get(ack.consumer_id)
        if consumer is None:
            # Acks flushed after a seek or a broker-side close refer to a consumer that is
            # gone; the messages will be delivered again, so the ack is dropped.
            if ack.HasField("request_id"):
                self.connection.send_command(
                    commands.ack_response(
                        ack.consumer_id,
                        ack.request_id,
                        error=pb.ConsumerNotFound,
                        message=f"no consumer with id {ack.consumer_id} on this connection",
                    )
                )
            log.debug("ack for unknown consumer %d ignored", ack.consumer_id)
            return None
        if ack.HasField("txnid_most_bits"):
            positions = [message_position(m) for m in ack.message_id]
            topic = self._topics[ack.consumer_id]
            return acknowledge_in_transaction(self.connection, topic, consumer, ack, positions)
        cumulative = ack.ack_type == pb.CommandAck.Cumulative
        subscription = consumer.subscription
        positions = []
        partly: list[tuple[Position, list[int]]] = []
        by_index = self.connection.config.acknowledgment_at_batch_index_level_enabled
        for message_id in ack.message_id:
            position = message_position(message_id)
            if len(message_id.ack_set) and any(message_id.ack_set):
                # Part of a batch is still unacknowledged: a cumulative ack moves up to the
                # entry before it; what was acknowledged of the batch is kept by index.
                if cumulative:
                    positions.append(subscription.position_before(position))
                if by_index:
                    partly.append((position, list(message_id.ack_set)))
                continue
            positions.append(position)
        if positions:
            subscription.on_ack(consumer, positions, cumulative)
        for position, unacked in partly:
            subscription.on_batch_ack(consumer, position, unacked)
        if ack.HasField("request_id"):
            self.connection.send_command(
                commands.ack_response(consumer.consumer_id, ack.request_id)
            )
        return None

    def _on_redeliver(self, frame: Frame) -> None:
        request = frame.command.redeliverUnacknowledgedMessages
        if request.consumer_id in self._moving:
            return
        consumer = self._consumer(request.consumer_id)
        if request.HasField("consumer_epoch"):
            consumer.epoch = request.consumer_epoch
        positions = [message_position(m) for m in request.message_ids] or None
        consumer.subscription.on_redeliver(consumer, positions)

    # --- positions ----------------------------------------------------------------------
    def _on_seek(self, frame: Frame) -> Awaitable[None]:
        return self._seek(frame.command.seek)

    async def _seek(self, request: pb.CommandSeek) -> None:
        consumer = self._consumer(request.consumer_id)
        topic = self._topics[request.consumer_id]
        if isinstance(topic, NonPersistentTopic):  # nothing stored to move to
            await consumer.subscription.reset_cursor(Position(-1, -1))
            return
        ledger = topic.managed_ledger
        if request.HasField("message_publish_time"):
            position = await ledger.find_position_by_time(request.message_publish_time)
        elif request.HasField("message_id"):
            position = message_position(request.message_id)
            if position.ledger_id < 0:
                position = ledger.first_position()
            elif position.ledger_id == LATEST_LEDGER_ID:
                position = ledger.next_position(ledger.last_confirmed)
        else:
            raise ProtocolError("SEEK needs a message id or a publish time")
        await consumer.subscription.reset_cursor(position)
        self.connection.send_command(commands.success(request.request_id))

    def _on_get_last_message_id(self, frame: Frame) -> Awaitable[None]:
        return self._get_last_message_id(frame.command.getLastMessageId)

    async def _get_last_message_id(self, request: pb.CommandGetLastMessageId) -> None:
        consumer = self._consumer(request.consumer_id)
        topic = self._topics[request.consumer_id]
        position, batch_index = await topic.last_message_id()
        mark_delete = consumer.subscription.mark_delete_position
        self.connection.send_command(
            commands.get_last_message_id_response(
                request.request_id,
                position.ledger_id,
                position.entry_id,
                batch_index=batch_index,
                partition=topic.name.partition_index,
                mark_delete=(mark_delete.ledger_id, mark_delete.entry_id),
            )
        )

    # --- leaving ------------------------------------------------------------------------
    def _on_unsubscribe(self, frame: Frame) -> Awaitable[None]:
        return self._unsubscribe(frame.command.unsubscribe)

    async def _unsubscribe(self, request: pb.CommandUnsubscribe) -> None:
        consumer = self._consumer(request.consumer_id)
        subscription = consumer.subscription
        others = [c for c in subscription.consumers if c is not consumer]
        if others:
            raise OtherConsumersError(
                f"subscription {subscription.name!r} has {len(others)} other consumer(s)"
            )
        topic = self._topics[request.consumer_id]
        self._forget(request.consumer_id)
        subscription.remove_consumer(consumer)
        await topic.unsubscribe(subscription.name)
        self.connection.send_command(commands.success(request.request_id))

    def _on_close_consumer(self, frame: Frame) -> Awaitable[None] | None:
        request = frame.command.close_consumer
        self._moving.discard(request.consumer_id)
        pending = self._creating.get(request.consumer_id)
        if pending is not None:
            return self._close_after(pending, request)
        self._close(request)
        return None

    async def _close_after(
        self, pending: asyncio.Future[None], request: pb.CommandCloseConsumer
    ) -> None:
        await pending
        self._close(request)

    def _close(self, request: pb.CommandCloseConsumer) -> None:
        consumer = self.consumers.get(request.consumer_id)
        if consumer is not None:
            topic = self._topics[request.consumer_id]
            self._forget(request.consumer_id)
            topic.consumer_closed(consumer)
        self.connection.send_command(commands.success(request.request_id))

    def _forget(self, consumer_id: int) -> None:
        del self.consumers[consumer_id]
        del self._topics[consumer_id]

    def connection_lost(self) -> None:
        self._moving.clear()
        for consumer_id, consumer in list(self.consumers.items()):
            self._topics[consumer_id].consumer_closed(consumer)
        self.consumers.clear()
        self._topics.clear()

    def _on_consumer_stats(self, frame: Frame) -> None:
        request = frame.command.consumerStats
        consumer = self._consumer(request.consumer_id)
        self.connection.send_command(
            commands.consumer_stats_response(
                request.request_id,
                msg_backlog=consumer.subscription.backlog(),
                available_permits=consumer.permits,
                unacked_messages=consumer.unacked_messages,
                consumer_name=consumer.name,
                subscription_type=consumer.subscription.type.name,
            )
        )


def message_position(message_id: pb.MessageIdData) -> Position:
    """Ids travel as uint64 but are Pulsar's signed longs: ``MessageId.earliest`` is -1:-1,
    and a client acknowledging the entry before a ledger's first sends ``(L, -1)``; read
    raw, that would be ``(L, 2**64 - 1)``, past every entry of ``L``."""
    return Position(
        commands.as_signed64(message_id.ledgerId), commands.as_signed64(message_id.entryId)
    )


def _key_shared_settings(request: pb.CommandSubscribe) -> KeySharedSettings:
    """A Key_Shared consumer's ``keySharedMeta`` (AUTO_SPLIT when the client sent none)."""
    if not request.HasField("keySharedMeta"):
        return KeySharedSettings()
    meta = request.keySharedMeta
    return KeySharedSettings(
        mode=KeySharedMode.STICKY if meta.keySharedMode == pb.STICKY else KeySharedMode.AUTO_SPLIT,
        ranges=tuple((r.start, r.end) for r in meta.hashRanges),
        allow_out_of_order=meta.allowOutOfOrderDelivery,
    )
