"""The broker, the deletion worker and the doctor on Kafka listeners that require SASL
(PLAIN over SASL_PLAINTEXT, SCRAM-SHA-256 over SASL_SSL); the broker on a Kafka SSL
listener; key-window deduplication on a Redis that requires a password, also over TLS;
brokers and the deletion worker calling brokers over HTTPS."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest
from confluent_kafka.admin import AdminClient

from dedup_broker.app.deletion_worker import run_doctor as check
from dedup_broker.config import BrokerConfig
from dedup_broker.devservers.kafka import NativeKafka
from dedup_broker.devservers.redis import NativeRedis, RedisTls
from dedup_broker.key_dedup.store import KeyStore, KeyStoreUnavailableError, ScopeKeys
from harness.admin_http import http_request
from harness.broker_process import BrokerProcess, free_port
from harness.cluster_processes import ClusterProcesses
from harness.worker_process import WorkerProcess
from tests.integration.conftest import make_broker
from tests.integration.system_topics.deletion_helpers import SMALL_LEDGERS, wait_until
from tests.optional_pieces import require_redis_tls
from tests.tls_certificates import Certificates, make_certificates

SASL = {
    "kafka_security_protocol": "SASL_PLAINTEXT",
    "kafka_sasl_mechanism": "PLAIN",
    "kafka_sasl_username": "broker",
    "kafka_sasl_password": "broker-secret",
}


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("certificates"))


@pytest.fixture(scope="module")
def secured_kafka(
    tmp_path_factory: pytest.TempPathFactory, certificates: Certificates
) -> Iterator[NativeKafka]:
    """One Kafka with SASL_PLAINTEXT, SSL and SASL_SSL listeners (and PLAINTEXT)."""
    folder = tmp_path_factory.mktemp("secured-kafka")
    keystore = folder / "keystore.pem"
    keystore.write_bytes(
        certificates.server_key.read_bytes() + certificates.server_cert.read_bytes()
    )
    kafka = NativeKafka(
        folder / "kafka", sasl_users={"broker": "broker-secret"}, ssl_keystore=keystore
    )
    kafka.start()
    try:
        yield kafka
    finally:
        kafka.close()


@pytest.mark.parametrize("link", ["plain-over-sasl-plaintext", "scram-over-sasl-ssl"])
def test_broker_worker_and_doctor_over_sasl(
    link: str, secured_kafka: NativeKafka, certificates: Certificates, tmp_path: Path
) -> None:
    settings: dict[str, object] = {**SASL, **SMALL_LEDGERS}
    servers = secured_kafka.sasl_bootstrap_servers
    if link == "scram-over-sasl-ssl":
        servers = secured_kafka.sasl_ssl_bootstrap_servers
        settings.update(
            kafka_security_protocol="SASL_SSL",
            kafka_sasl_mechanism="SCRAM-SHA-256",
            kafka_ssl_ca_location=str(certificates.ca),
        )
    broker = make_broker(servers, tmp_path, **settings)
    worker = WorkerProcess(servers, broker.cluster_name, settings, tmp_path)
    try:
        broker.start()
        worker.start()
        topic = f"persistent://public/default/sasl-{uuid.uuid4().hex[:8]}"
        # The worker (over SASL) deletes what is trimmed.
        _trim_and_see_the_worker_delete(broker, topic, secured_kafka.bootstrap_servers)
        report = check(BrokerConfig.load(environ=broker.environment()))
        assert report["orphans"] == [] and report["missing"] == [], report
    finally:
        worker.stop()
        broker.stop()


def test_a_wrong_kafka_password_stops_the_broker_with_the_reason(
    secured_kafka: NativeKafka, tmp_path: Path
) -> None:
    broker = make_broker(
        secured_kafka.sasl_bootstrap_servers,
        tmp_path,
        **{**SASL, "kafka_sasl_password": "guess", "kafka_request_timeout_ms": 5000},
    )
    # It exits (not waits for a Kafka "not ready yet"): refused credentials are final.
    with pytest.raises(RuntimeError, match="broker exited"):
        broker.start(timeout=40)
    broker.stop()
    assert "SASL authentication error: Authentication failed" in broker.log_text()


@pytest.mark.parametrize("tls", [False, True], ids=["redis", "rediss"])
def test_key_dedup_on_a_redis_with_a_password(
    tls: bool, kafka_bootstrap: str, certificates: Certificates, tmp_path: Path
) -> None:
    if tls:
        require_redis_tls()
    server = RedisTls(certificates.server_cert, certificates.server_key, certificates.ca)
    redis = NativeRedis(tmp_path / "redis", password="redis-secret", tls=server if tls else None)
    redis.start()
    settings = {"redis_ssl_ca_location": str(certificates.ca)} if tls else {}
    broker = make_broker(kafka_bootstrap, tmp_path, redis_url=redis.url, **settings)
    try:
        if tls:
            _refused_without_the_ca(redis, certificates)
        broker.start()
        topic = f"persistent://public/default/keys-{uuid.uuid4().hex[:8]}"
        path = "/admin/v2/persistent/" + topic.removeprefix("persistent://")
        policy = json.dumps({"enabled": True, "keySource": "partitionKey"}).encode()
        status, body = http_request("POST", broker.http_url + path + "/keyDeduplication", policy)
        assert status == 204, body
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=30)
        try:
            producer = client.create_producer(topic, batching_enabled=False)
            for key in ["a", "b", "a", "c", "b"]:
                producer.send(key.encode(), partition_key=key)
            reader = client.create_reader(topic, pulsar.MessageId.earliest)
            stored = [reader.read_next(10_000).data() for _ in range(3)]
            assert stored == [b"a", b"b", b"c"]
            with pytest.raises(pulsar.Timeout):
                reader.read_next(1_000)
        finally:
            client.close()
    finally:
        broker.stop()
        redis.close()


def _refused_without_the_ca(redis: NativeRedis, certificates: Certificates) -> None:
    """A client that does not trust Redis's certificate cannot use it."""

    async def claim() -> None:
        store = KeyStore(redis.url, connection={"ssl_ca_certs": str(certificates.other_ca)})
        try:
            await store.marker_present(ScopeKeys("tls-check"))
        finally:
            await store.close()

    with pytest.raises(KeyStoreUnavailableError, match="certificate verify failed"):
        asyncio.run(claim())


def _trim_and_see_the_worker_delete(broker: BrokerProcess, topic: str, kafka: str) -> None:
    """30 messages on ``topic`` (owned by ``broker``), 25 consumed: a trim gives ledgers
    up, the cluster's deletion worker deletes their Kafka topics, the rest stays readable."""
    admin = AdminClient({"bootstrap.servers": kafka})
    pattern = re.compile(re.escape(broker.cluster_name) + r"\.ledger\.(\d+)")

    def ledger_topics() -> set[int]:
        names = admin.list_topics(timeout=10).topics
        return {int(m.group(1)) for t in names if (m := pattern.fullmatch(t))}

    client = pulsar.Client(broker.service_url, operation_timeout_seconds=60)
    try:
        consumer = client.subscribe(topic, "sub")
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(30):
            producer.send(b"m-%d" % i)
        # Listed before anything is consumed: acknowledgements may start a trim too.
        path = "/admin/v2/persistent/" + topic.removeprefix("persistent://")
        before = {x["ledgerId"] for x in _internal(broker, path)["ledgers"]}
        received = []
        for _ in range(25):
            message = consumer.receive(10_000)
            received.append(message.data())
            consumer.acknowledge(message)
        assert received == [b"m-%d" % i for i in range(25)]
        consumer.close()
        trim = http_request("POST", broker.http_url + path + "/trim", None, broker.https_context)
        assert trim[0] == 204, trim
        trimmed = before - {x["ledgerId"] for x in _internal(broker, path)["ledgers"]}
        assert len(trimmed) >= 4
        wait_until(lambda: not (ledger_topics() & trimmed), what="ledgers deleted")
        consumer = client.subscribe(topic, "sub")
        assert [consumer.receive(10_000).data() for _ in range(5)] == [
            b"m-%d" % i for i in range(25, 30)
        ]
    finally:
        client.close()


def _internal(broker: BrokerProcess, path: str) -> dict[str, list[dict[str, int]]]:
    url = broker.http_url + path + "/internalStats"
    status, body = http_request("GET", url, None, broker.https_context)
    assert status == 200, body
    data: dict[str, list[dict[str, int]]] = json.loads(body)
    return data


def test_brokers_and_the_worker_call_brokers_over_https(
    kafka_bootstrap: str, certificates: Certificates, tmp_path: Path
) -> None:
    """With the plain web port off, a broker forwards partitioned-topic calls to the
    partitions' owners over HTTPS and the deletion worker asks owners there, each
    verifying the owner's certificate (tlsTrustCertsFilePath for the brokers,
    brokerClientTrustCertsFilePath for the worker)."""
    settings = {
        **SMALL_LEDGERS,
        "web_service_port": "none",
        "tls_certificate_file_path": str(certificates.server_cert),
        "tls_key_file_path": str(certificates.server_key),
        "tls_trust_certs_file_path": str(certificates.ca),
    }
    cluster = ClusterProcesses(kafka_bootstrap, tmp_path, size=2, settings=settings)
    for broker in cluster:
        broker.settings["web_service_port_tls"] = free_port()
    first, second = cluster
    worker_settings = {**SMALL_LEDGERS, "broker_client_trust_certs_file_path": str(certificates.ca)}
    worker = WorkerProcess(kafka_bootstrap, cluster.cluster_name, worker_settings, tmp_path)
    try:
        cluster.start()
        worker.start()
        local = f"https-{uuid.uuid4().hex[:8]}"
        base = f"{second.http_url}/admin/v2/persistent/public/default/{local}"
        assert http_request("PUT", base + "/partitions", b"6", second.https_context)[0] == 204
        client = pulsar.Client(cluster.service_url, operation_timeout_seconds=30)
        try:
            producer = client.create_producer(
                f"persistent://public/default/{local}",
                message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution,
                batching_enabled=False,
            )
            for i in range(12):
                producer.send(b"p-%d" % i)
        finally:
            client.close()
        # Partitions live on both brokers: each answer needs the other broker's part.
        for broker in cluster:
            url = base.replace(second.http_url, broker.http_url) + "/partitioned-stats"
            status, body = http_request("GET", url, None, broker.https_context)
            assert status == 200, body
            assert json.loads(body)["msgInCounter"] == 12
        _trim_and_see_the_worker_delete(first, _topic_owned_by(first), kafka_bootstrap)
    finally:
        worker.stop()
        cluster.stop()


def _topic_owned_by(broker: BrokerProcess) -> str:
    """A new topic name whose owner (by lookup) is ``broker``."""
    for _ in range(40):
        local = f"owned-{uuid.uuid4().hex[:8]}"
        url = f"{broker.http_url}/lookup/v2/topic/persistent/public/default/{local}"
        status, body = http_request("GET", url, None, broker.https_context)
        assert status == 200, body
        if json.loads(body)["httpUrlTls"] == broker.http_url:
            return f"persistent://public/default/{local}"
    raise AssertionError(f"no topic of 40 is owned by {broker.http_url}")


def test_the_broker_on_a_kafka_ssl_listener(
    secured_kafka: NativeKafka, certificates: Certificates, tmp_path: Path
) -> None:
    ssl = {"kafka_security_protocol": "SSL", "kafka_ssl_ca_location": str(certificates.ca)}
    broker = make_broker(secured_kafka.ssl_bootstrap_servers, tmp_path, **ssl)
    try:
        broker.start()
        topic = f"persistent://public/default/ssl-{uuid.uuid4().hex[:8]}"
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=30)
        try:
            consumer = client.subscribe(topic, "s")
            producer = client.create_producer(topic)
            sent = [f"over-tls-{i}".encode() for i in range(10)]
            for payload in sent:
                producer.send(payload)
            assert [consumer.receive(10_000).data() for _ in sent] == sent
        finally:
            client.close()
        # A CA that did not sign Kafka's certificate is refused at start.
        (tmp_path / "other").mkdir()
        other = make_broker(
            secured_kafka.ssl_bootstrap_servers,
            tmp_path / "other",
            **{**ssl, "kafka_ssl_ca_location": str(certificates.other_ca)},
            kafka_request_timeout_ms=5000,
        )
        with pytest.raises((RuntimeError, TimeoutError)):
            other.start(timeout=40)
        other.stop()
        assert "certificate verify failed" in other.log_text()
    finally:
        broker.stop()
