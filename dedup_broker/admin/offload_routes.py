"""Admin routes of tiered storage (Pulsar's shapes).

- ``PUT /admin/v2/persistent/{tenant}/{namespace}/{topic}/offload`` body a message id
  (``{"ledgerId": L, "entryId": E}``): offload every closed ledger before ledger ``L``,
  in the background (409 while an offload of the topic runs)
- ``GET .../{topic}/offload``: ``{"status": NOT_RUN|RUNNING|SUCCESS|ERROR, "lastError",
  "firstUnoffloadedMessage"}``
- ``PUT``/``POST``/``GET``/``DELETE /admin/v2/namespaces/{tenant}/{namespace}/offloadThreshold``
  body bytes: the size policy (negative: off, 0: offload every closed ledger)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dedup_broker.admin.http import HttpError, Request, Response, json_response, no_content
from dedup_broker.admin.paths import NAMESPACES, TOPIC, Route, namespace_of, topic_of
from dedup_broker.errors import OffloadInProgressError, TopicNotFoundError
from dedup_broker.storage.position import Position
from dedup_broker.tiered.policy import OFFLOAD_THRESHOLD

if TYPE_CHECKING:
    from dedup_broker.domain.broker import Broker
    from dedup_broker.domain.topic import Topic


def offload_routes(broker: Broker) -> list[Route]:
    api = _OffloadApi(broker)
    return [
        ("PUT", TOPIC + "/offload", api.trigger),
        ("GET", TOPIC + "/offload", api.status),
        ("PUT", NAMESPACES + "/offloadThreshold", api.set_threshold),
        ("POST", NAMESPACES + "/offloadThreshold", api.set_threshold),
        ("GET", NAMESPACES + "/offloadThreshold", api.get_threshold),
        ("DELETE", NAMESPACES + "/offloadThreshold", api.remove_threshold),
    ]


def _message_id(body: Any) -> Position:
    if not isinstance(body, dict):
        raise HttpError(400, 'expected a message id: {"ledgerId": .., "entryId": ..}')
    try:
        return Position(int(body["ledgerId"]), int(body.get("entryId", 0)))
    except (KeyError, TypeError, ValueError):
        raise HttpError(
            400, f"expected a message id with ledgerId and entryId, got {body}"
        ) from None


class _OffloadApi:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    async def _topic(self, request: Request) -> Topic:
        name = topic_of(request)
        if not self.broker.topic_exists(name):
            raise TopicNotFoundError(f"topic {name} does not exist")
        return await self.broker.get_topic(name)

    async def trigger(self, request: Request) -> Response:
        before = _message_id(request.json())
        topic = await self._topic(request)
        try:
            topic.managed_ledger.offloads.trigger(before)
        except OffloadInProgressError as exc:
            raise HttpError(409, str(exc)) from None
        return no_content()

    async def status(self, request: Request) -> Response:
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

    async def get_threshold(self, request: Request) -> Response:
        value = self.broker.policies.namespace_value(namespace_of(request), OFFLOAD_THRESHOLD)
        if value is None:
            value = self.broker.config.managed_ledger_offload_auto_trigger_size_threshold_bytes
        return json_response(value)

    async def set_threshold(self, request: Request) -> Response:
        text = request.text().strip()
        try:
            threshold = int(text)
        except ValueError:
            raise HttpError(400, f"expected a number of bytes as the body, got {text!r}") from None
        await self._apply(namespace_of(request), threshold)
        return no_content()

    async def remove_threshold(self, request: Request) -> Response:
        await self._apply(namespace_of(request), None)
        return no_content()

    async def _apply(self, namespace: str, threshold: int | None) -> None:
        await self.broker.policies.set_namespace_value(namespace, OFFLOAD_THRESHOLD, threshold)
        for topic in list(self.broker.topics.values()):
            if topic.name.namespace_name == namespace:
                topic.managed_ledger.offloads.check_soon()
