"""Pulsar's dynamic broker configuration: values set through the admin API
(``POST /admin/v2/brokers/configuration/{name}/{value}``), shared by every broker of the
cluster, kept in the policies table as Pulsar keeps them in its metadata store.

Any setting Pulsar or dedup-broker knows may be given a value (a name neither knows is
refused as Pulsar refuses a setting that is not dynamic). The values are stored and
listed, as given; they change nothing in a running broker: the settings it started with
apply (``GET .../configuration/runtime``).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from dedup_broker.config import BrokerConfig
from dedup_broker.errors import PermanentError
from dedup_broker.pulsar_settings import PULSAR_ONLY_SETTINGS, is_pulsar_only

if TYPE_CHECKING:
    from dedup_broker.storage.api import MetadataTable

__all__ = ["DynamicConfiguration", "NotDynamicError"]

DYNAMIC_CONFIGURATION_KEY = "broker-dynamic-configuration"


class NotDynamicError(PermanentError):
    """A setting that cannot be given a value at run time (Pulsar: 412)."""


class DynamicConfiguration:
    def __init__(self, table: MetadataTable, config: BrokerConfig) -> None:
        self.table = table
        self._own_names = frozenset(config.as_pulsar_names())

    def names(self) -> list[str]:
        """The settings that may be given a value."""
        return sorted(self._own_names | PULSAR_ONLY_SETTINGS)

    def values(self) -> dict[str, str]:
        """The values given, by setting."""
        raw = self.table.get(DYNAMIC_CONFIGURATION_KEY)
        return {str(k): str(v) for k, v in json.loads(raw).items()} if raw else {}

    async def update(self, name: str, value: str) -> None:
        if name not in self._own_names and not is_pulsar_only(name):
            raise NotDynamicError("Can't update non-dynamic configuration")
        await self.table.refresh()  # values other brokers gave
        await self._put({**self.values(), name: value})

    async def delete(self, name: str) -> None:
        await self.table.refresh()
        given = self.values()
        if name not in given:
            raise NotDynamicError("Can't delete non-dynamic configuration")
        del given[name]
        await self._put(given)

    async def _put(self, given: dict[str, str]) -> None:
        body = json.dumps(given, sort_keys=True).encode()
        await self.table.put(DYNAMIC_CONFIGURATION_KEY, body)
