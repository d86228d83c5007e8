"""The server TLS context: settings, client-certificate verification, certificate
re-reading; the tls authentication provider; TLS ports in member tags and settings."""

from __future__ import annotations

import asyncio
import os
import shutil
import ssl
from pathlib import Path

import pytest

from dedup_broker.cluster.membership import BrokerAddress
from dedup_broker.config import BrokerConfig
from dedup_broker.errors import ConfigError
from dedup_broker.security.authentication import AuthenticationError, Authenticator
from dedup_broker.security.tls import ServerTls, common_name, server_tls
from tests.tls_certificates import Certificates, make_certificates

TLS_PROVIDER = "org.apache.pulsar.broker.authentication.AuthenticationProviderTls"
ALICE = {"subject": ((("countryName", "NL"),), (("commonName", "alice"),))}


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("certs"))


def tls_config(certs: Certificates, **settings: object) -> BrokerConfig:
    base: dict[str, object] = {
        "broker_service_port_tls": 0,
        "tls_certificate_file_path": str(certs.server_cert),
        "tls_key_file_path": str(certs.server_key),
    }
    return BrokerConfig().with_overrides(**(base | settings))


def test_no_tls_ports_no_context() -> None:
    assert server_tls(BrokerConfig()) is None


def test_the_context_follows_the_settings(certs: Certificates) -> None:
    plain = ServerTls(tls_config(certs))
    assert plain.context.verify_mode == ssl.CERT_NONE
    optional = ServerTls(tls_config(certs, tls_trust_certs_file_path=str(certs.ca)))
    assert optional.context.verify_mode == ssl.CERT_OPTIONAL
    required = ServerTls(
        tls_config(
            certs,
            tls_trust_certs_file_path=str(certs.ca),
            tls_require_trusted_client_cert_on_connect=True,
        )
    )
    assert required.context.verify_mode == ssl.CERT_REQUIRED
    insecure = ServerTls(
        tls_config(
            certs, tls_trust_certs_file_path=str(certs.ca), tls_allow_insecure_connection=True
        )
    )
    assert insecure.context.verify_mode == ssl.CERT_NONE
    pinned = ServerTls(tls_config(certs, tls_protocols="TLSv1.3"))
    assert pinned.context.minimum_version == ssl.TLSVersion.TLSv1_3
    ranged = ServerTls(tls_config(certs, tls_protocols="TLSv1.3, TLSv1.2"))
    assert ranged.context.minimum_version == ssl.TLSVersion.TLSv1_2
    assert ranged.context.maximum_version == ssl.TLSVersion.TLSv1_3
    ServerTls(tls_config(certs, tls_ciphers="ECDHE-ECDSA-AES128-GCM-SHA256"))


def test_bad_settings_fail_at_start(certs: Certificates, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="tlsCertificateFilePath and tlsKeyFilePath"):
        server_tls(BrokerConfig().with_overrides(web_service_port_tls=8443))
    with pytest.raises(ConfigError, match="cannot load"):
        ServerTls(tls_config(certs, tls_key_file_path=str(tmp_path / "missing.key")))
    with pytest.raises(ConfigError, match="cannot load"):
        ServerTls(tls_config(certs, tls_key_file_path=str(certs.client_key)))  # not the pair
    with pytest.raises(ConfigError, match="tlsTrustCertsFilePath: cannot load"):
        ServerTls(tls_config(certs, tls_trust_certs_file_path=str(tmp_path / "none.pem")))
    with pytest.raises(ConfigError, match="tlsProtocols: unknown SSLv3"):
        ServerTls(tls_config(certs, tls_protocols="SSLv3"))
    with pytest.raises(ConfigError, match="tlsCiphers"):
        ServerTls(tls_config(certs, tls_ciphers="NO-SUCH-CIPHER"))
    with pytest.raises(ConfigError, match="needs tlsTrustCertsFilePath"):
        ServerTls(tls_config(certs, tls_require_trusted_client_cert_on_connect=True))


def test_ports_can_be_switched_off() -> None:
    config = BrokerConfig.load(
        environ={}, overrides={"brokerServicePort": "none", "brokerServicePortTls": "6651"}
    )
    assert (config.broker_service_port, config.broker_service_port_tls) == (None, 6651)
    assert (
        BrokerConfig.load(environ={"DEDUP_BROKER_WEB_SERVICE_PORT_TLS": ""}).web_service_port_tls
        is None
    )
    assert BrokerConfig().broker_service_port == 6650
    with pytest.raises(ConfigError, match="both off"):
        BrokerConfig.load(environ={}, overrides={"brokerServicePort": ""})
    with pytest.raises(ConfigError, match="both off"):
        BrokerConfig.load(environ={}, overrides={"webServicePort": "none"})


async def handshake(port: int, cafile: Path) -> str:
    """The common name of the server certificate a client trusting ``cafile`` sees."""
    client = ssl.create_default_context(cafile=str(cafile))
    _, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=client, server_hostname="localhost"
    )
    ssl_object = writer.get_extra_info("ssl_object")
    name = common_name(ssl_object.getpeercert())
    writer.close()
    return name or ""


def test_a_changed_certificate_is_used_by_new_connections(
    certs: Certificates, tmp_path: Path
) -> None:
    cert, key = tmp_path / "server.pem", tmp_path / "server.key"
    shutil.copy(certs.server_cert, cert)
    shutil.copy(certs.server_key, key)
    tls = ServerTls(
        tls_config(certs, tls_certificate_file_path=str(cert), tls_key_file_path=str(key))
    )
    assert not tls.refresh_if_changed()

    async def main() -> None:
        server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0, ssl=tls.context)
        port = server.sockets[0].getsockname()[1]
        try:
            assert await handshake(port, certs.ca) == "localhost"
            with pytest.raises(ssl.SSLCertVerificationError):
                await handshake(port, certs.other_ca)
            # A half-written change (the key first) keeps the current certificate.
            shutil.copy(certs.other_server_key, key)
            os.utime(key, ns=(1, 1))
            assert not tls.refresh_if_changed()
            assert await handshake(port, certs.ca) == "localhost"
            shutil.copy(certs.other_server_cert, cert)
            assert tls.refresh_if_changed()
            await handshake(port, certs.other_ca)
            with pytest.raises(ssl.SSLCertVerificationError):
                await handshake(port, certs.ca)
        finally:
            server.close()
            await server.wait_closed()

    asyncio.run(main())


def test_the_refresh_runs_in_the_loop(certs: Certificates) -> None:
    tls = ServerTls(tls_config(certs, tls_cert_refresh_check_duration_sec=1))
    checks: list[bool] = []
    tls.refresh_if_changed = lambda: checks.append(True) or False  # type: ignore[method-assign]

    async def main() -> None:
        tls.start()
        await asyncio.sleep(1.3)
        await tls.stop()

    asyncio.run(main())
    assert checks == [True]


def tls_authenticator(certs: Certificates, **settings: object) -> Authenticator:
    base: dict[str, object] = {
        "authentication_enabled": True,
        "authentication_providers": TLS_PROVIDER,
        "tls_trust_certs_file_path": str(certs.ca),
    }
    return Authenticator(tls_config(certs, **(base | settings)))


def test_the_tls_provider_takes_the_common_name(certs: Certificates) -> None:
    auth = tls_authenticator(certs)
    assert auth.authenticate("tls", b"", ALICE) == "alice"
    assert auth.authenticate_http({}, ALICE) == "alice"
    with pytest.raises(AuthenticationError, match="no trusted TLS client certificate"):
        auth.authenticate("tls", b"", None)
    with pytest.raises(AuthenticationError, match="no common name"):
        auth.authenticate("tls", b"", {"subject": ((("organizationName", "x"),),)})
    with pytest.raises(AuthenticationError, match="required"):
        auth.authenticate_http({})
    with pytest.raises(AuthenticationError, match="'token' is not enabled"):
        auth.authenticate("token", b"t", ALICE)


def test_the_tls_provider_next_to_tokens(certs: Certificates) -> None:
    auth = tls_authenticator(
        certs, authentication_providers="tls,token", token_secret_key="data:;base64,a2V5"
    )
    assert set(auth.providers) == {"tls", "token"}
    assert auth.authenticate("tls", b"", ALICE) == "alice"


def test_the_tls_provider_needs_verified_certificates(certs: Certificates) -> None:
    with pytest.raises(ConfigError, match="tls provider needs tlsTrustCertsFilePath"):
        tls_authenticator(certs, tls_trust_certs_file_path="")
    with pytest.raises(ConfigError, match="tls provider needs tlsTrustCertsFilePath"):
        tls_authenticator(certs, tls_allow_insecure_connection=True)
    with pytest.raises(ConfigError, match="needs a TLS port"):
        tls_authenticator(certs, broker_service_port_tls=None)


def test_member_tags_carry_tls_ports() -> None:
    address = BrokerAddress("10.0.0.7", 6650, 8080, "a1b2c3", 6651, 8443)
    tag = address.member_tag()
    assert tag == "dedup-broker@10.0.0.7|6650|8080|a1b2c3;tls=6651;webtls=8443"
    assert BrokerAddress.from_member_tag(tag) == address
    assert address.service_url_tls == "pulsar+ssl://10.0.0.7:6651"
    assert address.web_url_tls == "https://10.0.0.7:8443"
    old = BrokerAddress.from_member_tag("dedup-broker@10.0.0.7|6650|8080|a1b2c3")
    assert old == BrokerAddress("10.0.0.7", 6650, 8080, "a1b2c3")
    assert old is not None and old.service_url_tls is None
    tls_only = BrokerAddress("h", 0, 0, "i", 6651, 8443)
    assert BrokerAddress.from_member_tag(tls_only.member_tag()) == tls_only
    assert (tls_only.service_url, tls_only.web_url) == ("pulsar+ssl://h:6651", "https://h:8443")
    assert tls_only.broker_id == "h:8443"
    assert not tls_only.same_endpoint(BrokerAddress("h", 0, 0, "i", 6652))
    assert BrokerAddress.from_member_tag("dedup-broker@h|1|2|i;tls=x") is None
