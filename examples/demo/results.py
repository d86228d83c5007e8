"""The demo's last stage: apply each message of the topic once to a SQLite results table.

It is the project's effectively-once consumer (``connectors.effectively_once``): each
message's result row and the topic's last applied position are written in one SQLite
transaction, and anything at or before that position is skipped, so redeliveries (a
reader reconnecting after the broker was killed, a restart of this stage) never apply a
message twice.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulsar

from connectors.effectively_once import EffectivelyOnceConsumer
from dedup_broker.errors import RetriableError

log = logging.getLogger(__name__)

RESULTS_TABLE = """
CREATE TABLE IF NOT EXISTS results (
    event_id   INTEGER NOT NULL,
    user       TEXT    NOT NULL,
    amount     REAL    NOT NULL,
    message_id TEXT    NOT NULL
)
"""
PROGRESS_STEPS = 5
IDLE_SECONDS = 1.0


@dataclass
class ConsumeStats:
    applied: int = 0
    skipped: int = 0
    """Messages at or before the stored position: delivered again, not applied again."""


def _apply(cursor: Any, message: pulsar.Message) -> None:
    """The application's part: one result row per event, in the consumer's transaction."""
    event = json.loads(message.data())
    cursor.execute(
        "INSERT INTO results VALUES (?, ?, ?, ?)",
        (event["id"], event["user"], event["amount"], str(message.message_id())),
    )


def consume_into_results(
    service_url: str,
    topic: str,
    database: Path,
    expected: int,
    stop: threading.Event,
    progress: Callable[[int], None] | None = None,
) -> ConsumeStats:
    """Read ``topic`` and apply every message once, until ``expected`` rows or ``stop``."""
    client = pulsar.Client(service_url, operation_timeout_seconds=60, logger=quiet_client_logger())
    consumer = EffectivelyOnceConsumer(client, topic, _apply, store=database, name="demo-results")
    try:
        with consumer.store.transaction() as cursor:
            cursor.execute(RESULTS_TABLE)
            cursor.execute("SELECT COUNT(*) FROM results")
            applied = int(cursor.fetchone()[0])
        step = max(1, expected // PROGRESS_STEPS)
        while applied < expected and not stop.is_set():
            before = consumer.stats.applied
            try:
                consumer.run(
                    stop=stop, max_messages=min(step, expected - applied), idle_timeout=IDLE_SECONDS
                )
            except RetriableError as exc:  # the broker is being restarted: read again
                log.info("consumer: %s; resuming from the stored position", exc)
                time.sleep(IDLE_SECONDS)
            applied += consumer.stats.applied - before
            if progress is not None and consumer.stats.applied > before:
                progress(applied)
        return ConsumeStats(applied=applied, skipped=consumer.stats.skipped)
    finally:
        consumer.close()
        client.close()


def quiet_client_logger() -> logging.Logger:
    """The client's own log lines (connects, refused reconnects while the broker is down) off."""
    logger = logging.getLogger("pulsar.demo")
    logger.setLevel(logging.CRITICAL)
    return logger


def results_summary(database: Path) -> tuple[int, int]:
    """``(rows, distinct event ids)`` of the results table."""
    with sqlite3.connect(database) as db:
        rows, distinct = db.execute(
            "SELECT COUNT(*), COUNT(DISTINCT event_id) FROM results"
        ).fetchone()
    return int(rows), int(distinct)
