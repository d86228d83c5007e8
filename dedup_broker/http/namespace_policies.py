"""Admin routes of Pulsar's namespace-only policies (``domain_base.namespace_policies``).

For each, ``GET/POST/PUT/DELETE /admin/v2/namespaces/{tenant}/{namespace}/<name>``
(``subscriptionExpirationTime``, ``maxTopicsPerNamespace``, ``offloadDeletionLagMs``,
``properties``, ``autoTopicCreation``, ``persistence/bookieAffinity``): the namespace's
value, or what Pulsar answers while it is unset (no content for most). Pulsar's admin
clients set some with ``POST`` and others with ``PUT``: both are taken. Bodies are JSON;
failures use ``TOPIC_POLICY_ERROR_STATUSES`` (400 malformed, 412 out of range).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

from aiohttp import web

from dedup_broker.domain_base.namespace_policies import NAMESPACE_POLICIES, NamespacePolicy
from dedup_broker.domain_base.policies import Policies
from dedup_broker.domain_base.topic_policies import BadPolicyError
from dedup_broker.http.bodies import json_response, no_content, read_text
from dedup_broker.http.paths import NAMESPACES, namespace_of

_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def namespace_policy_routes(policies: Policies) -> list[web.RouteDef]:
    routes: list[web.RouteDef] = []
    for policy in NAMESPACE_POLICIES:
        path = f"{NAMESPACES}/{policy.route}"
        routes += [
            web.get(path, _handler(_get, policies, policy)),
            web.post(path, _handler(_set, policies, policy)),
            web.put(path, _handler(_set, policies, policy)),
            web.delete(path, _handler(_remove, policies, policy)),
        ]
    return routes


def _handler(
    method: Callable[[web.Request, Policies, NamespacePolicy], Awaitable[web.Response]],
    policies: Policies,
    policy: NamespacePolicy,
) -> _Handler:
    async def handle(request: web.Request) -> web.Response:
        return await method(request, policies, policy)

    return handle


async def _get(request: web.Request, policies: Policies, policy: NamespacePolicy) -> web.Response:
    value = policies.namespace_value(namespace_of(request), policy.stored)
    if value is None:
        value = policy.unset
    return no_content() if value is None else json_response(value)


async def _set(request: web.Request, policies: Policies, policy: NamespacePolicy) -> web.Response:
    text = (await read_text(request)).strip()
    try:
        body = json.loads(text)
    except json.JSONDecodeError:
        raise BadPolicyError(f"expected a JSON body, got {text!r}") from None
    value = policy.parse(body)
    namespace = namespace_of(request)
    stored = policies.namespace_value(namespace, policy.stored)
    if policy.merges and isinstance(stored, dict) and isinstance(value, dict):
        value = {**stored, **value}
    await policies.set_namespace_value(namespace, policy.stored, value)
    return no_content()


async def _remove(
    request: web.Request, policies: Policies, policy: NamespacePolicy
) -> web.Response:
    await policies.set_namespace_value(namespace_of(request), policy.stored, None)
    return no_content()
