"""Pulsar's ``advertisedListeners``: named addresses of a broker (``internal``, ``external``,
...) so that clients on different networks are sent to the address they can reach. A
client names its listener (``listenerName``) and lookups answer with that listener's URLs.

Each broker announces its listeners with its registry record in the policies table;
lookups of topics another broker owns read them from there.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dedup_broker.cluster.membership import BrokerAddress
from dedup_broker.config import BrokerConfig
from dedup_broker.errors import ConfigError, PermanentError
from dedup_broker.storage.api import broker_key

if TYPE_CHECKING:
    from dedup_broker.storage.api import MetadataTable


class UnknownListenerError(PermanentError):
    """A lookup names a listener the owning broker does not advertise."""


@dataclass(frozen=True)
class ListenerUrls:
    service_url: str | None = None
    service_url_tls: str | None = None

    def to_json(self) -> dict[str, str]:
        urls = {"pulsar": self.service_url, "pulsar+ssl": self.service_url_tls}
        return {scheme: url for scheme, url in urls.items() if url}


def parse_advertised_listeners(text: str) -> dict[str, ListenerUrls]:
    """``name:pulsar://host:port,name:pulsar+ssl://host:port,...`` (Pulsar's format)."""
    urls: dict[str, dict[str, str]] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, _, url = item.partition(":")
        scheme, sep, rest = url.partition("://")
        host, _, port = rest.rpartition(":")
        if not name or not sep or scheme not in ("pulsar", "pulsar+ssl") or not host:
            raise ConfigError(
                f"advertisedListeners: {item!r} is not name:pulsar://host:port "
                "or name:pulsar+ssl://host:port"
            )
        if not port.isdigit():
            raise ConfigError(f"advertisedListeners: {item!r} has no port")
        if scheme in urls.setdefault(name, {}):
            raise ConfigError(f"advertisedListeners: listener {name!r} has two {scheme} URLs")
        urls[name][scheme] = url
    return {
        name: ListenerUrls(schemes.get("pulsar"), schemes.get("pulsar+ssl"))
        for name, schemes in urls.items()
    }


def registry_key(address: BrokerAddress) -> str:
    """The key of a broker's registry record (its plain port, else its TLS port)."""
    return broker_key(address.host, address.broker_port or address.broker_port_tls or 0)


class AdvertisedListeners:
    def __init__(self, config: BrokerConfig, registry: MetadataTable) -> None:
        self.own = parse_advertised_listeners(config.advertised_listeners)
        self._registry = registry

    async def urls(self, owner: BrokerAddress | None, name: str) -> ListenerUrls:
        """Listener ``name`` of ``owner`` (None: this broker)."""
        if owner is None:
            found = self.own.get(name)
        else:
            found = self._announced(owner, name)
            if found is None:  # a broker that started meanwhile
                await self._registry.refresh()
                found = self._announced(owner, name)
        if found is None:
            raise UnknownListenerError(f"the broker serving this topic has no listener {name!r}")
        return found

    def _announced(self, owner: BrokerAddress, name: str) -> ListenerUrls | None:
        raw = self._registry.get(registry_key(owner))
        if raw is None:
            return None
        try:
            listeners = json.loads(raw).get("listeners", {})
            urls = listeners.get(name)
        except (ValueError, AttributeError):
            return None
        if not isinstance(urls, dict):
            return None
        return ListenerUrls(urls.get("pulsar"), urls.get("pulsar+ssl"))
