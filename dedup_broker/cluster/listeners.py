"""Pulsar's ``advertisedListeners``: named addresses of a broker (``internal``, ``external``,
...) so that clients on different networks are sent to the address they can reach. A
client names its listener (``listenerName``) and lookups answer with that listener's URLs.

Every broker has the internal listener (``internal``, Pulsar's default
``internalListenerName``), as Pulsar builds it: the broker's advertised address with the
ports it serves, plain and TLS; URLs that ``advertisedListeners`` gives for ``internal``
take the place of those. So a lookup names the owner's TLS URL whenever the owner has a
TLS port, with or without ``advertisedListeners``, and a client naming ``internal`` is
answered by every broker. A lookup naming no listener is answered with the internal one.

Each broker announces its listeners with its registry record in the policies table;
lookups of topics another broker owns read them from there.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dedup_broker.cluster.membership import BrokerAddress
from dedup_broker.config import BrokerConfig
from dedup_broker.errors import ConfigError, PermanentError
from dedup_broker.storage.api import broker_key

if TYPE_CHECKING:
    from dedup_broker.storage.api import MetadataTable


log = logging.getLogger(__name__)

INTERNAL_LISTENER = "internal"
"""Pulsar's default ``internalListenerName``: the listener of the broker's own address."""


class UnknownListenerError(PermanentError):
    """A lookup names a listener the owning broker does not advertise."""


class ListenerWithoutTlsError(UnknownListenerError):
    """A TLS client names a listener that has no ``pulsar+ssl`` URL: an empty URL in the
    answer would fail in the client with no word of why."""


@dataclass(frozen=True)
class ListenerUrls:
    service_url: str | None = None
    service_url_tls: str | None = None

    def to_json(self) -> dict[str, str]:
        urls = {"pulsar": self.service_url, "pulsar+ssl": self.service_url_tls}
        return {scheme: url for scheme, url in urls.items() if url}

    def completed_by(self, other: ListenerUrls) -> ListenerUrls:
        """These URLs, each one missing taken from ``other``."""
        return ListenerUrls(
            self.service_url or other.service_url, self.service_url_tls or other.service_url_tls
        )

    @property
    def lookup_url(self) -> str | None:
        """The ``brokerServiceUrl`` of a lookup: the plain URL, or the TLS one when the
        listener has no plain URL (a broker without a plain port)."""
        return self.service_url or self.service_url_tls

    def for_client(self, name: str, tls: bool) -> ListenerUrls:
        """These URLs for a client on ``tls`` or not; a TLS client is refused a listener
        without a TLS URL (``ListenerWithoutTlsError``)."""
        if tls and not self.service_url_tls:
            raise ListenerWithoutTlsError(
                f"listener {name!r} of the broker serving this topic has no pulsar+ssl URL "
                "(advertisedListeners) for this TLS client"
            )
        return self


def address_urls(address: BrokerAddress) -> ListenerUrls:
    """The URLs of a broker's advertised address and the ports it serves."""
    plain = f"pulsar://{address.host}:{address.broker_port}" if address.broker_port else None
    return ListenerUrls(plain, address.service_url_tls)


def broker_listeners(
    explicit: dict[str, ListenerUrls], address: BrokerAddress
) -> dict[str, ListenerUrls]:
    """A broker's listeners as Pulsar builds them: those given, and the internal one made
    of its address and ports, where the URLs given for ``internal`` come first."""
    given = explicit.get(INTERNAL_LISTENER, ListenerUrls())
    return {**explicit, INTERNAL_LISTENER: given.completed_by(address_urls(address))}


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
        self._explicit = parse_advertised_listeners(config.advertised_listeners)
        configured = BrokerAddress(
            config.advertised_address,
            config.broker_service_port or 0,
            config.web_service_port or 0,
            broker_port_tls=config.broker_service_port_tls,
            web_port_tls=config.web_service_port_tls,
        )
        self.own = broker_listeners(self._explicit, configured)
        """This broker's listeners (with the configured ports until :meth:`bind`)."""
        self._registry = registry

    def bind(self, address: BrokerAddress) -> None:
        """This broker's listeners, once its ports are bound: the internal one added."""
        self.own = broker_listeners(self._explicit, address)
        if address.broker_port_tls is not None:
            plain_only = sorted(n for n, urls in self.own.items() if not urls.service_url_tls)
            if plain_only:
                log.warning(
                    "advertisedListeners: %s have no pulsar+ssl URL; TLS clients naming "
                    "them are refused (this broker has brokerServicePortTls)",
                    ", ".join(plain_only),
                )

    async def urls(self, owner: BrokerAddress | None, name: str | None) -> ListenerUrls:
        """Listener ``name`` of ``owner`` (None: this broker); no name: the internal one."""
        name = name or INTERNAL_LISTENER
        if owner is None:
            found = self.own.get(name)
        elif name == INTERNAL_LISTENER:
            # Every broker has it: what the owner announced, else (an announcement not
            # read yet, a broker of a version that announced only the listeners given)
            # its address and ports, as the owners group names them.
            announced = self._announced(owner, name) or ListenerUrls()
            found = announced.completed_by(address_urls(owner))
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
