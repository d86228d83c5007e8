"""What the executors need to publish one Spark partition: plain, picklable values.

The driver (``connectors.sink``) turns the user's options and column expressions into a
``WriterSpec`` whose fields name positions in the projected rows; the executors
(``connectors.sink_writer``) never see a Spark ``Column``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from dedup_broker.errors import PermanentError, RetriableError


class SinkMode(StrEnum):
    """How replayed rows are recognised."""

    SEQUENCE = "sequence"
    """Producer per Spark partition, sequence id from the batch id and the row's index."""
    COLUMNS = "columns"
    """Producer and sequence id from the user's columns (e.g. source partition, offset)."""
    KEY = "key"
    """No producer identity: the key column goes out as the partition key (key window)."""


class Routing(StrEnum):
    """Which partition of a partitioned topic a row goes to; always deterministic."""

    AUTO = "auto"
    """``key`` when a key column is set, else ``spark-partition``."""
    KEY = "key"
    """Hash of the key, as Pulsar's Java clients route (``JavaStringHash``)."""
    SPARK_PARTITION = "spark-partition"
    """All rows of one Spark partition to partition ``index % partitions``."""
    COLUMN = "column"
    """The ``partition_column``'s integer value, modulo the partition count."""


class ClientKind(StrEnum):
    """Which client the connectors publish and read with."""

    LEAN = "lean"
    """The connectors' own protocol client (``connectors.wire``): Arrow batches in and out,
    whole batch entries built and split a column at a time."""
    OFFICIAL = "official"
    """The official ``pulsar-client``, one Python call per message: the reference path."""


class SinkPublishError(RetriableError):
    """Rows of a task were not all acknowledged by the broker; Spark retries the task."""


class SinkDataError(PermanentError):
    """A row cannot be published as configured (null key, bad sequence id, wrong type)."""


@dataclass(frozen=True)
class ProducerSettings:
    """Options of the official client's producers (names as ``create_producer`` takes them)."""

    batching_enabled: bool = True
    batching_max_messages: int = 1000
    batching_max_publish_delay_ms: int = 10
    max_pending_messages: int = 10_000
    send_timeout_ms: int = 30_000
    compression: str | None = None
    """``LZ4``, ``ZLib``, ``ZSTD``, ``SNAPPY`` or None."""
    batching_max_bytes: int = 128 * 1024
    """At most this many bytes of messages in one batch entry (the clients' default)."""


@dataclass(frozen=True)
class WriterSpec:
    """One batch's publishing plan; row positions refer to the projected columns."""

    service_url: str
    topic: str
    mode: SinkMode
    name: str | None
    batch_id: int
    routing: Routing
    value_index: int
    key_index: int | None = None
    producer_index: int | None = None
    sequence_index: int | None = None
    partition_index: int | None = None
    event_time_index: int | None = None
    property_indexes: tuple[tuple[str, int], ...] = ()
    properties_map_index: int | None = None
    """A map column whose entries all go out as properties (before ``property_indexes``)."""
    producer: ProducerSettings = field(default_factory=ProducerSettings)
    client_options: tuple[tuple[str, Any], ...] = ()
    client: ClientKind = ClientKind.LEAN
