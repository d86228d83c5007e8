"""Admin routes of tiered storage (Pulsar's shapes).

- ``PUT /admin/v2/persistent/{tenant}/{namespace}/{topic}/offload`` body a message id
  (``{"ledgerId": L, "entryId": E}``): offload every closed ledger before ledger ``L``,
  in the background (409 while an offload of the topic runs)
- ``GET .../{topic}/offload``: ``{"status": NOT_RUN|RUNNING|SUCCESS|ERROR, "lastError",
  "firstUnoffloadedMessage"}``
- ``PUT``/``POST``/``GET``/``DELETE /admin/v2/namespaces/{tenant}/{namespace}/offloadThreshold``
  body bytes: the size policy (negative: off, 0: offload every closed ledger)
- the same on ``.../offloadThresholdInSeconds``, body seconds: the age policy
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from aiohttp import web

from dedup_broker.config import BrokerConfig
from dedup_broker.domain.registry import TopicRegistry
from dedup_broker.domain_base.policies import Policies
from dedup_broker.errors import OffloadInProgressError
from dedup_broker.http.bodies import json_response, no_content, read_int, read_json
from dedup_broker.http.errors import ErrorStatuses, HttpError
from dedup_broker.http.paths import NAMESPACES, TOPIC, namespace_of, topic_of
from dedup_broker.storage.api import LedgerOffloads, Position
from dedup_broker.tiered.policy import (
    OFFLOAD_THRESHOLD,
    OFFLOAD_THRESHOLD_IN_SECONDS,
    check_namespace_offloads,
)

OFFLOAD_ERROR_STATUSES: ErrorStatuses = {OffloadInProgressError: HTTPStatus.CONFLICT}
"""An offload already running is a conflict with the request, not an outage (503)."""


def offload_routes(
    policies: Policies, config: BrokerConfig, topics: TopicRegistry
) -> list[web.RouteDef]:
    """Failures are answered with ``OFFLOAD_ERROR_STATUSES`` among the app's statuses."""
    api = _OffloadApi(policies, config, topics)
    return [
        web.put(TOPIC + "/offload", api.trigger),
        web.get(TOPIC + "/offload", api.status),
        web.put(NAMESPACES + "/offloadThreshold", api.set_threshold),
        web.post(NAMESPACES + "/offloadThreshold", api.set_threshold),
        web.get(NAMESPACES + "/offloadThreshold", api.get_threshold),
        web.delete(NAMESPACES + "/offloadThreshold", api.remove_threshold),
        web.put(NAMESPACES + "/offloadThresholdInSeconds", api.set_age),
        web.post(NAMESPACES + "/offloadThresholdInSeconds", api.set_age),
        web.get(NAMESPACES + "/offloadThresholdInSeconds", api.get_age),
        web.delete(NAMESPACES + "/offloadThresholdInSeconds", api.remove_age),
    ]


def _message_id(body: Any) -> Position:
    if not isinstance(body, dict):
        raise HttpError(
            HTTPStatus.BAD_REQUEST, 'expected a message id: {"ledgerId": .., "entryId": ..}'
        )
    try:
        return Position(int(body["ledgerId"]), int(body.get("entryId", 0)))
    except (KeyError, TypeError, ValueError):
        raise HttpError(
            HTTPStatus.BAD_REQUEST, f"expected a message id with ledgerId and entryId, got {body}"
        ) from None


class _OffloadApi:
    def __init__(self, policies: Policies, config: BrokerConfig, topics: TopicRegistry) -> None:
        self.policies = policies
        self.config = config
        self.topics = topics

    async def _offloads(self, request: web.Request) -> LedgerOffloads:
        return (await self.topics.loaded(topic_of(request))).managed_ledger.offloads

    async def trigger(self, request: web.Request) -> web.Response:
        before = _message_id(await read_json(request))
        (await self._offloads(request)).trigger(before)
        return no_content()

    async def status(self, request: web.Request) -> web.Response:
        offloads = await self._offloads(request)
        first = offloads.first_unoffloaded()
        return json_response(
            {
                "status": offloads.status,
                "lastError": offloads.last_error,
                "firstUnoffloadedMessage": {
                    "ledgerId": first.ledger_id,
                    "entryId": first.entry_id,
                    "partitionIndex": -1,
                },
            }
        )

    async def get_threshold(self, request: web.Request) -> web.Response:
        default = self.config.managed_ledger_offload_auto_trigger_size_threshold_bytes
        return self._get(request, OFFLOAD_THRESHOLD, default)

    async def set_threshold(self, request: web.Request) -> web.Response:
        threshold = await read_int(request, "a number of bytes")
        await self._apply(namespace_of(request), OFFLOAD_THRESHOLD, threshold)
        return no_content()

    async def remove_threshold(self, request: web.Request) -> web.Response:
        await self._apply(namespace_of(request), OFFLOAD_THRESHOLD, None)
        return no_content()

    async def get_age(self, request: web.Request) -> web.Response:
        default = self.config.managed_ledger_offload_threshold_in_seconds
        return self._get(request, OFFLOAD_THRESHOLD_IN_SECONDS, default)

    async def set_age(self, request: web.Request) -> web.Response:
        seconds = await read_int(request, "a number of seconds")
        await self._apply(namespace_of(request), OFFLOAD_THRESHOLD_IN_SECONDS, seconds)
        return no_content()

    async def remove_age(self, request: web.Request) -> web.Response:
        await self._apply(namespace_of(request), OFFLOAD_THRESHOLD_IN_SECONDS, None)
        return no_content()

    def _get(self, request: web.Request, policy: str, default: int) -> web.Response:
        value = self.policies.namespace_value(namespace_of(request), policy)
        return json_response(default if value is None else value)

    async def _apply(self, namespace: str, policy: str, value: int | None) -> None:
        await self.policies.set_namespace_value(namespace, policy, value)
        check_namespace_offloads(self.topics.loaded_ledgers(), namespace)
