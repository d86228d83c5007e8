"""The official Pulsar Go client (``pulsar-client-go``, built from the Go module proxy)
produces and consumes unmodified: unbatched and batched sends (default and key-based
batching), deduplication of resent sequence ids, ``pulsar+ssl://`` with the CA as
trust certificate, its ``BytesSchema`` (the schema version its messages carry is one its
consumers can ask for), and a producer whose topic is terminated under it (it fails with
the client's ``ErrTopicTerminated``, as on Pulsar, instead of timing out)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.admin_http import http_request
from harness.broker_process import BrokerProcess, free_port
from harness.pulsar_go import ensure_go_client, go_consume, go_produce, go_terminate_while_sending
from harness.pulsar_java import Batching, ReceivedMessage, java_payload, sha256_hex
from tests.integration.conftest import make_broker, serve
from tests.optional_pieces import require
from tests.tls_certificates import Certificates, make_certificates


@pytest.fixture(scope="module")
def go_client() -> Path:
    require("go")
    return ensure_go_client()


@pytest.fixture
def dedup_broker(kafka_bootstrap: str, tmp_path: Path) -> Iterator[BrokerProcess]:
    yield from serve(kafka_bootstrap, tmp_path, broker_deduplication_enabled=True)


@pytest.fixture(scope="module")
def plain_broker(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BrokerProcess]:
    yield from serve(kafka_bootstrap, tmp_path_factory.mktemp("go-plain"))


@pytest.fixture
def tls_broker(kafka_bootstrap: str, tmp_path: Path) -> Iterator[tuple[str, Certificates]]:
    """A broker serving ``pulsar+ssl://`` only (its plain port off), and its certificates."""
    certs = make_certificates(tmp_path)
    tls_port = free_port()
    process = make_broker(
        kafka_bootstrap,
        tmp_path,
        broker_service_port="none",
        broker_service_port_tls=tls_port,
        web_service_port_tls=free_port(),
        tls_certificate_file_path=str(certs.server_cert),
        tls_key_file_path=str(certs.server_key),
        tls_trust_certs_file_path=str(certs.ca),
    )
    process.start()
    try:
        yield f"pulsar+ssl://localhost:{tls_port}", certs
    finally:
        process.stop()


def _expected(index: int, key: str | None = None) -> tuple[object, ...]:
    payload = java_payload(index)
    return (key, len(payload), sha256_hex(payload), payload.decode())


def _seen(messages: list[ReceivedMessage]) -> list[tuple[object, ...]]:
    return [(m.key, m.size, m.sha256, m.value) for m in messages]


def test_go_unbatched_messages_arrive_exactly_and_in_order(
    go_client: Path, broker: BrokerProcess, topic: str
) -> None:
    url, count = broker.service_url, 20
    produced = go_produce(url, topic, count, name="go-plain")
    assert produced.last_sequence_id == -1
    assert [m.sequence_id for m in produced.sent] == list(range(count))
    assert not any(m.duplicate for m in produced.sent)
    # One entry per message: batch index 0 everywhere, entries strictly increasing.
    entries = [m.message_id.split(":") for m in produced.sent]
    assert [e[3] for e in entries] == ["0"] * count
    assert [int(e[1]) for e in entries] == sorted({int(e[1]) for e in entries})

    consumed = go_consume(url, topic, "go-sub", count)
    assert _seen(consumed.messages) == [_expected(i) for i in range(count)]
    assert {m.producer_name for m in consumed.messages} == {"go-plain"}
    assert [m.message_id for m in consumed.messages] == [m.message_id for m in produced.sent]


@pytest.mark.parametrize(("batching", "keys"), [("default", 0), ("key", 3)])
def test_go_batched_messages_arrive_each_exactly_once(
    go_client: Path, broker: BrokerProcess, topic: str, batching: Batching, keys: int
) -> None:
    url, count = broker.service_url, 120
    produced = go_produce(url, topic, count, name="go-batch", batching=batching, keys=keys)
    assert [m.sequence_id for m in produced.sent] == list(range(count))
    assert not any(m.duplicate for m in produced.sent)
    # The sends shared batches: some message sits past index 0 of its entry.
    assert any(m.message_id.split(":")[3] != "0" for m in produced.sent)

    consumed = go_consume(url, topic, "go-sub", count + 1, timeout_ms=3000)
    assert consumed.timed_out
    got = _seen(consumed.messages)
    assert len(got) == count
    assert sorted(got, key=lambda m: int(str(m[3])[2:])) == [
        _expected(i, f"k{i % keys}" if keys else None) for i in range(count)
    ]
    for k in range(keys):
        per_key = [int(str(m[3])[2:]) for m in got if m[0] == f"k{k}"]
        assert per_key == list(range(k, count, keys))


@pytest.mark.parametrize("batching", ["none", "default"])
def test_go_producer_resending_ids_is_answered_as_duplicate(
    go_client: Path, dedup_broker: BrokerProcess, topic: str, batching: Batching
) -> None:
    url = dedup_broker.service_url
    first = go_produce(url, topic, 10, name="go-app", batching=batching)
    assert first.last_sequence_id == -1
    assert not any(m.duplicate for m in first.sent)
    # The same producer name again: the broker remembers 9, so ids 0..9 are duplicates
    # and 10..14 new. (Each run is a batch of its own when batching: a batch that is
    # partly stored and partly new is judged as a whole.)
    again = go_produce(url, topic, 10, name="go-app", batching=batching)
    assert [m.duplicate for m in again.sent] == [True] * 10
    more = go_produce(url, topic, 5, name="go-app", batching=batching, first=10)
    assert not any(m.duplicate for m in more.sent)

    consumed = go_consume(url, topic, "go-sub", 16, timeout_ms=3000)
    assert _seen(consumed.messages) == [_expected(i) for i in range(15)]


def test_go_client_over_tls_with_the_ca_as_trust_cert(
    go_client: Path, tls_broker: tuple[str, Certificates], topic: str
) -> None:
    url, certs = tls_broker
    produced = go_produce(
        url, topic, 10, name="go-tls", tls_trust_certs=certs.ca, tls_validate_hostname=True
    )
    assert [m.sequence_id for m in produced.sent] == list(range(10))
    consumed = go_consume(
        url, topic, "go-sub", 10, tls_trust_certs=certs.ca, tls_validate_hostname=True
    )
    assert _seen(consumed.messages) == [_expected(i) for i in range(10)]


def test_go_bytes_schema_messages_decode_with_the_version_they_carry(
    go_client: Path, plain_broker: BrokerProcess, topic: str
) -> None:
    """The Go client's ``BytesSchema`` names type ``NONE``: registered as the topic's
    version 0, as Pulsar does, written by the producer into its messages, and found when
    the consumer's ``GetSchemaValue`` asks for it (the Go client's ``TestBytesSchema``
    and ``TestTableViewSchemas``)."""
    url = plain_broker.service_url
    produced = go_produce(url, topic, 3, schema="bytes")
    assert [m.sequence_id for m in produced.sent] == [0, 1, 2]
    events = go_consume(url, topic, "go-bytes", 3, timeout_ms=5000, schema="bytes")
    assert [m.value for m in events.messages] == [java_payload(i).decode() for i in range(3)]
    path = topic.removeprefix("persistent://")
    status, body = http_request("GET", f"{plain_broker.http_url}/admin/v2/schemas/{path}/schema")
    assert status == 200, body
    schema = json.loads(body)
    assert (schema["version"], schema["type"], schema["data"]) == (0, "NONE", "")


def test_go_producer_of_a_terminated_topic_fails_with_topic_terminated(
    go_client: Path, plain_broker: BrokerProcess, topic: str
) -> None:
    """A producer sending one message after the other when its topic is terminated (a
    consumer that acknowledges nothing on it): the first send that fails says
    ``ErrTopicTerminated`` (or ``ErrProducerClosed``) within the send timeout, as the Go
    client's ``TestTopicTermination`` expects from Pulsar: the broker closes the producer
    and refuses it when it comes back; a send met meanwhile is not refused on its own
    (a SEND_ERROR makes the Go client forget the producer and its sends time out), and
    the consumer is not told the end while it has unacknowledged messages (the Go client
    drops its connection, its producer's too, on that command)."""
    seen = go_terminate_while_sending(
        plain_broker.service_url, topic, "go-ended", plain_broker.http_url, send_timeout_ms=2000
    )
    assert seen.status == 200
    assert seen.error is not None
    assert seen.topic_terminated or seen.producer_closed, seen
    assert seen.after_ms < 2000, seen
