"""Producers on one connection: PRODUCER, SEND, CLOSE_PRODUCER, and the answers to SENDs.

Each SEND's outcome comes back from the domain as a future; answers leave strictly in the
order the SENDs came (the official clients drop the connection on a receipt out of order),
whatever order the outcomes settle in.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import TYPE_CHECKING

from dedup_broker.backlog.quota import check_producer
from dedup_broker.domain import subscription_admin
from dedup_broker.domain.topic import Topic
from dedup_broker.domain_base.handover import Destination, outcome
from dedup_broker.domain_base.outcomes import (
    EarlierSendFailedError,
    PublishOutcome,
    PublishResult,
    settled,
)
from dedup_broker.domain_base.producer import NO_METADATA, Producer, ProducerAccessMode
from dedup_broker.errors import ChecksumError, ProtocolError
from dedup_broker.lazy import LazyDeque
from dedup_broker.protocol import commands
from dedup_broker.protocol import pulsar_api_pb2 as pb
from dedup_broker.protocol.framing import Frame, parse_metadata_only, verify_checksum
from dedup_broker.schema.compatibility import SchemaInfo
from dedup_broker.security.authorization import AuthAction
from dedup_broker.security.encryption import check_producer_encryption
from dedup_broker.session.lookups import topic_name
from dedup_broker.session.replies import (
    CreationInProgressError,
    UnknownIdError,
    publish_reply,
)

if TYPE_CHECKING:
    from dedup_broker.domain.registry import ServedTopic
    from dedup_broker.session.context import Handler, Session

log = logging.getLogger(__name__)


class _Attached:
    """A producer of this connection: its topic and its SENDs awaiting an outcome, in
    arrival order."""

    __slots__ = ("pending", "producer", "refused", "schema_version", "topic")

    def __init__(self, producer: Producer, topic: ServedTopic, schema_version: bytes) -> None:
        self.producer = producer
        self.topic = topic
        self.schema_version = schema_version
        self.pending: LazyDeque[tuple[pb.CommandSend, PublishResult]] = LazyDeque()
        """A real deque only while SENDs wait (an empty one is 760 B per producer)."""
        self.refused: BaseException | None = None
        """Why a SEND of this producer failed with a retriable error: every later SEND
        of it on this connection fails too, until the client creates it again."""

    def note(self, result: PublishResult) -> None:
        """A retriable failure stops the producer's stream here. The client answers it by
        dropping the connection and resending everything from the failed SEND on; a later
        SEND it had already written must not be stored meanwhile: stored before the
        earlier ones, it would also make deduplication take their resends for
        duplicates (acknowledged, never stored)."""
        if result.cancelled() or self.refused is not None:
            return
        outcome = result.result()
        if outcome.error is not None and outcome.retriable:
            self.refused = outcome.error


class ProducerCommands:
    """The producer side of one connection; also each producer's link back to its client."""

    def __init__(self, connection: Session) -> None:
        self.connection = connection
        self.broker = connection.broker
        self.producers: dict[int, _Attached] = {}
        self._creating: dict[int, asyncio.Future[None]] = {}
        self._waiting: dict[int, tuple[Producer, ServedTopic]] = {}
        """Producers being attached (``WaitForExclusive`` ones may wait long), by id."""
        self._closed_by_broker: set[int] = set()
        """Producers the broker closed (its CLOSE_PRODUCER may still wait for the address
        of the topic's next broker), until the client creates the id again: the SENDs it
        wrote before it heard of the close go unanswered, and it resends them where it
        reconnects. An error would make the client drop the whole connection, every other
        producer and consumer on it included (Pulsar keeps recently closed producers for
        the same reason)."""

    def handlers(self) -> dict[int, Handler]:
        return {
            pb.BaseCommand.PRODUCER: self._on_producer,
            pb.BaseCommand.SEND: self._on_send,
            pb.BaseCommand.CLOSE_PRODUCER: self._on_close_producer,
        }

    # --- ProducerLink ---------------------------------------------------------------
    @property
    def remote_address(self) -> str:
        return self.connection.remote_address

    def close_producer(self, producer: Producer, destination: Destination | None = None) -> None:
        """The broker closed the producer (topic unloaded): the client reconnects it, to
        ``destination`` once known."""
        attached = self.producers.get(producer.producer_id)
        if attached is None or attached.producer is not producer:
            return
        self._forget(attached)
        producer_id = producer.producer_id
        self._closed_by_broker.add(producer_id)
        if destination is None or destination.done():
            self._send_close(producer_id, destination)
            return
        destination.add_done_callback(lambda done: self._moved(producer_id, done))

    def _moved(self, producer_id: int, destination: Destination) -> None:
        if producer_id in self._closed_by_broker:  # not closed by the client meanwhile
            self._send_close(producer_id, destination)

    def _send_close(self, producer_id: int, destination: Destination | None) -> None:
        urls = outcome(destination) if destination is not None else None
        self.connection.send_command(
            commands.close_producer(
                producer_id,
                assigned_broker_service_url=urls.service_url if urls else None,
                assigned_broker_service_url_tls=urls.service_url_tls if urls else None,
            )
        )

    # --- creation -------------------------------------------------------------------
    def _on_producer(self, frame: Frame) -> Awaitable[None]:
        self._closed_by_broker.discard(frame.command.producer.producer_id)
        return self._create(frame.command.producer)

    async def _create(self, request: pb.CommandProducer) -> None:
        name = topic_name(self.connection, request.topic)
        self.connection.authorizer.check_topic(self.connection.role, name, AuthAction.PRODUCE)
        check_producer_encryption(self.broker.policies, name, request.encrypted)
        initial_subscription = request.initial_subscription_name
        if initial_subscription:  # Pulsar asks for SUBSCRIBE on it too
            self.connection.authorizer.check_topic(self.connection.role, name, AuthAction.CONSUME)
        existing = self.producers.get(request.producer_id)
        if existing is not None:
            if str(existing.topic.name) != str(name):
                raise UnknownIdError(
                    f"producer id {request.producer_id} is in use for another topic"
                )
            self._success(request.request_id, existing, existing.topic.access.epoch)
            return
        if request.producer_id in self._creating:
            raise CreationInProgressError(f"producer {request.producer_id} is being created")
        self._creating[request.producer_id] = asyncio.get_running_loop().create_future()
        try:
            try:
                access_mode = ProducerAccessMode(request.producer_access_mode)
            except ValueError:
                raise ProtocolError(
                    f"unknown producer access mode {request.producer_access_mode}"
                ) from None
            topic = await self.broker.topic_registry.serve(name)
            schema = SchemaInfo.of_wire(request.schema) if request.HasField("schema") else None
            schema_version = await self.broker.schemas.for_producer(name, schema)
            await topic.wait_writable()
            if isinstance(topic, Topic):
                await check_producer(
                    self.broker.policies, self.broker.config, name, topic.managed_ledger
                )
                if initial_subscription:
                    await subscription_admin.ensure_subscription(topic, initial_subscription)
            user_named = request.HasField("producer_name") and bool(request.producer_name)
            producer = Producer(
                link=self,
                producer_id=request.producer_id,
                name=request.producer_name if user_named else self.broker.new_producer_name(),
                user_provided_name=user_named,
                access_mode=access_mode,
                topic_epoch=request.topic_epoch if request.HasField("topic_epoch") else None,
                metadata={kv.key: kv.value for kv in request.metadata} or NO_METADATA,
                client_version=self.connection.client_version,
            )
            self._waiting[request.producer_id] = (producer, topic)
            try:
                epoch = await topic.attach_producer(
                    producer, queued=lambda: self._queued(request.request_id, producer)
                )
            finally:
                self._waiting.pop(request.producer_id, None)
            if self.connection.closed:
                topic.remove_producer(producer)
                return
            attached = _Attached(producer, topic, schema_version)
            self.producers[request.producer_id] = attached
            self._success(request.request_id, attached, epoch)
        finally:
            self._creating.pop(request.producer_id).set_result(None)

    def _queued(self, request_id: int, producer: Producer) -> None:
        """A WaitForExclusive producer waits: the client hears it exists but is not ready
        (Pulsar's answer); a second PRODUCER_SUCCESS follows once it holds the topic."""
        self.connection.send_command(
            commands.producer_success(request_id, producer.name, producer_ready=False)
        )

    def _success(self, request_id: int, attached: _Attached, epoch: int | None) -> None:
        name = attached.producer.name
        self.connection.send_command(
            commands.producer_success(
                request_id,
                name,
                last_sequence_id=attached.topic.last_sequence_id(name),
                schema_version=attached.schema_version,
                topic_epoch=epoch,
            )
        )

    # --- publishing -----------------------------------------------------------------
    def _on_send(self, frame: Frame) -> None:
        send = frame.command.send
        attached = self.producers.get(send.producer_id)
        if attached is None and send.producer_id in self._closed_by_broker:
            return  # resent by the client where it reconnects
        if attached is None:
            raise UnknownIdError(f"no producer with id {send.producer_id} on this connection")
        producer = attached.producer
        entry = frame.payload
        result: PublishResult
        if not entry:
            result = settled(PublishOutcome.failed(ProtocolError("SEND without a message payload")))
        elif not verify_checksum(entry):
            self.connection.metrics.checksum_errors.inc()
            log.warning(
                "checksum mismatch from producer %s (%s)", producer.name, self.remote_address
            )
            result = settled(
                PublishOutcome.failed(
                    ChecksumError("message checksum (CRC32C) does not match its content")
                )
            )
        elif attached.refused is not None:
            result = settled(PublishOutcome.failed(EarlierSendFailedError(attached.refused)))
        else:
            try:
                metadata = parse_metadata_only(entry)
            except ProtocolError as exc:
                result = settled(PublishOutcome.failed(exc))
            else:
                result = attached.topic.publish(producer, send, entry, metadata)
        attached.pending.append((send, result))
        self.connection.publish_started()
        if result.done():  # before the next SEND of this very read is looked at
            attached.note(result)
        else:
            result.add_done_callback(attached.note)
        result.add_done_callback(lambda _: self._flush(attached))

    def _flush(self, attached: _Attached) -> None:
        """Answer every SEND at the head whose outcome is known, in order."""
        producer = attached.producer
        pending = attached.pending
        while pending and pending[0][1].done():
            send, result = pending.popleft()
            self.connection.publish_finished()
            outcome: PublishOutcome = result.result()
            if not producer.closed:
                self.connection.send_command(publish_reply(producer.producer_id, send, outcome))

    # --- closing --------------------------------------------------------------------
    def _on_close_producer(self, frame: Frame) -> Awaitable[None] | None:
        request = frame.command.close_producer
        self._closed_by_broker.discard(request.producer_id)
        waiting = self._waiting.get(request.producer_id)
        if waiting is not None:  # still waiting for the topic: it stops waiting
            producer, topic = waiting
            topic.remove_producer(producer)
        pending = self._creating.get(request.producer_id)
        if pending is not None:
            return self._close_after(pending, request)
        self._close(request)
        return None

    async def _close_after(
        self, pending: asyncio.Future[None], request: pb.CommandCloseProducer
    ) -> None:
        await pending
        self._close(request)

    def _close(self, request: pb.CommandCloseProducer) -> None:
        attached = self.producers.get(request.producer_id)
        if attached is not None:
            attached.topic.remove_producer(attached.producer)
            self._forget(attached)
        self.connection.send_command(commands.success(request.request_id))

    def _forget(self, attached: _Attached) -> None:
        del self.producers[attached.producer.producer_id]
        for _ in attached.pending:
            self.connection.publish_finished()
        attached.pending.clear()

    def connection_lost(self) -> None:
        self._closed_by_broker.clear()
        for producer, topic in list(self._waiting.values()):
            topic.remove_producer(producer)
        for attached in list(self.producers.values()):
            attached.topic.remove_producer(attached.producer)
        self.producers.clear()
