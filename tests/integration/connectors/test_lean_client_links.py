"""The lean client's links: ``pulsar+ssl://`` with a TLS client certificate as credentials
(refused without it), and a cluster whose other broker owns the topic (the lookup is
redirected, for writing and for reading)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pyarrow as pa
import pytest

from connectors.arrow_reader import read_arrow_range
from connectors.arrow_writer import write_arrow_partition
from connectors.client_security import ClientSecurity
from connectors.datasource_reader import arrow_schema
from connectors.positions import NOTHING, Position
from connectors.sink_options import Routing, SinkMode, SinkPublishError, WriterSpec
from connectors.wire import EntryReader, WireClient, WireSettings
from harness.cluster_processes import ClusterProcesses
from tests.integration.cluster.conftest import owner_of
from tests.integration.connectors.sink_fixtures import stored_values
from tests.integration.security.test_tls import TlsBroker

# The TLS tests' fixtures: a CA, a client certificate, a broker that authenticates with it.
from tests.integration.security.test_tls import certs as certs
from tests.integration.security.test_tls import tls_auth as tls_auth
from tests.tls_certificates import Certificates

pytestmark = pytest.mark.timeout(300)

VALUES = [f"row-{i}".encode() for i in range(500)]


def write(service_url: str, topic: str, **options: object) -> int:
    spec = WriterSpec(
        service_url=service_url,
        topic=topic,
        mode=SinkMode.SEQUENCE,
        name="links",
        batch_id=1,
        routing=Routing.SPARK_PARTITION,
        value_index=0,
        client_options=tuple(options.items()),
    )
    batch = pa.record_batch([pa.array(VALUES, pa.binary())], names=["value"])
    return write_arrow_partition(spec, 0, [batch]).stored


def last_position(service_url: str, topic: str, settings: WireSettings) -> Position:
    """The position of the topic's last entry, read with the lean reader."""
    client = WireClient(service_url, settings)
    try:
        reader = EntryReader.create(client, topic)
        last = None
        while (entry := reader.receive(3)) is not None:
            last = Position(entry.ledger_id, entry.entry_id)
        reader.close()
    finally:
        client.close()
    assert last is not None
    return last


def test_tls_with_a_client_certificate(
    tls_auth: TlsBroker,
    certs: Certificates,
) -> None:
    topic = f"persistent://public/default/lean-tls-{uuid.uuid4().hex[:8]}"
    url = tls_auth.url("localhost")
    credentials = {
        "tls_trust_certs_file_path": str(certs.ca),
        "tls_certificate_file": str(certs.client_cert),
        "tls_key_file": str(certs.client_key),
        "tls_validate_hostname": True,
    }
    assert write(url, topic, **credentials) == len(VALUES)
    security = ClientSecurity(**credentials)
    end = last_position(url, topic, WireSettings(security=security))
    batches = read_arrow_range(url, security, topic, NOTHING, end, 10_000, arrow_schema())
    assert [v for b in batches for v in b.column("value").to_pylist()] == VALUES

    with pytest.raises(SinkPublishError, match=r"(?i)authentication|connect"):
        write(url, topic, tls_trust_certs_file_path=str(certs.ca), operation_timeout_seconds=3)


def test_lookups_are_redirected_to_the_owner(kafka_bootstrap: str, tmp_path: Path) -> None:
    cluster = ClusterProcesses(kafka_bootstrap, tmp_path, size=2)
    try:
        cluster.start()
        entry = cluster[0]
        url = f"pulsar://127.0.0.1:{entry.port}"
        topics = [
            f"persistent://public/default/lean-owner-{uuid.uuid4().hex[:8]}" for _ in range(8)
        ]
        for topic in topics:
            assert write(url, topic) == len(VALUES)
        elsewhere = [t for t in topics if owner_of(cluster, t) is not entry]
        assert elsewhere, "every topic landed on the broker asked; the test needs another"
        for topic in elsewhere[:2]:
            assert stored_values(cluster.service_url, topic) == [v.decode() for v in VALUES]
            end = last_position(url, topic, WireSettings())
            batches = read_arrow_range(
                url, ClientSecurity(), topic, NOTHING, end, 10_000, arrow_schema()
            )
            assert [v for b in batches for v in b.column("value").to_pylist()] == VALUES
    finally:
        cluster.stop()
