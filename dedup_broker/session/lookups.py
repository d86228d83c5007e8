"""Where a topic lives and what it is: LOOKUP, partitioned metadata, namespace listings,
schemas."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING

from dedup_broker.domain.names import TopicName
from dedup_broker.protocol import commands
from dedup_broker.protocol import pulsar_api_pb2 as pb
from dedup_broker.protocol.framing import Frame

if TYPE_CHECKING:
    from dedup_broker.session.context import Handler, Session


def topic_name(connection: Session, text: str) -> TopicName:
    config = connection.config
    return TopicName.parse(text, config.default_tenant, config.default_namespace)


class LookupCommands:
    def __init__(self, connection: Session) -> None:
        self.connection = connection
        self.broker = connection.broker

    def handlers(self) -> dict[int, Handler]:
        return {
            pb.BaseCommand.PARTITIONED_METADATA: self._on_partitioned_metadata,
            pb.BaseCommand.LOOKUP: self._on_lookup,
            pb.BaseCommand.GET_TOPICS_OF_NAMESPACE: self._on_get_topics_of_namespace,
            pb.BaseCommand.GET_SCHEMA: self._on_get_schema,
            pb.BaseCommand.GET_OR_CREATE_SCHEMA: self._on_get_or_create_schema,
        }

    def _on_partitioned_metadata(self, frame: Frame) -> Awaitable[None]:
        return self._partitioned_metadata(frame.command.partitionMetadata)

    async def _partitioned_metadata(self, request: pb.CommandPartitionedTopicMetadata) -> None:
        name = topic_name(self.connection, request.topic)
        partitions = await self.broker.partitioned_metadata(name)
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
        owner = await self.broker.owner_of(name)
        if owner is not None:
            reply = commands.lookup_response(
                request.request_id,
                owner.service_url,
                response="Redirect",
                authoritative=True,
                proxy_through_service_url=False,
            )
        elif self.broker.cluster is not None:
            reply = commands.lookup_response(
                request.request_id,
                self.broker.cluster.address.service_url,
                proxy_through_service_url=False,
            )
        else:
            reply = commands.lookup_response(request.request_id, self.connection.service_url)
        self.connection.send_command(reply)

    def _on_get_topics_of_namespace(self, frame: Frame) -> Awaitable[None]:
        return self._topics_of_namespace(frame.command.getTopicsOfNamespace)

    async def _topics_of_namespace(self, request: pb.CommandGetTopicsOfNamespace) -> None:
        await self.broker.refresh_listing()
        topics = self.broker.topics_of_namespace(request.namespace)
        self.connection.send_command(
            commands.get_topics_of_namespace_response(request.request_id, topics)
        )

    def _on_get_schema(self, frame: Frame) -> None:
        request = frame.command.getSchema
        self.connection.send_command(
            commands.get_schema_response(
                request.request_id,
                error=pb.TopicNotFound,
                message="this broker does not store schemas",
            )
        )

    def _on_get_or_create_schema(self, frame: Frame) -> None:
        request = frame.command.getOrCreateSchema
        self.connection.send_command(commands.get_or_create_schema_response(request.request_id))
