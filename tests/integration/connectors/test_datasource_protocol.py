"""The ``dedup-broker`` data source's reader and writer driven as Spark drives them
(initialOffset, latestOffset, partitions, read on the "executor", commit; writer tasks with a
micro-batch id), against a real broker: exact rows from earliest / latest / JSON offsets,
``maxOffsetsPerTrigger``, a partitioned topic, a resume from a stored offset, and writer
replays stored once; on the lean client (Arrow record batches) and on the official one."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Iterator
from typing import Any
from unittest import mock

import pulsar
import pyarrow as pa
import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows
from pyspark.sql.types import BinaryType, MapType, StringType, StructField, StructType

from connectors.datasource_offsets import Offset
from connectors.datasource_reader import (
    SCHEMA,
    BatchReader,
    SourceOptions,
    StreamReader,
    read_partition,
)
from connectors.datasource_writer import BATCH_ID_PROPERTY, ArrowStreamWriter, StreamWriter
from harness.admin_http import http_request
from harness.broker_process import BrokerProcess
from tests.integration.connectors.sink_fixtures import stored_values

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(params=["lean", "official"])
def client_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def rows_of(items: Iterable[Any]) -> Iterator[tuple[Any, ...]]:
    """Rows as Spark makes them of what ``read`` returns: tuples as they are, record
    batches row by row (maps as dicts)."""
    for item in items:
        if not isinstance(item, pa.RecordBatch):
            yield item
            continue
        columns = [
            [dict(v) if isinstance(v, list) else v for v in column.to_pylist()]
            for column in item.columns
        ]
        yield from zip(*columns, strict=True)


def publish(client: pulsar.Client, topic: str, values: list[str], *, batching: bool) -> None:
    producer = client.create_producer(
        topic,
        batching_enabled=batching,
        batching_max_messages=4,
        batching_max_publish_delay_ms=20,
        message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution,
    )
    for value in values:
        producer.send_async(
            value.encode(), lambda r, _m: None, partition_key=f"k-{value}", properties={"v": value}
        )
    producer.flush()
    producer.close()


def options(broker: BrokerProcess, topic: str, client: str, **extra: str) -> SourceOptions:
    return SourceOptions.parse(
        {
            "serviceUrl": broker.service_url,
            "adminUrl": broker.http_url,
            "topic": topic,
            "client": client,
            **extra,
        }
    )


def run_batch(reader: StreamReader, start: Offset, limit: Any = None) -> tuple[Offset, list[str]]:
    """One micro-batch as Spark runs it: the end offset, then each partition's task."""
    end = reader.latestOffset(start, limit or reader.getDefaultReadLimit())
    values: list[str] = []
    for partition in reader.partitions(start, end):
        values.extend(row[1].decode() for row in rows_of(reader.read(partition)))
    reader.commit(end)
    return end, values


def test_earliest_latest_and_json_offsets(
    broker: BrokerProcess, client: pulsar.Client, topic: str, client_kind: str
) -> None:
    publish(client, topic, [f"a{i}" for i in range(10)], batching=True)
    earliest = StreamReader(options(broker, topic, client_kind))
    latest = StreamReader(options(broker, topic, client_kind, startingOffsets="latest"))
    start_earliest, start_latest = earliest.initialOffset(), latest.initialOffset()
    end, values = run_batch(earliest, start_earliest)
    assert values == [f"a{i}" for i in range(10)]
    assert run_batch(earliest, end)[1] == []
    assert run_batch(latest, start_latest)[1] == []

    publish(client, topic, [f"b{i}" for i in range(3)], batching=False)
    assert run_batch(earliest, end)[1] == ["b0", "b1", "b2"]
    assert run_batch(latest, start_latest)[1] == ["b0", "b1", "b2"]

    # JSON: after the message that a batch of the first run ended inside.
    rows = list(rows_of(read_partition(earliest.partitions(start_earliest, end)[0])))
    after_a4 = rows[4][5]
    ledger, entry, batch = (int(x) for x in after_a4.split(":"))
    assert batch >= 0, "a4 should sit inside a client batch"
    for given in (
        json.dumps({topic: {"ledgerId": ledger, "entryId": entry, "batchIndex": batch}}),
        json.dumps({topic: after_a4}),
    ):
        reader = StreamReader(options(broker, topic, client_kind, startingOffsets=given))
        assert run_batch(reader, reader.initialOffset())[1] == [
            *(f"a{i}" for i in range(5, 10)),
            "b0",
            "b1",
            "b2",
        ]
    for reader in (earliest, latest):
        reader.stop()


def test_columns_of_a_row(
    broker: BrokerProcess, client: pulsar.Client, topic: str, client_kind: str
) -> None:
    producer = client.create_producer(topic, producer_name="cols-producer")
    sent = producer.send(
        b"payload", partition_key="the-key", properties={"p": "1"}, event_timestamp=1_700_000
    )
    producer.close()
    reader = StreamReader(options(broker, topic, client_kind))
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())
    [row] = [row for part in reader.partitions(start, end) for row in rows_of(reader.read(part))]
    names = [f.split(" ")[0] for f in SCHEMA.split(", ")]
    values = dict(zip(names, row, strict=True))
    assert values["key"] == "the-key" and values["value"] == b"payload"
    assert values["properties"] == {"p": "1"}
    assert int(values["event_time"].timestamp() * 1000) == 1_700_000
    assert values["publish_time"].year >= 2024
    assert values["message_id"] == f"{sent.ledger_id()}:{sent.entry_id()}:{sent.batch_index()}"
    assert values["producer_name"] == "cols-producer"
    assert (values["topic"], values["partition"]) == (topic, -1)
    reader.stop()


def test_max_offsets_per_trigger_and_a_partitioned_topic(
    broker: BrokerProcess, client: pulsar.Client, client_kind: str
) -> None:
    name = f"ds-{uuid.uuid4().hex[:8]}"
    topic = f"persistent://public/default/{name}"
    path = f"{broker.http_url}/admin/v2/persistent/public/default/{name}/partitions"
    assert http_request("PUT", path, b"3")[0] == 204
    values = [f"m{i}" for i in range(20)]
    publish(client, topic, values, batching=True)
    reader = StreamReader(options(broker, name, client_kind, maxOffsetsPerTrigger="6"))
    assert reader.getDefaultReadLimit() == ReadMaxRows(6)
    offset = reader.initialOffset()
    assert sorted(offset) == [f"{topic}-partition-{i}" for i in range(3)]
    sizes, seen = [], []
    while True:
        offset, batch = run_batch(reader, offset)
        if not batch:
            break
        sizes.append(len(batch))
        seen.extend(batch)
    assert sizes == [6, 6, 6, 2]
    assert sorted(seen) == sorted(values)
    # A restart resumes after the stored offset: only new rows.
    publish(client, topic, ["n1", "n2"], batching=False)
    restarted = StreamReader(options(broker, name, client_kind, maxOffsetsPerTrigger="6"))
    assert sorted(run_batch(restarted, offset)[1]) == ["n1", "n2"]
    # Trigger.AvailableNow passes ReadAllAvailable: everything, whatever the option.
    everything = StreamReader(options(broker, name, client_kind, maxOffsetsPerTrigger="6"))
    assert len(run_batch(everything, everything.initialOffset(), ReadAllAvailable())[1]) == 22
    batch_reader = BatchReader(options(broker, topic, client_kind))
    rows = [row for part in batch_reader.partitions() for row in rows_of(batch_reader.read(part))]
    assert sorted(row[1].decode() for row in rows) == sorted([*values, "n1", "n2"])
    assert {row[8] for row in rows} == {0, 1, 2}
    for r in (reader, restarted, everything):
        r.stop()


class _Context:
    def __init__(self, partition: int, batch_id: int) -> None:
        self._partition, self._batch_id = partition, batch_id

    def partitionId(self) -> int:  # noqa: N802
        return self._partition

    def getLocalProperty(self, key: str) -> str | None:  # noqa: N802
        return str(self._batch_id) if key == BATCH_ID_PROPERTY else None


WRITTEN = pa.schema(
    [
        ("key", pa.string()),
        ("value", pa.binary()),
        ("properties", pa.map_(pa.string(), pa.string())),
    ]
)


def _task(writer: StreamWriter, partition: int, batch_id: int, rows: list[tuple[Any, ...]]) -> Any:
    """One writer task as Spark runs it: rows, or (Arrow writers) one record batch."""
    items: list[Any] = rows
    if isinstance(writer, ArrowStreamWriter):
        columns = [[row[i] for row in rows] for i in range(len(WRITTEN))]
        properties = [None if p is None else list(p.items()) for p in columns[2]]
        items = [pa.record_batch([*columns[:2], properties], schema=WRITTEN)]
    with mock.patch("pyspark.TaskContext.get", return_value=_Context(partition, batch_id)):
        return writer.write(iter(items))


@pytest.mark.parametrize("writer_class", [ArrowStreamWriter, StreamWriter])
def test_stream_writer_replays_are_stored_once(
    dedup_broker: BrokerProcess, topic: str, writer_class: type[StreamWriter]
) -> None:
    schema = StructType(
        [
            StructField("key", StringType()),
            StructField("value", BinaryType()),
            StructField("properties", MapType(StringType(), StringType())),
        ]
    )
    writer = writer_class(
        {"serviceUrl": dedup_broker.service_url, "topic": topic, "name": "ds-writer"}, schema
    )
    part0 = [(f"k{i}", f"r{i}".encode(), {"n": str(i)}) for i in range(5)]
    part1 = [(f"k{i}", f"r{i}".encode(), {"n": str(i)}) for i in range(5, 8)]
    first = _task(writer, 0, 0, part0)
    assert (first.rows, first.stored) == (5, 5)
    # The batch fails after task 0; Spark replays both tasks of batch 0, then batch 1.
    again = _task(writer, 0, 0, part0)
    assert (again.stored, again.skipped) == (0, 5)
    assert _task(writer, 1, 0, part1).stored == 3
    assert _task(writer, 0, 1, [("k9", b"r9", None)]).stored == 1
    assert stored_values(dedup_broker.service_url, topic) == [f"r{i}" for i in (*range(8), 9)]
    reader = StreamReader(options(dedup_broker, topic, "lean"))
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())
    rows = [row for part in reader.partitions(start, end) for row in rows_of(reader.read(part))]
    assert [(row[0], row[2]) for row in rows][:2] == [("k0", {"n": "0"}), ("k1", {"n": "1"})]
    reader.stop()
