"""Admin routes of backlog quotas, in Pulsar's shape (``?backlogQuotaType=`` is
``destination_storage`` or ``message_age``; bodies are Pulsar's ``BacklogQuota``):

- ``GET .../namespaces/{tenant}/{namespace}/backlogQuotaMap``,
  ``POST/DELETE .../namespaces/{tenant}/{namespace}/backlogQuota``
- ``GET .../persistent/{tenant}/{namespace}/{topic}/backlogQuotaMap`` (``?applied=true``:
  with the namespace's and the broker's), ``POST/DELETE .../{topic}/backlogQuota``
"""

from __future__ import annotations

from http import HTTPStatus

from aiohttp import web

from dedup_broker.backlog.quota import (
    BACKLOG_QUOTA_MAP,
    BacklogQuota,
    InvalidBacklogQuotaError,
    applied_quotas,
    check_quota,
    quota_map_json,
    quota_type,
    stored_quotas,
)
from dedup_broker.config import BrokerConfig
from dedup_broker.domain_base.policies import Policies
from dedup_broker.http.bodies import json_response, no_content, read_json
from dedup_broker.http.errors import ErrorStatuses
from dedup_broker.http.paths import (
    NAMESPACES,
    TOPIC,
    namespace_of,
    query_flag,
    query_value,
    topic_of,
)

BACKLOG_ERROR_STATUSES: ErrorStatuses = {InvalidBacklogQuotaError: HTTPStatus.PRECONDITION_FAILED}


def backlog_quota_routes(policies: Policies, config: BrokerConfig) -> list[web.RouteDef]:
    api = _BacklogQuotaApi(policies, config)
    return [
        web.get(NAMESPACES + "/backlogQuotaMap", api.namespace_map),
        web.post(NAMESPACES + "/backlogQuota", api.set_namespace),
        web.delete(NAMESPACES + "/backlogQuota", api.remove_namespace),
        web.get(TOPIC + "/backlogQuotaMap", api.topic_map),
        web.post(TOPIC + "/backlogQuota", api.set_topic),
        web.delete(TOPIC + "/backlogQuota", api.remove_topic),
    ]


class _BacklogQuotaApi:
    def __init__(self, policies: Policies, config: BrokerConfig) -> None:
        self.policies = policies
        self.config = config

    async def namespace_map(self, request: web.Request) -> web.Response:
        stored = self.policies.namespace_value(namespace_of(request), BACKLOG_QUOTA_MAP)
        return json_response(quota_map_json(stored_quotas(stored)))

    async def topic_map(self, request: web.Request) -> web.Response:
        name = topic_of(request)
        if query_flag(request, "applied"):
            return json_response(quota_map_json(applied_quotas(self.policies, self.config, name)))
        stored = self.policies.topic_value(name, BACKLOG_QUOTA_MAP)
        return json_response(quota_map_json(stored_quotas(stored)))

    async def set_namespace(self, request: web.Request) -> web.Response:
        namespace = namespace_of(request)
        stored = self.policies.namespace_value(namespace, BACKLOG_QUOTA_MAP)
        updated = await self._updated(request, stored)
        await self.policies.set_namespace_value(namespace, BACKLOG_QUOTA_MAP, updated)
        return no_content()

    async def remove_namespace(self, request: web.Request) -> web.Response:
        namespace = namespace_of(request)
        stored = self.policies.namespace_value(namespace, BACKLOG_QUOTA_MAP)
        await self.policies.set_namespace_value(
            namespace, BACKLOG_QUOTA_MAP, self._without(request, stored)
        )
        return no_content()

    async def set_topic(self, request: web.Request) -> web.Response:
        name = topic_of(request)
        stored = self.policies.topic_value(name, BACKLOG_QUOTA_MAP)
        updated = await self._updated(request, stored)
        await self.policies.set_topic_value(name, BACKLOG_QUOTA_MAP, updated)
        return no_content()

    async def remove_topic(self, request: web.Request) -> web.Response:
        name = topic_of(request)
        stored = self.policies.topic_value(name, BACKLOG_QUOTA_MAP)
        await self.policies.set_topic_value(name, BACKLOG_QUOTA_MAP, self._without(request, stored))
        return no_content()

    async def _updated(self, request: web.Request, stored: object) -> dict[str, object]:
        kind = quota_type(query_value(request, "backlogQuotaType"))
        quota = BacklogQuota.from_json(await read_json(request))
        check_quota(kind, quota)
        quotas = stored_quotas(stored)
        quotas[kind] = quota
        return quota_map_json(quotas)

    @staticmethod
    def _without(request: web.Request, stored: object) -> dict[str, object] | None:
        quotas = stored_quotas(stored)
        quotas.pop(quota_type(query_value(request, "backlogQuotaType")), None)
        return quota_map_json(quotas) or None
