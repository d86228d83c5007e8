"""The credentials a broker (or the deletion worker) presents when it calls another
broker's admin API: Pulsar's ``brokerClientAuthenticationPlugin`` and
``brokerClientAuthenticationParameters``. With authorization on, their role must be a
superuser. Over HTTPS (a broker whose plain web port is off) the other broker's
certificate is verified against ``brokerClientTrustCertsFilePath``."""

from __future__ import annotations

import base64
import json
import ssl
from pathlib import Path

from dedup_broker.config import BrokerConfig
from dedup_broker.errors import ConfigError

CLIENT_PLUGIN_ALIASES = {
    "token": "token",
    "org.apache.pulsar.client.impl.auth.AuthenticationToken": "token",
    "basic": "basic",
    "org.apache.pulsar.client.impl.auth.AuthenticationBasic": "basic",
    "tls": "tls",
    "org.apache.pulsar.client.impl.auth.AuthenticationTls": "tls",
}


def _plugin_kind(config: BrokerConfig) -> str | None:
    plugin = config.broker_client_authentication_plugin.strip()
    if not plugin:
        return None
    kind = CLIENT_PLUGIN_ALIASES.get(plugin)
    if kind is None:
        raise ConfigError(
            f"brokerClientAuthenticationPlugin: unknown plugin {plugin!r} "
            f"(known: {', '.join(sorted(CLIENT_PLUGIN_ALIASES))})"
        )
    return kind


def broker_client_headers(config: BrokerConfig) -> dict[str, str]:
    """``{"Authorization": ...}`` for calls to other brokers; empty without a plugin."""
    kind = _plugin_kind(config)
    if kind is None or kind == "tls":  # a certificate proves who it is, in the handshake
        return {}
    parameters = config.broker_client_authentication_parameters.strip()
    if kind == "token":
        return {"Authorization": f"Bearer {_token(parameters)}"}
    user, password = _user_password(parameters)
    pair = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {pair}"}


def broker_client_credentials(config: BrokerConfig) -> tuple[str, bytes] | None:
    """The same credentials as a Pulsar CONNECT carries them (method, auth data), for the
    connections brokers keep to each other's Pulsar ports; ``None`` without a plugin, and
    with ``AuthenticationTls`` (a certificate is no CONNECT data: a watch the other broker
    refuses still shows it alive)."""
    kind = _plugin_kind(config)
    if kind is None or kind == "tls":
        return None
    broker_client_headers(config)  # validates the plugin and its parameters
    parameters = config.broker_client_authentication_parameters.strip()
    if kind == "token":
        return "token", _token(parameters).encode()
    user, password = _user_password(parameters)
    return "basic", f"{user}:{password}".encode()


def broker_client_ssl_context(config: BrokerConfig) -> ssl.SSLContext:
    """How calls to other brokers' HTTPS verify them (certificate and host name, against
    ``brokerClientTrustCertsFilePath`` or else ``tlsTrustCertsFilePath``) and which client
    certificate they present (``brokerClientCertificateFilePath``, if any)."""
    cafile = config.broker_client_trust_certs_file_path or config.tls_trust_certs_file_path
    certificate, key = _client_certificate(config)
    try:
        context = ssl.create_default_context(cafile=cafile or None)
        if certificate:
            context.load_cert_chain(certificate, key or None)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(
            f"brokerClientTrustCertsFilePath {cafile!r}, brokerClientCertificateFilePath "
            f"{certificate!r}: {exc}"
        ) from exc
    return context


def broker_client_web_url(config: BrokerConfig, plain: str, tls: str | None) -> str:
    """The URL of another broker's admin API to call: its HTTPS one when the credentials
    are a client certificate (which only a TLS handshake presents)."""
    if tls and _plugin_kind(config) == "tls":
        return tls
    return plain


def _client_certificate(config: BrokerConfig) -> tuple[str, str]:
    """The client certificate and key: ``brokerClientCertificateFilePath`` and
    ``brokerClientKeyFilePath``, else, with the ``AuthenticationTls`` plugin, its
    parameters ``tlsCertFile:/path,tlsKeyFile:/path`` (or the same as JSON)."""
    certificate = config.broker_client_certificate_file_path
    key = config.broker_client_key_file_path
    if _plugin_kind(config) != "tls":
        return certificate, key
    parameters = config.broker_client_authentication_parameters.strip()
    if parameters.startswith("{"):
        named = {k: str(v) for k, v in _json(parameters).items()}
    else:
        pairs = (item.partition(":") for item in parameters.split(",") if item.strip())
        named = {name.strip(): value.strip() for name, _, value in pairs}
    certificate = certificate or named.get("tlsCertFile", "").removeprefix("file://")
    key = key or named.get("tlsKeyFile", "").removeprefix("file://")
    if not certificate or not key:
        raise ConfigError(
            "brokerClientAuthenticationPlugin AuthenticationTls needs a client certificate: "
            "brokerClientCertificateFilePath and brokerClientKeyFilePath (or tlsCertFile and "
            "tlsKeyFile in brokerClientAuthenticationParameters)"
        )
    return certificate, key


def _token(parameters: str) -> str:
    """``token:<jwt>``, ``file:///path`` or ``{"token": "<jwt>"}``, as Pulsar accepts."""
    if parameters.startswith("token:"):
        token = parameters.removeprefix("token:")
    elif parameters.startswith("file://"):
        path = parameters.removeprefix("file://")
        try:
            token = Path(path).read_text()
        except OSError as exc:
            raise ConfigError(f"brokerClientAuthenticationParameters: {exc}") from exc
    elif parameters.startswith("{"):
        token = str(_json(parameters).get("token", ""))
    else:
        token = parameters
    if not token.strip():
        raise ConfigError("brokerClientAuthenticationParameters: no token given")
    return token.strip()


def _user_password(parameters: str) -> tuple[str, str]:
    """``{"userId": ..., "password": ...}`` or ``user:password``."""
    if parameters.startswith("{"):
        body = _json(parameters)
        user, password = str(body.get("userId", "")), str(body.get("password", ""))
    else:
        user, _, password = parameters.partition(":")
    if not user or not password:
        raise ConfigError("brokerClientAuthenticationParameters: a user and a password are needed")
    return user, password


def _json(parameters: str) -> dict[str, object]:
    try:
        body = json.loads(parameters)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"brokerClientAuthenticationParameters: {exc}") from exc
    if not isinstance(body, dict):
        raise ConfigError("brokerClientAuthenticationParameters: expected a JSON object")
    return body
