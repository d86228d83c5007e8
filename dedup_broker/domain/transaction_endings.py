"""A transaction's ending applied where it wrote and where it acknowledged: the
coordinators' :class:`TransactionEnder` on this broker's topics."""

from __future__ import annotations

import time

from dedup_broker.domain.registry import TopicRegistry
from dedup_broker.domain.topic import Topic
from dedup_broker.domain_base.names import TopicName
from dedup_broker.errors import ServiceNotReadyError
from dedup_broker.transactions.coordinator_state import TxnAction, TxnId


class TopicEndings:
    def __init__(self, registry: TopicRegistry) -> None:
        self._registry = registry

    async def end_on_partition(
        self, topic: str, txn_id: TxnId, action: TxnAction, low_watermark: int
    ) -> None:
        """``END_TXN_ON_PARTITION``: the topic's marker, then its readers see the
        transaction's messages (commit) or skip them (abort)."""
        served = await self._served(topic, txn_id)
        await served.transactions.end(txn_id, action, int(time.time() * 1000))

    async def end_on_subscription(
        self, topic: str, subscription: str, txn_id: TxnId, action: TxnAction, low_watermark: int
    ) -> None:
        """``END_TXN_ON_SUBSCRIPTION``: the acknowledgements held for the transaction are
        applied (commit) or their messages delivered again (abort)."""
        served = await self._served(topic, txn_id)
        if served.pending_acks is not None:
            await served.pending_acks.end(subscription, txn_id, action)

    async def _served(self, topic: str, txn_id: TxnId) -> Topic:
        name = TopicName.parse(topic)
        if not self._registry.serves(name):
            raise ServiceNotReadyError(
                f"{name} is served by another broker: ending transaction {txn_id} there "
                "is not supported yet"
            )
        return await self._registry.get_topic(name)
