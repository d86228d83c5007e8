"""The demo's last stage: apply each message of the topic once to a SQLite results table.

Each message's result row and the id of the last applied message are written in one
SQLite transaction, and anything at or before that id is skipped, so redeliveries (a
reader reconnecting after the broker was killed, a restart of this stage) never apply a
message twice.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pulsar

RECEIVE_MS = 1_000

SCHEMA = """
CREATE TABLE IF NOT EXISTS results (
    event_id   INTEGER NOT NULL,
    user       TEXT    NOT NULL,
    amount     REAL    NOT NULL,
    message_id TEXT    NOT NULL
);
CREATE TABLE IF NOT EXISTS applied_position (
    topic       TEXT PRIMARY KEY,
    ledger_id   INTEGER NOT NULL,
    entry_id    INTEGER NOT NULL,
    batch_index INTEGER NOT NULL
);
"""


@dataclass
class ConsumeStats:
    applied: int = 0
    skipped: int = 0
    """Messages at or before the stored position: delivered again, not applied again."""


def consume_into_results(
    service_url: str,
    topic: str,
    database: Path,
    expected: int,
    stop: threading.Event,
    progress: Callable[[int], None] | None = None,
) -> ConsumeStats:
    """Read ``topic`` and apply every message once, until ``expected`` rows or ``stop``."""
    stats = ConsumeStats()
    db = sqlite3.connect(database)
    db.executescript(SCHEMA)
    row = db.execute(
        "SELECT ledger_id, entry_id, batch_index FROM applied_position WHERE topic = ?",
        (topic,),
    ).fetchone()
    last: tuple[int, int, int] = tuple(row) if row else (-1, -1, -1)
    stats.applied = db.execute("SELECT COUNT(*) FROM results").fetchone()[0]
    client = pulsar.Client(service_url, operation_timeout_seconds=60, logger=quiet_client_logger())
    try:
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        while stats.applied < expected and not stop.is_set():
            try:
                message = reader.read_next(RECEIVE_MS)
            except pulsar.Timeout:
                continue
            mid = message.message_id()
            position = (mid.ledger_id(), mid.entry_id(), mid.batch_index())
            if position <= last:
                stats.skipped += 1
                continue
            event = json.loads(message.data())
            with db:  # one transaction: the result and the position, or neither
                db.execute(
                    "INSERT INTO results VALUES (?, ?, ?, ?)",
                    (event["id"], event["user"], event["amount"], str(mid)),
                )
                db.execute(
                    "INSERT OR REPLACE INTO applied_position VALUES (?, ?, ?, ?)",
                    (topic, *position),
                )
            last = position
            stats.applied += 1
            if progress is not None:
                progress(stats.applied)
        reader.close()
    finally:
        client.close()
        db.close()
    return stats


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
