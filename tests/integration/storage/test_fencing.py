"""Write fences: once another process takes a slot's fence, the old holder gets no
acknowledgement out and none of its later metadata becomes visible."""

from __future__ import annotations

import asyncio
import gc
import time
import uuid

from dedup_broker.config import BrokerConfig
from dedup_broker.errors import OwnershipLostError, StorageError
from dedup_broker.storage import formats
from dedup_broker.storage.kafka.fencing import OPEN_TRANSACTION_SPAN_S, KafkaWriteFence
from dedup_broker.storage.ledger.managed_ledger import ManagedLedgerImpl
from dedup_broker.storage.service.kafka_storage import KafkaStorage
from dedup_broker.storage.tables.metadata_table import MetadataView
from tests.integration.storage.helpers import ConfigFactory, run, wait_until


async def refused_then_closed(ml: ManagedLedgerImpl) -> None:
    """An append of a managed ledger whose fence another holder took: never
    acknowledged, and the managed ledger closes."""
    try:
        await asyncio.wait_for(ml.append(b"late", 0), 30)
    except (OwnershipLostError, StorageError):
        pass
    else:
        raise AssertionError("an append after the takeover was acknowledged")
    await wait_until(lambda: ml.state == "Closed", timeout=30)


def test_a_new_holder_fences_the_old_one(make_config: ConfigFactory) -> None:
    config = make_config()

    async def scenario() -> None:
        old = await KafkaStorage.start(config)
        new = await KafkaStorage.start(config)
        try:
            old_fence = await old.acquire_fence(3)
            ml = await old.open_managed_ledger("fenced", fence=old_fence)
            acked = [await ml.append(f"m{i}".encode(), 0) for i in range(5)]
            cursor = await ml.cursors.open("sub", "earliest")
            cursor.mark_delete(acked[1])
            await cursor.flush()

            # The new holder takes the fence and the managed ledger (sealing the ledger
            # the old one writes): it sees exactly what was acknowledged, and the cursor.
            new_fence = await new.acquire_fence(3)
            ml2 = await new.open_managed_ledger("fenced", fence=new_fence)
            expected = [f"m{i}".encode() for i in range(5)]
            entries = await ml2.read_entries(ml2.first_position(), 20)
            assert [e.data for e in entries] == expected
            resumed = await ml2.cursors.open("sub")
            assert resumed.mark_delete_position == acked[1]

            # The old holder, unaware: no acknowledgement; its managed ledger closes.
            await refused_then_closed(ml)

            # Its late write is visible to nobody; the new holder goes on.
            nxt = await ml2.append(b"next", 0)
            assert nxt > acked[-1]
            entries = await ml2.read_entries(ml2.first_position(), 20)
            assert [e.data for e in entries] == [*expected, b"next"]

            # A write the old holder attempts now is never visible to anyone.
            forged = old_fence.send(
                formats.managed_ledgers_topic(config.cluster_name), b"forged", key=b"fenced"
            )
            try:
                await forged
            except OwnershipLostError:
                pass
            else:
                raise AssertionError("a fenced holder's metadata write was committed")
            fresh = MetadataView(
                formats.managed_ledgers_topic(config.cluster_name), new.admin, new._reader
            )
            await fresh.refresh()
            assert fresh.get("fenced") not in (None, b"forged")
        finally:
            await new.close()
            await old.close()

    run(scenario)


def test_commits_are_shared_by_appends_in_flight(make_config: ConfigFactory) -> None:
    config = make_config()

    async def scenario() -> None:
        storage = await KafkaStorage.start(config)
        try:
            fence = await storage.acquire_fence(0)
            ml = await storage.open_managed_ledger("busy", fence=fence)
            before = fence.commits + fence.proofs
            positions = await asyncio.gather(*(ml.append(f"e{i}".encode(), 0) for i in range(2000)))
            assert [p.entry_id for p in positions] == list(range(2000))
            used = fence.commits + fence.proofs - before
            assert 1 <= used < 2000 / 10, f"{used} proofs and commits for 2000 appends"
            entries = await ml.read_entries(ml.first_position(), 2000)
            assert [e.data for e in entries] == [f"e{i}".encode() for i in range(2000)]
        finally:
            await storage.close()

    run(scenario)


def test_proofs_commit_within_their_span_and_a_quiet_holder_is_still_fenced(
    make_config: ConfigFactory,
) -> None:
    """Appends are proven inside one open transaction, which commits within its span
    (never near Kafka's transaction timeout); a holder with no transaction open when
    another takes the slot gets nothing acknowledged either."""
    config = make_config()

    async def scenario() -> None:
        old = await KafkaStorage.start(config)
        new = await KafkaStorage.start(config)
        try:
            fence = await old.acquire_fence(2)
            ml = await old.open_managed_ledger("span", fence=fence)
            proofs, commits = fence.proofs, fence.commits
            acked = [await ml.append(f"p{i}".encode(), 0) for i in range(20)]
            assert fence.proofs - proofs >= 10, "appends waited for commits, not proofs"
            await wait_until(lambda: fence.commits > commits, timeout=3 * OPEN_TRANSACTION_SPAN_S)
            await asyncio.sleep(2 * OPEN_TRANSACTION_SPAN_S)  # quiet: no transaction open

            taken = await new.acquire_fence(2)
            ml2 = await new.open_managed_ledger("span", fence=taken)
            entries = await ml2.read_entries(ml2.first_position(), 50)
            assert [e.data for e in entries] == [f"p{i}".encode() for i in range(20)]
            assert entries[-1].position == acked[-1]
            await refused_then_closed(ml)
        finally:
            await new.close()
            await old.close()

    run(scenario, timeout=120)


def test_taking_a_fence_with_kafka_unreachable_fails_within_its_timeout() -> None:
    config = BrokerConfig(
        cluster_name="unreachable",
        kafka_bootstrap_servers="127.0.0.1:9",
        kafka_request_timeout_ms=2000,
    )

    async def scenario() -> None:
        started = time.monotonic()
        try:
            await KafkaWriteFence.acquire(config, 1)
        except Exception as exc:  # a StorageError naming the slot
            assert "slot 1" in str(exc)
        else:
            raise AssertionError("a fence without Kafka")
        assert time.monotonic() - started < 15

    run(scenario, timeout=30)


def test_managed_ledgers_closed_under_a_fence_are_not_kept_by_it(
    make_config: ConfigFactory,
) -> None:
    """A slot's fence lives as long as the slot is owned, while its topics are loaded and
    unloaded many times: a closed managed ledger must not stay reachable through it."""
    config = make_config()

    async def scenario() -> None:
        storage = await KafkaStorage.start(config)
        try:
            fence = await storage.acquire_fence(1)
            prefix = f"churn-{uuid.uuid4().hex[:8]}-"
            for i in range(5):
                ml = await storage.open_managed_ledger(f"{prefix}{i}", fence=fence)
                await ml.append(b"one", 0)
                await ml.close()
            del ml
            kept = await storage.open_managed_ledger(f"{prefix}kept", fence=fence)
            await kept.append(b"still fenced", 0)
            gc.collect()
            alive = sorted(
                o.name
                for o in gc.get_objects()
                if isinstance(o, ManagedLedgerImpl) and o.name.startswith(prefix)
            )
            assert alive == [f"{prefix}kept"]
            # The fence still stops the managed ledger that is open.
            other = await KafkaStorage.start(config)
            try:
                await other.acquire_fence(1)
                await refused_then_closed(kept)
            finally:
                await other.close()
        finally:
            await storage.close()

    run(scenario, timeout=120)
