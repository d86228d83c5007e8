"""The lean client against a real broker, with the official client as the reference: what
the Arrow path writes reads back through the official client exactly as what the
official path writes; both paths give each row the same producer name and sequence id;
whole entries sent again are stored once; a producer rides a broker kill -9 out."""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from connectors.arrow_entries import MessageColumns, batch_block, encode_records
from connectors.arrow_writer import write_arrow_partition
from connectors.sink_options import Routing, SinkMode, WriterSpec
from connectors.sink_writer import write_partition
from connectors.wire import EntryProducer, EntryReader, OutgoingEntry, WireClient
from dedup_broker.protocol import parse_message, split_batch
from dedup_broker.protocol import pulsar_api_pb2 as pb
from harness.broker_process import BrokerProcess, free_port
from tests.integration.connectors.sink_fixtures import stored_messages, stored_values

pytestmark = pytest.mark.timeout(300)

SCHEMA = pa.schema(
    [
        ("value", pa.binary()),
        ("key", pa.string()),
        ("properties", pa.map_(pa.string(), pa.string())),
        ("event_time", pa.timestamp("us", tz="UTC")),
        ("part", pa.int64()),
        ("offset", pa.int64()),
    ]
)


def new_topic() -> str:
    return f"persistent://public/default/lean-{uuid.uuid4().hex[:8]}"


def sample_batch(count: int) -> pa.RecordBatch:
    values = [None if i % 17 == 5 else f"value-{i}".encode() for i in range(count)]
    keys = [None if i % 5 == 0 else ("" if i % 7 == 0 else f"ключ-{i % 11}") for i in range(count)]
    properties = [
        None if i % 6 == 0 else [("n", str(i)), ("maybe", None if i % 2 else "x")]
        for i in range(count)
    ]
    events = [None if i % 4 == 0 else 1_700_000_000_000_000 + i * 1_000 for i in range(count)]
    return pa.record_batch(
        [values, keys, properties, events, [i % 3 for i in range(count)], list(range(count))],
        schema=SCHEMA,
    )


def spec(service_url: str, topic: str, **fields: Any) -> WriterSpec:
    defaults: dict[str, Any] = {
        "mode": SinkMode.SEQUENCE,
        "name": "lean",
        "batch_id": 7,
        "routing": Routing.SPARK_PARTITION,
        "value_index": 0,
        "key_index": 1,
        "properties_map_index": 2,
        "event_time_index": 3,
    }
    return WriterSpec(service_url=service_url, topic=topic, **(defaults | fields))


def rows(batch: pa.RecordBatch) -> list[tuple[Any, ...]]:
    """The batch as the official path's rows (maps as dicts)."""
    columns = [column.to_pylist() for column in batch.columns]
    columns[2] = [None if m is None else dict(m) for m in columns[2]]
    return list(zip(*columns, strict=True))


def identities(client: WireClient, topic: str, count: int) -> list[tuple[str, int, bytes]]:
    """(producer name, sequence id, payload) of every message, from the raw entries."""
    reader = EntryReader.create(client, topic)
    found: list[tuple[str, int, bytes]] = []
    try:
        while len(found) < count:
            entry = reader.receive(10)
            assert entry is not None, f"only {len(found)} of {count} messages"
            parsed = parse_message(entry.block)
            for message in split_batch(parsed.metadata, parsed.payload):
                found.append(
                    (parsed.metadata.producer_name, message.metadata.sequence_id, message.payload)
                )
    finally:
        reader.close()
    return found


@pytest.mark.parametrize("mode", [SinkMode.SEQUENCE, SinkMode.COLUMNS])
def test_the_arrow_path_writes_what_the_official_path_writes(
    dedup_broker: BrokerProcess, mode: SinkMode
) -> None:
    batch = sample_batch(3_000)
    columns_mode = {"producer_index": 4, "sequence_index": 5} if mode is SinkMode.COLUMNS else {}
    lean_topic, official_topic = new_topic(), new_topic()
    url = dedup_broker.service_url
    lean = write_arrow_partition(
        spec(url, lean_topic, mode=mode, **columns_mode),
        1,
        [batch.slice(0, 1000), batch.slice(1000)],
    )
    official = write_partition(spec(url, official_topic, mode=mode, **columns_mode), 1, rows(batch))
    assert lean == official
    assert (lean.rows, lean.stored) == (3_000, 3_000)

    def read(topic: str) -> list[tuple[Any, ...]]:
        return [
            (m.data(), m.partition_key(), dict(m.properties()), m.event_timestamp())
            for m in stored_messages(url, topic)
        ]

    # In columns mode the paths interleave producers differently; each producer's order
    # is the same.
    written = read(lean_topic)
    assert sorted(written, key=repr) == sorted(read(official_topic), key=repr)
    assert (b"value-1", "ключ-1", {"n": "1"}, 1_700_000_000_001) in written
    client = WireClient(url)
    try:
        lean_ids = identities(client, lean_topic, 3_000)
        official_ids = identities(client, official_topic, 3_000)
    finally:
        client.close()
    assert sorted(lean_ids) == sorted(official_ids)
    for name in {n for n, _, _ in lean_ids}:
        assert [i for i in lean_ids if i[0] == name] == [i for i in official_ids if i[0] == name]


def test_entries_sent_again_are_stored_once(dedup_broker: BrokerProcess) -> None:
    topic = new_topic()
    client = WireClient(dedup_broker.service_url)
    try:
        entries = [entry(f"again-{i}", first=i * 10) for i in range(5)]
        producer = EntryProducer.create(client, topic, "again")
        for item in entries[:3]:
            producer.send(item)
        assert producer.flush(30).stored == 30
        producer.close()
        # A resend of everything (what a reconnect does): the first three are duplicates.
        producer = EntryProducer.create(client, topic, "again")
        assert producer.last_sequence_id == 29
        for item in entries:
            producer.send(item)
        counts = producer.flush(30)
        assert (counts.stored, counts.duplicates) == (20, 30)
        producer.close()
    finally:
        client.close()
    assert Counter(stored_values(dedup_broker.service_url, topic)) == Counter(
        f"again-{i}-{j}" for i in range(5) for j in range(10)
    )


def test_a_producer_rides_a_broker_kill_out(dedup_broker: BrokerProcess) -> None:
    topic = new_topic()
    client = WireClient(dedup_broker.service_url)
    total = 400
    try:
        producer = EntryProducer.create(client, topic, "crash", send_timeout_ms=120_000)
        sent = threading.Event()

        def send_all() -> None:
            for i in range(total):
                producer.send(entry(f"crash-{i}", first=i * 10))
                if i == total // 4:
                    sent.set()
                time.sleep(0.01)

        sender = threading.Thread(target=send_all)
        sender.start()
        assert sent.wait(60)
        dedup_broker.restart(kill=True)
        sender.join(120)
        counts = producer.flush(120)
        assert counts.stored + counts.duplicates == total * 10
        producer.close()
    finally:
        client.close()
    assert Counter(stored_values(dedup_broker.service_url, topic)) == Counter(
        f"crash-{i}-{j}" for i in range(total) for j in range(10)
    )


def test_a_service_url_host_that_does_not_answer_is_passed_over(
    dedup_broker: BrokerProcess,
) -> None:
    topic = new_topic()
    url = f"pulsar://127.0.0.1:{free_port()},127.0.0.1:{dedup_broker.port}"
    client = WireClient(url)
    try:
        assert client.partitions(topic) == [topic]
        producer = EntryProducer.create(client, topic, "hosts")
        producer.send(entry("hosts", first=0))
        assert producer.flush(30).stored == 10
        producer.close()
    finally:
        client.close()


def entry(prefix: str, first: int, count: int = 10) -> OutgoingEntry:
    """A batch entry of ``count`` messages ``{prefix}-{j}``, ids ``first`` on."""
    values = pa.array([f"{prefix}-{j}".encode() for j in range(count)], pa.binary())
    ids = np.arange(first, first + count, dtype=np.uint64)
    records = encode_records(MessageColumns(values), ids)
    name = prefix.split("-")[0]
    block = batch_block(
        name, first, first + count - 1, count, records.payload(0, count), pb.NONE, 1
    )
    return OutgoingEntry(first, first + count - 1, count, block)
