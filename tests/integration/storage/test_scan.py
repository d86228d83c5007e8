"""Scans: a replay's pass over many entries on the real Kafka, bypassing the cache."""

from __future__ import annotations

import threading

from dedup_broker.storage.api import Position
from dedup_broker.storage.service.kafka_storage import KafkaStorage
from tests.integration.storage.helpers import ConfigFactory, run

SMALL_LEDGERS = {
    "managed_ledger_max_entries_per_ledger": 5,
    "managed_ledger_min_ledger_rollover_time_minutes": 0,
}


def test_scan_hands_every_entry_once_in_order_across_ledgers(make_config: ConfigFactory) -> None:
    async def scenario() -> None:
        storage = await KafkaStorage.start(make_config(**SMALL_LEDGERS))
        try:
            ml = await storage.open_managed_ledger("tenant/ns/persistent/scanned")
            positions = [await ml.append(f"e{i}".encode(), 1_000 + i) for i in range(13)]
            seen: list[tuple[Position, bytes]] = []
            threads: set[int] = set()

            def visit(ledger_id: int, first_entry_id: int, data: list[bytes]) -> None:
                threads.add(threading.get_ident())
                seen.extend(
                    (Position(ledger_id, first_entry_id + i), d) for i, d in enumerate(data)
                )

            cache = storage.entry_cache
            lookups = cache.hits + cache.misses
            last = await ml.scan_entries(positions[2], 7, visit)
            assert last == positions[8]
            assert seen == [(positions[i], f"e{i}".encode()) for i in range(2, 9)]
            assert threading.get_ident() not in threads  # folded off the event loop

            seen.clear()
            start = ml.next_position(last)
            assert await ml.scan_entries(start, 100, visit) == positions[12]
            assert [p for p, _ in seen] == positions[9:]
            # Nothing beyond last_confirmed.
            assert await ml.scan_entries(ml.next_position(positions[12]), 100, visit) is None
            assert cache.hits + cache.misses == lookups  # the cache is not consulted
        finally:
            await storage.close()

    run(scenario)
