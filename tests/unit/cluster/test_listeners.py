"""Pulsar's advertisedListeners format."""

from __future__ import annotations

import pytest

from dedup_broker.cluster.listeners import ListenerUrls, parse_advertised_listeners
from dedup_broker.errors import ConfigError


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
