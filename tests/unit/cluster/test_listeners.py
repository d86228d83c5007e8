"""Pulsar's advertisedListeners format, and each broker's listeners as lookups read them."""

from __future__ import annotations

import pytest

from dedup_broker.cluster.listeners import (
    AdvertisedListeners,
    ListenerUrls,
    ListenerWithoutTlsError,
    UnknownListenerError,
    broker_listeners,
    parse_advertised_listeners,
    registry_key,
)
from dedup_broker.cluster.membership import BrokerAddress
from dedup_broker.config import BrokerConfig
from dedup_broker.errors import ConfigError
from dedup_broker.storage.api import broker_record
from harness.memory_table import MemoryTable


def test_named_listeners_with_plain_and_tls_urls() -> None:
    parsed = parse_advertised_listeners(
        "internal:pulsar://10.0.0.5:6650, internal:pulsar+ssl://10.0.0.5:6651,"
        "external:pulsar+ssl://broker-1.example.com:443"
    )
    assert parsed == {
        "internal": ListenerUrls("pulsar://10.0.0.5:6650", "pulsar+ssl://10.0.0.5:6651"),
        "external": ListenerUrls(None, "pulsar+ssl://broker-1.example.com:443"),
    }
    assert parse_advertised_listeners("") == {}


@pytest.mark.parametrize(
    "text",
    [
        "internal",
        "internal:http://h:80",
        "internal:pulsar://host",
        "internal:pulsar://h:1,internal:pulsar://h:2",
    ],
)
def test_malformed_listeners_are_refused(text: str) -> None:
    with pytest.raises(ConfigError, match="advertisedListeners"):
        parse_advertised_listeners(text)


def address(port: int, tls: int | None = None, host: str = "b1") -> BrokerAddress:
    return BrokerAddress(host, port, 8080, "i", tls, None)


def test_the_internal_listener_is_the_address_with_its_ports() -> None:
    """Pulsar's internal listener: built from the ports, URLs given for it come first."""
    assert broker_listeners({}, address(6650, 6651)) == {
        "internal": ListenerUrls("pulsar://b1:6650", "pulsar+ssl://b1:6651")
    }
    given = parse_advertised_listeners(
        "internal:pulsar://10.0.0.5:6650,external:pulsar://broker-1.example.com:6650"
    )
    listeners = broker_listeners(given, address(6650, 6651))
    assert listeners["internal"] == ListenerUrls("pulsar://10.0.0.5:6650", "pulsar+ssl://b1:6651")
    assert listeners["external"] == ListenerUrls("pulsar://broker-1.example.com:6650", None)
    tls_only = broker_listeners({}, address(0, 6651))["internal"]
    assert tls_only == ListenerUrls(None, "pulsar+ssl://b1:6651")
    assert tls_only.lookup_url == "pulsar+ssl://b1:6651"


def test_a_tls_client_is_refused_a_listener_without_a_tls_url() -> None:
    plain = ListenerUrls("pulsar://h:6650", None)
    assert plain.for_client("edge", tls=False) is plain
    with pytest.raises(ListenerWithoutTlsError, match=r"'edge'.*no pulsar\+ssl URL"):
        plain.for_client("edge", tls=True)


async def test_lookups_read_the_owners_listeners_and_complete_its_internal_one() -> None:
    """Another broker's listeners come from its announcement; its internal one is
    completed from its address and ports even where it announced none (an older
    broker, a record not read yet)."""
    table = MemoryTable()
    config = BrokerConfig(advertised_address="b1", broker_service_port_tls=6651)
    listeners = AdvertisedListeners(config, table)
    listeners.bind(address(6650, 6651))
    assert await listeners.urls(None, None) == ListenerUrls(
        "pulsar://b1:6650", "pulsar+ssl://b1:6651"
    )
    owner = address(7650, 7651, host="b2")
    assert await listeners.urls(owner, "internal") == ListenerUrls(
        "pulsar://b2:7650", "pulsar+ssl://b2:7651"
    )
    with pytest.raises(UnknownListenerError, match="no listener 'external'"):
        await listeners.urls(owner, "external")
    announced = {
        "internal": {"pulsar": "pulsar://10.0.0.2:7650"},
        "external": {"pulsar+ssl": "pulsar+ssl://b2.example.com:443"},
    }
    await table.put(registry_key(owner), broker_record("http://b2:8080", "b2", announced))
    assert await listeners.urls(owner, None) == ListenerUrls(
        "pulsar://10.0.0.2:7650", "pulsar+ssl://b2:7651"
    )
    assert await listeners.urls(owner, "external") == ListenerUrls(
        None, "pulsar+ssl://b2.example.com:443"
    )
