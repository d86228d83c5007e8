"""TLS with the official client: ``pulsar+ssl://`` produce and consume, server
certificate and hostname verification, HTTPS admin and lookups, TLS client certificates
as credentials (``AuthenticationTLS``). One broker serves TLS only (its plain Pulsar port
is off), another authenticates with client certificates."""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest

from dedup_broker.config import ENV_PREFIX
from dedup_broker.protocol import pulsar_api_pb2 as pb
from harness.broker_process import BrokerProcess, free_port
from harness.cluster_processes import ClusterProcesses
from harness.raw_client import RawConnection
from tests.integration.conftest import make_broker
from tests.tls_certificates import Certificates, make_certificates

REFUSED = (pulsar.ConnectError, pulsar.Timeout, pulsar.AuthenticationError)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("certs"))


class TlsBroker:
    def __init__(self, process: BrokerProcess, tls_port: int, https_port: int) -> None:
        self.process = process
        self.tls_port = tls_port
        self.https_port = https_port

    def url(self, host: str = "127.0.0.1") -> str:
        return f"pulsar+ssl://{host}:{self.tls_port}"

    @property
    def https_url(self) -> str:
        return f"https://127.0.0.1:{self.https_port}"


def start_tls_broker(
    kafka_bootstrap: str, folder: Path, certs: Certificates, **settings: object
) -> TlsBroker:
    tls_port, https_port = free_port(), free_port()
    process = make_broker(
        kafka_bootstrap,
        folder,
        broker_service_port_tls=tls_port,
        web_service_port_tls=https_port,
        tls_certificate_file_path=str(certs.server_cert),
        tls_key_file_path=str(certs.server_key),
        tls_trust_certs_file_path=str(certs.ca),
        **settings,
    )
    process.start()
    return TlsBroker(process, tls_port, https_port)


@pytest.fixture(scope="module")
def tls_only(
    kafka_bootstrap: str, certs: Certificates, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TlsBroker]:
    """TLS on the Pulsar protocol only: the plain port is off (HTTP stays, for probes)."""
    broker = start_tls_broker(
        kafka_bootstrap, tmp_path_factory.mktemp("tls-only"), certs, broker_service_port="none"
    )
    try:
        yield broker
    finally:
        broker.process.stop()


@pytest.fixture(scope="module")
def tls_auth(
    kafka_bootstrap: str, certs: Certificates, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TlsBroker]:
    broker = start_tls_broker(
        kafka_bootstrap,
        tmp_path_factory.mktemp("tls-auth"),
        certs,
        authentication_enabled=True,
        authentication_providers="tls",
    )
    try:
        yield broker
    finally:
        broker.process.stop()


def round_trip(client: pulsar.Client, topic: str, count: int = 5) -> list[bytes]:
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic)
    for i in range(count):
        producer.send(f"m{i}".encode())
    received = [consumer.receive(timeout_millis=10_000).data() for _ in range(count)]
    for message in received:
        assert message
    return received


def new_topic() -> str:
    return f"persistent://public/default/tls-{uuid.uuid4().hex[:8]}"


def tls_client(url: str, cafile: Path, **options: Any) -> pulsar.Client:
    return pulsar.Client(
        url, tls_trust_certs_file_path=str(cafile), operation_timeout_seconds=5, **options
    )


def https_context(certs: Certificates, client_cert: bool = False) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(certs.ca))
    if client_cert:
        context.load_cert_chain(str(certs.client_cert), str(certs.client_key))
    return context


def get_json(url: str, context: ssl.SSLContext) -> Any:
    with urllib.request.urlopen(url, timeout=10, context=context) as response:
        assert response.status == 200
        return json.loads(response.read())


def raw_lookup(port: int, certs: Certificates, topic: str) -> pb.CommandLookupTopicResponse:
    raw = RawConnection("127.0.0.1", port, ssl_context=https_context(certs))
    try:
        raw.connect()
        lookup = pb.BaseCommand(type=pb.BaseCommand.LOOKUP)
        lookup.lookupTopic.topic, lookup.lookupTopic.request_id = topic, 1
        raw.send(lookup)
        answer: pb.CommandLookupTopicResponse = raw.expect(
            pb.BaseCommand.LOOKUP_RESPONSE
        ).command.lookupTopicResponse
        return answer
    finally:
        raw.close()


def test_produce_and_consume_over_tls(tls_only: TlsBroker, certs: Certificates) -> None:
    client = tls_client(tls_only.url(), certs.ca)
    try:
        assert round_trip(client, new_topic()) == [f"m{i}".encode() for i in range(5)]
    finally:
        client.close()


def test_a_partitioned_topic_over_tls(tls_only: TlsBroker, certs: Certificates) -> None:
    """Every partition is looked up; each answer must name the TLS URL."""
    topic = new_topic()
    request = urllib.request.Request(
        f"{tls_only.https_url}/admin/v2/{topic.replace('://', '/')}/partitions",
        data=b"3",
        method="PUT",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10, context=https_context(certs)) as response:
        assert response.status in (200, 204)
    client = tls_client(tls_only.url(), certs.ca)
    try:
        producer = client.create_producer(topic)
        consumer = client.subscribe(topic, "s")
        sent = {f"p{i}".encode() for i in range(9)}
        for data in sorted(sent):
            producer.send(data, partition_key=data.decode())
        received = {consumer.receive(timeout_millis=10_000).data() for _ in range(9)}
        assert received == sent
    finally:
        client.close()


def test_lookups_over_tls_answer_the_tls_url(tls_only: TlsBroker, certs: Certificates) -> None:
    expected = f"pulsar+ssl://127.0.0.1:{tls_only.tls_port}"
    answer = raw_lookup(tls_only.tls_port, certs, new_topic())
    assert answer.brokerServiceUrlTls == expected
    assert answer.response == pb.CommandLookupTopicResponse.Connect
    assert answer.authoritative
    data = get_json(
        f"{tls_only.https_url}/lookup/v2/topic/persistent/public/default/x", https_context(certs)
    )
    assert data["brokerUrlTls"] == expected
    assert data["httpUrlTls"] == tls_only.https_url


def test_an_untrusted_server_certificate_is_refused(
    tls_only: TlsBroker, certs: Certificates
) -> None:
    client = tls_client(tls_only.url(), certs.other_ca)
    try:
        with pytest.raises(REFUSED):
            client.create_producer(new_topic())
    finally:
        client.close()


def test_hostname_verification(tls_only: TlsBroker, certs: Certificates) -> None:
    client = tls_client(tls_only.url("localhost"), certs.ca, tls_validate_hostname=True)
    try:
        assert round_trip(client, new_topic(), count=1) == [b"m0"]
    finally:
        client.close()
    # 127.1 reaches the broker too (it works without hostname verification), but the
    # certificate names localhost and 127.0.0.1.
    client = tls_client(tls_only.url("127.1"), certs.ca)
    try:
        assert round_trip(client, new_topic(), count=1) == [b"m0"]
    finally:
        client.close()
    client = tls_client(tls_only.url("127.1"), certs.ca, tls_validate_hostname=True)
    try:
        with pytest.raises(REFUSED):
            client.create_producer(new_topic())
    finally:
        client.close()


def test_https_admin(tls_only: TlsBroker, certs: Certificates) -> None:
    topics = get_json(
        f"{tls_only.https_url}/admin/v2/persistent/public/default", https_context(certs)
    )
    assert isinstance(topics, list)
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        urllib.request.urlopen(
            f"{tls_only.https_url}/admin/v2/persistent/public/default",
            timeout=10,
            context=ssl.create_default_context(cafile=str(certs.other_ca)),
        )


def test_a_client_certificate_authenticates(tls_auth: TlsBroker, certs: Certificates) -> None:
    client = tls_client(
        tls_auth.url(),
        certs.ca,
        authentication=pulsar.AuthenticationTLS(str(certs.client_cert), str(certs.client_key)),
    )
    try:
        assert round_trip(client, new_topic(), count=2) == [b"m0", b"m1"]
    finally:
        client.close()
    assert "authenticated with role alice using tls" in tls_auth.process.log_text()


def test_a_client_without_a_certificate_is_refused(
    tls_auth: TlsBroker, certs: Certificates
) -> None:
    client = tls_client(tls_auth.url(), certs.ca)
    try:
        with pytest.raises(REFUSED):
            client.create_producer(new_topic())
    finally:
        client.close()
    assert "refused: authentication is required" in tls_auth.process.log_text()


def test_https_with_a_client_certificate(tls_auth: TlsBroker, certs: Certificates) -> None:
    url = f"{tls_auth.https_url}/admin/v2/persistent/public/default"
    assert isinstance(get_json(url, https_context(certs, client_cert=True)), list)
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(url, timeout=10, context=https_context(certs))
    assert caught.value.code == 401


def test_a_cluster_redirects_tls_clients_to_the_owners_tls_port(
    kafka_bootstrap: str, certs: Certificates, tmp_path: Path
) -> None:
    """Brokers learn each other's TLS ports from the owners group's member tags."""
    cluster = ClusterProcesses(
        kafka_bootstrap,
        tmp_path,
        size=2,
        settings={
            "tls_certificate_file_path": str(certs.server_cert),
            "tls_key_file_path": str(certs.server_key),
        },
    )
    tls_ports = {}
    for broker in cluster:
        tls_ports[broker.port] = broker.settings["broker_service_port_tls"] = free_port()
    try:
        cluster.start()
        first, second = cluster
        tls_url = f"pulsar+ssl://127.0.0.1:{tls_ports[second.port]}"
        for _ in range(40):
            topic = new_topic()
            answer = raw_lookup(tls_ports[first.port], certs, topic)
            if answer.response == pb.CommandLookupTopicResponse.Redirect:
                break
        else:
            pytest.fail("no topic of 40 is owned by the second broker")
        assert answer.brokerServiceUrlTls == tls_url
        assert answer.brokerServiceUrl == second.service_url
        assert answer.authoritative
        client = tls_client(f"pulsar+ssl://127.0.0.1:{tls_ports[first.port]}", certs.ca)
        try:
            assert round_trip(client, topic, count=2) == [b"m0", b"m1"]
        finally:
            client.close()
    finally:
        cluster.stop()


def test_bad_tls_settings_stop_the_broker_at_start(certs: Certificates, tmp_path: Path) -> None:
    env = dict(os.environ)
    env |= {
        ENV_PREFIX + "BROKER_SERVICE_PORT_TLS": str(free_port()),
        ENV_PREFIX + "TLS_CERTIFICATE_FILE_PATH": str(certs.server_cert),
        ENV_PREFIX + "TLS_KEY_FILE_PATH": str(tmp_path / "missing.key"),
    }
    result = subprocess.run(
        [sys.executable, "-m", "dedup_broker.app.cli", "serve"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "configuration error: tlsCertificateFilePath/tlsKeyFilePath: cannot load" in (
        result.stderr
    )
