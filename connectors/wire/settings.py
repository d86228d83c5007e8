"""The wire client's settings, from the same plain options as the official client's.

Executors get their settings pickled, as plain values (``connectors.client_security``);
the wire client reads the options it understands (credentials, TLS, timeouts) and ignores
the official client's others (``io_threads``, ``logger``, ...).
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from connectors.client_security import ClientSecurity

DEFAULT_OPERATION_TIMEOUT_SECONDS = 30.0
DEFAULT_CONNECTION_TIMEOUT_SECONDS = 10.0


@dataclass(frozen=True)
class BrokerAddress:
    """Where to open a connection: host, port and whether it speaks TLS."""

    host: str
    port: int
    tls: bool

    @classmethod
    def parse(cls, url: str) -> BrokerAddress:
        """``pulsar://host:6650`` or ``pulsar+ssl://host:6651`` (the first host of a list)."""
        return cls.parse_all(url)[0]

    @classmethod
    def parse_all(cls, url: str) -> list[BrokerAddress]:
        """Every host of ``pulsar://host1:6650,host2:6650`` (a cluster's service URL)."""
        parts = urlsplit(url)
        if parts.scheme not in ("pulsar", "pulsar+ssl"):
            raise ValueError(f"service URL {url!r} is neither pulsar:// nor pulsar+ssl://")
        tls = parts.scheme == "pulsar+ssl"
        addresses = []
        for host_port in parts.netloc.split(","):
            host, _, port = host_port.rpartition(":")
            if not host:
                host, port = host_port, ""
            default = 6651 if tls else 6650
            addresses.append(cls(host.strip("[]"), int(port) if port else default, tls))
        return addresses

    def __str__(self) -> str:
        return f"{'pulsar+ssl' if self.tls else 'pulsar'}://{self.host}:{self.port}"


@dataclass(frozen=True)
class WireSettings:
    """Timeouts, credentials and TLS of one client."""

    operation_timeout: float = DEFAULT_OPERATION_TIMEOUT_SECONDS
    """Seconds a lookup, a producer's or a reader's creation may take, retries included."""
    connection_timeout: float = DEFAULT_CONNECTION_TIMEOUT_SECONDS
    security: ClientSecurity = field(default_factory=ClientSecurity)
    tls_allow_insecure_connection: bool = False

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> WireSettings:
        """From ``new_client``'s options: ``ClientSecurity``'s fields,
        ``operation_timeout_seconds``, ``connection_timeout_ms``,
        ``tls_allow_insecure_connection``."""
        names = set(ClientSecurity.__dataclass_fields__)
        security = ClientSecurity(**{k: v for k, v in options.items() if k in names})
        return cls(
            operation_timeout=float(
                options.get("operation_timeout_seconds", DEFAULT_OPERATION_TIMEOUT_SECONDS)
            ),
            connection_timeout=float(
                options.get("connection_timeout_ms", DEFAULT_CONNECTION_TIMEOUT_SECONDS * 1000)
            )
            / 1000,
            security=security,
            tls_allow_insecure_connection=bool(options.get("tls_allow_insecure_connection")),
        )

    def credentials(self) -> tuple[str, bytes]:
        """CONNECT's ``auth_method_name`` and ``auth_data`` (empty: anonymous).

        A TLS client certificate proves itself in the handshake; CONNECT only names it.
        """
        security = self.security
        if security.auth_token:
            return "token", security.auth_token.encode()
        if security.auth_basic:
            return "basic", security.auth_basic.encode()
        if security.tls_certificate_file and security.tls_key_file:
            return "tls", b""
        return "", b""

    def ssl_context(self) -> ssl.SSLContext:
        """The context of ``pulsar+ssl://`` connections, as the official client sets it up:
        the broker's certificate checked against ``tls_trust_certs_file_path`` (or the
        system's CAs), its host name only with ``tls_validate_hostname``."""
        security = self.security
        context = ssl.create_default_context(
            cafile=security.tls_trust_certs_file_path or None,
        )
        context.check_hostname = security.tls_validate_hostname
        if self.tls_allow_insecure_connection:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if security.tls_certificate_file and security.tls_key_file:
            context.load_cert_chain(security.tls_certificate_file, security.tls_key_file)
        return context
