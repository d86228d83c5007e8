"""The effectively-once consumer killed with SIGKILL mid-stream, again and again, then run to
the end: every message is applied exactly once, on SQLite and on a real PostgreSQL. And a
broker killed under a running consumer: it continues, still exactly once."""

from __future__ import annotations

import contextlib
import os
import random
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pulsar
import pytest

from connectors.effectively_once import ConsumerStats, EffectivelyOnceConsumer
from connectors.offset_store import open_store
from harness.admin_http import http_request
from harness.broker_process import BrokerProcess

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(420)]

ROOT = Path(__file__).resolve().parents[2]
PARTITIONS = 3
FIRST_HALF = 1500
TOTAL = 3000
KILL_CYCLES = 6


@pytest.fixture(params=["sqlite", "postgres"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "results.db")
    url: str = request.getfixturevalue("postgres_url")
    return url


def publish(client: pulsar.Client, topic: str, numbers: range) -> None:
    producer = client.create_producer(
        topic,
        batching_enabled=True,
        batching_max_messages=7,
        batching_max_publish_delay_ms=5,
        message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution,
    )
    for i in numbers:
        producer.send_async(f"m-{i}".encode(), None)
    producer.flush()
    producer.close()


def count_applied(database: str, results: str) -> int:
    """Rows in the results table, read without taking the writer's lock (0 before it exists)."""
    query = f"SELECT count(*) FROM {results}"
    try:
        if database.startswith("postgresql://"):
            with psycopg.connect(database, autocommit=True) as conn:
                row = conn.execute(query).fetchone()
        else:
            with contextlib.closing(sqlite3.connect(database, timeout=30)) as conn:
                row = conn.execute(query).fetchone()
    except (sqlite3.OperationalError, psycopg.errors.UndefinedTable):
        return 0
    assert row is not None
    return int(row[0])


def wait_for(condition: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


def test_consumer_killed_mid_stream_applies_each_message_once(
    broker: BrokerProcess, client: pulsar.Client, database: str, tmp_path: Path
) -> None:
    name = f"t-{uuid.uuid4().hex[:8]}"
    topic = f"persistent://public/default/{name}"
    path = f"{broker.http_url}/admin/v2/persistent/public/default/{name}/partitions"
    assert http_request("PUT", path, str(PARTITIONS).encode())[0] == 204
    results = f"results_{uuid.uuid4().hex[:10]}"
    publish(client, topic, range(FIRST_HALF))

    argv = [
        sys.executable,
        "-m",
        "tests.chaos.consumer_worker",
        "--service-url",
        broker.service_url,
        "--topic",
        topic,
        "--database",
        database,
        "--name",
        f"consumer-{name}",
        "--results",
        results,
    ]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    rng = random.Random(7)
    kills_mid_stream = 0
    available = FIRST_HALF
    for cycle in range(KILL_CYCLES):
        if cycle == 2:
            publish(client, topic, range(FIRST_HALF, TOTAL))
            available = TOTAL
        before = count_applied(database, results)
        # Kill at a random point: after this run applied 50..300 more messages, plus a
        # random fraction of a batch, so most kills land inside a transaction.
        target = min(before + rng.randint(50, 300), available - 1)
        with (tmp_path / f"worker-{cycle}.log").open("wb") as log:
            worker = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        try:
            wait_for(lambda: count_applied(database, results) >= target, 60)  # noqa: B023
            time.sleep(rng.uniform(0.0, 0.02))
        finally:
            worker.kill()
            worker.wait(timeout=30)
        if count_applied(database, results) < available:
            kills_mid_stream += 1
    assert kills_mid_stream == KILL_CYCLES, "every kill should land before the end of the stream"

    final = subprocess.run(
        [*argv, "--idle-timeout", "5", "--delay-ms", "0", "--batch", "100"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        timeout=240,
        check=False,
    )
    assert final.returncode == 0, final.stdout.decode()[-3000:] + final.stderr.decode()[-3000:]

    store = open_store(database)
    try:
        with store.transaction() as cur:
            cur.execute(f"SELECT body FROM {results}")
            bodies = Counter(row[0] for row in cur.fetchall())
            cur.execute(f"SELECT n FROM {results}_total")
            total = cur.fetchone()[0]
        positions = store.positions(f"consumer-{name}")
    finally:
        store.close()
    duplicates = {body: n for body, n in bodies.items() if n > 1}
    assert duplicates == {}
    assert set(bodies) == {f"m-{i}" for i in range(TOTAL)}
    assert total == TOTAL
    assert len(positions) == PARTITIONS
    assert all(not position.is_before_everything for position in positions.values())


def test_consumer_rides_through_a_broker_kill(
    broker: BrokerProcess, client: pulsar.Client, tmp_path: Path
) -> None:
    topic = f"persistent://public/default/bk-{uuid.uuid4().hex[:8]}"
    publish(client, topic, range(400))
    store = open_store(tmp_path / "app.db")
    with store.transaction() as cur:
        cur.execute("CREATE TABLE results (body TEXT NOT NULL)")

    def apply(cursor: Any, message: pulsar.Message) -> None:
        cursor.execute("INSERT INTO results (body) VALUES (?)", (message.data().decode(),))
        time.sleep(0.002)

    own_client = pulsar.Client(broker.service_url, operation_timeout_seconds=30)
    consumer = EffectivelyOnceConsumer(own_client, topic, apply, store, max_batch_messages=10)
    outcome: list[BaseException | ConsumerStats] = []

    def consume() -> None:
        try:
            outcome.append(consumer.run(max_messages=600))
        except BaseException as exc:
            outcome.append(exc)

    worker = threading.Thread(target=consume, daemon=True)
    worker.start()
    assert wait_for(lambda: consumer.stats.applied >= 100, 60)
    broker.kill()
    broker.start()
    publish(client, topic, range(400, 600))
    worker.join(timeout=180)
    assert not worker.is_alive()
    consumer.close()
    own_client.close()
    assert len(outcome) == 1 and isinstance(outcome[0], ConsumerStats), outcome
    with store.transaction() as cur:
        cur.execute("SELECT body FROM results")
        bodies = Counter(row[0] for row in cur.fetchall())
    store.close()
    assert bodies == Counter(f"m-{i}" for i in range(600))
