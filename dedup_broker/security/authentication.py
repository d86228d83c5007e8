"""Authentication with Pulsar's providers: token (JWT), basic (htpasswd) and TLS client
certificates.

Binary clients present a method name and data in CONNECT; HTTP clients an
``Authorization`` header; TLS clients their certificate in the handshake. The result is
a role (the principal authorization will check).
With ``authenticationEnabled`` off every client is anonymous and everything is allowed,
as before.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import jwt

from dedup_broker.config import BrokerConfig
from dedup_broker.errors import ConfigError, PermanentError
from dedup_broker.security.htpasswd import parse_htpasswd, password_matches
from dedup_broker.security.keys import (
    PUBLIC_ALGORITHMS,
    SECRET_ALGORITHMS,
    load_public_key,
    read_key_bytes,
)
from dedup_broker.security.tls import PeerCertificate, common_name

PROVIDER_ALIASES = {
    "token": "token",
    "org.apache.pulsar.broker.authentication.AuthenticationProviderToken": "token",
    "basic": "basic",
    "org.apache.pulsar.broker.authentication.AuthenticationProviderBasic": "basic",
    "tls": "tls",
    "org.apache.pulsar.broker.authentication.AuthenticationProviderTls": "tls",
}


class AuthenticationError(PermanentError):
    """Credentials missing, malformed, expired or not valid (Pulsar's AuthenticationError;
    HTTP 401)."""


class Provider(Protocol):
    method: str

    def authenticate(self, data: bytes, certificate: PeerCertificate | None) -> str:
        """The role the credentials prove (``certificate``: the client's verified TLS
        certificate, if any); AuthenticationError if they prove none."""


class TokenProvider:
    """JWTs signed with ``tokenSecretKey`` (HS*) or ``tokenPublicKey``'s pair (RS*, ES*)."""

    method = "token"

    def __init__(self, config: BrokerConfig) -> None:
        self._claim = config.token_auth_claim
        self._audience_claim = config.token_audience_claim
        self._audience = config.token_audience
        if config.token_secret_key:
            self._key: Any = read_key_bytes(config.token_secret_key, "tokenSecretKey")
            self._algorithms: tuple[str, ...] = SECRET_ALGORITHMS
        elif config.token_public_key:
            raw = read_key_bytes(config.token_public_key, "tokenPublicKey")
            self._key = load_public_key(raw, "tokenPublicKey")
            self._algorithms = PUBLIC_ALGORITHMS
        else:
            raise ConfigError("the token provider needs tokenSecretKey or tokenPublicKey")

    def authenticate(self, data: bytes, certificate: PeerCertificate | None = None) -> str:
        token = data.decode("utf-8", "replace").strip()
        if token.lower().startswith("bearer "):
            token = token[7:].strip()
        if not token:
            raise AuthenticationError("no token given")
        try:
            claims = jwt.decode(
                token,
                self._key,
                algorithms=list(self._algorithms),
                options={"require": [], "verify_aud": False},
            )
        except jwt.ExpiredSignatureError:
            raise AuthenticationError("the token has expired") from None
        except jwt.InvalidTokenError as exc:
            raise AuthenticationError(f"the token is not valid: {exc}") from None
        if self._audience:
            audience = claims.get(self._audience_claim)
            audiences = audience if isinstance(audience, list) else [audience]
            if self._audience not in audiences:
                raise AuthenticationError(
                    f"the token's {self._audience_claim!r} claim does not name {self._audience!r}"
                )
        role = claims.get(self._claim)
        if not isinstance(role, str) or not role:
            raise AuthenticationError(f"the token has no {self._claim!r} claim naming a role")
        return role


class BasicProvider:
    """``user:password`` checked against an htpasswd file (``basicAuthConf``): Apache MD5
    (``htpasswd -m``) and crypt (``htpasswd -d``) as Pulsar reads them, bcrypt too."""

    method = "basic"

    def __init__(self, config: BrokerConfig) -> None:
        if not config.basic_auth_conf:
            raise ConfigError("the basic provider needs basicAuthConf (an htpasswd file)")
        self._users = _read_htpasswd(config.basic_auth_conf)

    def authenticate(self, data: bytes, certificate: PeerCertificate | None = None) -> str:
        user, sep, password = data.decode("utf-8", "replace").partition(":")
        hashed = self._users.get(user)
        if not sep or hashed is None:
            raise AuthenticationError("unknown user or wrong password")
        if not password_matches(password.encode(), hashed):
            raise AuthenticationError("unknown user or wrong password")
        return user


class TlsProvider:
    """A client certificate the broker's trusted CAs signed (verified in the TLS
    handshake against ``tlsTrustCertsFilePath``); the role is its subject's common name,
    as Pulsar's ``AuthenticationProviderTls``."""

    method = "tls"

    def __init__(self, config: BrokerConfig) -> None:
        if config.broker_service_port_tls is None and config.web_service_port_tls is None:
            raise ConfigError(
                "the tls provider needs a TLS port (brokerServicePortTls or webServicePortTls)"
            )
        if not config.tls_trust_certs_file_path or config.tls_allow_insecure_connection:
            raise ConfigError(
                "the tls provider needs tlsTrustCertsFilePath (the CAs client certificates "
                "are verified against) and tlsAllowInsecureConnection=false"
            )

    def authenticate(self, data: bytes, certificate: PeerCertificate | None = None) -> str:
        if not certificate:
            raise AuthenticationError("no trusted TLS client certificate was presented")
        role = common_name(certificate)
        if role is None:
            raise AuthenticationError("the client certificate's subject has no common name")
        return role


def _new_provider(kind: str, config: BrokerConfig) -> Provider:
    if kind == "token":
        return TokenProvider(config)
    if kind == "basic":
        return BasicProvider(config)
    return TlsProvider(config)


def _read_htpasswd(source: str) -> dict[str, str]:
    try:
        text = (
            read_key_bytes(source, "basicAuthConf").decode()
            if source.startswith("data:")
            else Path(source.removeprefix("file://")).read_text()
        )
    except OSError as exc:
        raise ConfigError(f"basicAuthConf: cannot read {source}: {exc}") from exc
    return parse_htpasswd(text)


class Authenticator:
    """The configured providers, by method name; one place decides who a client is."""

    def __init__(self, config: BrokerConfig) -> None:
        self.enabled = config.authentication_enabled
        self.anonymous_role = config.anonymous_user_role or None
        self.providers: dict[str, Provider] = {}
        if not self.enabled:
            return
        names = [n.strip() for n in config.authentication_providers.split(",") if n.strip()]
        if not names:
            raise ConfigError("authenticationEnabled needs authenticationProviders")
        for name in names:
            kind = PROVIDER_ALIASES.get(name)
            if kind is None:
                raise ConfigError(
                    f"authenticationProviders: unknown provider {name!r} "
                    f"(known: {', '.join(sorted(PROVIDER_ALIASES))})"
                )
            provider = _new_provider(kind, config)
            self.providers[provider.method] = provider

    def authenticate(
        self, method: str, data: bytes, certificate: PeerCertificate | None = None
    ) -> str | None:
        """The role of a client presenting ``data`` for ``method`` (None: anonymous with
        authentication off); ``certificate`` is its verified TLS client certificate."""
        if not self.enabled:
            return None
        if not method or method == "none":
            if self.anonymous_role is not None:
                return self.anonymous_role
            raise AuthenticationError(
                "authentication is required: connect with a token or credentials "
                f"(methods: {', '.join(sorted(self.providers))})"
            )
        provider = self.providers.get(method)
        if provider is None and self.anonymous_role is not None:
            return self.anonymous_role  # Pulsar: an unknown method is anonymous when allowed
        if provider is None:
            raise AuthenticationError(
                f"authentication method {method!r} is not enabled here "
                f"(enabled: {', '.join(sorted(self.providers))})"
            )
        return provider.authenticate(data, certificate)

    def expires_at(self, method: str, data: bytes) -> float | None:
        """When credentials that authenticated expire (epoch seconds): a token's ``exp``;
        None for credentials that do not expire."""
        if not self.enabled or method != "token":
            return None
        token = data.decode("utf-8", "replace").strip().removeprefix("Bearer ").strip()
        try:
            claims = jwt.decode(token, options={"verify_signature": False})
        except jwt.InvalidTokenError:
            return None
        expiry = claims.get("exp")
        return float(expiry) if isinstance(expiry, int | float) else None

    def authenticate_http(
        self, headers: Mapping[str, str], certificate: PeerCertificate | None = None
    ) -> str | None:
        """The role of an HTTP request (``Authorization: Bearer`` or ``Basic``, else a
        TLS client certificate when the tls provider is on)."""
        if not self.enabled:
            return None
        header = headers.get("Authorization", "")
        scheme, _, value = header.partition(" ")
        if scheme.lower() == "bearer":
            return self.authenticate("token", value.encode())
        if scheme.lower() == "basic":
            try:
                decoded = base64.b64decode(value.strip(), validate=True)
            except (binascii.Error, ValueError):
                raise AuthenticationError("malformed Basic credentials") from None
            return self.authenticate("basic", decoded)
        if header:
            raise AuthenticationError(f"unsupported Authorization scheme {scheme!r}")
        if certificate and "tls" in self.providers:
            return self.authenticate("tls", b"", certificate)
        return self.authenticate("", b"")
