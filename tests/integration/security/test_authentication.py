"""Authentication with the official client: tokens (HS256, RS256), basic, anonymous role,
HTTP Bearer/Basic; keys and tokens made by ``dedup-broker tokens``."""

from __future__ import annotations

import base64
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import bcrypt
import jwt
import pulsar
import pytest

from harness.broker_process import BrokerProcess
from tests.integration.conftest import make_broker


def tokens(*args: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "dedup_broker.app.cli", "tokens", *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return result.stdout.strip()


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("keys")
    paths = {
        "secret": folder / "secret.key",
        "private": folder / "private.der",
        "public": folder / "public.der",
        "htpasswd": folder / "htpasswd",
    }
    tokens("create-secret-key", "--output", str(paths["secret"]))
    tokens(
        "create-key-pair",
        "--output-private-key",
        str(paths["private"]),
        "--output-public-key",
        str(paths["public"]),
    )
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode()
    paths["htpasswd"].write_text(f"carol:{hashed.replace('$2b$', '$2y$', 1)}\n")
    return paths


@pytest.fixture(scope="module")
def secured(
    kafka_bootstrap: str, keys: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BrokerProcess]:
    broker = make_broker(
        kafka_bootstrap,
        tmp_path_factory.mktemp("secured"),
        authentication_enabled=True,
        authentication_providers=(
            "org.apache.pulsar.broker.authentication.AuthenticationProviderToken,basic"
        ),
        token_secret_key=f"file://{keys['secret']}",
        basic_auth_conf=str(keys["htpasswd"]),
    )
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


def round_trip(
    url: str, authentication: pulsar.Authentication | None, timeout_seconds: int = 10
) -> bytes:
    client = pulsar.Client(
        url, authentication=authentication, operation_timeout_seconds=timeout_seconds
    )
    try:
        topic = f"persistent://public/default/auth-{uuid.uuid4().hex[:8]}"
        consumer = client.subscribe(topic, "s")
        client.create_producer(topic).send(b"hello")
        return consumer.receive(timeout_millis=10_000).data()
    finally:
        client.close()


def test_a_valid_token_is_accepted(secured: BrokerProcess, keys: dict[str, Path]) -> None:
    token = tokens("create", "--secret-key", str(keys["secret"]), "--subject", "alice")
    assert round_trip(secured.service_url, pulsar.AuthenticationToken(token)) == b"hello"


def test_basic_credentials_are_accepted(secured: BrokerProcess) -> None:
    auth = pulsar.AuthenticationBasic("carol", "s3cret")
    assert round_trip(secured.service_url, auth) == b"hello"


REASONS = {
    "none": "authentication is required",
    "expired": "the token has expired",
    "other-key": "the token is not valid",
    "wrong-password": "unknown user or wrong password",
}


@pytest.mark.parametrize("case", sorted(REASONS))
def test_bad_credentials_are_refused(
    secured: BrokerProcess, keys: dict[str, Path], tmp_path: Path, case: str
) -> None:
    """The broker answers CONNECT with ERROR(AuthenticationError) and closes; the official
    client then fails the operation (it reports a connection failure)."""
    auth: pulsar.Authentication | None = None
    if case == "expired":
        token = tokens(
            "create", "--secret-key", str(keys["secret"]), "--subject", "a", "--expiry-time", "1s"
        )
        time.sleep(2)
        auth = pulsar.AuthenticationToken(token)
    elif case == "other-key":
        other = tmp_path / "other.key"
        tokens("create-secret-key", "--output", str(other))
        auth = pulsar.AuthenticationToken(
            tokens("create", "--secret-key", str(other), "--subject", "alice")
        )
    elif case == "wrong-password":
        auth = pulsar.AuthenticationBasic("carol", "guess")
    refused = (pulsar.AuthenticationError, pulsar.Timeout, pulsar.ConnectError)
    with pytest.raises(refused):
        round_trip(secured.service_url, auth, timeout_seconds=3)
    assert f"refused: {REASONS[case]}" in secured.log_text()


def test_http_needs_credentials(secured: BrokerProcess, keys: dict[str, Path]) -> None:
    url = f"{secured.http_url}/admin/v2/persistent/public/default"
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(url, timeout=10)
    assert caught.value.code == 401
    assert "Authentication required" in caught.value.read().decode()
    token = tokens("create", "--secret-key", str(keys["secret"]), "--subject", "alice")
    for header in (
        f"Bearer {token}",
        "Basic " + base64.b64encode(b"carol:s3cret").decode(),
    ):
        request = urllib.request.Request(url, headers={"Authorization": header})
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 200
    # Probes and scrapers stay open.
    with urllib.request.urlopen(f"{secured.http_url}/metrics", timeout=10) as response:
        assert response.status == 200


def test_rs256_tokens_and_the_anonymous_role(
    kafka_bootstrap: str, keys: dict[str, Path], tmp_path: Path
) -> None:
    broker = make_broker(
        kafka_bootstrap,
        tmp_path,
        authentication_enabled=True,
        authentication_providers="token",
        token_public_key=f"file://{keys['public']}",
        anonymous_user_role="guest",
    )
    broker.start()
    try:
        token = tokens("create", "--private-key", str(keys["private"]), "--subject", "bob")
        assert round_trip(broker.service_url, pulsar.AuthenticationToken(token)) == b"hello"
        assert round_trip(broker.service_url, None) == b"hello"  # as "guest"
    finally:
        broker.stop()


@pytest.fixture(scope="module")
def refreshing(
    kafka_bootstrap: str, keys: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BrokerProcess]:
    broker = make_broker(
        kafka_bootstrap,
        tmp_path_factory.mktemp("refreshing"),
        authentication_enabled=True,
        authentication_providers="token",
        token_secret_key=f"file://{keys['secret']}",
        authentication_refresh_check_seconds=1,
    )
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


def short_lived_token(secret: Path, seconds: int = 3) -> str:
    return jwt.encode(
        {"sub": "dana", "exp": int(time.time()) + seconds}, secret.read_bytes(), algorithm="HS256"
    )


def test_a_token_supplier_keeps_a_long_lived_producer_connected(
    refreshing: BrokerProcess, keys: dict[str, Path]
) -> None:
    """Each token lives 3 s; the broker challenges the expired one (AUTH_CHALLENGE) and the
    client answers with a fresh one from its supplier: nothing fails, nothing reconnects."""
    issued: list[str] = []

    def supplier() -> str:
        issued.append(short_lived_token(keys["secret"]))
        return issued[-1]

    client = pulsar.Client(
        refreshing.service_url,
        authentication=pulsar.AuthenticationToken(supplier),
        operation_timeout_seconds=10,
    )
    try:
        topic = f"persistent://public/default/refresh-{uuid.uuid4().hex[:8]}"
        consumer = client.subscribe(topic, "s")
        producer = client.create_producer(topic)
        sent = []
        deadline = time.monotonic() + 9
        while time.monotonic() < deadline:
            sent.append(f"m{len(sent)}".encode())
            producer.send(sent[-1])
            time.sleep(0.3)
        received = [consumer.receive(timeout_millis=10_000).data() for _ in sent]
        assert received == sent
    finally:
        client.close()
    log = refreshing.log_text()
    assert log.count("refreshed (role dana)") >= 2, log[-2000:]
    assert "its credentials expired" not in log
    assert len(issued) >= 3


def test_an_expired_token_that_is_not_renewed_loses_its_connection(
    refreshing: BrokerProcess, keys: dict[str, Path]
) -> None:
    client = pulsar.Client(
        refreshing.service_url,
        authentication=pulsar.AuthenticationToken(short_lived_token(keys["secret"], 5)),
        operation_timeout_seconds=10,
    )
    try:
        topic = f"persistent://public/default/expire-{uuid.uuid4().hex[:8]}"
        producer = client.create_producer(topic, send_timeout_millis=4000)
        producer.send(b"while valid")
        time.sleep(8)
        # The client cannot reconnect with an expired token.
        with pytest.raises((pulsar.Timeout, pulsar.AuthenticationError, pulsar.ConnectError)):
            producer.send(b"after expiry")
    finally:
        client.close()
    assert "refused: the token has expired" in refreshing.log_text()
