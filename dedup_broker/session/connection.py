"""One client connection: frames in, commands dispatched, responses out.

The connection owns the producers and consumers the client created on it. Bad input
gets a clear error (or, for bytes that cannot be framed, a closed connection) and is
logged once; it never touches other connections.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from dedup_broker import __version__
from dedup_broker.domain.consumer import Consumer
from dedup_broker.domain.names import TopicName
from dedup_broker.domain.producer import Producer
from dedup_broker.domain.subscription import SubscriptionType
from dedup_broker.domain.topic import LATEST_LEDGER_ID
from dedup_broker.errors import BrokerError, ProtocolError
from dedup_broker.protocol import commands
from dedup_broker.protocol import pulsar_api_pb2 as pb
from dedup_broker.protocol.framing import (
    FRAME_PADDING,
    Frame,
    FrameDecoder,
    encode_command,
    parse_metadata_only,
    verify_checksum,
)
from dedup_broker.session.replies import server_error_of
from dedup_broker.storage.position import Position

if TYPE_CHECKING:
    from dedup_broker.domain.broker import BrokerService

log = logging.getLogger(__name__)

SERVER_PROTOCOL_VERSION = 21
MAX_PENDING_SENDS = 1000
"""Reading pauses when this many publishes await Kafka (Pulsar's per-connection limit)."""

_INITIAL_POSITION = {0: "latest", 1: "earliest"}
_BASE = pb.BaseCommand


class ClientConnection(asyncio.Protocol):
    def __init__(self, broker: BrokerService) -> None:
        self.broker = broker
        self.config = broker.config
        self.transport: asyncio.Transport | None = None
        self.remote_address = "?"
        self.decoder = FrameDecoder(self.config.max_message_size + FRAME_PADDING)
        self.connected = False
        self.protocol_version = 0
        self.producers: dict[int, Producer] = {}
        self.consumers: dict[int, Consumer] = {}
        self._creating: dict[tuple[str, int], asyncio.Future[None]] = {}
        self.writable = True
        self._pending_sends = 0
        self._reading_paused = False
        self._last_heard = time.monotonic()
        self._ping_outstanding = False
        self._keepalive: asyncio.TimerHandle | None = None
        self._closed = False
        self._handlers: dict[int, Callable[[Frame], Awaitable[None] | None]] = {
            _BASE.CONNECT: self._on_connect,
            _BASE.PING: self._on_ping,
            _BASE.PONG: self._on_pong,
            _BASE.PARTITIONED_METADATA: self._on_partitioned_metadata,
            _BASE.LOOKUP: self._on_lookup,
            _BASE.PRODUCER: self._on_producer,
            _BASE.SEND: self._on_send,
            _BASE.CLOSE_PRODUCER: self._on_close_producer,
            _BASE.SUBSCRIBE: self._on_subscribe,
            _BASE.FLOW: self._on_flow,
            _BASE.ACK: self._on_ack,
            _BASE.REDELIVER_UNACKNOWLEDGED_MESSAGES: self._on_redeliver,
            _BASE.SEEK: self._on_seek,
            _BASE.GET_LAST_MESSAGE_ID: self._on_get_last_message_id,
            _BASE.UNSUBSCRIBE: self._on_unsubscribe,
            _BASE.CLOSE_CONSUMER: self._on_close_consumer,
            _BASE.CONSUMER_STATS: self._on_consumer_stats,
            _BASE.GET_TOPICS_OF_NAMESPACE: self._on_get_topics_of_namespace,
            _BASE.GET_SCHEMA: self._on_get_schema,
            _BASE.GET_OR_CREATE_SCHEMA: self._on_get_or_create_schema,
        }

    # --- transport callbacks --------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.remote_address = f"{peer[0]}:{peer[1]}" if peer else "?"
        transport.set_write_buffer_limits(high=4 * 1024 * 1024, low=1024 * 1024)
        self.broker.connection_opened(self)
        self._schedule_keepalive()

    def data_received(self, data: bytes) -> None:
        self._last_heard = time.monotonic()
        self._ping_outstanding = False
        try:
            frames = self.decoder.feed(data)
        except ProtocolError as exc:
            log.warning("closing connection from %s: %s", self.remote_address, exc)
            self.broker.metrics.protocol_errors.inc()
            self._send_error_and_close(str(exc))
            return
        for frame in frames:
            if self._closed:
                return
            self._handle(frame)

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        if self._keepalive is not None:
            self._keepalive.cancel()
        for producer in list(self.producers.values()):
            producer.topic.remove_producer(producer)
        for consumer in list(self.consumers.values()):
            consumer.subscription.topic.consumer_closed(consumer)
        self.producers.clear()
        self.consumers.clear()
        self.broker.connection_closed(self)

    def pause_writing(self) -> None:
        self.writable = False

    def resume_writing(self) -> None:
        self.writable = True
        for consumer in self.consumers.values():
            consumer.subscription.trigger()

    # --- output -----------------------------------------------------------------------
    def send_command(self, command: pb.BaseCommand) -> None:
        self.write_bytes(encode_command(command))

    def write_bytes(self, data: bytes) -> None:
        if self.transport is not None and not self._closed:
            self.transport.write(data)

    def close(self) -> None:
        if self.transport is not None and not self._closed:
            self.transport.close()

    def _send_error_and_close(self, message: str) -> None:
        self.send_command(commands.error(0, pb.UnknownError, message))
        self.close()

    # --- publish back-pressure -------------------------------------------------------
    def publish_started(self) -> None:
        self._pending_sends += 1
        if self._pending_sends >= MAX_PENDING_SENDS and not self._reading_paused:
            self._reading_paused = True
            if self.transport is not None:
                self.transport.pause_reading()

    def publish_finished(self) -> None:
        self._pending_sends -= 1
        if self._reading_paused and self._pending_sends <= MAX_PENDING_SENDS // 2:
            self._reading_paused = False
            if self.transport is not None and not self._closed:
                self.transport.resume_reading()

    # --- keep-alive -----------------------------------------------------------------
    def _schedule_keepalive(self) -> None:
        loop = asyncio.get_running_loop()
        self._keepalive = loop.call_later(
            self.config.keep_alive_interval_seconds, self._check_alive
        )

    def _check_alive(self) -> None:
        if self._closed:
            return
        idle = time.monotonic() - self._last_heard
        if idle >= self.config.keep_alive_interval_seconds:
            if self._ping_outstanding:
                log.info("closing %s: no answer to keep-alive ping", self.remote_address)
                self.close()
                return
            self._ping_outstanding = True
            self.send_command(commands.ping())
        self._schedule_keepalive()

    # --- dispatch -------------------------------------------------------------------
    def _handle(self, frame: Frame) -> None:
        command = frame.command
        if not self.connected and command.type != _BASE.CONNECT:
            self._send_error_and_close(
                f"{commands.command_name(command)} before CONNECT: "
                "the first command must be CONNECT"
            )
            return
        handler = self._handlers.get(command.type)
        if handler is None:
            name = commands.command_name(command)
            log.info("unsupported command %s from %s", name, self.remote_address)
            self.send_command(
                commands.error(
                    commands.request_id_of(command) or 0,
                    pb.NotAllowedError,
                    f"command {name} is not supported by this broker",
                )
            )
            return
        try:
            result = handler(frame)
        except BrokerError as exc:
            self._reply_error(command, exc)
            return
        if result is not None:
            task = asyncio.get_running_loop().create_task(self._guard(command, result))
            task.add_done_callback(_log_unexpected)

    async def _guard(self, command: pb.BaseCommand, work: Awaitable[None]) -> None:
        try:
            await work
        except BrokerError as exc:
            self._reply_error(command, exc)
        except Exception as exc:
            log.exception("%s from %s failed", commands.command_name(command), self.remote_address)
            self._reply_error(command, exc)

    def _reply_error(self, command: pb.BaseCommand, exc: BaseException) -> None:
        code = server_error_of(exc)
        request_id = commands.request_id_of(command)
        if command.type == _BASE.SEND:
            send = command.send
            self.send_command(
                commands.send_error(send.producer_id, send.sequence_id, code, str(exc))
            )
        elif command.type == _BASE.PARTITIONED_METADATA:
            self.send_command(
                commands.partitioned_metadata_response(
                    command.partitionMetadata.request_id, error=code, message=str(exc)
                )
            )
        elif command.type == _BASE.LOOKUP:
            self.send_command(
                commands.lookup_response(
                    command.lookupTopic.request_id, "", error=code, message=str(exc)
                )
            )
        else:
            self.send_command(commands.error(request_id or 0, code, str(exc)))
        log.info("%s from %s refused: %s", commands.command_name(command), self.remote_address, exc)

    # --- connection-level commands ---------------------------------------------------
    def _on_connect(self, frame: Frame) -> None:
        if self.connected:
            raise ProtocolError("CONNECT received twice on one connection")
        connect = frame.command.connect
        self.protocol_version = min(connect.protocol_version, SERVER_PROTOCOL_VERSION)
        self.connected = True
        self.send_command(
            commands.connected(
                f"dedup-broker {__version__}",
                self.protocol_version,
                self.config.max_message_size,
            )
        )

    def _on_ping(self, frame: Frame) -> None:
        self.send_command(commands.pong())

    def _on_pong(self, frame: Frame) -> None:
        self._ping_outstanding = False

    def _topic_name(self, text: str) -> TopicName:
        return TopicName.parse(text, self.config.default_tenant, self.config.default_namespace)

    def _on_partitioned_metadata(self, frame: Frame) -> None:
        request = frame.command.partitionMetadata
        name = self._topic_name(request.topic)
        partitions = self.broker.partitions_of(name)
        self.send_command(commands.partitioned_metadata_response(request.request_id, partitions))

    def _on_lookup(self, frame: Frame) -> None:
        request = frame.command.lookupTopic
        self._topic_name(request.topic)
        self.send_command(commands.lookup_response(request.request_id, self.broker.service_url))

    def _on_get_topics_of_namespace(self, frame: Frame) -> None:
        request = frame.command.getTopicsOfNamespace
        topics = self.broker.topics_of_namespace(request.namespace)
        self.send_command(commands.get_topics_of_namespace_response(request.request_id, topics))

    def _on_get_schema(self, frame: Frame) -> None:
        request = frame.command.getSchema
        self.send_command(
            commands.get_schema_response(
                request.request_id,
                error=pb.TopicNotFound,
                message="this broker does not store schemas",
            )
        )

    def _on_get_or_create_schema(self, frame: Frame) -> None:
        request = frame.command.getOrCreateSchema
        self.send_command(commands.get_or_create_schema_response(request.request_id))

    # --- producers ------------------------------------------------------------------
    def _on_producer(self, frame: Frame) -> Awaitable[None]:
        return self._create_producer(frame.command.producer)

    async def _create_producer(self, request: pb.CommandProducer) -> None:
        name = self._topic_name(request.topic)
        existing = self.producers.get(request.producer_id)
        if existing is not None:
            if str(existing.topic.name) != str(name):
                raise BrokerError(f"producer id {request.producer_id} is in use for another topic")
            self._producer_success(request.request_id, existing)
            return
        key = ("producer", request.producer_id)
        if key in self._creating:
            raise CreationInProgressError(f"producer {request.producer_id} is being created")
        self._creating[key] = asyncio.get_running_loop().create_future()
        try:
            if request.producer_access_mode not in (0,):
                raise BrokerError("only the Shared producer access mode is supported")
            topic = await self.broker.get_topic(name, for_producer=True)
            await topic.managed_ledger.wait_writable()
            user_named = request.HasField("producer_name") and bool(request.producer_name)
            producer = Producer(
                connection=self,
                producer_id=request.producer_id,
                name=request.producer_name if user_named else self.broker.new_producer_name(),
                topic=topic,
                user_provided_name=user_named,
            )
            topic.add_producer(producer)
            if self._closed:
                topic.remove_producer(producer)
                return
            self.producers[request.producer_id] = producer
            self.broker.metrics.producers.inc()
            self._producer_success(request.request_id, producer)
        finally:
            self._creating.pop(key).set_result(None)

    def _producer_success(self, request_id: int, producer: Producer) -> None:
        self.send_command(
            commands.producer_success(
                request_id,
                producer.name,
                last_sequence_id=producer.topic.last_sequence_id(producer.name),
            )
        )

    def _on_send(self, frame: Frame) -> None:
        send = frame.command.send
        producer = self.producers.get(send.producer_id)
        if producer is None:
            raise UnknownIdError(f"no producer with id {send.producer_id} on this connection")
        entry = frame.payload
        if not entry:
            raise ProtocolError("SEND without a message payload")
        if not verify_checksum(entry):
            self.broker.metrics.checksum_errors.inc()
            self.send_command(
                commands.send_error(
                    send.producer_id,
                    send.sequence_id,
                    pb.ChecksumError,
                    "message checksum (CRC32C) does not match its content",
                )
            )
            log.warning(
                "checksum mismatch from producer %s (%s)", producer.name, self.remote_address
            )
            return
        metadata = parse_metadata_only(entry)
        producer.topic.publish(producer, send, entry, metadata)

    def _on_close_producer(self, frame: Frame) -> Awaitable[None] | None:
        request = frame.command.close_producer
        pending = self._creating.get(("producer", request.producer_id))
        if pending is not None:
            return self._close_producer_after(pending, request)
        self._close_producer(request)
        return None

    async def _close_producer_after(
        self, pending: asyncio.Future[None], request: pb.CommandCloseProducer
    ) -> None:
        await pending
        self._close_producer(request)

    def _close_producer(self, request: pb.CommandCloseProducer) -> None:
        producer = self.producers.pop(request.producer_id, None)
        if producer is not None:
            producer.topic.remove_producer(producer)
            self.broker.metrics.producers.dec()
        self.send_command(commands.success(request.request_id))

    def close_producer_by_broker(self, producer: Producer) -> None:
        """The broker closes a producer (topic unloaded); the client reconnects it."""
        if self.producers.get(producer.producer_id) is producer:
            del self.producers[producer.producer_id]
            producer.topic.remove_producer(producer)
            self.broker.metrics.producers.dec()
            self.send_command(commands.close_producer(producer.producer_id))

    # --- consumers ------------------------------------------------------------------
    def _on_subscribe(self, frame: Frame) -> Awaitable[None]:
        return self._subscribe(frame.command.subscribe)

    async def _subscribe(self, request: pb.CommandSubscribe) -> None:
        name = self._topic_name(request.topic)
        existing = self.consumers.get(request.consumer_id)
        if existing is not None:
            self.send_command(commands.success(request.request_id))
            return
        key = ("consumer", request.consumer_id)
        if key in self._creating:
            raise CreationInProgressError(f"consumer {request.consumer_id} is being created")
        self._creating[key] = asyncio.get_running_loop().create_future()
        try:
            sub_type = SubscriptionType(request.subType)
            if sub_type == SubscriptionType.KEY_SHARED:
                raise BrokerError("Key_Shared subscriptions are not supported yet")
            if not request.subscription:
                raise BrokerError("a subscription name is required")
            topic = await self.broker.get_topic(name, for_producer=False)
            start = None
            if request.HasField("start_message_id"):
                # As Pulsar does: the reader's start entry itself is sent, and the client
                # drops what lies at or before its start id (batch index, exclusivity).
                start = _start_position(request.start_message_id)
            consumer = Consumer(
                connection=self,
                consumer_id=request.consumer_id,
                name=request.consumer_name or f"consumer-{request.consumer_id}",
                subscription_name=request.subscription,
                priority_level=request.priority_level,
                partition_index=name.partition_index,
            )
            durable = request.durable if request.HasField("durable") else True
            await topic.subscribe(
                consumer,
                sub_type,
                durable=durable,
                initial_position=_INITIAL_POSITION.get(request.initialPosition, "latest"),
                start=start,
                start_inclusive=True,
            )
            if self._closed:
                topic.consumer_closed(consumer)
                return
            self.consumers[request.consumer_id] = consumer
            self.broker.metrics.consumers.inc()
            self.send_command(commands.success(request.request_id))
            if sub_type == SubscriptionType.FAILOVER:
                active = consumer.subscription.active_consumer is consumer
                self.send_command(commands.active_consumer_change(consumer.consumer_id, active))
        finally:
            self._creating.pop(key).set_result(None)

    def _consumer(self, consumer_id: int) -> Consumer:
        consumer = self.consumers.get(consumer_id)
        if consumer is None:
            raise UnknownIdError(f"no consumer with id {consumer_id} on this connection")
        return consumer

    def _on_flow(self, frame: Frame) -> None:
        flow = frame.command.flow
        consumer = self._consumer(flow.consumer_id)
        consumer.subscription.on_flow(consumer, flow.messagePermits)

    def _on_ack(self, frame: Frame) -> None:
        ack = frame.command.ack
        consumer = self.consumers.get(ack.consumer_id)
        if consumer is None:
            # Acks flushed after a seek or a broker-side close refer to a consumer that is
            # gone; the messages will be delivered again, so the ack is dropped.
            if ack.HasField("request_id"):
                self.send_command(
                    commands.ack_response(
                        ack.consumer_id,
                        ack.request_id,
                        error=pb.ConsumerNotFound,
                        message=f"no consumer with id {ack.consumer_id} on this connection",
                    )
                )
            log.debug("ack for unknown consumer %d ignored", ack.consumer_id)
            return
        cumulative = ack.ack_type == pb.CommandAck.Cumulative
        positions = []
        for message_id in ack.message_id:
            position = Position(message_id.ledgerId, message_id.entryId)
            if len(message_id.ack_set) and any(message_id.ack_set):
                # Part of a batch is still unacknowledged: only a cumulative ack may move
                # up to the entry before it.
                if cumulative:
                    positions.append(
                        consumer.subscription.topic.managed_ledger.previous_position(position)
                    )
                continue
            positions.append(position)
        if positions:
            consumer.subscription.on_ack(consumer, positions, cumulative)
        if ack.HasField("request_id"):
            self.send_command(commands.ack_response(consumer.consumer_id, ack.request_id))

    def _on_redeliver(self, frame: Frame) -> None:
        request = frame.command.redeliverUnacknowledgedMessages
        consumer = self._consumer(request.consumer_id)
        if request.HasField("consumer_epoch"):
            consumer.epoch = request.consumer_epoch
        positions = [Position(m.ledgerId, m.entryId) for m in request.message_ids] or None
        consumer.subscription.on_redeliver(consumer, positions)

    def _on_seek(self, frame: Frame) -> Awaitable[None]:
        return self._seek(frame.command.seek)

    async def _seek(self, request: pb.CommandSeek) -> None:
        consumer = self._consumer(request.consumer_id)
        subscription = consumer.subscription
        ledger = subscription.topic.managed_ledger
        if request.HasField("message_publish_time"):
            position = await ledger.find_position_by_time(request.message_publish_time)
        elif request.HasField("message_id"):
            position = _start_position(request.message_id)
            if position.ledger_id < 0:
                position = ledger.first_position()
            elif position.ledger_id == LATEST_LEDGER_ID:
                position = ledger.next_position(ledger.last_confirmed)
        else:
            raise ProtocolError("SEEK needs a message id or a publish time")
        await subscription.reset_cursor(position)
        self.send_command(commands.success(request.request_id))

    def _on_get_last_message_id(self, frame: Frame) -> Awaitable[None]:
        return self._get_last_message_id(frame.command.getLastMessageId)

    async def _get_last_message_id(self, request: pb.CommandGetLastMessageId) -> None:
        consumer = self._consumer(request.consumer_id)
        topic = consumer.subscription.topic
        position, batch_index = await topic.last_message_id()
        mark_delete = consumer.subscription.cursor.mark_delete_position
        self.send_command(
            commands.get_last_message_id_response(
                request.request_id,
                position.ledger_id,
                position.entry_id,
                batch_index=batch_index,
                partition=topic.name.partition_index,
                mark_delete=(mark_delete.ledger_id, mark_delete.entry_id),
            )
        )

    def _on_unsubscribe(self, frame: Frame) -> Awaitable[None]:
        return self._unsubscribe(frame.command.unsubscribe)

    async def _unsubscribe(self, request: pb.CommandUnsubscribe) -> None:
        consumer = self._consumer(request.consumer_id)
        subscription = consumer.subscription
        others = [c for c in subscription.consumers if c is not consumer]
        if others:
            raise BrokerError(
                f"subscription {subscription.name!r} has {len(others)} other consumer(s)"
            )
        self.consumers.pop(request.consumer_id, None)
        subscription.remove_consumer(consumer)
        self.broker.metrics.consumers.dec()
        await subscription.topic.unsubscribe(subscription.name)
        self.send_command(commands.success(request.request_id))

    def _on_close_consumer(self, frame: Frame) -> Awaitable[None] | None:
        request = frame.command.close_consumer
        pending = self._creating.get(("consumer", request.consumer_id))
        if pending is not None:
            return self._close_consumer_after(pending, request)
        self._close_consumer(request)
        return None

    async def _close_consumer_after(
        self, pending: asyncio.Future[None], request: pb.CommandCloseConsumer
    ) -> None:
        await pending
        self._close_consumer(request)

    def _close_consumer(self, request: pb.CommandCloseConsumer) -> None:
        consumer = self.consumers.pop(request.consumer_id, None)
        if consumer is not None:
            consumer.subscription.topic.consumer_closed(consumer)
            self.broker.metrics.consumers.dec()
        self.send_command(commands.success(request.request_id))

    def close_consumer_by_broker(self, consumer: Consumer) -> None:
        """The broker closes a consumer (seek, unload); the client resubscribes."""
        if self.consumers.get(consumer.consumer_id) is consumer:
            del self.consumers[consumer.consumer_id]
            consumer.subscription.topic.consumer_closed(consumer)
            self.broker.metrics.consumers.dec()
            self.send_command(commands.close_consumer(consumer.consumer_id))

    def _on_consumer_stats(self, frame: Frame) -> None:
        request = frame.command.consumerStats
        consumer = self._consumer(request.consumer_id)
        self.send_command(
            commands.consumer_stats_response(
                request.request_id,
                msg_backlog=consumer.subscription.backlog(),
                available_permits=consumer.permits,
                unacked_messages=consumer.unacked_messages,
                consumer_name=consumer.name,
                subscription_type=consumer.subscription.type.name,
            )
        )


def _start_position(message_id: pb.MessageIdData) -> Position:
    """Ids travel as uint64; ``MessageId.earliest`` is -1:-1 as Pulsar's signed longs."""
    return Position(
        commands.as_signed64(message_id.ledgerId), commands.as_signed64(message_id.entryId)
    )


class UnknownIdError(BrokerError):
    """A command names a producer or consumer id this connection does not have."""


class CreationInProgressError(BrokerError):
    """The same producer or consumer is still being created; the client retries."""

    retriable = True


def _log_unexpected(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("command handler crashed", exc_info=task.exception())
