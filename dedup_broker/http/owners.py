"""Admin calls a broker forwards to the broker serving a topic (partitioned-topic calls
touch partitions that other brokers own)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import Any

import aiohttp

from dedup_broker.cluster.membership import BrokerAddress
from dedup_broker.config import BrokerConfig
from dedup_broker.domain_base.names import TopicName
from dedup_broker.errors import ServiceNotReadyError
from dedup_broker.security.broker_client import (
    broker_client_headers,
    broker_client_ssl_context,
    broker_client_web_url,
)

TIMEOUT = aiohttp.ClientTimeout(total=30)

OwnerOf = Callable[[TopicName], Awaitable[BrokerAddress | None]]
"""The broker serving a topic; ``None`` when it is this one."""


def topic_path(name: TopicName) -> str:
    return f"/admin/v2/{name.domain}/{name.tenant}/{name.namespace}/{name.local_name}"


class OwnerCalls:
    def __init__(self, config: BrokerConfig, owner_of: OwnerOf) -> None:
        self._config = config
        self._owner_of = owner_of

    async def call(
        self,
        name: TopicName,
        method: str,
        suffix: str = "",
        query: str = "",
        body: bytes | None = None,
    ) -> Any:
        """``method`` on the owner's ``{topic}{suffix}`` (with ``body``, JSON): its JSON,
        or ``None`` for 404/204."""
        path = topic_path(name) + suffix + (f"?{query}" if query else "")
        return await self.request(name, method, path, body)

    async def get(self, name: TopicName, path: str) -> Any:
        """GET ``path`` (with its query) of the broker serving ``name``."""
        return await self.request(name, "GET", path)

    async def request(
        self, name: TopicName, method: str, path: str, body: bytes | None = None
    ) -> Any:
        owner = await self._owner_of(name)
        if owner is None:
            raise ServiceNotReadyError(f"{name} moved to this broker during the call; retry")
        url = broker_client_web_url(self._config, owner.web_url, owner.web_url_tls) + path
        async with (
            aiohttp.ClientSession(
                timeout=TIMEOUT, headers=broker_client_headers(self._config)
            ) as session,
            session.request(
                method,
                url,
                data=body,
                headers={"Content-Type": "application/json"} if body else None,
                ssl=broker_client_ssl_context(self._config),
            ) as response,
        ):
            if response.status in (HTTPStatus.NOT_FOUND, HTTPStatus.NO_CONTENT):
                return None
            if response.status >= 300:
                reason = await response.text()
                raise ServiceNotReadyError(f"{method} {url}: {response.status} {reason}")
            return await response.json()
