"""The authenticator's decisions, without a broker."""

from __future__ import annotations

import base64
import time

import jwt
import pytest

from dedup_broker.config import BrokerConfig
from dedup_broker.errors import ConfigError
from dedup_broker.security.authentication import AuthenticationError, Authenticator

SECRET = b"k" * 32
KEY = "data:;base64," + base64.b64encode(SECRET).decode()


def token(**claims: object) -> str:
    return jwt.encode(dict(claims), SECRET, algorithm="HS256")


def authenticator(**settings: object) -> Authenticator:
    base = {
        "authentication_enabled": True,
        "authentication_providers": "token",
        "token_secret_key": KEY,
    }
    return Authenticator(BrokerConfig().with_overrides(**(base | settings)))


def test_off_means_anonymous_and_allowed() -> None:
    assert Authenticator(BrokerConfig()).authenticate("", b"") is None


def test_tokens_claims_and_audience() -> None:
    auth = authenticator()
    assert auth.authenticate("token", token(sub="alice").encode()) == "alice"
    assert auth.authenticate_http({"Authorization": f"Bearer {token(sub='bob')}"}) == "bob"
    with pytest.raises(AuthenticationError, match="expired"):
        auth.authenticate("token", token(sub="a", exp=int(time.time()) - 5).encode())
    with pytest.raises(AuthenticationError, match="no 'sub' claim"):
        auth.authenticate("token", token(role="a").encode())
    with pytest.raises(AuthenticationError, match="not enabled"):
        auth.authenticate("basic", b"u:p")
    with pytest.raises(AuthenticationError, match="required"):
        auth.authenticate_http({})
    scoped = authenticator(token_audience="brokers", token_auth_claim="role")
    assert scoped.authenticate("token", token(role="r", aud="brokers").encode()) == "r"
    with pytest.raises(AuthenticationError, match="does not name 'brokers'"):
        scoped.authenticate("token", token(role="r", aud="web").encode())
    assert authenticator(anonymous_user_role="guest").authenticate("", b"") == "guest"
    # As Pulsar: a method no provider serves is anonymous when an anonymous role is set.
    assert authenticator(anonymous_user_role="guest").authenticate("unknown", b"x") == "guest"


def test_bad_settings_fail_at_start() -> None:
    with pytest.raises(ConfigError, match="unknown provider 'ldap'"):
        authenticator(authentication_providers="token,ldap")
    with pytest.raises(ConfigError, match="tokenSecretKey or tokenPublicKey"):
        authenticator(token_secret_key="")
    with pytest.raises(ConfigError, match="basicAuthConf"):
        authenticator(authentication_providers="basic")
    with pytest.raises(ConfigError, match="needs authenticationProviders"):
        authenticator(authentication_providers="")
