"""Executor side of the sink: publish one Spark partition's rows with the official client.

Runs inside a Spark task. It either gets every row acknowledged by the broker (stored, or
recognised as a duplicate of a row stored before) or raises, so that Spark fails and
retries the task; a row is never dropped without an error.

In the sequence modes each producer first asks the broker for its last stored sequence
id (``PRODUCER_SUCCESS``) and does not resend rows at or below it. A replayed task thus
sends only what is new, and never a client batch that is partly stored and partly new
(which the broker could only answer with an error). Whatever still arrives twice, for
instance after a reconnect, the broker drops by the same sequence ids.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import pulsar

from connectors.client_security import new_client
from connectors.sink_ids import (
    batch_sequence_id,
    column_producer_name,
    column_route,
    column_sequence_id,
    key_partition,
    partition_producer_name,
    spark_partition_route,
)
from connectors.sink_options import (
    ProducerSettings,
    Routing,
    SinkDataError,
    SinkMode,
    SinkPublishError,
    WriterSpec,
)

log = logging.getLogger(__name__)

WAIT_MARGIN_SECONDS = 60.0
"""Beyond the send timeout, how long to wait for the last acknowledgements."""


@dataclass
class PartitionResult:
    """What one task did; summed over the batch by the driver."""

    rows: int = 0
    stored: int = 0
    """Acknowledged with a real message id: written by this attempt."""
    duplicates: int = 0
    """Acknowledged with message id -1:-1: the broker already had them."""
    skipped: int = 0
    """Not sent: at or below the producer's last stored sequence id."""

    def as_tuple(self) -> tuple[int, int, int, int]:
        return (self.rows, self.stored, self.duplicates, self.skipped)


class _Acks:
    """Counts acknowledgements from the client's callback thread.

    The callback runs once per message under the GIL; it only counts, and wakes the task
    only once every message sent is acknowledged and the task waits for that.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._all_acked = threading.Event()
        self._waiting = False
        self.sent = 0
        self.acked = 0
        self.stored = 0
        self.duplicates = 0
        self.errors: list[str] = []

    def callback(self, result: pulsar.Result, message_id: pulsar.MessageId) -> None:
        with self._lock:
            self.acked += 1
            if result != pulsar.Result.Ok:
                self.errors.append(str(result))
            elif message_id.entry_id() < 0:
                self.duplicates += 1
            else:
                self.stored += 1
            if self._waiting and self.acked >= self.sent:
                self._all_acked.set()

    def wait_all(self, timeout: float | None) -> bool:
        """Wait for every message sent so far (called once, after the last send)."""
        with self._lock:
            if self.acked >= self.sent:
                return True
            self._waiting = True
        return self._all_acked.wait(timeout)


@dataclass
class _Slot:
    producer: pulsar.Producer
    last_stored: int
    """The broker's last stored sequence id for this name on this partition (-1: none)."""
    last_sent: int = -1


class PartitionWriter:
    """Publishes the rows of one Spark partition of one batch."""

    def __init__(self, spec: WriterSpec, spark_partition: int, client: pulsar.Client) -> None:
        self.spec = spec
        self.spark_partition = spark_partition
        self.client = client
        self.partition_topics: list[str] = list(client.get_topic_partitions(spec.topic))
        self.result = PartitionResult()
        self._acks = _Acks()
        self._slots: dict[tuple[str | None, int], _Slot] = {}

    # --- per row --------------------------------------------------------------------
    def publish(self, index: int, row: Sequence[Any]) -> None:
        spec = self.spec
        if self._acks.errors:
            raise SinkPublishError(f"publishing to {spec.topic} failed: {self._acks.errors[0]}")
        self.result.rows += 1
        raw_key = row[spec.key_index] if spec.key_index is not None else None
        key = None if raw_key is None else _text(raw_key)
        name, sequence_id = self._identity(index, row)
        slot = self._slot(name, self._route(row, key))
        if sequence_id is not None:
            if sequence_id <= slot.last_sent:
                raise SinkDataError(
                    f"sequence ids of producer {name!r} do not increase within the batch "
                    f"({sequence_id} after {slot.last_sent}): the producer and sequence "
                    "columns must identify each row and be sorted"
                )
            slot.last_sent = sequence_id
            if sequence_id <= slot.last_stored:
                self.result.skipped += 1
                return
        kwargs: dict[str, Any] = {}
        if key is not None:
            kwargs["partition_key"] = key
        if sequence_id is not None:
            kwargs["sequence_id"] = sequence_id
        props: dict[str, str] = {}
        if spec.properties_map_index is not None and row[spec.properties_map_index]:
            props.update(
                (_text(k), _text(v))
                for k, v in dict(row[spec.properties_map_index]).items()
                if v is not None
            )
        if spec.property_indexes:
            props.update(
                (prop, _text(row[i])) for prop, i in spec.property_indexes if row[i] is not None
            )
        if props:
            kwargs["properties"] = props
        if spec.event_time_index is not None and row[spec.event_time_index] is not None:
            kwargs["event_timestamp"] = _millis(row[spec.event_time_index])
        self._acks.sent += 1
        slot.producer.send_async(_payload(row[spec.value_index]), self._acks.callback, **kwargs)

    def _identity(self, index: int, row: Sequence[Any]) -> tuple[str | None, int | None]:
        spec = self.spec
        if spec.mode is SinkMode.SEQUENCE:
            assert spec.name is not None
            name = partition_producer_name(spec.name, self.spark_partition)
            try:
                return name, batch_sequence_id(spec.batch_id, index)
            except ValueError as exc:
                raise SinkDataError(str(exc)) from exc
        if spec.mode is SinkMode.COLUMNS:
            assert spec.name is not None
            assert spec.producer_index is not None and spec.sequence_index is not None
            try:
                name = column_producer_name(spec.name, row[spec.producer_index])
                return name, column_sequence_id(row[spec.sequence_index])
            except ValueError as exc:
                raise SinkDataError(str(exc)) from exc
        if spec.key_index is None or row[spec.key_index] is None:
            raise SinkDataError("key mode needs a non-null key in every row")
        return None, None

    def _route(self, row: Sequence[Any], key: str | None) -> int:
        count = len(self.partition_topics)
        if count == 1:
            return 0
        routing = self.spec.routing
        if routing is Routing.KEY:
            if key is None:
                raise SinkDataError("routing by key needs a non-null key in every row")
            return key_partition(key, count)
        if routing is Routing.COLUMN:
            assert self.spec.partition_index is not None
            try:
                return column_route(row[self.spec.partition_index], count)
            except ValueError as exc:
                raise SinkDataError(str(exc)) from exc
        return spark_partition_route(self.spark_partition, count)

    def _slot(self, name: str | None, partition: int) -> _Slot:
        slot = self._slots.get((name, partition))
        if slot is None:
            settings = self.spec.producer
            options: dict[str, Any] = {
                "batching_enabled": settings.batching_enabled,
                "batching_max_messages": settings.batching_max_messages,
                "batching_max_publish_delay_ms": settings.batching_max_publish_delay_ms,
                "batching_max_allowed_size_in_bytes": settings.batching_max_bytes,
                "max_pending_messages": settings.max_pending_messages,
                "block_if_queue_full": True,
                "send_timeout_millis": settings.send_timeout_ms,
            }
            if settings.compression:
                options["compression_type"] = getattr(pulsar.CompressionType, settings.compression)
            if name is not None:
                options["producer_name"] = name
            producer = self.client.create_producer(self.partition_topics[partition], **options)
            last = producer.last_sequence_id() if name is not None else -1
            slot = _Slot(producer, last)
            self._slots[(name, partition)] = slot
        return slot

    # --- end of the partition -------------------------------------------------------
    def finish(self) -> PartitionResult:
        """Wait until every row is acknowledged; raise if any was not."""
        for slot in self._slots.values():
            slot.producer.flush()
        timeout = acknowledgement_timeout(self.spec.producer)
        if not self._acks.wait_all(timeout):
            raise SinkPublishError(
                f"{self._acks.sent - self._acks.acked} rows to {self.spec.topic} were not "
                f"acknowledged within {timeout:.0f}s"
            )
        if self._acks.errors:
            raise SinkPublishError(
                f"{len(self._acks.errors)} rows to {self.spec.topic} failed: {self._acks.errors[0]}"
            )
        self.result.stored = self._acks.stored
        self.result.duplicates = self._acks.duplicates
        return self.result

    def close(self) -> None:
        close_quietly(slot.producer for slot in self._slots.values())
        self._slots.clear()


class Closable(Protocol):
    def close(self) -> None: ...


def close_quietly(producers: Iterable[Closable]) -> None:
    """Close every producer; a failure to close changes nothing (the task may be failing)."""
    for producer in producers:
        try:
            producer.close()
        except Exception as exc:
            log.debug("closing producer: %s", exc)


def acknowledgement_timeout(settings: ProducerSettings) -> float | None:
    """How long a task waits for its last acknowledgements: beyond twice the send timeout
    (a resend may take one more), none when the send timeout is off."""
    timeout_ms = settings.send_timeout_ms
    return None if timeout_ms <= 0 else 2 * timeout_ms / 1000 + WAIT_MARGIN_SECONDS


def write_partition(
    spec: WriterSpec, spark_partition: int, rows: Iterable[Sequence[Any]]
) -> PartitionResult:
    """Publish every row of one partition, or raise (the task fails and Spark retries)."""
    client = new_client(spec.service_url, dict(spec.client_options))
    try:
        writer = PartitionWriter(spec, spark_partition, client)
        try:
            for index, row in enumerate(rows):
                writer.publish(index, row)
            return writer.finish()
        finally:
            writer.close()
    finally:
        client.close()


def _payload(value: object) -> bytes:
    if value is None:
        return b""
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if isinstance(value, str):
        return value.encode()
    raise SinkDataError(f"value must be binary or string, not {type(value).__name__}")


def _text(value: object) -> str:
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode()
    return str(value)


def _millis(value: object) -> int:
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.astimezone()
        return int(value.timestamp() * 1000)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise SinkDataError(f"event time must be a timestamp or epoch millis, not {value!r}")
