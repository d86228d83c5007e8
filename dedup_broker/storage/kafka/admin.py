"""Kafka admin operations the storage layer needs, as coroutines.

The admin client resolves its futures from librdkafka's own background thread, so
awaiting them (``asyncio.wrap_future``) never blocks the event loop and needs no worker
thread of ours.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import (
    IsolationLevel,
    KafkaError,
    KafkaException,
    TopicCollection,
    TopicPartition,
)

# These names are public API; the package's stubs merely do not re-export them.
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
)

from dedup_broker.config import BrokerConfig
from dedup_broker.errors import KafkaNotReadyError, StorageError
from dedup_broker.kafka_logging import kafka_logger
from dedup_broker.storage.kafka.common import storage_error
from dedup_broker.storage.kafka.end_offsets import PartitionEnds
from dedup_broker.storage.kafka.topic_batches import TopicBatches

log = logging.getLogger(__name__)

SEALED_MAX_MESSAGE_BYTES = "0"
"""``max.message.bytes`` of a sealed ledger topic: Kafka rejects every further write."""
LIST_OFFSETS_ATTEMPTS = 6
"""Offset queries tried this often (about 3 s of back-off in all) before they fail."""
LEADERSHIP_PATIENCE_S = 20.0
"""How long offset queries keep being asked while Kafka answers that a partition's
leadership is changing (after Kafka was frozen or restarted, its leaders' epochs settle
in seconds): such an answer says "ask again", not "this failed"."""
_LIST_OFFSETS_FIRST_DELAY_S, _LIST_OFFSETS_MAX_DELAY_S = 0.1, 1.0
_LEADERSHIP_CODES = frozenset(
    {
        KafkaError.UNKNOWN_LEADER_EPOCH,
        KafkaError.FENCED_LEADER_EPOCH,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.OFFSET_NOT_AVAILABLE,
        KafkaError.REPLICA_NOT_AVAILABLE,
    }
)
START_PATIENCE_S = 120.0
"""How long a starting broker waits for Kafka to be able to create its topics."""
_START_RETRY_FIRST_S, _START_RETRY_MAX_S = 0.5, 5.0
_GROW_LOOKUP_PATIENCE_S = 10.0
"""How long a topic missing from the metadata is looked up again before a growth gives up."""
_NOT_READY_CODES = frozenset(
    {
        KafkaError.REQUEST_TIMED_OUT,  # "Failed while waiting for controller"
        KafkaError.NOT_CONTROLLER,
        KafkaError.BROKER_NOT_AVAILABLE,
    }
)
"""Answers of a Kafka that is up but not ready; a Kafka that cannot be reached or refuses
the broker's credentials fails the start at once, with librdkafka's reason logged."""


def _error_code(exc: BaseException) -> int | None:
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return int(exc.args[0].code())
    return None


def creation_error(topic: str, exc: BaseException) -> StorageError:
    """What a failed topic creation means: ``KafkaNotReadyError`` when Kafka will be
    able to create it in a moment (its controller busy, or its only broker still fenced,
    which Kafka answers as a replication factor it cannot meet)."""
    error = storage_error(f"create topic {topic}", exc)
    kafka_error = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    if not isinstance(kafka_error, KafkaError):
        return error
    code, reason = kafka_error.code(), kafka_error.str()
    fenced = code == KafkaError.INVALID_REPLICATION_FACTOR and "fenced" in reason
    # Kafka's busy controller, as librdkafka reports it once its own timeout ran out.
    busy = code == KafkaError._TIMED_OUT and "waiting for controller" in reason
    not_ready = fenced or busy or code in _NOT_READY_CODES
    return KafkaNotReadyError(str(error)) if not_ready else error


class KafkaAdmin:
    def __init__(self, config: BrokerConfig) -> None:
        self._timeout_s = config.kafka_request_timeout_ms / 1000
        self._replication_factor = config.kafka_replication_factor
        conf: dict[str, Any] = {
            **config.kafka_connection(),
            "client.id": f"{config.cluster_name}.broker-admin",
            "logger": kafka_logger(),
            "allow.auto.create.topics": False,
        }
        self._client = AdminClient(conf)
        # Kafka answers one request per connection at a time and a CreateTopics waits for
        # the controller, so creations and deletions get their own client (offset queries
        # do not queue behind them) and go in batches (see topic_batches).
        self._topics_client = AdminClient({**conf, "client.id": f"{conf['client.id']}-topics"})
        self._ends = PartitionEnds(self._client, self._timeout_s)
        self._metadata_requests = threading.Lock()
        """Held around every ``list_topics`` of the client, which runs in worker threads:
        librdkafka can corrupt its heap ("double free or corruption") when metadata
        requests for topics it does not know run in several threads at once."""
        self._creations = TopicBatches[NewTopic](
            "create topics", self._send_creations, self._created
        )
        self._deletions = TopicBatches[str]("delete topics", self._send_deletions, self._deleted)
        self._descriptions = TopicBatches[str](
            "describe topics", self._send_descriptions, self._described, shared=True
        )
        self._creation_checks = TopicBatches[NewTopic](
            "check topics", self._send_creation_checks, self._created, shared=True
        )

    async def _wait(self, what: str, future: concurrent.futures.Future[Any]) -> Any:
        try:
            return await asyncio.wrap_future(future)
        except KafkaException as exc:
            self._client.poll(0)  # librdkafka's reason (refused credentials...) gets logged
            raise storage_error(what, exc) from exc

    async def create_topic(
        self, topic: str, config: Mapping[str, str], partitions: int = 1
    ) -> bool:
        """Create ``topic``; False if it already existed.

        Creations asked for while a CreateTopics request is in flight go together in the
        next one: a single-node KRaft Kafka takes about as long for a hundred topics in
        one request as for one, so loading many topics at once is not one round trip each.
        """
        new = NewTopic(topic, partitions, self._replication_factor, config=dict(config))
        return await self._creations.ask(topic, new)

    async def create_topic_when_ready(
        self,
        topic: str,
        config: Mapping[str, str],
        partitions: int = 1,
        patience_s: float = START_PATIENCE_S,
    ) -> bool:
        """``create_topic`` for a broker that starts: tried again while Kafka is not ready
        yet (started together with it, or just restarted), for at most ``patience_s``."""
        deadline = time.monotonic() + patience_s
        delay = _START_RETRY_FIRST_S
        while True:
            try:
                return await self.create_topic(topic, config, partitions)
            except KafkaNotReadyError as exc:
                # A client Kafka refuses (credentials) reads the same timeout: only a Kafka
                # that answers this broker is waited for.
                if time.monotonic() + delay > deadline or not await self._answers():
                    raise
                log.warning("%s; trying again in %.1fs", exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, _START_RETRY_MAX_S)

    async def grow_partitions(self, topic: str, count: int) -> None:
        """Give ``topic`` ``count`` partitions if it has fewer (Kafka never shrinks).

        A topic just created may be missing from a node's metadata for a moment: it is
        looked up again for a few seconds before it is taken as absent."""
        deadline = time.monotonic() + _GROW_LOOKUP_PATIENCE_S
        while True:
            metadata = await asyncio.to_thread(self._locked_list_topics, topic)
            found = metadata.topics.get(topic)
            if found is not None and found.error is None:
                break
            if time.monotonic() >= deadline:
                log.warning("%s not found in Kafka's metadata: not grown", topic)
                return
            await asyncio.sleep(0.1)
        if len(found.partitions) >= count:
            return
        futures = self._topics_client.create_partitions(
            [NewPartitions(topic, count)], request_timeout=self._timeout_s
        )
        try:
            await self._wait(f"grow {topic} to {count} partitions", futures[topic])
        except StorageError as exc:
            if "already has" not in str(exc):  # raced by another broker: fine
                raise
        log.info("%s grown to %d partitions", topic, count)

    def _locked_list_topics(self, topic: str) -> Any:
        with self._metadata_requests:
            return self._client.list_topics(topic, timeout=self._timeout_s)

    async def _answers(self) -> bool:
        """Kafka serves this broker's metadata requests (it is reached and authenticated)."""
        try:
            await asyncio.to_thread(self._client.list_topics, timeout=self._timeout_s)
        except KafkaException:
            return False
        return True

    def _send_creations(self, topics: list[NewTopic]) -> dict[str, Any]:
        return self._topics_client.create_topics(
            topics, operation_timeout=self._timeout_s, request_timeout=self._timeout_s
        )

    def _send_deletions(self, topics: list[str]) -> dict[str, Any]:
        return self._topics_client.delete_topics(
            topics, operation_timeout=self._timeout_s, request_timeout=self._timeout_s
        )

    def _created(self, topic: str, refusal: KafkaException | None) -> bool:
        """A creation's answer: True if created, False if the topic existed already."""
        if refusal is None:
            return True
        if _error_code(refusal) == KafkaError.TOPIC_ALREADY_EXISTS:
            return False
        self._topics_client.poll(0)  # librdkafka's reason (refused credentials...) is logged
        raise creation_error(topic, refusal)

    def _deleted(self, topic: str, refusal: KafkaException | None) -> bool:
        """A deletion's answer: True if deleted, False if the topic did not exist."""
        if refusal is None:
            return True
        if _error_code(refusal) == KafkaError.UNKNOWN_TOPIC_OR_PART:
            return False
        self._topics_client.poll(0)
        raise storage_error(f"delete topic {topic}", refusal)

    async def topic_exists(self, topic: str) -> bool:
        """Whether ``topic`` exists; never False for a topic Kafka's controller has.

        Asked together with the other such questions of the moment, in one DescribeTopics
        (a Metadata request per topic, one at a time, grew to seconds each on a Kafka busy
        with tens of thousands of partitions). A broker answers that from its copy of the
        cluster's metadata, which lags its controller by up to about a minute while
        thousands of topics are created: "unknown" is asked again of the controller
        itself, as a validate-only creation (which fails if the topic exists), so a
        ledger created a moment ago is never taken for one already deleted. (A topic
        deleted a moment ago may still be described: deleting it again says so.)
        """
        if await self._descriptions.ask(topic, topic):
            return True
        new = NewTopic(topic, 1, self._replication_factor)
        return not await self._creation_checks.ask(topic, new)

    def _send_creation_checks(self, topics: list[NewTopic]) -> dict[str, Any]:
        return self._topics_client.create_topics(
            topics,
            validate_only=True,
            operation_timeout=self._timeout_s,
            request_timeout=self._timeout_s,
        )

    def _send_descriptions(self, topics: list[str]) -> dict[str, Any]:
        return self._client.describe_topics(
            TopicCollection(topics), request_timeout=self._timeout_s
        )

    def _described(self, topic: str, refusal: KafkaException | None) -> bool:
        """A description's answer: True if the topic exists, False if it does not."""
        if refusal is None:
            return True
        if _error_code(refusal) == KafkaError.UNKNOWN_TOPIC_OR_PART:
            return False
        raise storage_error(f"describe topic {topic}", refusal)

    async def list_topics(self) -> list[str]:
        """Every topic of the Kafka cluster, sorted, as the answering broker knows them (its
        copy of the metadata can miss a topic created a moment ago: see topic_exists)."""
        try:
            return await asyncio.to_thread(self._all_topics)
        except KafkaException as exc:
            raise storage_error("list topics", exc) from exc

    def _all_topics(self) -> list[str]:
        with self._metadata_requests:
            return sorted(self._client.list_topics(timeout=self._timeout_s).topics)

    async def delete_topic(self, topic: str) -> bool:
        """Delete ``topic``; False if it did not exist. Deletions asked while one is in
        flight go together in the next request (see topic_batches)."""
        return await self._deletions.ask(topic, topic)

    async def delete_topics(self, topics: list[str]) -> None:
        """Delete ``topics``; ones that do not exist are not an error."""
        await asyncio.gather(*(self.delete_topic(topic) for topic in topics))

    async def _list_offsets(
        self,
        request: dict[TopicPartition, Any],
        what: str,
        isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
    ) -> dict[str, int]:
        """Offsets per topic for ``request`` (partition -> OffsetSpec)."""
        topics = sorted({tp.topic for tp in request})
        deadline = time.monotonic() + LEADERSHIP_PATIENCE_S
        attempt = 0
        while True:
            attempt += 1
            futures = self._client.list_offsets(
                request, isolation_level=isolation, request_timeout=self._timeout_s
            )
            try:
                return {
                    tp.topic: int((await asyncio.wrap_future(future)).offset)
                    for tp, future in futures.items()
                }
            except KafkaException as exc:
                leadership = _error_code(exc) in _LEADERSHIP_CODES
                if attempt >= LIST_OFFSETS_ATTEMPTS and (
                    not leadership or time.monotonic() >= deadline
                ):
                    raise storage_error(what, exc) from exc
                # The client sends these from cached metadata (leader, leader epoch) and
                # does not refresh it when they fail, e.g. after a broker restart; a topic
                # created a moment ago may have no leader in that metadata yet.
                log.debug("%s failed (%s); refreshing metadata of %s", what, exc, topics)
                await asyncio.to_thread(self._refresh_metadata, topics)
                delay = _LIST_OFFSETS_FIRST_DELAY_S * 2 ** (attempt - 1)
                await asyncio.sleep(min(delay, _LIST_OFFSETS_MAX_DELAY_S))

    def _refresh_metadata(self, topics: list[str]) -> None:
        with self._metadata_requests:
            for topic in topics:
                with contextlib.suppress(KafkaException):
                    self._client.list_topics(topic, timeout=self._timeout_s)

    async def high_watermark(self, topic: str, partition: int = 0) -> int:
        """The partition's end offset: one past the last record readers may see."""
        return await self._end(topic, partition, IsolationLevel.READ_UNCOMMITTED, "end offset")

    async def stable_end(self, topic: str, partition: int = 0) -> int:
        """The partition's last stable offset: one past the last record that is not part
        of a transaction still open (the end a read-committed reader reaches)."""
        return await self._end(topic, partition, IsolationLevel.READ_COMMITTED, "stable end")

    async def _end(self, topic: str, partition: int, isolation: IsolationLevel, what: str) -> int:
        """Asked together with the other ends asked for in this turn; a failed answer is
        asked again on its own, with the retries of :meth:`_list_offsets`."""
        try:
            return await self._ends.end(topic, partition, isolation)
        except KafkaException as exc:
            log.debug("%s of %s failed (%s); asking on its own", what, topic, exc)
        await asyncio.to_thread(self._refresh_metadata, [topic])
        latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
        request = {TopicPartition(topic, partition): latest}
        return (await self._list_offsets(request, f"{what} of {topic}", isolation))[topic]

    async def offsets_for_time(self, topics: list[str], timestamp_ms: int) -> dict[str, int]:
        """Per topic (partition 0): offset of the first record with timestamp >= the
        given one, or -1 if there is none."""
        if not topics:
            return {}
        request = {
            TopicPartition(topic, 0): OffsetSpec.for_timestamp(timestamp_ms) for topic in topics
        }
        return await self._list_offsets(request, f"offsets by time in {len(topics)} ledgers")

    async def seal_topic(self, topic: str) -> None:
        """Make Kafka refuse every further write to ``topic`` (reads are unaffected).

        A broker that recovers a ledger another process may still be writing seals it
        first, so that writer fails instead of adding records past the recorded end.
        """
        resource = ConfigResource(
            ConfigResource.Type.TOPIC,
            topic,
            incremental_configs=[
                ConfigEntry(
                    "max.message.bytes",
                    SEALED_MAX_MESSAGE_BYTES,
                    incremental_operation=AlterConfigOpType.SET,
                )
            ],
        )
        futures = self._client.incremental_alter_configs(
            [resource], request_timeout=self._timeout_s
        )
        await self._wait(f"seal {topic}", next(iter(futures.values())))
