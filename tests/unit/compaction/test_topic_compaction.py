"""Compaction runs on the in-memory storage: what the compacted view holds."""

from __future__ import annotations

import pytest

from dedup_broker.compaction.records import CompactedMessage, MalformedCompactedRecordError
from dedup_broker.compaction.topic import CompactionInProgressError, CompactionStatus
from dedup_broker.domain.topic import Topic
from dedup_broker.protocol import pulsar_api_pb2 as pb
from dedup_broker.protocol.batch import build_batch, split_batch
from dedup_broker.protocol.framing import encode_message, parse_message
from dedup_broker.storage.values import Position
from harness.memory_broker import MemoryBroker

TOPIC = "persistent://public/default/prices"


def _single(key: str | None, value: bytes, sequence_id: int) -> bytes:
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=sequence_id, publish_time=1)
    if key is not None:
        metadata.partition_key = key
    return encode_message(metadata, value)


def _batch(messages: list[tuple[str | None, bytes]], sequence_id: int) -> bytes:
    records = []
    for key, value in messages:
        single = pb.SingleMessageMetadata(payload_size=len(value))
        if key is not None:
            single.partition_key = key
        records.append((single, value))
    raw = build_batch(records)
    metadata = pb.MessageMetadata(
        producer_name="p",
        sequence_id=sequence_id,
        publish_time=1,
        num_messages_in_batch=len(messages),
        uncompressed_size=len(raw),
    )
    return encode_message(metadata, raw)


async def _append(topic: Topic, *entries: bytes) -> list[Position]:
    return [await topic.managed_ledger.append(entry, 1) for entry in entries]


async def _view(topic: Topic) -> list[tuple[Position, list[tuple[str, bytes]]]]:
    view = await topic.compaction.view()
    assert view is not None
    out = []
    for entry in view.read(Position(-1, -1), 1000):
        parsed = parse_message(entry.data)
        messages = split_batch(parsed.metadata, parsed.payload)
        out.append((entry.position, [(m.metadata.partition_key, m.payload) for m in messages]))
    return out


async def test_the_view_holds_the_latest_message_per_key_in_log_order() -> None:
    topic = await MemoryBroker().topic(TOPIC)
    assert await topic.compaction.view() is None
    p = await _append(
        topic,
        _single("a", b"a1", 0),
        _batch([("b", b"b1"), ("a", b"a2"), (None, b"no key"), ("c", b"c1")], 1),
        _single("b", b"", 5),  # empty payload: b is gone
        _single("c", b"c2", 6),
    )
    await topic.compaction.run()
    assert topic.compaction.horizon() == p[3]
    assert await _view(topic) == [(p[1], [("a", b"a2")]), (p[3], [("c", b"c2")])]


async def test_a_second_run_reads_only_what_came_after_the_horizon() -> None:
    broker = MemoryBroker()
    topic = await broker.topic(TOPIC)
    p = await _append(topic, _single("a", b"a1", 0), _single("b", b"b1", 1))
    await topic.compaction.run()
    q = await _append(topic, _single("a", b"a2", 2), _single("c", b"c1", 3))
    await topic.compaction.run()
    expected = [(p[1], [("b", b"b1")]), (q[0], [("a", b"a2")]), (q[1], [("c", b"c1")])]
    assert await _view(topic) == expected
    # Stored: a restarted broker sees the same view.
    again = await (await broker.restarted()).topic(TOPIC)
    assert await _view(again) == expected


async def test_messages_without_a_key_are_kept_when_configured() -> None:
    topic = await MemoryBroker.configured(topic_compaction_retain_null_key=True).topic(TOPIC)
    p = await _append(topic, _single(None, b"x", 0), _single(None, b"y", 1))
    await topic.compaction.run()
    assert await _view(topic) == [(p[0], [("", b"x")]), (p[1], [("", b"y")])]


async def test_a_second_trigger_while_running_is_refused() -> None:
    topic = await MemoryBroker().topic(TOPIC)
    await _append(topic, _single("a", b"a1", 0))
    topic.compaction.trigger()
    with pytest.raises(CompactionInProgressError):
        topic.compaction.trigger()
    assert topic.compaction._task is not None
    await topic.compaction._task
    assert topic.compaction.status is CompactionStatus.SUCCESS


def test_records_round_trip_and_malformed_ones_are_refused() -> None:
    message = CompactedMessage(Position(3, 4), 1, 2, b"meta", b"single", b"payload")
    assert CompactedMessage.decode(message.encode()) == message
    with pytest.raises(MalformedCompactedRecordError):
        CompactedMessage.decode(message.encode()[:-1])
    with pytest.raises(MalformedCompactedRecordError):
        CompactedMessage.decode(b"\x00" * 5)


async def test_records_of_a_run_that_crashed_before_its_horizon_was_stored_are_ignored() -> None:
    broker = MemoryBroker()
    topic = await broker.topic(TOPIC)
    p = await _append(topic, _single("a", b"a1", 0), _single("b", b"b1", 1))
    await topic.compaction.run()
    q = await _append(topic, _single("a", b"a2", 2))
    # A run wrote its records, then the broker died before the cursor moved.
    companions = broker.storage.compacted_topics
    (name,) = companions.topics
    late = CompactedMessage(
        q[0],
        -1,
        0,
        pb.MessageMetadata(producer_name="p", sequence_id=2, publish_time=1).SerializeToString(),
        b"",
        b"a2",
    )
    await companions.write(name, [(b"ka", late.encode())])
    restarted = await (await broker.restarted(graceful=False)).topic(TOPIC)
    # Up to the horizon: b only (a's stored record is beyond it); a2 comes from the topic.
    assert await _view(restarted) == [(p[1], [("b", b"b1")])]
    await restarted.compaction.run()
    assert await _view(restarted) == [(p[1], [("b", b"b1")]), (q[0], [("a", b"a2")])]
