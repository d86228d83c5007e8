"""A consuming application for the kill tests: run as its own process, killed with SIGKILL.

Each message is applied with plain, non-idempotent SQL: a row in the results table (no
unique key, so a second application would show as a second row) and ``+ 1`` on a
counter. Only the consumer's bookkeeping can keep either exact.
"""

from __future__ import annotations

import argparse
import logging
import time
from typing import Any

import pulsar

from connectors.effectively_once import EffectivelyOnceConsumer
from connectors.offset_store import PositionStore, open_store


def create_tables(store: PositionStore, results: str) -> None:
    with store.transaction() as cur:
        cur.execute(
            f"CREATE TABLE IF NOT EXISTS {results} "
            "(body TEXT NOT NULL, topic TEXT NOT NULL, message_id TEXT NOT NULL)"
        )
        cur.execute(f"CREATE TABLE IF NOT EXISTS {results}_total (n BIGINT NOT NULL)")
        cur.execute(f"SELECT count(*) FROM {results}_total")
        if cur.fetchone()[0] == 0:
            cur.execute(f"INSERT INTO {results}_total (n) VALUES (0)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--service-url", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--database", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--results", required=True)
    parser.add_argument("--batch", type=int, default=5)
    parser.add_argument("--delay-ms", type=float, default=1.0)
    parser.add_argument("--idle-timeout", type=float, default=None)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    store = open_store(args.database)
    create_tables(store, args.results)
    p = store.placeholder

    def apply(cursor: Any, message: pulsar.Message) -> None:
        cursor.execute(
            f"INSERT INTO {args.results} (body, topic, message_id) VALUES ({p}, {p}, {p})",
            (message.data().decode(), message.topic_name(), str(message.message_id())),
        )
        cursor.execute(f"UPDATE {args.results}_total SET n = n + 1")
        if args.delay_ms:
            time.sleep(args.delay_ms / 1000)

    client = pulsar.Client(args.service_url, operation_timeout_seconds=30)
    consumer = EffectivelyOnceConsumer(
        client, args.topic, apply, store, name=args.name, max_batch_messages=args.batch
    )
    try:
        consumer.run(idle_timeout=args.idle_timeout)
    finally:
        consumer.close()
        store.close()
        client.close()


if __name__ == "__main__":
    main()
