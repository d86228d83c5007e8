"""Credentials and TLS settings of the connectors' Pulsar clients.

The official client's authentication objects cannot be pickled, and Spark ships every
task's settings to executors by pickling them; so the settings travel as plain values and
each executor builds its client from them (``new_client``).
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pulsar

DATA_SOURCE_OPTIONS = {
    "authToken": "auth_token",
    "authBasic": "auth_basic",
    "tlsTrustCertsFilePath": "tls_trust_certs_file_path",
    "tlsCertificateFile": "tls_certificate_file",
    "tlsKeyFile": "tls_key_file",
    "tlsValidateHostname": "tls_validate_hostname",
}
"""Data source option -> client option."""


@dataclass(frozen=True)
class ClientSecurity:
    auth_token: str = ""
    """A JWT (``pulsar.AuthenticationToken``)."""
    auth_basic: str = ""
    """``user:password`` (``pulsar.AuthenticationBasic``)."""
    tls_trust_certs_file_path: str = ""
    tls_certificate_file: str = ""
    """With ``tls_key_file``: a TLS client certificate (``pulsar.AuthenticationTLS``)."""
    tls_key_file: str = ""
    tls_validate_hostname: bool = False

    @classmethod
    def from_options(cls, get: Callable[[str], str | None]) -> ClientSecurity:
        """From a data source's options (``authToken``, ``tlsTrustCertsFilePath``, ...)."""
        values: dict[str, Any] = {}
        for option, field_name in DATA_SOURCE_OPTIONS.items():
            value = get(option)
            if value is not None:
                values[field_name] = (
                    value.lower() == "true" if field_name == "tls_validate_hostname" else value
                )
        return cls(**values)

    def client_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of ``pulsar.Client``."""
        kwargs: dict[str, Any] = {}
        if self.auth_token:
            kwargs["authentication"] = pulsar.AuthenticationToken(self.auth_token)
        elif self.auth_basic:
            user, _, password = self.auth_basic.partition(":")
            kwargs["authentication"] = pulsar.AuthenticationBasic(user, password)
        elif self.tls_certificate_file and self.tls_key_file:
            kwargs["authentication"] = pulsar.AuthenticationTLS(
                self.tls_certificate_file, self.tls_key_file
            )
        if self.tls_trust_certs_file_path:
            kwargs["tls_trust_certs_file_path"] = self.tls_trust_certs_file_path
        if self.tls_validate_hostname:
            kwargs["tls_validate_hostname"] = True
        return kwargs

    def http_headers(self) -> dict[str, str]:
        """The ``Authorization`` header of admin calls."""
        if self.auth_token:
            return {"Authorization": f"Bearer {self.auth_token}"}
        if self.auth_basic:
            return {"Authorization": "Basic " + base64.b64encode(self.auth_basic.encode()).decode()}
        return {}


def new_client(service_url: str, options: Mapping[str, Any]) -> pulsar.Client:
    """A client from plain options: ``ClientSecurity``'s fields (``auth_token``,
    ``auth_basic``, ``tls_certificate_file``/``tls_key_file``, ...) become the client's
    authentication; the other options are ``pulsar.Client`` keyword arguments."""
    fields = set(ClientSecurity.__dataclass_fields__)
    security = ClientSecurity(**{k: v for k, v in options.items() if k in fields})
    rest = {k: v for k, v in options.items() if k not in fields}
    rest.setdefault("logger", logging.getLogger("pulsar"))
    return pulsar.Client(service_url, **rest, **security.client_kwargs())
