"""The lean client's settings come from the official client's plain options."""

from __future__ import annotations

import ssl

import pytest

from connectors.wire.settings import BrokerAddress, WireSettings


def test_service_urls_name_hosts_ports_and_tls() -> None:
    assert BrokerAddress.parse_all("pulsar://a:1,b:2") == [
        BrokerAddress("a", 1, False),
        BrokerAddress("b", 2, False),
    ]
    assert BrokerAddress.parse("pulsar+ssl://broker") == BrokerAddress("broker", 6651, True)
    assert BrokerAddress.parse("pulsar://[::1]:7000") == BrokerAddress("::1", 7000, False)
    assert str(BrokerAddress("h", 1, True)) == "pulsar+ssl://h:1"
    with pytest.raises(ValueError, match="pulsar"):
        BrokerAddress.parse("http://broker:8080")


def test_credentials_and_timeouts_come_from_the_client_options() -> None:
    settings = WireSettings.from_options(
        {"auth_token": "jwt", "operation_timeout_seconds": 5, "io_threads": 4}
    )
    assert settings.credentials() == ("token", b"jwt")
    assert settings.operation_timeout == 5
    assert WireSettings.from_options({"auth_basic": "u:p"}).credentials() == ("basic", b"u:p")
    certificate = WireSettings.from_options({"tls_certificate_file": "c", "tls_key_file": "k"})
    assert certificate.credentials() == ("tls", b"")
    assert WireSettings().credentials() == ("", b"")


def test_tls_checks_the_broker_unless_told_otherwise() -> None:
    context = WireSettings.from_options({"tls_validate_hostname": True}).ssl_context()
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert not WireSettings().ssl_context().check_hostname
    insecure = WireSettings.from_options({"tls_allow_insecure_connection": True}).ssl_context()
    assert insecure.verify_mode == ssl.CERT_NONE
