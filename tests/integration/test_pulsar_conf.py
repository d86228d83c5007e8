"""A Pulsar standalone.conf given to ``dedup-broker serve -c`` starts a working broker."""

from __future__ import annotations

import json
import urllib.request
import uuid
from pathlib import Path

import pulsar

from harness.broker_process import BrokerProcess

PULSAR_STANDALONE = Path(__file__).parent / "data" / "pulsar-standalone.conf"


class ConfiguredBroker(BrokerProcess):
    command = ("serve", "-c", str(PULSAR_STANDALONE))


def test_serve_with_a_pulsar_standalone_conf(kafka_bootstrap: str, tmp_path: Path) -> None:
    broker = ConfiguredBroker(
        kafka_bootstrap, cluster_name=f"t-{uuid.uuid4().hex[:10]}", log_dir=tmp_path
    )
    broker.start()
    try:
        log = broker.log_text()
        assert "settings are not implemented by dedup-broker and were ignored" in log
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=30)
        try:
            topic = f"persistent://public/default/conf-{uuid.uuid4().hex[:8]}"
            consumer = client.subscribe(topic, "s")
            producer = client.create_producer(topic, producer_name="p", send_timeout_millis=0)
            for i in range(3):
                producer.send(f"m{i}".encode(), sequence_id=i)
            producer.send(b"m1-again", sequence_id=1)  # the file turns PIP-6 on
            got = [consumer.receive(timeout_millis=10000).data() for _ in range(3)]
            assert got == [b"m0", b"m1", b"m2"]
            stats = broker_stats(broker, topic)
            assert stats["msgInCounter"] == 3
        finally:
            client.close()
    finally:
        broker.stop()


def broker_stats(broker: BrokerProcess, topic: str) -> dict[str, object]:
    local = topic.rsplit("/", 1)[-1]
    url = f"{broker.http_url}/admin/v2/persistent/public/default/{local}/stats"
    with urllib.request.urlopen(url, timeout=10) as response:
        result: dict[str, object] = json.loads(response.read())
        return result


class PulsarSettingsBroker(BrokerProcess):
    command = ("serve", "--set", "topicLevelPoliciesEnabled=true")


def test_serve_takes_pulsar_settings_it_does_not_implement(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """As deployments pass them: on the command line and in the environment."""
    broker = PulsarSettingsBroker(
        kafka_bootstrap,
        cluster_name=f"t-{uuid.uuid4().hex[:10]}",
        settings={"load_balancer_enabled": False},
        log_dir=tmp_path,
    )
    broker.start()
    try:
        log = broker.log_text()
        assert "overrides (--set): 1 Pulsar settings are not implemented" in log
        assert "the environment: 1 Pulsar settings are not implemented" in log
        assert "(they have no effect here): topicLevelPoliciesEnabled" in log
        assert "(they have no effect here): loadBalancerEnabled" in log
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=30)
        try:
            topic = f"persistent://public/default/set-{uuid.uuid4().hex[:8]}"
            consumer = client.subscribe(topic, "s")
            client.create_producer(topic).send(b"served")
            assert consumer.receive(timeout_millis=10000).data() == b"served"
        finally:
            client.close()
    finally:
        broker.stop()
