"""Transactions on the wire (PIP-31): the coordinator's commands (TC_CLIENT_CONNECT,
NEW_TXN, ADD_PARTITION_TO_TXN, ADD_SUBSCRIPTION_TO_TXN, END_TXN) and acknowledgements
made in a transaction.

Each coordinator command is answered by its own response type
(``protocol/txn_commands.py``); a refusal is that response with the error code
``replies.py`` decides."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING

from dedup_broker.domain.consumer import Consumer
from dedup_broker.domain.registry import ServedTopic
from dedup_broker.domain.topic import Topic
from dedup_broker.domain_base.names import TopicName
from dedup_broker.errors import BrokerError
from dedup_broker.protocol import commands
from dedup_broker.protocol import pulsar_api_pb2 as pb
from dedup_broker.protocol.framing import Frame
from dedup_broker.protocol.txn_commands import txn_response
from dedup_broker.session.replies import server_error_of
from dedup_broker.storage.api import Position
from dedup_broker.transactions.buffer import TransactionsDisabledError
from dedup_broker.transactions.coordinator import TransactionCoordinator
from dedup_broker.transactions.coordinator_state import TxnAction, TxnId
from dedup_broker.transactions.pending_acks import HeldAcks

if TYPE_CHECKING:
    from dedup_broker.session.context import Handler, Session

_BASE = pb.BaseCommand
DEFAULT_TIMEOUT_MS = 60_000
"""A NEW_TXN without ``txn_ttl_seconds`` (the Java client's default is one minute too)."""


class TransactionCommands:
    def __init__(self, connection: Session) -> None:
        self.connection = connection
        self.coordinators = connection.broker.transactions

    def handlers(self) -> dict[int, Handler]:
        return {
            _BASE.TC_CLIENT_CONNECT_REQUEST: self._on_connect,
            _BASE.NEW_TXN: self._on_new_txn,
            _BASE.ADD_PARTITION_TO_TXN: self._on_add_partitions,
            _BASE.ADD_SUBSCRIPTION_TO_TXN: self._on_add_subscriptions,
            _BASE.END_TXN: self._on_end_txn,
            _BASE.END_TXN_ON_PARTITION: self._on_end_on_partition,
            _BASE.END_TXN_ON_SUBSCRIPTION: self._on_end_on_subscription,
        }

    def _answer(self, request_type: int, request_id: int, txn: TxnId | None = None) -> None:
        pair = (txn.most, txn.least) if txn is not None else None
        self.connection.send_command(txn_response(request_type, request_id, pair))

    def _coordinator_of(self, txn: TxnId) -> Awaitable[TransactionCoordinator]:
        return self.coordinators.coordinator(txn.most)

    def _on_connect(self, frame: Frame) -> Awaitable[None]:
        return self._connect(frame.command.tcClientConnectRequest)

    async def _connect(self, request: pb.CommandTcClientConnectRequest) -> None:
        await self.coordinators.coordinator(request.tc_id)
        self._answer(_BASE.TC_CLIENT_CONNECT_REQUEST, request.request_id)

    def _on_new_txn(self, frame: Frame) -> Awaitable[None]:
        return self._new_txn(frame.command.newTxn)

    async def _new_txn(self, request: pb.CommandNewTxn) -> None:
        coordinator = await self.coordinators.coordinator(request.tc_id)
        # Despite its name the field holds milliseconds: the official clients send
        # their timeout in milliseconds and Pulsar's coordinator reads it so.
        timeout_ms = request.txn_ttl_seconds or DEFAULT_TIMEOUT_MS
        txn = await coordinator.new_txn(timeout_ms, self.connection.role)
        self._answer(_BASE.NEW_TXN, request.request_id, txn)

    def _on_add_partitions(self, frame: Frame) -> Awaitable[None]:
        return self._add_partitions(frame.command.addPartitionToTxn)

    async def _add_partitions(self, request: pb.CommandAddPartitionToTxn) -> None:
        txn = TxnId(request.txnid_most_bits, request.txnid_least_bits)
        partitions = [_as_sent(p) for p in request.partitions]
        await (await self._coordinator_of(txn)).add_partitions(txn, partitions)
        self._answer(_BASE.ADD_PARTITION_TO_TXN, request.request_id, txn)

    def _on_add_subscriptions(self, frame: Frame) -> Awaitable[None]:
        return self._add_subscriptions(frame.command.addSubscriptionToTxn)

    async def _add_subscriptions(self, request: pb.CommandAddSubscriptionToTxn) -> None:
        txn = TxnId(request.txnid_most_bits, request.txnid_least_bits)
        subscriptions = [(_as_sent(s.topic), s.subscription) for s in request.subscription]
        await (await self._coordinator_of(txn)).add_subscriptions(txn, subscriptions)
        self._answer(_BASE.ADD_SUBSCRIPTION_TO_TXN, request.request_id, txn)

    def _on_end_txn(self, frame: Frame) -> Awaitable[None]:
        return self._end_txn(frame.command.endTxn)

    async def _end_txn(self, request: pb.CommandEndTxn) -> None:
        txn = TxnId(request.txnid_most_bits, request.txnid_least_bits)
        action = TxnAction(request.txn_action)
        await (await self._coordinator_of(txn)).end_txn(txn, action)
        self._answer(_BASE.END_TXN, request.request_id, txn)

    # --- between brokers: a coordinator elsewhere ends a transaction on topics here ---
    def _on_end_on_partition(self, frame: Frame) -> Awaitable[None]:
        return self._end_on_partition(frame.command.endTxnOnPartition)

    async def _end_on_partition(self, request: pb.CommandEndTxnOnPartition) -> None:
        txn = TxnId(request.txnid_most_bits, request.txnid_least_bits)
        self._check_peer("END_TXN_ON_PARTITION")
        await self.connection.broker.transaction_endings.end_here(
            request.topic, None, txn, TxnAction(request.txn_action)
        )
        self._answer(_BASE.END_TXN_ON_PARTITION, request.request_id, txn)

    def _on_end_on_subscription(self, frame: Frame) -> Awaitable[None]:
        return self._end_on_subscription(frame.command.endTxnOnSubscription)

    async def _end_on_subscription(self, request: pb.CommandEndTxnOnSubscription) -> None:
        txn = TxnId(request.txnid_most_bits, request.txnid_least_bits)
        self._check_peer("END_TXN_ON_SUBSCRIPTION")
        await self.connection.broker.transaction_endings.end_here(
            request.subscription.topic,
            request.subscription.subscription,
            txn,
            TxnAction(request.txn_action),
        )
        self._answer(_BASE.END_TXN_ON_SUBSCRIPTION, request.request_id, txn)

    def _check_peer(self, what: str) -> None:
        """Only the brokers themselves (superusers once authorization is on) end
        transactions on topics."""
        self.coordinators.check_enabled()
        authorizer = self.connection.authorizer
        if authorizer.enabled:
            authorizer.check_superuser(self.connection.role, what)


async def acknowledge_in_transaction(
    connection: Session,
    topic: ServedTopic,
    consumer: Consumer,
    ack: pb.CommandAck,
    positions: list[Position],
) -> None:
    """An ACK naming a transaction: held until the transaction ends; the client hears it
    was taken once it is recorded (or why it was refused: ``TransactionConflict``...)."""
    txn = TxnId(ack.txnid_most_bits, ack.txnid_least_bits)
    error: BrokerError | None = None
    try:
        connection.broker.transactions.check_enabled()
        if not isinstance(topic, Topic) or topic.pending_acks is None:
            raise TransactionsDisabledError(f"{topic.name} takes no transactions")
        subscription = topic.subscriptions[consumer.subscription_name]
        acks = HeldAcks()
        for message_id, position in zip(ack.message_id, positions, strict=True):
            partial = any(message_id.ack_set)
            if ack.ack_type == pb.CommandAck.Cumulative:
                acks.cumulative = subscription.position_before(position) if partial else position
            elif partial:
                acks.parts[position] = tuple(message_id.ack_set)
            else:
                acks.whole.add(position)
        await topic.pending_acks.acknowledge(subscription, consumer, txn, acks)
    except BrokerError as exc:
        error = exc
    if ack.HasField("request_id"):
        connection.send_command(
            commands.ack_response(
                ack.consumer_id,
                ack.request_id,
                error=server_error_of(error) if error is not None else None,
                message=str(error) if error is not None else None,
            )
        )


def _as_sent(topic: str) -> str:
    """A topic named in a transaction, checked but kept as the client spelled it: Pulsar's
    coordinator keeps the names so, and ``transactionMetadata`` shows them so (clients
    look their topics up in it by the names they sent)."""
    TopicName.parse(topic)
    return topic
