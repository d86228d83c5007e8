"""The official ``pulsar-admin`` CLI (4.0.6, from Maven Central) against the admin API.

Every command runs in one JVM (start-up dominates); each command's exit code and output
are those pulsar-admin gives a user.
"""

from __future__ import annotations

import json
from pathlib import Path

import pulsar
import pytest
import requests

from harness.broker_process import BrokerProcess
from harness.pulsar_tools import (
    AdminOutcome,
    ensure_pulsar_tools,
    run_pulsar_admin_batch,
    write_client_conf,
)

NAMESPACE = "public/default"
TOPIC = "persistent://public/default/admin-topic"
PARTITIONED = "persistent://public/default/admin-partitioned"


@pytest.fixture(scope="module")
def tools() -> Path:
    return ensure_pulsar_tools()


def _by_command(outcomes: list[AdminOutcome]) -> dict[str, AdminOutcome]:
    return {" ".join(o.args[:2]) + f"#{i}": o for i, o in enumerate(outcomes)}


def test_pulsar_admin_commands(tools: Path, broker: BrokerProcess, tmp_path: Path) -> None:
    client = pulsar.Client(broker.service_url)
    try:
        producer = client.create_producer(f"{PARTITIONED}-seed")
        producer.send(b"seed")
    finally:
        client.close()
    conf = write_client_conf(tmp_path / "client.conf", broker.service_url, broker.http_url)
    commands: list[list[str]] = [
        ["topics", "create", TOPIC],  # 0
        ["topics", "create", TOPIC],  # 1: exists already
        ["topics", "create-partitioned-topic", PARTITIONED, "-p", "3"],  # 2
        ["topics", "list", NAMESPACE],  # 3
        ["topics", "list-partitioned-topics", NAMESPACE],  # 4
        ["topics", "get-partitioned-topic-metadata", PARTITIONED],  # 5
        ["topics", "update-partitioned-topic", PARTITIONED, "-p", "4"],  # 6
        ["topics", "stats", f"{PARTITIONED}-seed"],  # 7
        ["topics", "stats-internal", TOPIC],  # 8
        ["topics", "partitioned-stats", PARTITIONED],  # 9
        ["topics", "subscriptions", TOPIC],  # 10
        ["topics", "unload", TOPIC],  # 11
        ["topics", "offload-status", TOPIC],  # 12
        ["namespaces", "set-deduplication", NAMESPACE, "--enable"],  # 13
        ["namespaces", "get-deduplication", NAMESPACE],  # 14
        ["namespaces", "set-retention", NAMESPACE, "--size", "10M", "--time", "1h"],  # 15
        ["namespaces", "get-retention", NAMESPACE],  # 16
        ["namespaces", "remove-retention", NAMESPACE],  # 17
        ["namespaces", "get-retention", NAMESPACE],  # 18
        ["namespaces", "bundles", NAMESPACE],  # 19
        ["brokers", "healthcheck"],  # 20
        ["topics", "delete", TOPIC],  # 21
        ["topics", "delete-partitioned-topic", PARTITIONED],  # 22
        ["topics", "list", NAMESPACE],  # 23
        ["topics", "delete", TOPIC],  # 24: gone already (pulsar-admin still exits 0)
    ]
    out = run_pulsar_admin_batch(conf, commands)
    codes = [o.exit_code for o in out]
    expected_failures = {1}
    assert [i for i, code in enumerate(codes) if code != 0] == sorted(expected_failures), "\n".join(
        f"{o.args}: {o.exit_code}\n{o.output[-600:]}" for o in out
    )
    assert "already exists" in out[1].output
    partitions = [f"{PARTITIONED}-partition-{i}" for i in range(3)]
    assert _json_lines(out[3].output) == sorted([TOPIC, f"{PARTITIONED}-seed", *partitions])
    assert _json_lines(out[4].output) == [PARTITIONED]
    assert json.loads(out[5].output)["partitions"] == 3
    stats = json.loads(out[7].output)
    assert stats["msgInCounter"] == 1
    assert stats["deduplicationStatus"] == "Disabled"
    assert json.loads(out[8].output)["numberOfEntries"] == 0
    assert json.loads(out[9].output)["metadata"]["partitions"] == 4
    assert out[10].output.strip() == ""
    assert "Offload has not been run" in out[12].output
    assert out[14].output.strip() == "true"
    assert json.loads(out[16].output) == {"retentionTimeInMinutes": 60, "retentionSizeInMB": 10}
    assert out[18].output.strip() in ("", "null")
    assert json.loads(out[19].output)["numBundles"] >= 1
    assert out[20].output.strip() == "ok"
    assert _json_lines(out[23].output) == [f"{PARTITIONED}-seed"]
    assert "Failed to delete topic" in out[24].output
    assert "does not exist" in out[24].output

    # The namespace policy set through the CLI is the broker's.
    policy = requests.get(f"{broker.http_url}/admin/v2/namespaces/{NAMESPACE}/deduplication")
    assert policy.json() is True


def test_pulsar_admin_tenants_namespaces_and_permissions(
    tools: Path, broker: BrokerProcess, tmp_path: Path
) -> None:
    conf = write_client_conf(tmp_path / "client.conf", broker.service_url, broker.http_url)
    cluster = broker.cluster_name
    commands = [
        ["tenants", "create", "acme", "--admin-roles", "alice", "--allowed-clusters", cluster],
        ["tenants", "list"],  # 1
        ["tenants", "get", "acme"],  # 2
        ["namespaces", "create", "acme/app"],  # 3
        ["namespaces", "list", "acme"],  # 4
        ["namespaces", "grant-permission", "acme/app", "--role", "bob", "--actions", "produce"],
        ["namespaces", "permissions", "acme/app"],  # 6
        ["namespaces", "revoke-permission", "acme/app", "--role", "bob"],  # 7
        ["namespaces", "permissions", "acme/app"],  # 8
        ["tenants", "delete", "acme"],  # 9: it still has a namespace
        ["namespaces", "delete", "acme/app"],  # 10
        ["tenants", "delete", "acme"],  # 11
        ["tenants", "list"],  # 12
    ]
    out = run_pulsar_admin_batch(conf, commands)
    codes = [o.exit_code for o in out]
    assert [i for i, code in enumerate(codes) if code != 0] == [9], "\n".join(
        f"{o.args}: {o.exit_code}\n{o.output[-600:]}" for o in out
    )
    assert {"acme", "public"} <= set(out[1].output.split())
    assert json.loads(out[2].output) == {"adminRoles": ["alice"], "allowedClusters": [cluster]}
    assert "acme/app" in out[4].output.split()
    assert out[6].output.split() == ["bob", "[produce]"]
    assert "bob" not in out[8].output
    assert "active namespaces" in out[9].output
    assert "acme" not in out[12].output.split()


def test_pulsar_admin_schemas(tools: Path, broker: BrokerProcess, tmp_path: Path) -> None:
    conf = write_client_conf(tmp_path / "client.conf", broker.service_url, broker.http_url)
    topic = "persistent://public/default/admin-schemas"
    record = {
        "type": "record",
        "name": "Order",
        "fields": [{"name": "id", "type": "long"}, {"name": "item", "type": "string"}],
    }
    definition = tmp_path / "order.json"
    definition.write_text(
        json.dumps({"type": "JSON", "schema": json.dumps(record), "properties": {}})
    )
    commands = [
        ["schemas", "upload", topic, "-f", str(definition)],  # 0
        ["schemas", "get", topic],  # 1
        ["schemas", "upload", topic, "-f", str(definition)],  # 2: the same schema again
        ["schemas", "get", topic, "--version", "0"],  # 3
        ["schemas", "delete", topic],  # 4
        ["schemas", "get", topic],  # 5: gone
    ]
    out = run_pulsar_admin_batch(conf, commands)
    codes = [o.exit_code for o in out]
    assert [i for i, code in enumerate(codes) if code != 0] == [5], "\n".join(
        f"{o.args}: {o.exit_code}\n{o.output[-600:]}" for o in out
    )

    def shown(index: int) -> dict[str, object]:
        text = out[index].output
        parsed: dict[str, object] = json.loads(text[text.index("{") :])
        return parsed

    latest = shown(1)  # the latest: its version and the schema (parsed for JSON schemas)
    assert latest["version"] == 0
    assert latest["schemaInfo"] == {**shown(3), "timestamp": shown(3)["timestamp"]}
    assert shown(3)["type"] == "JSON"
    assert shown(3)["schema"] == record


def test_pulsar_admin_create_subscription(
    tools: Path, broker: BrokerProcess, tmp_path: Path
) -> None:
    topic = "persistent://public/default/admin-subscriptions"
    client = pulsar.Client(broker.service_url)
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(3):
            producer.send(f"before-{i}".encode())
        conf = write_client_conf(tmp_path / "client.conf", broker.service_url, broker.http_url)
        commands = [
            ["topics", "create-subscription", "-s", "from-start", "-m", "earliest", topic],
            ["topics", "create-subscription", "-s", "at-end", topic],  # 1: latest
            ["topics", "create-subscription", "-s", "at-end", topic],  # 2: exists already
            ["topics", "subscriptions", topic],  # 3
        ]
        out = run_pulsar_admin_batch(conf, commands)
        assert [o.exit_code for o in out] == [0, 0, 1, 0], "\n".join(
            f"{o.args}: {o.exit_code}\n{o.output[-600:]}" for o in out
        )
        assert "already exists" in out[2].output
        assert set(out[3].output.split()) >= {"from-start", "at-end"}
        producer.send(b"after")
        from_start = client.subscribe(topic, "from-start")
        assert [from_start.receive(10_000).data() for _ in range(4)] == [
            b"before-0",
            b"before-1",
            b"before-2",
            b"after",
        ]
        at_end = client.subscribe(topic, "at-end")
        assert at_end.receive(10_000).data() == b"after"
    finally:
        client.close()


def test_pulsar_admin_clusters_and_runtime_configuration(
    tools: Path, broker: BrokerProcess, tmp_path: Path
) -> None:
    conf = write_client_conf(tmp_path / "client.conf", broker.service_url, broker.http_url)
    commands = [["clusters", "list"], ["brokers", "get-runtime-config"]]
    out = run_pulsar_admin_batch(conf, commands)
    assert [o.exit_code for o in out] == [0, 0], "\n".join(
        f"{o.args}: {o.exit_code}\n{o.output[-600:]}" for o in out
    )
    assert broker.cluster_name in out[0].output.split()
    # The tool prints one "name    value" line per setting.
    runtime = {}
    for line in out[1].output.splitlines():
        name, _, value = line.strip().partition("    ")
        runtime[name] = value.strip()
    assert runtime["clusterName"] == broker.cluster_name
    assert runtime["brokerServicePort"] == str(broker.port)
    assert runtime["redisUrl"] == "******"  # a URL may carry a password


def test_pulsar_admin_compaction_and_offload_thresholds(
    tools: Path, broker: BrokerProcess, tmp_path: Path
) -> None:
    topic = f"{TOPIC}-compacted"
    client = pulsar.Client(broker.service_url)
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        for value, key in ((b"1", "k"), (b"2", "k"), (b"x", "other")):
            producer.send(value, partition_key=key)
        conf = write_client_conf(tmp_path / "client.conf", broker.service_url, broker.http_url)
        commands: list[list[str]] = [
            ["topics", "compaction-status", topic],  # 0
            ["topics", "compact", topic],  # 1
            ["topics", "compaction-status", "-w", topic],  # 2: waits for the end
            ["namespaces", "set-compaction-threshold", NAMESPACE, "--threshold", "10M"],  # 3
            ["namespaces", "get-compaction-threshold", NAMESPACE],  # 4
            ["namespaces", "remove-compaction-threshold", NAMESPACE],  # 5
            ["namespaces", "get-compaction-threshold", NAMESPACE],  # 6
            ["namespaces", "set-offload-threshold", NAMESPACE, "--size", "1M", "--time", "2h"],
            ["namespaces", "get-offload-threshold", NAMESPACE],  # 8
        ]
        out = run_pulsar_admin_batch(conf, commands)
        assert [o.exit_code for o in out] == [0] * len(commands), "\n".join(
            f"{o.args}: {o.exit_code}\n{o.output[-600:]}" for o in out
        )
        assert "Compaction has not been run" in out[0].output
        assert "Compaction was a success" in out[2].output
        assert out[4].output.strip() == str(10 * 1024 * 1024)
        # Removed: no namespace value (Pulsar answers no content; pulsar-admin prints null).
        assert out[6].output.strip() == "null"
        assert "1048576" in out[8].output and "7200" in out[8].output, out[8].output
        policy = f"{broker.http_url}/admin/v2/namespaces/{NAMESPACE}/offloadThresholdInSeconds"
        assert requests.get(policy, timeout=10).json() == 7200
        reader = client.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=True)
        got = [reader.read_next(10_000) for _ in range(2)]
        assert [(m.partition_key(), m.data()) for m in got] == [("k", b"2"), ("other", b"x")]
    finally:
        client.close()


def _json_lines(output: str) -> list[str]:
    """``topics list`` prints one name per line (other output filtered away)."""
    return sorted(line.strip() for line in output.splitlines() if "://" in line)
