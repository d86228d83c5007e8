"""The broker's TLS: one server ``ssl.SSLContext`` built from Pulsar's settings, shared
by the Pulsar protocol and HTTPS listeners, and re-read when the certificate files change.

Only the standard ``ssl`` module does the work. A certificate that changed on disk is
loaded again into the same context (``load_cert_chain``), so connections made after the
check use it while established ones keep theirs.
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
from collections.abc import Mapping
from typing import Any

from dedup_broker.config import BrokerConfig
from dedup_broker.errors import ConfigError

log = logging.getLogger(__name__)

PeerCertificate = Mapping[str, Any]
"""A verified peer certificate as ``ssl.SSLSocket.getpeercert()`` returns it."""

PROTOCOL_VERSIONS = {
    "TLSv1": ssl.TLSVersion.TLSv1,
    "TLSv1.1": ssl.TLSVersion.TLSv1_1,
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}


def tls_enabled(config: BrokerConfig) -> bool:
    return config.broker_service_port_tls is not None or config.web_service_port_tls is not None


def common_name(certificate: PeerCertificate | None) -> str | None:
    """The subject's common name (CN) of a ``getpeercert()`` dictionary."""
    if not certificate:
        return None
    for rdn in certificate.get("subject", ()):
        for key, value in rdn:
            if key == "commonName" and value:
                return str(value)
    return None


def peer_certificate(ssl_object: object) -> PeerCertificate | None:
    """The verified client certificate of a TLS connection (None: plain, or no cert)."""
    if not isinstance(ssl_object, ssl.SSLObject | ssl.SSLSocket):
        return None
    try:
        certificate = ssl_object.getpeercert()
    except ValueError:  # the handshake has not finished
        return None
    return certificate or None


class ServerTls:
    """The server context and the files it was made from."""

    def __init__(self, config: BrokerConfig) -> None:
        if not config.tls_certificate_file_path or not config.tls_key_file_path:
            raise ConfigError(
                "TLS ports need tlsCertificateFilePath and tlsKeyFilePath (PEM files)"
            )
        self.certificate_path = config.tls_certificate_file_path
        self.key_path = config.tls_key_file_path
        self.trust_path = config.tls_trust_certs_file_path
        self.check_seconds = config.tls_cert_refresh_check_duration_sec
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        _set_protocols(self.context, config.tls_protocols)
        if config.tls_ciphers.strip():
            ciphers = ":".join(c.strip() for c in config.tls_ciphers.split(",") if c.strip())
            try:
                self.context.set_ciphers(ciphers)
            except ssl.SSLError as exc:
                raise ConfigError(f"tlsCiphers: no usable cipher in {ciphers!r}: {exc}") from exc
        self.verifies_clients = bool(self.trust_path) and not config.tls_allow_insecure_connection
        if self.verifies_clients:
            self.context.verify_mode = (
                ssl.CERT_REQUIRED
                if config.tls_require_trusted_client_cert_on_connect
                else ssl.CERT_OPTIONAL
            )
        elif config.tls_require_trusted_client_cert_on_connect:
            raise ConfigError(
                "tlsRequireTrustedClientCertOnConnect needs tlsTrustCertsFilePath "
                "(and tlsAllowInsecureConnection=false)"
            )
        self._load(initial=True)
        self._mtimes = self._read_mtimes()
        self._task: asyncio.Task[None] | None = None

    @property
    def files(self) -> list[str]:
        return [p for p in (self.certificate_path, self.key_path, self.trust_path) if p]

    def _load(self, initial: bool) -> None:
        try:
            self.context.load_cert_chain(self.certificate_path, self.key_path)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(
                f"tlsCertificateFilePath/tlsKeyFilePath: cannot load "
                f"{self.certificate_path} with {self.key_path}: {exc}"
            ) from exc
        if self.verifies_clients:
            try:
                self.context.load_verify_locations(cafile=self.trust_path)
            except (OSError, ssl.SSLError) as exc:
                raise ConfigError(
                    f"tlsTrustCertsFilePath: cannot load {self.trust_path}: {exc}"
                ) from exc
        if not initial:
            log.info("TLS certificate re-read from %s", self.certificate_path)

    def _read_mtimes(self) -> dict[str, int]:
        mtimes: dict[str, int] = {}
        for path in self.files:
            try:
                mtimes[path] = os.stat(path).st_mtime_ns
            except OSError:
                mtimes[path] = -1
        return mtimes

    def refresh_if_changed(self) -> bool:
        """Load the files again if any changed since the last load; True if reloaded.

        A change that does not load (a key written before its certificate, a bad file)
        keeps the current certificate and is tried again at the next check."""
        mtimes = self._read_mtimes()
        if mtimes == self._mtimes:
            return False
        try:
            self._load(initial=False)
        except ConfigError as exc:
            log.error("keeping the current TLS certificate: %s", exc)
            return False
        self._mtimes = mtimes
        return True

    def start(self) -> None:
        """Check the files every ``tlsCertRefreshCheckDurationSec`` in the running loop."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._watch())

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self.check_seconds)
            self.refresh_if_changed()


def _set_protocols(context: ssl.SSLContext, setting: str) -> None:
    names = [n.strip() for n in setting.split(",") if n.strip()]
    if not names:
        return
    unknown = [n for n in names if n not in PROTOCOL_VERSIONS]
    if unknown:
        raise ConfigError(
            f"tlsProtocols: unknown {', '.join(unknown)} (known: {', '.join(PROTOCOL_VERSIONS)})"
        )
    versions = sorted(PROTOCOL_VERSIONS[n] for n in names)
    try:
        context.minimum_version = versions[0]
        context.maximum_version = versions[-1]
    except (ValueError, ssl.SSLError) as exc:
        raise ConfigError(f"tlsProtocols: {setting!r} is not available: {exc}") from exc


def server_tls(config: BrokerConfig) -> ServerTls | None:
    """The server TLS of ``config`` (None without TLS ports); ConfigError if unusable."""
    return ServerTls(config) if tls_enabled(config) else None
