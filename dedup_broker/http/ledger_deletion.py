"""Admin routes of two-phase ledger deletion (PIP-186), asked by the deletion workers.

- ``GET /admin/v2/ledger-deletion/ledgers/{ledgerId}?managedLedger=...[&type=OFFLOAD_LEDGER
  &uid=...]``: may a worker delete this ledger's Kafka copy (or offloaded copy ``uid``)?
  ``in-use``, ``pending`` (ask again later) or ``deletable``
- ``GET /admin/v2/ledger-deletion/stats``: estimated deletions in flight
"""

from __future__ import annotations

import asyncio
from http import HTTPStatus

from aiohttp import web

from dedup_broker.config import BrokerConfig
from dedup_broker.http.bodies import json_response
from dedup_broker.http.errors import HttpError
from dedup_broker.http.paths import query_value
from dedup_broker.storage.api import LedgerType, LedgerUsage
from system_topics.lag import group_lag
from system_topics.topics import DeletionTopics

DELETION = "/admin/v2/ledger-deletion"


def ledger_deletion_routes(config: BrokerConfig, usage: LedgerUsage) -> list[web.RouteDef]:
    """``usage``: the broker's storage, which knows which ledgers its topics list."""
    api = _LedgerDeletionApi(config, usage)
    return [
        web.get(DELETION + "/ledgers/{ledgerId}", api.ledger_status),
        web.get(DELETION + "/stats", api.stats),
    ]


class _LedgerDeletionApi:
    def __init__(self, config: BrokerConfig, usage: LedgerUsage) -> None:
        self.config = config
        self.usage = usage

    async def ledger_status(self, request: web.Request) -> web.Response:
        name = query_value(request, "managedLedger")
        try:
            ledger_id = int(request.match_info["ledgerId"])
        except ValueError:
            raise HttpError(HTTPStatus.BAD_REQUEST, "ledgerId must be an integer") from None
        if not name:
            raise HttpError(HTTPStatus.BAD_REQUEST, "the managedLedger query parameter is required")
        try:
            ledger_type = LedgerType(query_value(request, "type", LedgerType.LEDGER.value))
        except ValueError:
            raise HttpError(
                HTTPStatus.BAD_REQUEST, "type must be LEDGER or OFFLOAD_LEDGER"
            ) from None
        uid = query_value(request, "uid")
        status = await self.usage.ledger_status(name, ledger_id, ledger_type, uid)
        return json_response({"managedLedger": name, "ledgerId": ledger_id, "status": status.value})

    async def stats(self, request: web.Request) -> web.Response:
        config = self.config
        topics = DeletionTopics.from_config(config)
        lag = await asyncio.to_thread(group_lag, config.kafka_connection(), topics)
        return json_response(
            {
                "twoPhaseDeletionEnabled": config.topic_two_phase_deletion_enabled,
                "estimatedInFlightDeletions": sum(lag.values()),
                "lag": lag,
            }
        )
