"""Reading paths run once the faults stopped and the producers drained: Readers from
earliest over every topic, the compacted view, the Spark Data Source source."""

from __future__ import annotations

import logging

import pulsar

from verify.check import Mode, PathSpec
from verify.environment import Admin
from verify.history import History
from verify.load import PARTITIONS, Kind, Topic, id_of, key_of

log = logging.getLogger(__name__)

READ_MS = 30_000
RECEIVER_QUEUE = 5_000
"""As in the read that once skipped the rest of a ledger."""


def partitions_of(topic: Topic) -> list[str]:
    if topic.kind is Kind.PARTITIONED:
        return [f"{topic.name}-partition-{n}" for n in range(PARTITIONS)]
    return [topic.name]


def order_group(topic: Topic, message_id: int) -> str:
    """What a reading path's order is promised within: the key on the partitioned topic
    (each key lives in one partition), the whole topic otherwise."""
    return key_of(topic.kind, message_id) if topic.kind is Kind.PARTITIONED else ""


def read_from_earliest(
    client: pulsar.Client, history: History, topic: Topic, path: str = "reader"
) -> PathSpec:
    """``has_message_available()`` / ``read_next()`` from ``MessageId.earliest``, one Reader
    per partition; the order is promised per key on the partitioned topic (its producer
    batches by key, and a key-based batcher sends one key's batch before another's in no
    set order) and for the whole topic otherwise."""
    spec = PathSpec(path, topic.tag, Mode.EXACTLY_ONCE, True)
    history.path(spec)
    for partition in partitions_of(topic):
        reader = client.create_reader(
            partition, pulsar.MessageId.earliest, receiver_queue_size=RECEIVER_QUEUE
        )
        try:
            while reader.has_message_available():
                message = reader.read_next(READ_MS)
                message_id = id_of(message.data())
                history.delivered(spec, message_id, 0, order_group(topic, message_id))
        finally:
            reader.close()
    return spec


def read_compacted(client: pulsar.Client, history: History, admin: Admin, topic: Topic) -> str:
    """Compact the topic, then read it with ``is_read_compacted``: each key's values rise
    and its last one is the last acknowledged. Returns the compaction's outcome."""
    spec = PathSpec("compacted", topic.tag, Mode.LATEST_PER_KEY, True)
    history.path(spec)
    outcome = admin.compact(topic.name)
    reader = client.create_reader(
        topic.name, pulsar.MessageId.earliest, is_read_compacted=True, receiver_queue_size=1000
    )
    try:
        while reader.has_message_available():
            message = reader.read_next(READ_MS)
            history.delivered(spec, id_of(message.data()), 0, message.partition_key())
    finally:
        reader.close()
    return outcome


def read_with_spark(
    history: History, service_url: str, admin_url: str, topics: list[Topic]
) -> None:
    """``spark.read.format("dedup-broker")`` over each topic; rows in message-id order per
    partition."""
    from connectors.datasource import DedupBrokerDataSource
    from connectors.local_spark import local_session

    spark = local_session(app_name="verify", extra={"spark.driver.memory": "2g"})
    try:
        spark.dataSource.register(DedupBrokerDataSource)
        for topic in topics:
            spec = PathSpec("spark-source", topic.tag, Mode.EXACTLY_ONCE, True)
            history.path(spec)
            rows = (
                spark.read.format("dedup-broker")
                .option("serviceUrl", service_url)
                .option("adminUrl", admin_url)
                .option("topic", topic.name)
                .load()
                .select("value", "message_id", "partition")
                .toLocalIterator()
            )
            ordered = sorted(
                (
                    int(row["partition"]),
                    *map(int, row["message_id"].split(":")),
                    id_of(row["value"]),
                )
                for row in rows
            )
            for _partition, _ledger, _entry, _batch, message_id in ordered:
                history.delivered(spec, message_id, 0, order_group(topic, message_id))
    finally:
        spark.stop()
