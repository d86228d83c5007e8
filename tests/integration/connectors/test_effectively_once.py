"""The effectively-once consumer with the official client on a real broker, on SQLite and a
real PostgreSQL: exact results, positions per partition, resume, failures."""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pulsar
import pytest

from connectors.effectively_once import EffectivelyOnceConsumer
from connectors.offset_store import PositionStore, open_store
from connectors.positions import Position
from dedup_broker.errors import (
    MessageProcessingError,
    MessageRetriesExhaustedError,
    RetriableError,
)
from harness.admin_http import http_request
from harness.broker_process import BrokerProcess

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    target = (
        str(tmp_path / "app.db")
        if request.param == "sqlite"
        else request.getfixturevalue("postgres_url")
    )
    opened = open_store(target, table=f"positions_{uuid.uuid4().hex[:8]}")
    yield opened
    opened.close()


class Results:
    """An application table written with plain INSERTs (a duplicate would be a second row)."""

    def __init__(self, store: PositionStore) -> None:
        self.store = store
        self.table = f"results_{uuid.uuid4().hex[:8]}"
        with store.transaction() as cur:
            cur.execute(f"CREATE TABLE {self.table} (body TEXT NOT NULL, topic TEXT NOT NULL)")

    def apply(self, cursor: Any, message: pulsar.Message) -> None:
        p = self.store.placeholder
        cursor.execute(
            f"INSERT INTO {self.table} (body, topic) VALUES ({p}, {p})",
            (message.data().decode(), message.topic_name()),
        )

    def bodies(self) -> Counter[str]:
        with self.store.transaction() as cur:
            cur.execute(f"SELECT body FROM {self.table}")
            return Counter(row[0] for row in cur.fetchall())


def partitioned_topic(broker: BrokerProcess, partitions: int) -> str:
    name = f"eo-{uuid.uuid4().hex[:8]}"
    path = f"{broker.http_url}/admin/v2/persistent/public/default/{name}/partitions"
    assert http_request("PUT", path, str(partitions).encode())[0] == 204
    return f"persistent://public/default/{name}"


def publish(
    client: pulsar.Client, topic: str, bodies: list[str], *, batching: bool
) -> dict[str, pulsar.MessageId]:
    producer = client.create_producer(
        topic,
        batching_enabled=batching,
        batching_max_messages=5,
        batching_max_publish_delay_ms=20,
        message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution,
    )
    ids: dict[str, pulsar.MessageId] = {}

    def sent(body: str) -> Any:
        def callback(result: pulsar.Result, message_id: pulsar.MessageId) -> None:
            assert result == pulsar.Result.Ok
            ids[body] = message_id

        return callback

    for body in bodies:
        producer.send_async(body.encode(), sent(body))
    producer.flush()
    producer.close()
    return ids


def test_partitioned_batched_topic_applied_once_with_one_position_per_partition(
    broker: BrokerProcess, client: pulsar.Client, store: PositionStore
) -> None:
    topic = partitioned_topic(broker, 3)
    bodies = [f"s-{i}" for i in range(30)] + [f"b-{i}" for i in range(60)]
    ids = publish(client, topic, bodies[:30], batching=False)
    ids |= publish(client, topic, bodies[30:], batching=True)
    results = Results(store)
    with EffectivelyOnceConsumer(client, topic, results.apply, store, name="app") as consumer:
        stats = consumer.run(max_messages=len(bodies))
        assert consumer.poll(0.5) == 0
    assert stats.applied == len(bodies)
    assert results.bodies() == Counter(bodies)
    # The stored position of each partition is the id of the last message it holds.
    last: dict[int, Position] = {}
    for message_id in ids.values():
        position = Position.of(message_id)
        partition = message_id.partition()
        last[partition] = max(last.get(partition, position), position)
    stored = store.positions("app")
    assert sorted(stored) == [f"{topic}-partition-{n}" for n in range(3)]
    assert {int(t.rsplit("-", 1)[1]): p for t, p in stored.items()} == last
    assert all(position.batch_index >= 0 for position in stored.values())


def test_restart_resumes_after_the_stored_position(
    client: pulsar.Client, topic: str, store: PositionStore
) -> None:
    bodies = [f"m-{i}" for i in range(40)]
    publish(client, topic, bodies[:25], batching=True)
    results = Results(store)
    with EffectivelyOnceConsumer(client, topic, results.apply, store, max_batch_messages=4) as c:
        c.run(max_messages=13)
    assert results.bodies() == Counter(bodies[:13])
    publish(client, topic, bodies[25:], batching=True)
    with EffectivelyOnceConsumer(client, topic, results.apply, store) as again:
        stats = again.run(max_messages=27)
        assert again.poll(0.5) == 0
    assert stats.applied == 27
    assert results.bodies() == Counter(bodies)


def test_messages_at_or_before_the_stored_id_are_ignored_even_inside_a_batch(
    client: pulsar.Client, topic: str, store: PositionStore
) -> None:
    bodies = [f"x-{i}" for i in range(20)]
    ids = publish(client, topic, bodies, batching=True)
    middle = ids["x-7"]
    assert middle.batch_index() > 0, "x-7 should sit inside a batch"
    store.ensure_schema("app", [topic])
    with store.transaction() as cur:
        store.save(cur, "app", topic, Position.of(middle))
    results = Results(store)
    with EffectivelyOnceConsumer(client, topic, results.apply, store, name="app") as consumer:
        consumer.run(max_messages=12)
        assert consumer.poll(0.5) == 0
        assert consumer.stats.skipped >= 1  # the stored entry is read again, then skipped
    assert results.bodies() == Counter(bodies[8:])


class FlakyError(RetriableError):
    """What an application raises for a failure that may pass (e.g. a remote call)."""


def test_failures_roll_back_and_say_whether_to_retry(
    client: pulsar.Client, topic: str, store: PositionStore
) -> None:
    bodies = [f"f-{i}" for i in range(10)]
    publish(client, topic, bodies, batching=False)
    results = Results(store)
    failures = {"f-3": [FlakyError("try again")], "f-6": [ValueError("bad input")]}

    def apply(cursor: Any, message: pulsar.Message) -> None:
        results.apply(cursor, message)
        pending = failures.get(message.data().decode())
        if pending:
            raise pending.pop()

    consumer = EffectivelyOnceConsumer(
        client, topic, apply, store, max_batch_messages=1, retry_backoff_seconds=0.01
    )
    with consumer:
        with pytest.raises(MessageProcessingError) as raised:
            consumer.run(max_messages=10)
        assert not raised.value.retriable
        assert consumer.stats.retries == 1  # f-3 failed once, then went through
        assert results.bodies() == Counter(bodies[:6])
        # The permanent failure is fixed (popped); consuming again starts at f-6.
        consumer.run(max_messages=4)
    assert results.bodies() == Counter(bodies)

    always = EffectivelyOnceConsumer(
        client,
        topic,
        lambda cursor, message: (_ for _ in ()).throw(FlakyError("down")),
        store,
        name="other",
        max_attempts=2,
        retry_backoff_seconds=0.01,
    )
    with always, pytest.raises(MessageRetriesExhaustedError) as exhausted:
        always.run(max_messages=1)
    assert exhausted.value.retriable


def test_two_instances_of_one_consumer_still_apply_each_message_once(
    client: pulsar.Client, topic: str, store: PositionStore, tmp_path: Path
) -> None:
    bodies = [f"c-{i}" for i in range(200)]
    publish(client, topic, bodies, batching=True)
    results = Results(store)
    target = getattr(store, "conninfo", None) or str(getattr(store, "path", ""))
    errors: list[BaseException] = []

    def instance() -> None:
        own = open_store(target, table=store.table)
        try:
            consumer = EffectivelyOnceConsumer(
                client, topic, results.apply, own, name="shared", max_batch_messages=3
            )
            with consumer:
                consumer.run(idle_timeout=2.0)
        except BaseException as exc:
            errors.append(exc)
        finally:
            own.close()

    threads = [threading.Thread(target=instance) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert errors == []
    assert results.bodies() == Counter(bodies)
