"""Kafka stops and comes back while a managed ledger is being written (own Kafka)."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from dedup_broker.config import BrokerConfig
from dedup_broker.devservers import KafkaService
from dedup_broker.errors import LedgerFencedError, StorageError
from dedup_broker.storage.api import ManagedLedger, Position
from dedup_broker.storage.service.kafka_storage import KafkaStorage
from tests.integration.storage.helpers import run, wait_until


@pytest.mark.chaos
def test_writes_during_a_kafka_outage_fence_then_recover(native_kafka: KafkaService) -> None:
    config = BrokerConfig(
        cluster_name=f"outage-{uuid.uuid4().hex[:8]}",
        kafka_bootstrap_servers=native_kafka.bootstrap_servers,
        kafka_delivery_timeout_ms=4000,
        kafka_request_timeout_ms=3000,
        managed_ledger_default_mark_delete_rate_limit=5,
    )

    async def scenario() -> None:
        storage = await KafkaStorage.start(config)
        try:
            ml = await storage.open_managed_ledger("outage")
            resolved: list[tuple[Position, Position]] = []
            ml.on_write_failure_resolved = lambda told, true: resolved.append((told, true))
            acked = [await ml.append(f"a{i}".encode(), 0) for i in range(20)]
            cursor = await ml.cursors.open("sub", "earliest")
            cursor.mark_delete(acked[9])
            await cursor.flush()

            await asyncio.to_thread(native_kafka.stop)
            during = [ml.append(f"d{i}".encode(), 0) for i in range(5)]
            outcomes = await asyncio.gather(*during, return_exceptions=True)
            assert isinstance(outcomes[0], StorageError)
            assert all(isinstance(o, LedgerFencedError) for o in outcomes[1:])
            assert ml.state == "Fenced"
            refused = await asyncio.gather(ml.append(b"refused", 0), return_exceptions=True)
            assert isinstance(refused[0], LedgerFencedError)
            cursor.mark_delete(acked[14])  # stored once Kafka is back

            await asyncio.sleep(2)
            assert ml.state == "Fenced"
            await asyncio.to_thread(native_kafka.start)
            await asyncio.wait_for(ml.wait_writable(), 90)
            assert len(resolved) == 1 and resolved[0][0] == acked[-1]
            truth = resolved[0][1]
            assert truth >= acked[-1] and ml.last_confirmed == truth
            after = await ml.append(b"after", 0)
            assert after == Position(ml.ledgers()[-1].ledger_id, 0)
            await wait_until(lambda: cursor.persisted_mark_delete_position == acked[14], 30)
            # The metadata tables still follow Kafka: another broker's write shows.
            other = await KafkaStorage.start(config)
            try:
                await other.policies.put("after-outage", b"written")
                await storage.policies.refresh()
                assert storage.policies.get("after-outage") == b"written"
            finally:
                await other.close()
        finally:
            await storage.close()

        again = await KafkaStorage.start(config)
        try:
            ml2 = await again.open_managed_ledger("outage")
            entries = await ml2.read_entries(ml2.first_position(), 100)
            data = [e.data for e in entries]
            # Every acknowledged entry, in order; what landed during the outage (if
            # anything) follows them; then the append made after recovery.
            assert data[:20] == [f"a{i}".encode() for i in range(20)]
            assert data[-1] == b"after"
            assert set(data[20:-1]) <= {f"d{i}".encode() for i in range(5)}
            restored = await ml2.cursors.open("sub")
            assert restored.mark_delete_position == acked[14]
        finally:
            await again.close()

    run(scenario, timeout=240)


@pytest.mark.chaos
@pytest.mark.parametrize("outage", ["stop", "kill"])
def test_no_acknowledged_entry_is_lost_while_kafka_dies_mid_stream(
    native_kafka: KafkaService, outage: str
) -> None:
    config = BrokerConfig(
        cluster_name=f"stream-{uuid.uuid4().hex[:8]}",
        kafka_bootstrap_servers=native_kafka.bootstrap_servers,
        kafka_delivery_timeout_ms=4000,
        kafka_request_timeout_ms=3000,
        managed_ledger_max_entries_per_ledger=300,
        managed_ledger_min_ledger_rollover_time_minutes=0,
    )
    acked: dict[Position, bytes] = {}
    failures: list[BaseException] = []

    async def writer(ml: ManagedLedger, stop: asyncio.Event) -> None:
        sequence = 0
        while not stop.is_set():
            await ml.wait_writable()
            batch = []
            for _ in range(20):
                data = f"s{sequence}".encode()
                sequence += 1
                batch.append((data, ml.append(data, 0)))
            for data, future in batch:
                try:
                    acked[await future] = data
                except (StorageError, LedgerFencedError) as exc:
                    failures.append(exc)
            await asyncio.sleep(0.005)

    async def scenario() -> None:
        storage = await KafkaStorage.start(config)
        try:
            ml = await storage.open_managed_ledger("stream")
            stop = asyncio.Event()
            task = asyncio.create_task(writer(ml, stop))
            await wait_until(lambda: len(acked) >= 500, 30)
            await asyncio.to_thread(getattr(native_kafka, outage))
            await wait_until(lambda: ml.state == "Fenced", 30)
            before = len(acked)
            await asyncio.sleep(1)
            await asyncio.to_thread(native_kafka.start)
            await wait_until(lambda: len(acked) >= before + 500, 90)
            stop.set()
            await asyncio.wait_for(task, 60)
            assert failures
            assert list(acked) == sorted(acked)
        finally:
            await storage.close()

        again = await KafkaStorage.start(config)
        try:
            ml2 = await again.open_managed_ledger("stream")
            stored: dict[Position, bytes] = {}
            position = ml2.first_position()
            while position <= ml2.last_confirmed:
                entries = await ml2.read_entries(position, 1000)
                stored.update((e.position, e.data) for e in entries)
                position = ml2.next_position(entries[-1].position)
            missing = [p for p in acked if stored.get(p) != acked[p]]
            assert missing == []
            # Stored order is the order of the writes: sequence numbers only increase.
            sequence = [int(data[1:]) for _, data in sorted(stored.items())]
            assert sequence == sorted(sequence)
        finally:
            await again.close()

    run(scenario, timeout=240)
