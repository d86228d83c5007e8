"""Pulsar's subscription permissions: the roles a namespace admits to one subscription
name (``auth_policies.subscription_auth_roles``).

A subscription given roles may be consumed only by them (tenant admins and superusers
always may); a subscription no grant names is open to every role that may consume, as in
Pulsar. Stored in the policies table, one key per namespace.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from dedup_broker.errors import PermanentError

if TYPE_CHECKING:
    from dedup_broker.storage.api import MetadataTable

SUBSCRIPTION_PERMISSIONS_KEY = "subscription-permissions/"


class SubscriptionGrantNotFoundError(PermanentError):
    """A revocation for a subscription no grant names (HTTP 404)."""


class SubscriptionPermissions:
    def __init__(self, table: MetadataTable) -> None:
        self.table = table

    def roles(self, namespace: str) -> dict[str, list[str]]:
        """Subscription -> the roles it admits."""
        raw = self.table.get(SUBSCRIPTION_PERMISSIONS_KEY + namespace)
        stored = json.loads(raw) if raw else {}
        return {str(name): [str(r) for r in roles] for name, roles in stored.items()}

    def admits(self, namespace: str, subscription: str, role: str | None) -> bool:
        roles = self.roles(namespace).get(subscription)
        return not roles or role in roles

    async def grant(self, namespace: str, subscription: str, roles: list[str]) -> None:
        """The subscription admits ``roles`` (replacing what it admitted)."""
        granted = self.roles(namespace)
        granted[subscription] = sorted(set(roles))
        await self._put(namespace, granted)

    async def revoke(self, namespace: str, subscription: str, role: str) -> None:
        granted = self.roles(namespace)
        if subscription not in granted:
            raise SubscriptionGrantNotFoundError(
                f"no permission is granted on subscription {subscription} of {namespace}"
            )
        granted[subscription] = [r for r in granted[subscription] if r != role]
        await self._put(namespace, granted)

    async def _put(self, namespace: str, granted: dict[str, list[str]]) -> None:
        body = json.dumps(granted, sort_keys=True).encode()
        await self.table.put(SUBSCRIPTION_PERMISSIONS_KEY + namespace, body)
