"""Exactly-once consume-process-produce through broker crashes: the Java client moves
messages from one topic to another in transactions while the broker is killed with
kill -9 and restarted; every input appears in the output exactly once.

Deduplication is on, as exactly-once needs it in Pulsar too: a producer that lost its
connection sends again what was not acknowledged, and without deduplication a message
stored before the crash would be stored twice in the same transaction.
``TXN_CHAOS_INPUTS`` and ``TXN_CHAOS_KILLS`` set the size (``make soak`` runs more)."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.broker_process import BrokerProcess
from harness.pulsar_java_txn import JavaTransactions
from tests.integration.conftest import serve
from tests.integration.transactions.conftest import visible

INPUTS = int(os.environ.get("TXN_CHAOS_INPUTS", "2000"))
KILLS = int(os.environ.get("TXN_CHAOS_KILLS", "2"))


@pytest.fixture
def exactly_once_broker(kafka_bootstrap: str, tmp_path: Path) -> Iterator[BrokerProcess]:
    yield from serve(
        kafka_bootstrap,
        tmp_path,
        transaction_coordinator_enabled=True,
        broker_deduplication_enabled=True,
    )


def test_every_input_reaches_the_output_once_through_kill_9(
    exactly_once_broker: BrokerProcess, topic: str
) -> None:
    txn_broker = exactly_once_broker
    url, sink = txn_broker.service_url, topic + "-out"
    killed_at: list[int] = []  # messages committed when each kill came
    restarts: list[threading.Thread] = []

    def on_step(committed: int, failed: int) -> None:
        # Each kill comes when the pipeline is under way (its share of the inputs
        # committed, the rest still to come), not after a clock: on a slow machine the
        # client may still be subscribing when a fixed delay runs out.
        share = INPUTS * (len(killed_at) + 1) // (KILLS + 1)
        restarting = restarts and restarts[-1].is_alive()
        if len(killed_at) < KILLS and committed >= share and not restarting:
            killed_at.append(committed)
            restarts.append(threading.Thread(target=txn_broker.restart, kwargs={"kill": True}))
            restarts[-1].start()

    with JavaTransactions(url) as java:
        for i in range(INPUTS):
            java.send_plain(topic, f"in{i}")
        java.start_pipeline(topic, sink, batch=10)
        try:
            committed, failed = java.wait_pipeline(timeout=300 + 20 * KILLS, on_step=on_step)
        finally:
            for restart in restarts:
                restart.join()
    out = visible(url, sink)
    assert sorted(out) == sorted(f"out-in{i}" for i in range(INPUTS))  # once each
    print(f"pipeline: {committed} committed, {failed} steps failed, kills at {killed_at}")
    # Every kill came with the pipeline under way. A step under way may fail (aborted
    # and tried again) or ride through the restart: the client retries its
    # transaction's requests on the new connection, so either is a pass.
    assert len(killed_at) == KILLS
    assert all(0 < at < INPUTS for at in killed_at)
