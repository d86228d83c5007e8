"""A topic's acknowledgements in transactions: held per subscription, recorded in the
topic's pending-ack log before the client hears they are taken, applied to the cursor
when the transaction commits, delivered again when it aborts."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from urllib.parse import quote

from dedup_broker.domain.consumer import Consumer, SubscriptionType
from dedup_broker.domain.subscription import Subscription
from dedup_broker.domain_base.names import TopicName
from dedup_broker.errors import BrokerError, PermanentError
from dedup_broker.lazy import LazyLock
from dedup_broker.storage.api import Position, StorageService, WriteFence
from dedup_broker.transactions.coordinator_state import TxnAction, TxnId
from dedup_broker.transactions.pending_acks import (
    HeldAcks,
    PendingAckLog,
    PendingAcks,
    TransactionConflictError,
)

log = logging.getLogger(__name__)


class CumulativeAckNotAllowedError(PermanentError):
    """A cumulative acknowledgement in a transaction on a Shared or Key_Shared
    subscription (Pulsar allows it on Exclusive and Failover only)."""


def pending_ack_ledger_name(topic: TopicName) -> str:
    """In the system namespace, so that it is listed with no namespace's topics."""
    return "pulsar/system/persistent/" + quote(
        f"{topic.namespace_name}/{topic.local_name}__transaction_pending_ack", safe=""
    )


_NOTHING_HELD: dict[str, PendingAcks] = {}
"""Shared by every topic that never had an acknowledgement in a transaction."""


class TopicPendingAcks:
    __slots__ = ("_fence", "_held", "_log", "_opening", "_storage", "_subscriptions", "_topic")

    def __init__(
        self,
        storage: StorageService,
        topic: TopicName,
        fence: WriteFence | None,
        subscriptions: Mapping[str, Subscription],
    ) -> None:
        self._storage = storage
        self._topic = topic
        self._fence = fence
        self._subscriptions = subscriptions
        self._held = _NOTHING_HELD
        self._log: PendingAckLog | None = None
        self._opening: LazyLock | None = None

    @property
    def _ledger_name(self) -> str:
        return pending_ack_ledger_name(self._topic)

    async def recover(self) -> None:
        """Held acknowledgements as the log left them (topics that never had one: none)."""
        if self._storage.managed_ledger_exists(self._ledger_name):
            await self._opened()

    async def _opened(self) -> PendingAckLog:
        if self._opening is None:
            self._opening = LazyLock()
        async with self._opening:
            if self._log is None:
                ledger = await self._storage.open_managed_ledger(
                    self._ledger_name, create=True, fence=self._fence
                )
                self._log, held = await PendingAckLog.recover(ledger)
                for subscription, transactions in held.items():
                    for txn_id, acks in transactions.items():
                        self._of(subscription).hold(txn_id, acks)
            return self._log

    def _of(self, subscription: str) -> PendingAcks:
        if self._held is _NOTHING_HELD:
            self._held = {}
        return self._held.setdefault(subscription, PendingAcks())

    def holds(self, subscription: str, position: Position) -> bool:
        held = self._held.get(subscription)
        return held is not None and held.holds(position)

    def stats(self, subscription: str) -> dict[str, object]:
        """Pulsar's ``TransactionPendingAckStats``."""
        held = self._held.get(subscription)
        return {
            "state": "Ready",
            "lowWaterMarks": {},
            "ongoingTxnSize": len(held.held) if held is not None else 0,
        }

    def transaction_stats(self, subscription: str, txn_id: TxnId) -> dict[str, object]:
        """Pulsar's ``TransactionInPendingAckStats``."""
        held = self._held.get(subscription)
        acks = held.held.get(txn_id) if held is not None else None
        cumulative = acks.cumulative if acks is not None else None
        return {"cumulativeAckPosition": str(cumulative) if cumulative else None}

    async def acknowledge(
        self, subscription: Subscription, consumer: Consumer, txn_id: TxnId, acks: HeldAcks
    ) -> None:
        """Hold ``acks`` for ``txn_id``; raises ``TransactionConflictError`` if another
        transaction holds one of them or the subscription has it acknowledged."""
        if acks.cumulative is not None:
            if subscription.type not in (SubscriptionType.EXCLUSIVE, SubscriptionType.FAILOVER):
                raise CumulativeAckNotAllowedError(
                    "a cumulative acknowledgement in a transaction needs an Exclusive or "
                    f"Failover subscription, not {subscription.type.name}"
                )
            if acks.cumulative <= subscription.mark_delete_position:
                raise TransactionConflictError(f"{acks.cumulative} is acknowledged already")
        cursor = subscription.cursor
        acknowledged = {p for p in acks.positions() if cursor.is_acknowledged(p)}
        held = self._of(subscription.name)
        held.check(txn_id, acks, acknowledged)
        log = await self._opened()
        held.check(txn_id, acks, acknowledged)  # again: another may have come meanwhile
        await log.held(subscription.name, txn_id, acks)
        held.hold(txn_id, acks)
        for position in acks.positions():
            consumer.acknowledge(position)  # counted now, as Pulsar counts it

    async def end(self, subscription_name: str, txn_id: TxnId, action: TxnAction) -> None:
        """``END_TXN_ON_SUBSCRIPTION``: commit applies the acknowledgements to the cursor
        (stored before the ending is recorded), abort delivers the messages again. Safe
        to repeat."""
        held = self._held.get(subscription_name)
        if held is None and self._log is None:
            if not self._storage.managed_ledger_exists(self._ledger_name):
                return  # nothing was ever held on this topic
            await self._opened()
            held = self._held.get(subscription_name)
        acks = held.held.get(txn_id) if held is not None else None
        subscription = self._subscriptions.get(subscription_name)
        if acks is not None and subscription is not None and action is TxnAction.COMMIT:
            await _apply(subscription, acks)
        if held is not None:
            held.release(txn_id)
        if acks is not None and subscription is not None and action is TxnAction.ABORT:
            subscription.on_redeliver(None, sorted(acks.positions()))
        await (await self._opened()).ended(subscription_name, txn_id)

    async def close(self) -> None:
        if self._log is not None:
            try:
                await self._log.close()
            except BrokerError as exc:  # the records are stored; only the cursor lags
                log.warning("%s: closing the pending-ack log: %s", self._topic, exc)


async def _apply(subscription: Subscription, acks: HeldAcks) -> None:
    if acks.whole:
        subscription.on_ack(None, sorted(acks.whole), cumulative=False)
    for position, unacked in acks.parts.items():
        subscription.on_batch_ack(None, position, unacked)
    if acks.cumulative is not None:
        subscription.on_ack(None, [acks.cumulative], cumulative=True)
    await subscription.cursor.flush()
