"""Lookups over TLS name the owner's TLS URLs, and the Go and Java clients work over TLS.

One broker has the plain and the TLS ports together, as the official clients' own CI
runs Pulsar (``brokerServicePortTls``, ``webServicePortTls``, token authentication next
to anonymous clients, ``transactionCoordinatorEnabled``): its binary LOOKUP and
PARTITIONED_METADATA answers and its HTTP lookup carry ``brokerServiceUrlTls`` /
``brokerUrlTls`` and ``httpUrlTls``; the Go client produces, consumes and runs
transactions over ``pulsar+ssl://`` and ``https://`` (host-name verification, insecure
TLS, a token), the Java client too. In a cluster of two brokers with advertised
listeners, a TLS lookup asked of the broker that does not own the topic redirects to the
owner's TLS URL, for every listener that has one (the internal listener's is the owner's
TLS port even where ``advertisedListeners`` names only its plain URL)."""

from __future__ import annotations

import json
import secrets
import ssl
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
import pulsar
import pytest

from dedup_broker.protocol import pulsar_api_pb2 as pb
from harness.broker_process import BrokerProcess, free_port
from harness.cluster_processes import ClusterProcesses
from harness.pulsar_go import ensure_go_client, go_consume, go_produce, go_transactions
from harness.pulsar_java import ClientTls
from harness.pulsar_java_txn import JavaTransactions
from harness.raw_client import RawConnection
from tests.integration.cluster.conftest import owner_of
from tests.integration.conftest import make_broker
from tests.optional_pieces import require
from tests.tls_certificates import Certificates, make_certificates

TC_ASSIGN = "persistent://pulsar/system/transaction_coordinator_assign-partition-0"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def go_client() -> Path:
    require("go")
    return ensure_go_client()


def tls_settings(certs: Certificates) -> dict[str, Any]:
    """Advertised as ``localhost``, the name the server certificate carries."""
    return {
        "advertised_address": "localhost",
        "tls_certificate_file_path": str(certs.server_cert),
        "tls_key_file_path": str(certs.server_key),
        "tls_trust_certs_file_path": str(certs.ca),
    }


def client_context(certs: Certificates) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(certs.ca))


@dataclass
class DualBroker:
    """A broker with plain and TLS ports, token authentication and anonymous clients."""

    process: BrokerProcess
    tls_port: int
    https_port: int
    secret: bytes

    @property
    def plain_url(self) -> str:
        return f"pulsar://localhost:{self.process.port}"

    @property
    def tls_url(self) -> str:
        return f"pulsar+ssl://localhost:{self.tls_port}"

    @property
    def https_url(self) -> str:
        return f"https://localhost:{self.https_port}"

    def token(self, role: str) -> str:
        return jwt.encode({"sub": role}, self.secret, algorithm="HS256")


@pytest.fixture(scope="module")
def dual(
    kafka_bootstrap: str, certs: Certificates, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DualBroker]:
    folder = tmp_path_factory.mktemp("dual")
    secret = secrets.token_bytes(32)
    (folder / "secret.key").write_bytes(secret)
    tls_port, https_port = free_port(), free_port()
    process = make_broker(
        kafka_bootstrap,
        folder,
        broker_service_port_tls=tls_port,
        web_service_port_tls=https_port,
        transaction_coordinator_enabled=True,
        authentication_enabled=True,
        authentication_providers="token",
        token_secret_key=f"file://{folder / 'secret.key'}",
        anonymous_user_role="anonymous",
        **tls_settings(certs),
    )
    process.start()
    try:
        yield DualBroker(process, tls_port, https_port, secret)
    finally:
        process.stop()


def unique_topic(prefix: str) -> str:
    return f"persistent://public/default/{prefix}-{uuid.uuid4().hex[:8]}"


def lookup(
    connection: RawConnection, topic: str, request_id: int, listener: str | None = ""
) -> pb.CommandLookupTopicResponse:
    """A LOOKUP as the Go client sends it: the listener name always set ("" for none)."""
    command = pb.BaseCommand(type=pb.BaseCommand.LOOKUP)
    command.lookupTopic.topic = topic
    command.lookupTopic.request_id = request_id
    if listener is not None:
        command.lookupTopic.advertised_listener_name = listener
    connection.send(command)
    frame = connection.expect(pb.BaseCommand.LOOKUP_RESPONSE)
    answer: pb.CommandLookupTopicResponse = frame.command.lookupTopicResponse
    return answer


def partitioned_metadata(
    connection: RawConnection, topic: str, request_id: int
) -> pb.CommandPartitionedTopicMetadataResponse:
    command = pb.BaseCommand(type=pb.BaseCommand.PARTITIONED_METADATA)
    command.partitionMetadata.topic = topic
    command.partitionMetadata.request_id = request_id
    connection.send(command)
    frame = connection.expect(pb.BaseCommand.PARTITIONED_METADATA_RESPONSE)
    answer: pb.CommandPartitionedTopicMetadataResponse = frame.command.partitionMetadataResponse
    return answer


def http_json(url: str, context: ssl.SSLContext | None = None, method: str = "GET") -> Any:
    body = b"2" if method == "PUT" else None
    headers = {"Content-Type": "application/json"}
    request = urllib.request.Request(url, data=body, method=method, headers=headers)
    with urllib.request.urlopen(request, timeout=15, context=context) as response:
        text = response.read()
        return json.loads(text) if text else None


def tls_connection(port: int, certs: Certificates) -> RawConnection:
    connection = RawConnection("localhost", port, ssl_context=client_context(certs))
    connection.connect()
    return connection


def test_binary_lookups_carry_the_tls_url(dual: DualBroker, certs: Certificates) -> None:
    """PARTITIONED_METADATA then LOOKUP of a partition, the transaction coordinators'
    topic, the internal listener by name: each answer names the TLS URL too, on the TLS
    connection and on the plain one; a listener the broker does not have fails."""
    topic = unique_topic("partitioned")
    local = topic.removeprefix("persistent://")
    http_json(f"{dual.process.http_url}/admin/v2/persistent/{local}/partitions", method="PUT")
    plain = RawConnection("127.0.0.1", dual.process.port)
    plain.connect()
    secure = tls_connection(dual.tls_port, certs)
    try:
        for connection in (secure, plain):
            metadata = partitioned_metadata(connection, topic, 1)
            assert not metadata.HasField("error"), metadata
            assert metadata.partitions == 2
            for request_id, (name, listener) in enumerate(
                [
                    (f"{topic}-partition-0", ""),
                    (f"{topic}-partition-1", None),
                    (TC_ASSIGN, ""),
                    (f"{topic}-partition-0", "internal"),
                ],
                start=2,
            ):
                answer = lookup(connection, name, request_id, listener)
                assert answer.response == pb.CommandLookupTopicResponse.Connect, answer
                assert answer.brokerServiceUrlTls == dual.tls_url, (name, listener, answer)
                assert answer.brokerServiceUrl == dual.plain_url, (name, listener, answer)
            missing = lookup(connection, topic, 9, "nowhere")
            assert missing.response == pb.CommandLookupTopicResponse.Failed
            assert "no listener 'nowhere'" in missing.message
    finally:
        plain.close()
        secure.close()


def test_http_lookup_carries_the_tls_urls(dual: DualBroker, certs: Certificates) -> None:
    topic = unique_topic("http")
    path = f"/lookup/v2/topic/persistent/{topic.removeprefix('persistent://')}"
    expected = {
        "brokerUrl": dual.plain_url,
        "brokerUrlTls": dual.tls_url,
        "httpUrl": f"http://localhost:{dual.process.http_port}",
        "httpUrlTls": dual.https_url,
        "nativeUrl": dual.plain_url,
    }
    context = client_context(certs)
    assert http_json(dual.https_url + path, context) == expected
    assert http_json(dual.https_url + path + "?listenerName=internal", context) == expected
    assert http_json(dual.process.http_url + path) == expected


@pytest.mark.parametrize(
    "tls",
    [
        ClientTls(validate_hostname=True),
        ClientTls(allow_insecure=True),
        ClientTls(token="go-user"),
    ],
    ids=["hostname-verified", "insecure", "token"],
)
def test_go_client_produces_and_consumes_over_tls(
    go_client: Path, dual: DualBroker, certs: Certificates, tls: ClientTls
) -> None:
    """Go's TLS tests in its own CI: a trusted CA with host-name verification, insecure
    TLS without any CA, a token over TLS (the broker says which role it authenticated)."""
    topic, count = unique_topic("go-tls"), 5
    trust = None if tls.allow_insecure else certs.ca
    token = None if tls.token is None else dual.token(tls.token)
    options: dict[str, Any] = {
        "tls_trust_certs": trust,
        "tls_allow_insecure": tls.allow_insecure,
        "tls_validate_hostname": tls.validate_hostname,
        "token": token,
    }
    produced = go_produce(dual.tls_url, topic, count, **options)
    assert [m.sequence_id for m in produced.sent] == list(range(count))
    consumed = go_consume(dual.tls_url, topic, "s", count, **options)
    assert [m.value for m in consumed.messages] == [f"m-{i}" for i in range(count)]
    if tls.token is not None:
        assert "authenticated with role go-user using token" in dual.process.tail(400)


def test_a_forged_token_is_refused_over_tls(dual: DualBroker, certs: Certificates) -> None:
    """Token authentication holds on the TLS port: a token not signed with the broker's
    key is refused at CONNECT."""
    forged = jwt.encode({"sub": "go-user"}, secrets.token_bytes(32), algorithm="HS256")
    connection = RawConnection("localhost", dual.tls_port, ssl_context=client_context(certs))
    try:
        command = pb.BaseCommand(type=pb.BaseCommand.CONNECT)
        command.connect.client_version = "forger"
        command.connect.protocol_version = 21
        command.connect.auth_method_name = "token"
        command.connect.auth_data = forged.encode()
        connection.send(command)
        error = connection.expect(pb.BaseCommand.ERROR).command.error
        assert error.error == pb.AuthenticationError, error
    finally:
        connection.close()


@pytest.mark.parametrize("scheme", ["https", "pulsar+ssl"])
def test_go_transactions_over_tls(
    go_client: Path, dual: DualBroker, certs: Certificates, scheme: str
) -> None:
    """The Go client's transactions (its coordinator client looks the coordinators' topic
    up first): over ``https://`` (HTTP lookups, as the Go client's own transaction tests
    connect) and ``pulsar+ssl://``. The committed messages arrive exactly, the aborted ones
    never, nothing is visible before the commit, and the acknowledgements committed in a
    transaction hold for a new consumer."""
    url = dual.https_url if scheme == "https" else dual.tls_url
    count = 4
    seen = go_transactions(
        url, unique_topic("go-txn"), "s", count, tls_trust_certs=certs.ca, timeout_ms=1000
    )
    assert seen.committed == [f"c-{i}" for i in range(count)]
    assert seen.aborted == [f"a-{i}" for i in range(count)]
    assert seen.visible_before_commit == 0
    assert seen.received == seen.committed
    assert seen.redelivered == 0
    assert len(set(seen.transaction_ids)) == 3


def test_java_client_over_tls(dual: DualBroker, certs: Certificates) -> None:
    """The Java client over ``pulsar+ssl://`` with host-name verification and a token:
    plain sends, a transaction committed, one aborted, and the messages received and
    acknowledged in a third, committed; read back with the Python client over TLS."""
    tls = ClientTls(certs.ca, validate_hostname=True, token=dual.token("java-user"))
    topic = unique_topic("java-tls")
    with JavaTransactions(dual.tls_url, tls=tls) as java:
        java.send_plain(topic, "plain-0")
        java.send_plain(topic, "plain-1")
        java.new()
        java.send(topic, "kept-0")
        java.send(topic, "kept-1")
        java.commit()
        java.new()
        java.send(topic, "dropped")
        java.abort()
        java.new()
        expected = ["plain-0", "plain-1", "kept-0", "kept-1"]
        assert java.consume(topic, "acked", 4) == expected
        java.commit()
    assert "authenticated with role java-user using token" in dual.process.tail(400)
    client = pulsar.Client(
        dual.tls_url,
        tls_trust_certs_file_path=str(certs.ca),
        tls_validate_hostname=True,
        authentication=pulsar.AuthenticationToken(dual.token("python-user")),
        operation_timeout_seconds=15,
    )
    try:
        reader = client.subscribe(topic, "all", initial_position=pulsar.InitialPosition.Earliest)
        assert [reader.receive(10_000).data().decode() for _ in expected] == expected
        with pytest.raises(pulsar.Timeout):
            reader.receive(1000)  # nothing of the aborted transaction
        acked = client.subscribe(topic, "acked", consumer_type=pulsar.ConsumerType.Shared)
        with pytest.raises(pulsar.Timeout):
            acked.receive(1000)  # the acknowledgements were committed
    finally:
        client.close()


@pytest.fixture(scope="module")
def listener_cluster(
    kafka_bootstrap: str, certs: Certificates, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ClusterProcesses, dict[int, int]]]:
    """Two brokers with plain and TLS ports; their advertised listeners: ``internal``
    with the plain URL only, ``external`` with a TLS URL only, ``edge`` without one.
    Also: each broker's TLS port by its plain port."""
    cluster = ClusterProcesses(
        kafka_bootstrap,
        tmp_path_factory.mktemp("listeners"),
        size=0,
        settings={**tls_settings(certs), "transaction_coordinator_enabled": True},
    )
    tls_ports: dict[int, int] = {}
    for _ in range(2):
        broker = cluster.add()
        tls_ports[broker.port] = tls_port = free_port()
        broker.settings = {
            **broker.settings,
            "broker_service_port_tls": tls_port,
            "web_service_port_tls": free_port(),
            "advertised_listeners": (
                f"internal:pulsar://localhost:{broker.port},"
                f"external:pulsar+ssl://127.0.0.1:{tls_port},"
                f"edge:pulsar://127.0.0.1:{broker.port}"
            ),
        }
    try:
        cluster.start()
        yield cluster, tls_ports
    finally:
        cluster.stop()


def test_cluster_redirects_tls_lookups_to_the_owners_tls_url(
    listener_cluster: tuple[ClusterProcesses, dict[int, int]], certs: Certificates
) -> None:
    """Asked of the broker that does not own the topic, over TLS: a Redirect to the
    owner's TLS URL with no listener named, with ``internal`` (the owner's TLS port
    completes the listener) and with ``external``; ``edge`` has no TLS URL, so a TLS
    client naming it is told so. The HTTP lookup over HTTPS says the same."""
    cluster, tls_ports = listener_cluster
    candidates = [unique_topic("redirect") for _ in range(32)]
    owners = {topic: owner_of(cluster, topic) for topic in candidates}
    assert set(owners.values()) == set(cluster.brokers), "both brokers own some topic"
    # Four owned by each broker (eight random names alone may all fall on one).
    topics = [t for b in cluster for t in [t for t in candidates if owners[t] is b][:4]]
    context = client_context(certs)
    for topic in topics:
        owner = owners[topic]
        asked = next(b for b in cluster if b is not owner)
        owner_tls = tls_ports[owner.port]
        connection = tls_connection(tls_ports[asked.port], certs)
        try:
            for request_id, (listener, tls_url) in enumerate(
                [
                    ("", f"pulsar+ssl://localhost:{owner_tls}"),
                    ("internal", f"pulsar+ssl://localhost:{owner_tls}"),
                    ("external", f"pulsar+ssl://127.0.0.1:{owner_tls}"),
                ],
                start=1,
            ):
                answer = lookup(connection, topic, request_id, listener)
                assert answer.response == pb.CommandLookupTopicResponse.Redirect, answer
                assert answer.brokerServiceUrlTls == tls_url, (listener, answer)
            edge = lookup(connection, topic, 9, "edge")
            assert edge.response == pb.CommandLookupTopicResponse.Failed, edge
            assert "no pulsar+ssl URL" in edge.message
        finally:
            connection.close()
        https = asked.settings["web_service_port_tls"]
        path = f"/lookup/v2/topic/persistent/{topic.removeprefix('persistent://')}"
        for query in ("", "?listenerName=internal"):
            data = http_json(f"https://localhost:{https}{path}{query}", context)
            assert data["brokerUrlTls"] == f"pulsar+ssl://localhost:{owner_tls}", data
            assert (
                data["httpUrlTls"] == f"https://localhost:{owner.settings['web_service_port_tls']}"
            )


@pytest.mark.parametrize("listener", [None, "internal"])
def test_go_client_through_a_cluster_over_tls(
    go_client: Path,
    listener_cluster: tuple[ClusterProcesses, dict[int, int]],
    certs: Certificates,
    listener: str | None,
) -> None:
    """The Go client given one broker's TLS URL reaches the topics of both (host names
    verified), and runs its transactions there, with and without a listener name."""
    cluster, tls_ports = listener_cluster
    url = f"pulsar+ssl://localhost:{tls_ports[cluster[0].port]}"
    options: dict[str, Any] = {
        "tls_trust_certs": certs.ca,
        "tls_validate_hostname": True,
        "listener_name": listener,
    }
    owned: dict[int, str] = {}
    while len(owned) < 2:
        topic = unique_topic("go-cluster")
        owned.setdefault(owner_of(cluster, topic).port, topic)
    for topic in owned.values():
        go_produce(url, topic, 3, **options)
        consumed = go_consume(url, topic, "s", 3, **options)
        assert [m.value for m in consumed.messages] == ["m-0", "m-1", "m-2"]
    seen = go_transactions(url, unique_topic("go-cluster-txn"), "s", 2, timeout_ms=1000, **options)
    assert seen.received == seen.committed == ["c-0", "c-1"]
    assert seen.visible_before_commit == seen.redelivered == 0
