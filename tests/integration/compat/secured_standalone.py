"""A broker set up as Pulsar users set up a secured standalone (the official Python
client's own test setup): TLS on the Pulsar protocol and HTTP next to the plain ports,
TLS + token + basic authentication under Pulsar's class names, an Apache ``htpasswd -m``
file, authorization with superusers, ``anonymousUserRole``, and a broker client that
presents a certificate (``AuthenticationTls``)."""

from __future__ import annotations

import json
import secrets
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
import pulsar

from dedup_broker.security.htpasswd import ITOA64, apr1_crypt
from harness.broker_process import BrokerProcess
from tests.integration.security.test_tls import start_tls_broker
from tests.tls_certificates import Certificates, make_certificates

PROVIDERS = ",".join(
    f"org.apache.pulsar.broker.authentication.{name}"
    for name in (
        "AuthenticationProviderTls",
        "AuthenticationProviderToken",
        "AuthenticationProviderBasic",
    )
)
SUPERUSERS = "localhost,superUser,admin"
BASIC_USERS = {"carol": "carol-secret", "erin": "erin-secret"}


def write_htpasswd(path: Path) -> None:
    """Apache MD5 (``$apr1$``) lines as ``htpasswd -m`` writes them, made with the project's
    own APR1 code and a random salt, so the suite needs no apache2-utils; the unit tests
    check that code against hashes the real ``htpasswd`` wrote (and against the binary
    itself where it is installed)."""
    lines = [
        f"{user}:{apr1_crypt(password.encode(), random_salt())}\n"
        for user, password in BASIC_USERS.items()
    ]
    path.write_text("".join(lines))


def random_salt() -> str:
    """Eight characters of APR1's alphabet, as ``htpasswd`` draws them."""
    return "".join(secrets.choice(ITOA64) for _ in range(8))


@dataclass
class SecuredBroker:
    process: BrokerProcess
    certs: Certificates
    secret: bytes
    tls_port: int
    https_port: int

    def token(self, role: str) -> str:
        return jwt.encode({"sub": role}, self.secret, algorithm="HS256")

    @property
    def tls_url(self) -> str:
        return f"pulsar+ssl://localhost:{self.tls_port}"

    @property
    def https_url(self) -> str:
        return f"https://localhost:{self.https_port}"

    def client(self, role: str | None = None, tls: bool = False, **options: Any) -> pulsar.Client:
        """A client of ``role`` (a token), anonymous without one."""
        if role is not None:
            options["authentication"] = pulsar.AuthenticationToken(self.token(role))
        if tls:
            options["tls_trust_certs_file_path"] = str(self.certs.ca)
        url = self.tls_url if tls else self.process.service_url
        return pulsar.Client(url, operation_timeout_seconds=10, **options)

    def admin(
        self, role: str | None, method: str, path: str, body: Any = None, https: bool = False
    ) -> tuple[int, Any]:
        """An admin call (as ``role``'s token; anonymous without one): status and JSON."""
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if role is not None:
            headers["Authorization"] = f"Bearer {self.token(role)}"
        data = None if body is None else json.dumps(body).encode()
        base = self.https_url if https else self.process.http_url
        request = urllib.request.Request(base + path, data=data, headers=headers, method=method)
        context = ssl.create_default_context(cafile=str(self.certs.ca)) if https else None
        try:
            with urllib.request.urlopen(request, timeout=15, context=context) as response:
                text = response.read().decode()
                return response.status, json.loads(text) if text else None
        except urllib.error.HTTPError as exc:
            text = exc.read().decode()
            try:
                return exc.code, json.loads(text) if text else None
            except json.JSONDecodeError:
                return exc.code, text


def start_secured_broker(kafka_bootstrap: str, folder: Path, **settings: Any) -> SecuredBroker:
    certs = make_certificates(folder)
    secret = secrets.token_bytes(32)
    key = folder / "secret.key"
    key.write_bytes(secret)
    htpasswd = folder / ".htpasswd"
    write_htpasswd(htpasswd)
    tls = start_tls_broker(
        kafka_bootstrap,
        folder,
        certs,
        authentication_enabled=True,
        authentication_providers=PROVIDERS,
        token_secret_key=f"file://{key}",
        basic_auth_conf=str(htpasswd),
        authorization_enabled=True,
        super_user_roles=SUPERUSERS,
        anonymous_user_role="anonymous",
        broker_client_authentication_plugin="org.apache.pulsar.client.impl.auth.AuthenticationTls",
        broker_client_certificate_file_path=str(certs.client_cert),
        broker_client_key_file_path=str(certs.client_key),
        **settings,
    )
    return SecuredBroker(tls.process, certs, secret, tls.tls_port, tls.https_port)
