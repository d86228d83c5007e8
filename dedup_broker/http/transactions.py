"""Admin routes of transactions, Pulsar's ``/admin/v3/transactions`` (what
``pulsar-admin transactions`` calls):

- ``GET /coordinatorStats[?coordinatorId=N]``: one coordinator's stats, or every
  coordinator's by id (those other brokers serve are asked of them)
- ``GET /transactionMetadata/{most}/{least}``: a transaction, with the stats of each
  partition it wrote and each subscription it acknowledged
- ``GET /slowTransactions/{timeoutMs}[?coordinatorId=N]``: transactions open longer
- ``GET /transactionBufferStats/{tenant}/{namespace}/{topic}``,
  ``/transactionInBufferStats/{tenant}/{namespace}/{topic}/{most}/{least}``
- ``GET /pendingAckStats/{tenant}/{namespace}/{topic}/{subscription}``,
  ``/transactionInPendingAckStats/{tenant}/{namespace}/{topic}/{subscription}/{most}/{least}``
- ``POST /abortTransaction/{most}/{least}``

A coordinator or topic served by another broker is answered with 307 to it, as Pulsar's
brokers do; with transactions off every route answers 503.
"""

from __future__ import annotations

import time
from http import HTTPStatus
from typing import Any
from urllib.parse import quote

from aiohttp import web

from dedup_broker.domain.broker import Broker
from dedup_broker.domain.topic import Topic
from dedup_broker.domain_base.names import TopicName
from dedup_broker.http.bodies import json_response, no_content
from dedup_broker.http.errors import ErrorStatuses, HttpError
from dedup_broker.http.owners import OwnerCalls
from dedup_broker.http.paths import query_value
from dedup_broker.transactions.buffer import TransactionsDisabledError
from dedup_broker.transactions.coordinator import TransactionCoordinator
from dedup_broker.transactions.coordinator_state import TransactionMeta, TxnAction, TxnId
from dedup_broker.transactions.errors import TransactionNotFoundError
from dedup_broker.transactions.service import ASSIGN_TOPIC, TransactionCoordinators

V3 = "/admin/v3/transactions"
_TOPIC = "{tenant}/{namespace}/{topic}"
_TXN = "{most}/{least}"

TRANSACTION_ERROR_STATUSES: ErrorStatuses = {
    TransactionsDisabledError: HTTPStatus.SERVICE_UNAVAILABLE,
    TransactionNotFoundError: HTTPStatus.NOT_FOUND,
}


def transaction_routes(broker: Broker, owners: OwnerCalls) -> list[web.RouteDef]:
    api = _TransactionsApi(broker, owners)
    return [
        web.get(V3 + "/coordinatorStats", api.coordinator_stats),
        web.get(V3 + "/transactionMetadata/" + _TXN, api.transaction_metadata),
        web.get(V3 + "/slowTransactions/{timeout}", api.slow_transactions),
        web.get(V3 + "/transactionBufferStats/" + _TOPIC, api.buffer_stats),
        web.get(V3 + "/transactionInBufferStats/" + _TOPIC + "/" + _TXN, api.in_buffer_stats),
        web.get(V3 + "/pendingAckStats/" + _TOPIC + "/{subscription}", api.pending_ack_stats),
        web.get(
            V3 + "/transactionInPendingAckStats/" + _TOPIC + "/{subscription}/" + _TXN,
            api.in_pending_ack_stats,
        ),
        web.post(V3 + "/abortTransaction/" + _TXN, api.abort),
    ]


def _txn_of(request: web.Request) -> TxnId:
    try:
        return TxnId(int(request.match_info["most"]), int(request.match_info["least"]))
    except ValueError:
        raise HttpError(
            HTTPStatus.BAD_REQUEST, "mostSigBits and leastSigBits are numbers"
        ) from None


def _topic_of(request: web.Request) -> TopicName:
    p = request.match_info
    return TopicName.parse(f"persistent://{p['tenant']}/{p['namespace']}/{p['topic']}")


class _TransactionsApi:
    def __init__(self, broker: Broker, owners: OwnerCalls) -> None:
        self.broker = broker
        self.topics = broker.topic_registry
        self.owners = owners

    @property
    def coordinators(self) -> TransactionCoordinators:
        return self.broker.transactions

    # --- coordinators -----------------------------------------------------------------
    async def _coordinator(self, coordinator_id: int) -> TransactionCoordinator:
        """Served here (recovered now if need be); NotOwnerError: 307 to its owner."""
        self.coordinators.check_enabled()
        if not 0 <= coordinator_id < self.coordinators.config.transaction_coordinator_count:
            raise HttpError(
                HTTPStatus.NOT_FOUND, f"transaction coordinator {coordinator_id} not found"
            )
        self.topics.check_served(ASSIGN_TOPIC.partition(coordinator_id))
        return await self.coordinators.coordinator(coordinator_id)

    async def _each_coordinator(self, path: str) -> dict[str, Any]:
        """``path`` (with ``coordinatorId=N`` added) for every coordinator, by id: the
        ones served here answered here, the others by their owners."""
        self.coordinators.check_enabled()
        answers: dict[str, Any] = {}
        for coordinator_id in range(self.coordinators.config.transaction_coordinator_count):
            partition = ASSIGN_TOPIC.partition(coordinator_id)
            separator = "&" if "?" in path else "?"
            query = f"{separator}coordinatorId={coordinator_id}"
            if self.topics.serves(partition):
                answers[str(coordinator_id)] = await self._local(path, coordinator_id)
            else:
                answers[str(coordinator_id)] = await self.owners.get(partition, path + query)
        return answers

    async def _local(self, path: str, coordinator_id: int) -> Any:
        coordinator = await self._coordinator(coordinator_id)
        if path.startswith(V3 + "/coordinatorStats"):
            return coordinator.stats()
        timeout_ms = int(path.rsplit("/", 1)[-1])
        return await self._slow(coordinator, timeout_ms)

    async def coordinator_stats(self, request: web.Request) -> web.Response:
        raw = query_value(request, "coordinatorId")
        if raw:
            return json_response((await self._coordinator(int(raw))).stats())
        return json_response(await self._each_coordinator(V3 + "/coordinatorStats"))

    async def transaction_metadata(self, request: web.Request) -> web.Response:
        txn = _txn_of(request)
        coordinator = await self._coordinator(txn.most)
        return json_response(await self._metadata(coordinator.get(txn)))

    async def slow_transactions(self, request: web.Request) -> web.Response:
        try:
            timeout_ms = int(request.match_info["timeout"])
        except ValueError:
            raise HttpError(HTTPStatus.BAD_REQUEST, "the timeout is milliseconds") from None
        raw = query_value(request, "coordinatorId")
        if raw:
            return json_response(await self._slow(await self._coordinator(int(raw)), timeout_ms))
        slow: dict[str, Any] = {}
        for answer in (await self._each_coordinator(request.path)).values():
            slow.update(answer or {})
        return json_response(slow)

    async def _slow(self, coordinator: TransactionCoordinator, timeout_ms: int) -> dict[str, Any]:
        now = int(time.time() * 1000)
        return {
            str(meta.txn_id): await self._metadata(meta)
            for meta in coordinator.live()
            if now - meta.opened_at_ms >= timeout_ms
        }

    async def _metadata(self, meta: TransactionMeta) -> dict[str, Any]:
        """Pulsar's ``TransactionMetadata``."""
        produced: dict[str, Any] = {}
        for partition in meta.partitions:
            produced[partition] = await self._at_topic(
                partition, "transactionInBufferStats", f"{meta.txn_id.most}/{meta.txn_id.least}"
            )
        acked: dict[str, dict[str, Any]] = {}
        for topic, subscription in meta.subscriptions:
            acked.setdefault(topic, {})[subscription] = await self._at_topic(
                topic,
                "transactionInPendingAckStats",
                f"{quote(subscription, safe='')}/{meta.txn_id.most}/{meta.txn_id.least}",
            )
        return {
            "txnId": str(meta.txn_id),
            "status": meta.status.name,
            "openTimestamp": meta.opened_at_ms,
            "timeoutAt": meta.timeout_ms,
            "producedPartitions": produced,
            "ackedPartitions": acked,
            "owner": meta.owner,
        }

    async def _at_topic(self, topic: str, route: str, rest: str) -> Any:
        name = TopicName.parse(topic)
        path = (
            f"{V3}/{route}/{name.tenant}/{name.namespace}/{quote(name.local_name, safe='')}/{rest}"
        )
        if not self.topics.serves(name):
            return await self.owners.get(name, path)
        served = await self._topic(name)
        if route == "transactionInBufferStats":
            return served.transactions.transaction_stats(TxnId(*map(int, rest.split("/"))))
        subscription, most, least = rest.split("/")
        acks = served.pending_acks
        txn = TxnId(int(most), int(least))
        return acks.transaction_stats(subscription, txn) if acks is not None else {}

    async def abort(self, request: web.Request) -> web.Response:
        txn = _txn_of(request)
        coordinator = await self._coordinator(txn.most)
        await coordinator.end_txn(txn, TxnAction.ABORT)
        return no_content()

    # --- topics -----------------------------------------------------------------------
    async def _topic(self, name: TopicName) -> Topic:
        self.coordinators.check_enabled()
        return await self.topics.loaded(name)

    async def buffer_stats(self, request: web.Request) -> web.Response:
        return json_response((await self._topic(_topic_of(request))).transactions.stats())

    async def in_buffer_stats(self, request: web.Request) -> web.Response:
        topic = await self._topic(_topic_of(request))
        return json_response(topic.transactions.transaction_stats(_txn_of(request)))

    async def pending_ack_stats(self, request: web.Request) -> web.Response:
        topic = await self._topic(_topic_of(request))
        subscription = request.match_info["subscription"]
        self._check_subscription(topic, subscription)
        acks = topic.pending_acks
        return json_response(acks.stats(subscription) if acks is not None else {})

    async def in_pending_ack_stats(self, request: web.Request) -> web.Response:
        topic = await self._topic(_topic_of(request))
        subscription = request.match_info["subscription"]
        self._check_subscription(topic, subscription)
        acks = topic.pending_acks
        txn = _txn_of(request)
        return json_response(acks.transaction_stats(subscription, txn) if acks else {})

    @staticmethod
    def _check_subscription(topic: Topic, subscription: str) -> None:
        if subscription not in topic.subscriptions:
            raise HttpError(
                HTTPStatus.NOT_FOUND, f"subscription {subscription} not found on {topic.name}"
            )
