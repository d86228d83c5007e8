"""The credentials brokers present to each other, in Pulsar's parameter forms, and how
they verify each other's HTTPS."""

from __future__ import annotations

import base64
import ssl
from pathlib import Path

import pytest

from dedup_broker.config import BrokerConfig
from dedup_broker.errors import ConfigError
from dedup_broker.security.broker_client import (
    broker_client_credentials,
    broker_client_headers,
    broker_client_ssl_context,
    broker_client_web_url,
)
from tests.tls_certificates import make_certificates


def headers(plugin: str, parameters: str) -> dict[str, str]:
    return broker_client_headers(
        BrokerConfig().with_overrides(
            broker_client_authentication_plugin=plugin,
            broker_client_authentication_parameters=parameters,
        )
    )


def test_token_forms(tmp_path: Path) -> None:
    stored = tmp_path / "broker.jwt"
    stored.write_text("abc.def.ghi\n")
    for parameters in ("token:abc.def.ghi", f"file://{stored}", '{"token": "abc.def.ghi"}'):
        assert headers("token", parameters) == {"Authorization": "Bearer abc.def.ghi"}
    plugin = "org.apache.pulsar.client.impl.auth.AuthenticationToken"
    assert headers(plugin, "token:x") == {"Authorization": "Bearer x"}


def test_basic_forms() -> None:
    expected = "Basic " + base64.b64encode(b"broker:pw").decode()
    assert headers("basic", '{"userId": "broker", "password": "pw"}')["Authorization"] == expected
    assert headers("basic", "broker:pw")["Authorization"] == expected


def test_nothing_without_a_plugin() -> None:
    assert broker_client_headers(BrokerConfig()) == {}
    assert broker_client_credentials(BrokerConfig()) is None


def test_connect_credentials_of_the_peer_watch() -> None:
    def credentials(plugin: str, parameters: str) -> tuple[str, bytes] | None:
        return broker_client_credentials(
            BrokerConfig().with_overrides(
                broker_client_authentication_plugin=plugin,
                broker_client_authentication_parameters=parameters,
            )
        )

    assert credentials("token", "token:abc") == ("token", b"abc")
    assert credentials("basic", "broker:pw") == ("basic", b"broker:pw")


@pytest.mark.parametrize(
    ("plugin", "parameters", "reason"),
    [
        ("kerberos", "x", "unknown plugin"),
        ("token", "", "no token"),
        ("token", "file:///nonexistent/broker.jwt", "No such file"),
        ("basic", "broker", "a user and a password"),
        ("basic", "{not json", "brokerClientAuthenticationParameters"),
    ],
)
def test_bad_settings_are_refused(plugin: str, parameters: str, reason: str) -> None:
    with pytest.raises(ConfigError, match=reason):
        headers(plugin, parameters)


def test_https_to_brokers_trusts_the_broker_client_ca_or_else_the_tls_one(tmp_path: Path) -> None:
    certificates = make_certificates(tmp_path)
    base = BrokerConfig().with_overrides(tls_trust_certs_file_path=str(certificates.ca))
    other = base.with_overrides(broker_client_trust_certs_file_path=str(certificates.other_ca))
    for config, trusted in ((base, "dedup-broker test CA"), (other, "an unrelated CA")):
        context = broker_client_ssl_context(config)
        assert context.verify_mode is ssl.CERT_REQUIRED and context.check_hostname
        assert [ca["subject"] for ca in context.get_ca_certs()] == [((("commonName", trusted),),)]
    with_certificate = base.with_overrides(
        broker_client_certificate_file_path=str(certificates.client_cert),
        broker_client_key_file_path=str(certificates.client_key),
    )
    broker_client_ssl_context(with_certificate)
    missing = base.with_overrides(broker_client_trust_certs_file_path=str(tmp_path / "none.pem"))
    with pytest.raises(ConfigError, match="brokerClientTrustCertsFilePath"):
        broker_client_ssl_context(missing)


def test_tls_plugin_presents_a_client_certificate_and_no_header(tmp_path: Path) -> None:
    """Pulsar's ``AuthenticationTls``: the certificate from brokerClientCertificateFilePath
    (or the plugin's tlsCertFile/tlsKeyFile parameters); calls go to the HTTPS port."""
    certificates = make_certificates(tmp_path)
    plugin = "org.apache.pulsar.client.impl.auth.AuthenticationTls"
    base = BrokerConfig().with_overrides(
        broker_client_authentication_plugin=plugin,
        tls_trust_certs_file_path=str(certificates.ca),
    )
    by_settings = base.with_overrides(
        broker_client_certificate_file_path=str(certificates.client_cert),
        broker_client_key_file_path=str(certificates.client_key),
    )
    by_parameters = base.with_overrides(
        broker_client_authentication_parameters=(
            f"tlsCertFile:{certificates.client_cert},tlsKeyFile:{certificates.client_key}"
        )
    )
    for config in (by_settings, by_parameters):
        assert broker_client_headers(config) == {}
        # The peers' watch connections carry no CONNECT credentials: a certificate is none.
        assert broker_client_credentials(config) is None
        broker_client_ssl_context(config)
        assert broker_client_web_url(config, "http://b:8080", "https://b:8443") == (
            "https://b:8443"
        )
    assert broker_client_web_url(config, "http://b:8080", None) == "http://b:8080"
    assert broker_client_web_url(BrokerConfig(), "http://b:8080", "https://b:8443") == (
        "http://b:8080"
    )
    with pytest.raises(ConfigError, match="needs a client certificate"):
        broker_client_ssl_context(base)
