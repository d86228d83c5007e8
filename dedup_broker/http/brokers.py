"""Admin routes of the brokers, in Pulsar's REST shape (superusers only):

- ``GET /admin/v2/brokers``: the live brokers of this cluster (``host:webServicePort``);
- ``GET /admin/v2/brokers/leaderBroker``: Pulsar's ``BrokerInfo`` ``{"serviceUrl",
  "brokerId"}``; this cluster elects no leader, so it names the first live broker, the one
  ``GET /admin/v2/clusters/{cluster}`` names too;
- ``GET /admin/v2/brokers/configuration``: the settings that may be given a value;
  ``GET .../configuration/values``: the values given; ``POST
  .../configuration/{name}/{value}`` (200) and ``DELETE .../configuration/{name}``
  (``domain_base.dynamic_configuration``: stored, no effect on a running broker).
"""

from __future__ import annotations

from http import HTTPStatus

from aiohttp import web

from dedup_broker.cluster.membership import BrokerAddress
from dedup_broker.cluster.service import Cluster
from dedup_broker.domain_base.dynamic_configuration import DynamicConfiguration
from dedup_broker.http.bodies import json_response, no_content

BROKERS = "/admin/v2/brokers"
CONFIGURATION = BROKERS + "/configuration"


def live_broker_routes(cluster: Cluster) -> list[web.RouteDef]:
    async def live_brokers() -> list[BrokerAddress]:
        view = await cluster.view()
        return view.brokers or [cluster.address]

    async def brokers(request: web.Request) -> web.Response:
        return json_response([b.broker_id for b in await live_brokers()])

    async def leader(request: web.Request) -> web.Response:
        first = (await live_brokers())[0]
        return json_response({"serviceUrl": first.web_url, "brokerId": first.broker_id})

    return [web.get(BROKERS, brokers), web.get(BROKERS + "/leaderBroker", leader)]


def dynamic_configuration_routes(dynamic: DynamicConfiguration) -> list[web.RouteDef]:
    async def names(request: web.Request) -> web.Response:
        return json_response(dynamic.names())

    async def values(request: web.Request) -> web.Response:
        await dynamic.table.refresh()
        return json_response(dynamic.values())

    async def update(request: web.Request) -> web.Response:
        params = request.match_info
        await dynamic.update(params["name"], params["value"])
        return web.Response(status=HTTPStatus.OK)

    async def delete(request: web.Request) -> web.Response:
        await dynamic.delete(request.match_info["name"])
        return no_content()

    return [
        web.get(CONFIGURATION, names),
        web.get(CONFIGURATION + "/values", values),
        web.post(CONFIGURATION + "/{name}/{value:.+}", update),  # a value may hold "/"
        web.delete(CONFIGURATION + "/{name}", delete),
    ]
