"""Where a topic lives and what it is: LOOKUP, partitioned metadata, namespace listings
and their watches (pattern subscriptions), schemas."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING

from dedup_broker.cluster.listeners import INTERNAL_LISTENER
from dedup_broker.domain.topic_list import (
    TopicListWatch,
    compile_pattern,
    filter_topics,
    topics_hash,
)
from dedup_broker.domain_base.names import TopicName
from dedup_broker.errors import PermanentError
from dedup_broker.protocol import commands
from dedup_broker.protocol import pulsar_api_pb2 as pb
from dedup_broker.protocol.framing import Frame
from dedup_broker.schema.compatibility import (
    IncompatibleSchemaError,
    SchemaInfo,
    SchemaNotFoundError,
    SchemaType,
)
from dedup_broker.schema.registry import version_bytes, version_of
from dedup_broker.security.authorization import AuthAction

if TYPE_CHECKING:
    from dedup_broker.session.context import Handler, Session


def topic_name(connection: Session, text: str) -> TopicName:
    config = connection.config
    return TopicName.parse(text, config.default_tenant, config.default_namespace)


class InvalidTopicsPatternError(PermanentError):
    """A topic-list watch with a pattern this broker cannot evaluate."""


class LookupCommands:
    def __init__(self, connection: Session) -> None:
        self.connection = connection
        self.broker = connection.broker
        self.watches: dict[int, TopicListWatch] = {}

    def handlers(self) -> dict[int, Handler]:
        return {
            pb.BaseCommand.PARTITIONED_METADATA: self._on_partitioned_metadata,
            pb.BaseCommand.LOOKUP: self._on_lookup,
            pb.BaseCommand.GET_TOPICS_OF_NAMESPACE: self._on_get_topics_of_namespace,
            pb.BaseCommand.WATCH_TOPIC_LIST: self._on_watch_topic_list,
            pb.BaseCommand.WATCH_TOPIC_LIST_CLOSE: self._on_watch_topic_list_close,
            pb.BaseCommand.GET_SCHEMA: self._on_get_schema,
            pb.BaseCommand.GET_OR_CREATE_SCHEMA: self._on_get_or_create_schema,
        }

    def _on_partitioned_metadata(self, frame: Frame) -> Awaitable[None]:
        return self._partitioned_metadata(frame.command.partitionMetadata)

    async def _partitioned_metadata(self, request: pb.CommandPartitionedTopicMetadata) -> None:
        name = topic_name(self.connection, request.topic)
        self.connection.authorizer.check_lookup(self.connection.role, name)
        partitions = await self.broker.partitioned_topics.partitioned_metadata(name)
        self.connection.send_command(
            commands.partitioned_metadata_response(request.request_id, partitions)
        )

    def _on_lookup(self, frame: Frame) -> Awaitable[None]:
        return self._lookup(frame.command.lookupTopic)

    async def _lookup(self, request: pb.CommandLookupTopic) -> None:
        """Connect when this broker serves the topic, else Redirect to the one that does
        (authoritative: the owner is named by the cluster, the client need not ask again
        elsewhere)."""
        name = topic_name(self.connection, request.topic)
        self.connection.authorizer.check_lookup(self.connection.role, name)
        await self.broker.namespaces.require_namespace(name.namespace_name)
        owner = await self.broker.topic_registry.owner_of(name)
        listener = request.advertised_listener_name or None  # the Go client sends ""
        listeners = self.connection.advertised_listeners
        if listeners is not None:
            # The listener named, else the internal one: the owner's address with its
            # plain and TLS ports. A name the owner does not have fails, as on Pulsar.
            urls = await listeners.urls(owner, listener)
            urls = urls.for_client(listener or INTERNAL_LISTENER, self.connection.tls)
            reply = commands.lookup_response(
                request.request_id,
                urls.lookup_url,
                response="Redirect" if owner is not None else "Connect",
                proxy_through_service_url=False,
                broker_service_url_tls=urls.service_url_tls,
            )
        elif owner is not None:
            reply = commands.lookup_response(
                request.request_id,
                owner.service_url,
                response="Redirect",
                authoritative=True,
                proxy_through_service_url=False,
                broker_service_url_tls=owner.service_url_tls,
            )
        elif self.broker.cluster is not None:
            address = self.broker.cluster.address
            reply = commands.lookup_response(
                request.request_id,
                address.service_url,
                proxy_through_service_url=False,
                broker_service_url_tls=address.service_url_tls,
            )
        else:
            reply = commands.lookup_response(
                request.request_id,
                self.connection.service_url,
                broker_service_url_tls=self.connection.service_url_tls,
            )
        self.connection.send_command(reply)

    def _on_get_topics_of_namespace(self, frame: Frame) -> Awaitable[None]:
        return self._topics_of_namespace(frame.command.getTopicsOfNamespace)

    async def _topics_of_namespace(self, request: pb.CommandGetTopicsOfNamespace) -> None:
        """The topics of the mode's domains (non-persistent ones: those live on this
        broker), filtered by the pattern when there is one this broker can evaluate (the
        client filters again anyway)."""
        self.connection.authorizer.check_namespace_read(
            self.connection.role, request.namespace, f"list the topics of {request.namespace}"
        )
        modes = pb.CommandGetTopicsOfNamespace
        topics: list[str] = []
        if request.mode != modes.NON_PERSISTENT:
            topics = await self.broker.namespaces.current_topics_of_namespace(request.namespace)
        if request.mode != modes.PERSISTENT:
            topics += self.broker.topic_registry.non_persistent_topics_of_namespace(
                request.namespace
            )
        filtered = False
        if request.HasField("topics_pattern"):
            pattern = compile_pattern(request.topics_pattern)
            if pattern is not None:
                topics, filtered = filter_topics(topics, pattern), True
        listing_hash = topics_hash(topics)
        unchanged = filtered and request.topics_hash == listing_hash
        self.connection.send_command(
            commands.get_topics_of_namespace_response(
                request.request_id,
                [] if unchanged else topics,
                filtered=filtered,
                topics_hash=listing_hash,
                changed=not unchanged,
            )
        )

    def _on_watch_topic_list(self, frame: Frame) -> Awaitable[None]:
        return self._watch(frame.command.watchTopicList)

    async def _watch(self, request: pb.CommandWatchTopicList) -> None:
        self.connection.authorizer.check_namespace_read(
            self.connection.role, request.namespace, f"watch the topics of {request.namespace}"
        )
        pattern = compile_pattern(request.topics_pattern)
        if pattern is None:
            raise InvalidTopicsPatternError(f"invalid topics pattern {request.topics_pattern!r}")
        watcher_id = request.watcher_id
        previous = self.watches.pop(watcher_id, None)
        if previous is not None:
            self.broker.namespaces.watches.unwatch(previous)

        def updated(new: list[str], deleted: list[str], listing_hash: str) -> None:
            self.connection.send_command(
                commands.watch_topic_update(watcher_id, new, deleted, listing_hash)
            )

        watch = await self.broker.namespaces.watches.watch(request.namespace, pattern, updated)
        if self.connection.closed:
            self.broker.namespaces.watches.unwatch(watch)
            return
        self.watches[watcher_id] = watch
        self.connection.send_command(
            commands.watch_topic_list_success(
                request.request_id, watcher_id, sorted(watch.topics), watch.hash
            )
        )

    def _on_watch_topic_list_close(self, frame: Frame) -> None:
        request = frame.command.watchTopicListClose
        watch = self.watches.pop(request.watcher_id, None)
        if watch is not None:
            self.broker.namespaces.watches.unwatch(watch)
        self.connection.send_command(commands.success(request.request_id))

    def connection_lost(self) -> None:
        for watch in self.watches.values():
            self.broker.namespaces.watches.unwatch(watch)
        self.watches.clear()

    def _on_get_schema(self, frame: Frame) -> Awaitable[None]:
        return self._get_schema(frame.command.getSchema)

    async def _get_schema(self, request: pb.CommandGetSchema) -> None:
        """The version asked for, else the latest; Pulsar's ``TopicNotFound`` without one."""
        name = topic_name(self.connection, request.topic)
        self.connection.authorizer.check_lookup(self.connection.role, name)
        raw = request.schema_version if request.HasField("schema_version") else b""
        version = version_of(raw) if raw else None
        try:
            if raw and version is None:
                raise SchemaNotFoundError(f"invalid schema version {raw.hex()}")
            stored = self.broker.schemas.get(name, version)
        except SchemaNotFoundError:
            self.connection.send_command(
                commands.get_schema_response(
                    request.request_id,
                    error=pb.TopicNotFound,
                    message=f"Topic not found or no-schema {name}",
                )
            )
            return
        self.connection.send_command(
            commands.get_schema_response(
                request.request_id,
                schema=stored.info.to_wire(str(name.partitioned_base)),
                schema_version=version_bytes(stored.version),
            )
        )

    def _on_get_or_create_schema(self, frame: Frame) -> Awaitable[None]:
        return self._get_or_create_schema(frame.command.getOrCreateSchema)

    async def _get_or_create_schema(self, request: pb.CommandGetOrCreateSchema) -> None:
        """As a producer's schema, but ``NONE`` is no schema here (Pulsar's empty version)."""
        name = topic_name(self.connection, request.topic)
        self.connection.authorizer.check_topic(self.connection.role, name, AuthAction.PRODUCE)
        schema = SchemaInfo.of_wire(request.schema)
        try:
            version = await self.broker.schemas.for_producer(
                name, schema if schema.type is not SchemaType.NONE else None
            )
        except IncompatibleSchemaError as exc:
            self.connection.send_command(
                commands.get_or_create_schema_response(
                    request.request_id, error=pb.IncompatibleSchema, message=str(exc)
                )
            )
            return
        self.connection.send_command(
            commands.get_or_create_schema_response(request.request_id, schema_version=version)
        )
