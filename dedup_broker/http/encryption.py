"""Admin routes of a namespace's ``encryptionRequired`` policy, as ``pulsar-admin
namespaces set-encryption-required`` / ``get-encryption-required`` call them:
``GET/POST .../namespaces/{tenant}/{namespace}/encryptionRequired`` (body: ``true`` or
``false``)."""

from __future__ import annotations

from aiohttp import web

from dedup_broker.domain_base.policies import Policies
from dedup_broker.http.bodies import json_response, no_content, read_bool
from dedup_broker.http.paths import NAMESPACES, namespace_of
from dedup_broker.security.encryption import ENCRYPTION_REQUIRED, encryption_required


def encryption_routes(policies: Policies) -> list[web.RouteDef]:
    async def get(request: web.Request) -> web.Response:
        return json_response(encryption_required(policies, namespace_of(request)))

    async def set_(request: web.Request) -> web.Response:
        value = await read_bool(request)
        await policies.set_namespace_value(namespace_of(request), ENCRYPTION_REQUIRED, value)
        return no_content()

    return [
        web.get(NAMESPACES + "/encryptionRequired", get),
        web.post(NAMESPACES + "/encryptionRequired", set_),
    ]
