"""Topic and namespace policies with Pulsar's own ``pulsar-admin`` (4.0.6), and the ones
in effect seen by the official Python client."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pulsar
import pytest

from harness.admin_http import http_request
from harness.broker_process import BrokerProcess
from harness.pulsar_tools import (
    AdminOutcome,
    ensure_pulsar_tools,
    run_pulsar_admin_batch,
    write_client_conf,
)

NAMESPACE = "public/default"


@pytest.fixture(scope="module")
def tools() -> Path:
    return ensure_pulsar_tools()


def _last_line(outcome: AdminOutcome) -> str:
    lines = [line for line in outcome.output.splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def _json(outcome: AdminOutcome) -> object:
    text = outcome.output
    return json.loads(text[text.index("{") : text.rindex("}") + 1])


def test_topic_and_namespace_policies_with_pulsar_admin(
    tools: Path, broker: BrokerProcess, tmp_path: Path
) -> None:
    topic = f"persistent://{NAMESPACE}/policies-{uuid.uuid4().hex[:8]}"
    partitioned = f"persistent://{NAMESPACE}/policies-p-{uuid.uuid4().hex[:8]}"
    missing = f"persistent://{NAMESPACE}/missing-{uuid.uuid4().hex[:8]}"
    conf = write_client_conf(tmp_path / "client.conf", broker.service_url, broker.http_url)
    commands: dict[str, list[str]] = {
        "create": ["topics", "create", topic],
        "create partitioned": ["topics", "create-partitioned-topic", partitioned, "-p", "2"],
        "unset": ["topics", "get-max-unacked-messages-per-consumer", topic],
        "applied broker": ["topics", "get-max-unacked-messages-per-consumer", topic, "-ap"],
        "set ns": ["namespaces", "set-max-unacked-messages-per-consumer", NAMESPACE, "-c", "7"],
        "get ns": ["namespaces", "get-max-unacked-messages-per-consumer", NAMESPACE],
        "applied ns": ["topics", "get-max-unacked-messages-per-consumer", topic, "-ap"],
        "set topic": ["topics", "set-max-unacked-messages-per-consumer", topic, "-m", "5"],
        "get topic": ["topics", "get-max-unacked-messages-per-consumer", topic],
        "applied topic": ["topics", "get-max-unacked-messages-per-consumer", topic, "-ap"],
        "remove topic": ["topics", "remove-max-unacked-messages-per-consumer", topic],
        "applied again": ["topics", "get-max-unacked-messages-per-consumer", topic, "-ap"],
        "negative": ["topics", "set-max-unacked-messages-per-consumer", topic, "-m", "-1"],
        "partition": [
            "topics",
            "get-max-unacked-messages-per-consumer",
            f"{partitioned}-partition-0",
        ],
        "on partitioned": [
            "topics",
            "set-max-unacked-messages-per-consumer",
            partitioned,
            "-m",
            "9",
        ],
        "missing": ["topics", "get-max-unacked-messages-per-consumer", missing],
        "set producers": ["topics", "set-max-producers", topic, "-p", "3"],
        "get producers": ["topics", "get-max-producers", topic],
        "ns consumers": ["namespaces", "set-max-consumers-per-topic", NAMESPACE, "-c", "11"],
        "applied consumers": ["topics", "get-max-consumers", topic, "-ap"],
        "set ttl": ["topics", "set-message-ttl", topic, "-t", "120"],
        "get ttl": ["topics", "get-message-ttl", topic],
        "ns ttl": ["namespaces", "set-message-ttl", NAMESPACE, "-ttl", "300"],
        "get ns ttl": ["namespaces", "get-message-ttl", NAMESPACE],
        "set rate": ["topics", "set-dispatch-rate", topic, "-md", "100", "-bd", "2048", "-dt", "2"],
        "get rate": ["topics", "get-dispatch-rate", topic],
        "applied sub rate": ["topics", "get-subscription-dispatch-rate", topic, "-ap"],
        "set persistence": ["topics", "set-persistence", topic, "-e", "3", "-w", "2", "-a", "2"],
        "get persistence": ["topics", "get-persistence", topic],
        "bad persistence": ["topics", "set-persistence", topic, "-e", "1", "-w", "2", "-a", "1"],
        "set inactive": [
            "topics",
            "set-inactive-topic-policies",
            topic,
            "-e",
            "-t",
            "1h",
            "-m",
            "delete_when_subscriptions_caught_up",
        ],
        "get inactive": ["topics", "get-inactive-topic-policies", topic],
        "set types": ["topics", "set-subscription-types-enabled", topic, "-t", "Shared,Failover"],
        "get types": ["topics", "get-subscription-types-enabled", topic],
        "set delayed": ["topics", "set-delayed-delivery", topic, "-e", "-t", "2s"],
        "get delayed": ["topics", "get-delayed-delivery", topic],
        "set size": ["topics", "set-max-message-size", topic, "-m", "1024"],
        "get size": ["topics", "get-max-message-size", topic],
        "set publish": ["topics", "set-publish-rate", topic, "-m", "10", "-b", "1000"],
        "get publish": ["topics", "get-publish-rate", topic],
        "set subscribe": ["topics", "set-subscribe-rate", topic, "-sr", "5", "-st", "10"],
        "get subscribe": ["topics", "get-subscribe-rate", topic],
        "set subs": ["topicPolicies", "set-max-subscriptions-per-topic", topic, "-s", "4"],
        "get subs": ["topicPolicies", "get-max-subscriptions-per-topic", topic],
        "set per sub": ["topics", "set-max-consumers-per-subscription", topic, "-c", "2"],
        "get per sub": ["topics", "get-max-consumers-per-subscription", topic],
        "set sub unacked": [
            "topics",
            "set-max-unacked-messages-per-subscription",
            topic,
            "-m",
            "8",
        ],
        "get sub unacked": ["topics", "get-max-unacked-messages-per-subscription", topic],
    }
    outcomes = dict(
        zip(commands, run_pulsar_admin_batch(conf, list(commands.values())), strict=True)
    )
    expected_failures = {"negative", "partition", "missing", "bad persistence"}
    failed = {name for name, outcome in outcomes.items() if outcome.exit_code != 0}
    assert failed == expected_failures, "\n".join(
        f"{o.args}: {o.exit_code}\n{o.output[-600:]}" for o in outcomes.values()
    )
    assert _last_line(outcomes["unset"]) == "null"
    assert _last_line(outcomes["applied broker"]) == "50000"  # maxUnackedMessagesPerConsumer
    assert _last_line(outcomes["get ns"]) == "7"
    assert _last_line(outcomes["applied ns"]) == "7"
    assert _last_line(outcomes["get topic"]) == "5"
    assert _last_line(outcomes["applied topic"]) == "5"
    assert _last_line(outcomes["applied again"]) == "7"
    assert "maxUnackedNum must be 0 or more" in outcomes["negative"].output
    assert "Not allowed to set/get topic policy for a partition" in outcomes["partition"].output
    assert "not found" in outcomes["missing"].output
    assert _last_line(outcomes["get producers"]) == "3"
    assert _last_line(outcomes["applied consumers"]) == "11"
    assert _last_line(outcomes["get ttl"]) == "120"
    assert _last_line(outcomes["get ns ttl"]) == "300"
    assert _json(outcomes["get rate"]) == {
        "dispatchThrottlingRateInMsg": 100,
        "dispatchThrottlingRateInByte": 2048,
        "relativeToPublishRate": False,
        "ratePeriodInSecond": 2,
    }
    applied_rate = _json(outcomes["applied sub rate"])
    assert isinstance(applied_rate, dict) and applied_rate["dispatchThrottlingRateInMsg"] == 0
    persistence = _json(outcomes["get persistence"])
    assert isinstance(persistence, dict)
    assert (persistence["bookkeeperEnsemble"], persistence["bookkeeperAckQuorum"]) == (3, 2)
    assert "Bookkeeper Ensemble (1) >= WriteQuorum (2) >= AckQuorum (1)" in (
        outcomes["bad persistence"].output
    )
    inactive = _json(outcomes["get inactive"])
    assert inactive == {
        "inactiveTopicDeleteMode": "delete_when_subscriptions_caught_up",
        "maxInactiveDurationSeconds": 3600,
        "deleteWhileInactive": True,
    }
    assert "Shared" in outcomes["get types"].output and "Failover" in outcomes["get types"].output
    delayed = _json(outcomes["get delayed"])
    assert isinstance(delayed, dict) and (delayed["tickTime"], delayed["active"]) == (2000, True)
    assert _last_line(outcomes["get size"]) == "1024"
    publish = _json(outcomes["get publish"])
    assert isinstance(publish, dict) and publish["publishThrottlingRateInMsg"] == 10
    subscribe = _json(outcomes["get subscribe"])
    assert isinstance(subscribe, dict) and subscribe["subscribeThrottlingRatePerConsumer"] == 5
    assert _last_line(outcomes["get subs"]) == "4"
    assert _last_line(outcomes["get per sub"]) == "2"
    assert _last_line(outcomes["get sub unacked"]) == "8"


def test_a_shared_consumer_stops_at_its_topics_unacked_limit_until_it_acknowledges(
    broker: BrokerProcess,
) -> None:
    local = f"unacked-{uuid.uuid4().hex[:8]}"
    topic = f"persistent://{NAMESPACE}/{local}"
    policy = (
        f"{broker.http_url}/admin/v2/persistent/{NAMESPACE}/{local}/maxUnackedMessagesOnConsumer"
    )
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=30)
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        assert http_request("POST", policy, b"3")[0] == 204
        consumer = client.subscribe(
            topic,
            "shared",
            consumer_type=pulsar.ConsumerType.Shared,
            initial_position=pulsar.InitialPosition.Earliest,
        )
        for i in range(6):
            producer.send(f"m{i}".encode())
        received = [consumer.receive(timeout_millis=10_000) for _ in range(3)]
        assert [m.data() for m in received] == [b"m0", b"m1", b"m2"]
        with pytest.raises(pulsar.Timeout):
            consumer.receive(timeout_millis=2_000)
        consumer.acknowledge(received[0])
        assert consumer.receive(timeout_millis=10_000).data() == b"m3"
        with pytest.raises(pulsar.Timeout):
            consumer.receive(timeout_millis=1_000)
        stats = json.loads(http_request("GET", policy.rsplit("/", 1)[0] + "/stats")[1])
        assert stats["subscriptions"]["shared"]["consumers"][0]["unackedMessages"] == 3

        assert http_request("POST", policy.replace("OnConsumer", "x"), b"3")[0] == 404
        status, body = http_request("POST", policy, b'"-2"')
        assert (status, json.loads(body)["reason"]) == (412, "maxUnackedNum must be 0 or more")
        assert http_request("POST", policy, b"plenty")[0] == 400
    finally:
        client.close()


def test_producer_and_consumer_limits_of_a_namespace_and_a_topic(broker: BrokerProcess) -> None:
    local = f"limits-{uuid.uuid4().hex[:8]}"
    topic = f"persistent://{NAMESPACE}/{local}"
    admin = f"{broker.http_url}/admin/v2"
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
    try:
        client.create_producer(topic, producer_name="first")
        assert (
            http_request("POST", f"{admin}/namespaces/{NAMESPACE}/maxProducersPerTopic", b"1")[0]
            == 204
        )
        with pytest.raises(pulsar.ProducerBusy):
            client.create_producer(topic, producer_name="second")
        assert (
            http_request("POST", f"{admin}/persistent/{NAMESPACE}/{local}/maxProducers", b"2")[0]
            == 204
        )
        client.create_producer(topic, producer_name="second")

        limit = f"{admin}/persistent/{NAMESPACE}/{local}/maxConsumersPerSubscription"
        assert http_request("POST", limit, b"1")[0] == 204
        shared = pulsar.ConsumerType.Shared
        client.subscribe(topic, "s", consumer_type=shared)
        with pytest.raises(pulsar.ConsumerBusy):
            client.subscribe(topic, "s", consumer_type=shared)
    finally:
        client.close()
