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
from typing import TYPE_CHECKING, Any

from aiohttp import web

from dedup_broker.errors import OffloadInProgressError, TopicNotFoundError
from dedup_broker.http.bodies import json_response, no_content, read_int, read_json
from dedup_broker.http.errors import ErrorStatuses, HttpError
from dedup_broker.http.paths import NAMESPACES, TOPIC, namespace_of, topic_of
from dedup_broker.storage.position import Position
from dedup_broker.tiered.policy import OFFLOAD_THRESHOLD, OFFLOAD_THRESHOLD_IN_SECONDS

if TYPE_CHECKING:
    from dedup_broker.domain.broker import Broker
    from dedup_broker.domain.topic import Topic


OFFLOAD_ERROR_STATUSES: ErrorStatuses = {OffloadInProgressError: HTTPStatus.CONFLICT}
"""An offload already running is a conflict with the request, not an outage (503)."""


def offload_routes(broker: Broker) -> list[web.RouteDef]:
    """Failures are answered with ``OFFLOAD_ERROR_STATUSES`` among the app's statuses."""
    api = _OffloadApi(broker)
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
    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    async def _topic(self, request: web.Request) -> Topic:
        name = topic_of(request)
        self.broker.check_served(name)
        if not self.broker.topic_exists(name):
            raise TopicNotFoundError(f"topic {name} does not exist")
        return await self.broker.get_topic(name)

    async def trigger(self, request: web.Request) -> web.Response:
        before = _message_id(await read_json(request))
        topic = await self._topic(request)
        topic.managed_ledger.offloads.trigger(before)
        return no_content()

    async def status(self, request: web.Request) -> web.Response:
        offloads = (await self._topic(request)).managed_ledger.offloads
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
        default = self.broker.config.managed_ledger_offload_auto_trigger_size_threshold_bytes
        return self._get(request, OFFLOAD_THRESHOLD, default)

    async def set_threshold(self, request: web.Request) -> web.Response:
        threshold = await read_int(request, "a number of bytes")
        await self._apply(namespace_of(request), OFFLOAD_THRESHOLD, threshold)
        return no_content()

    async def remove_threshold(self, request: web.Request) -> web.Response:
        await self._apply(namespace_of(request), OFFLOAD_THRESHOLD, None)
        return no_content()

    async def get_age(self, request: web.Request) -> web.Response:
        default = self.broker.config.managed_ledger_offload_threshold_in_seconds
        return self._get(request, OFFLOAD_THRESHOLD_IN_SECONDS, default)

    async def set_age(self, request: web.Request) -> web.Response:
        seconds = await read_int(request, "a number of seconds")
        await self._apply(namespace_of(request), OFFLOAD_THRESHOLD_IN_SECONDS, seconds)
        return no_content()

    async def remove_age(self, request: web.Request) -> web.Response:
        await self._apply(namespace_of(request), OFFLOAD_THRESHOLD_IN_SECONDS, None)
        return no_content()

    def _get(self, request: web.Request, policy: str, default: int) -> web.Response:
        value = self.broker.policies.namespace_value(namespace_of(request), policy)
        return json_response(default if value is None else value)

    async def _apply(self, namespace: str, policy: str, value: int | None) -> None:
        await self.broker.policies.set_namespace_value(namespace, policy, value)
        for topic in list(self.broker.topics.values()):
            if topic.name.namespace_name == namespace:
                topic.managed_ledger.offloads.check_soon()
