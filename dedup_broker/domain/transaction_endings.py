"""A transaction's ending applied where it wrote and where it acknowledged: the
coordinators' :class:`TransactionEnder`. Topics served here end here; a topic another
broker serves is asked of that broker (``END_TXN_ON_PARTITION`` /
``END_TXN_ON_SUBSCRIPTION``, as Pulsar's brokers do), which answers once the ending is
stored there. Every step may be repeated."""

from __future__ import annotations

import time

from dedup_broker.cluster.service import Cluster
from dedup_broker.domain.registry import TopicRegistry
from dedup_broker.domain_base.names import TopicName
from dedup_broker.errors import ServiceNotReadyError
from dedup_broker.protocol import pulsar_api_pb2 as pb
from dedup_broker.transactions.coordinator_state import TxnAction, TxnId


class TopicEndings:
    def __init__(self, registry: TopicRegistry, cluster: Cluster | None) -> None:
        self._registry = registry
        self._cluster = cluster

    async def end_on_partition(
        self, topic: str, txn_id: TxnId, action: TxnAction, low_watermark: int
    ) -> None:
        """The topic's marker, then its readers see the transaction's messages (commit)
        or skip them (abort)."""
        await self._end(topic, None, txn_id, action)

    async def end_on_subscription(
        self, topic: str, subscription: str, txn_id: TxnId, action: TxnAction, low_watermark: int
    ) -> None:
        """The acknowledgements held for the transaction are applied (commit) or their
        messages delivered again (abort)."""
        await self._end(topic, subscription, txn_id, action)

    async def _end(
        self, topic: str, subscription: str | None, txn_id: TxnId, action: TxnAction
    ) -> None:
        name = TopicName.parse(topic)
        if self._registry.serves(name):
            await self.end_here(topic, subscription, txn_id, action)
            return
        assert self._cluster is not None  # without a cluster every topic is served here
        owner = await self._cluster.owner_of(name)
        if owner == self._cluster.address:
            await self.end_here(topic, subscription, txn_id, action)
            return
        answer = await self._cluster.requests.request(
            owner, _ending_command(topic, subscription, txn_id, action)
        )
        response = (
            answer.endTxnOnPartitionResponse
            if subscription is None
            else answer.endTxnOnSubscriptionResponse
        )
        if answer.type == pb.BaseCommand.ERROR or response.HasField("error"):
            message = (
                answer.error.message if answer.type == pb.BaseCommand.ERROR else response.message
            )
            raise ServiceNotReadyError(
                f"ending transaction {txn_id} on {topic} at {owner.service_url}: {message}"
            )

    async def end_here(
        self, topic: str, subscription: str | None, txn_id: TxnId, action: TxnAction
    ) -> None:
        """On a topic this broker serves (``NotOwnerError`` if it does not)."""
        name = TopicName.parse(topic)
        self._registry.check_served(name)
        if not self._registry.topic_exists(name):
            return  # never written nor subscribed: nothing to end
        served = await self._registry.get_topic(name)
        if subscription is None:
            await served.transactions.end(txn_id, action, int(time.time() * 1000))
        elif served.pending_acks is not None:
            await served.pending_acks.end(subscription, txn_id, action)


def _ending_command(
    topic: str, subscription: str | None, txn_id: TxnId, action: TxnAction
) -> pb.BaseCommand:
    most, least = txn_id.most, txn_id.least
    if subscription is None:
        return pb.BaseCommand(
            type=pb.BaseCommand.END_TXN_ON_PARTITION,
            endTxnOnPartition=pb.CommandEndTxnOnPartition(
                request_id=0,
                txnid_most_bits=most,
                txnid_least_bits=least,
                topic=topic,
                txn_action=action.name,
            ),
        )
    return pb.BaseCommand(
        type=pb.BaseCommand.END_TXN_ON_SUBSCRIPTION,
        endTxnOnSubscription=pb.CommandEndTxnOnSubscription(
            request_id=0,
            txnid_most_bits=most,
            txnid_least_bits=least,
            subscription=pb.Subscription(topic=topic, subscription=subscription),
            txn_action=action.name,
        ),
    )
