"""A coordinator's log on Kafka: what a coordinator told its clients survives a broker
that stops without closing anything, and no transaction id is handed out twice."""

from __future__ import annotations

from dedup_broker.storage.service.kafka_storage import KafkaStorage
from dedup_broker.transactions.coordinator import TransactionCoordinator
from dedup_broker.transactions.coordinator_log import CoordinatorLog, log_ledger_name
from dedup_broker.transactions.coordinator_state import ID_BLOCK, TxnAction, TxnId, TxnStatus
from tests.integration.storage.helpers import ConfigFactory, run


class Applied:
    """Endings applied, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, TxnId, TxnAction]] = []

    async def end_on_partition(
        self, topic: str, txn_id: TxnId, action: TxnAction, low_watermark: int
    ) -> None:
        self.calls.append((topic, txn_id, action))

    async def end_on_subscription(
        self, topic: str, subscription: str, txn_id: TxnId, action: TxnAction, low_watermark: int
    ) -> None:
        self.calls.append((f"{topic}/{subscription}", txn_id, action))


def test_transactions_survive_a_broker_that_stops_without_closing(
    make_config: ConfigFactory,
) -> None:
    config = make_config()

    async def scenario() -> None:
        first = await KafkaStorage.start(config)
        ledger = await first.open_managed_ledger(log_ledger_name(2))
        coordinator = TransactionCoordinator(await CoordinatorLog.recover(ledger, 2), Applied())
        committed = await coordinator.new_txn(timeout_ms=60_000)
        await coordinator.add_partitions(committed, ["persistent://t/n/out-partition-0"])
        await coordinator.end_txn(committed, TxnAction.COMMIT)
        open_txn = await coordinator.new_txn(timeout_ms=60_000, owner="role")
        await coordinator.add_subscriptions(open_txn, [("persistent://t/n/in", "sub")])
        aborting = await coordinator.new_txn(timeout_ms=60_000)
        await coordinator.add_partitions(aborting, ["persistent://t/n/out-partition-1"])
        # The broker stops here: its storage is dropped, nothing closed or flushed.

        second = await KafkaStorage.start(config)
        try:
            applied = Applied()
            recovered = TransactionCoordinator(
                await CoordinatorLog.recover(
                    await second.open_managed_ledger(log_ledger_name(2)), 2
                ),
                applied,
            )
            assert recovered.get(committed).status == TxnStatus.COMMITTED
            kept = recovered.get(open_txn)
            assert (kept.status, kept.owner) == (TxnStatus.OPEN, "role")
            assert kept.subscriptions == (("persistent://t/n/in", "sub"),)
            await recovered.end_txn(aborting, TxnAction.ABORT)
            assert applied.calls == [
                ("persistent://t/n/out-partition-1", aborting, TxnAction.ABORT)
            ]
            fresh = await recovered.new_txn(timeout_ms=60_000)
            assert fresh == TxnId(2, ID_BLOCK)
        finally:
            await second.close()
            await first.close(timeout_seconds=1)

    run(scenario)
