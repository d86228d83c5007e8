"""A namespace's ``encryption_required`` policy, set with ``pulsar-admin``: a producer
that does not encrypt is refused (``MetadataError``, as on Pulsar: the C++-based client
retries until its operation timeout); one that encrypts with the official client's
``CryptoKeyReader`` publishes, and a consumer with the private key reads the plain
messages back."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from harness.broker_process import BrokerProcess
from harness.pulsar_tools import ensure_pulsar_tools, run_pulsar_admin_batch, write_client_conf
from tests.integration.conftest import serve


@pytest.fixture(scope="module")
def served(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BrokerProcess]:
    yield from serve(kafka_bootstrap, tmp_path_factory.mktemp("encryption"))


def key_reader(folder: Path) -> pulsar.CryptoKeyReader:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private, public = folder / "private.pem", folder / "public.pem"
    private.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    public.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return pulsar.CryptoKeyReader(str(public), str(private))


def test_a_namespace_requiring_encryption_refuses_plain_producers(
    served: BrokerProcess, tmp_path: Path
) -> None:
    namespace = f"public/sealed-{uuid.uuid4().hex[:6]}"
    ensure_pulsar_tools()
    conf = write_client_conf(tmp_path / "client.conf", served.service_url, served.http_url)
    outcomes = run_pulsar_admin_batch(
        conf,
        [
            ["namespaces", "create", namespace],
            ["namespaces", "get-encryption-required", namespace],
            ["namespaces", "set-encryption-required", namespace, "--enable"],
            ["namespaces", "get-encryption-required", namespace],
        ],
    )
    for outcome in outcomes:
        assert outcome.exit_code == 0, (outcome.args, outcome.output)
    assert [o.output.strip().splitlines()[-1] for o in outcomes[1::2]] == ["false", "true"]

    topic = f"persistent://{namespace}/orders"
    reader = key_reader(tmp_path)
    client = pulsar.Client(served.service_url, operation_timeout_seconds=5)
    try:
        # The C++-based client retries a MetadataError until its operation timeout.
        with pytest.raises(pulsar.Timeout):
            client.create_producer(topic)
        consumer = client.subscribe(topic, "audit", crypto_key_reader=reader)
        producer = client.create_producer(
            topic, encryption_key="orders-key", crypto_key_reader=reader
        )
        sent = [f"order-{i}".encode() for i in range(20)]
        for payload in sent:
            producer.send(payload)
        received = []
        for _ in sent:
            message = consumer.receive(timeout_millis=10000)
            received.append(message.data())
            consumer.acknowledge(message)
        assert received == sent
        # The stored payloads are ciphertext: a consumer without the key cannot read them.
        blind = client.subscribe(
            topic,
            "blind",
            initial_position=pulsar.InitialPosition.Earliest,
            crypto_failure_action=pulsar.ConsumerCryptoFailureAction.CONSUME,
        )
        stored = blind.receive(timeout_millis=10000)
        assert stored.data() != sent[0]
    finally:
        client.close()
