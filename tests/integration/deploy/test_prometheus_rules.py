"""The shipped alert and recording rules, in Debian's Prometheus scraping a running broker.

``promtool`` checks the rules; a Prometheus of the test's own (free port, its own data
directory, 1 s scrapes and evaluations, the rules with their ``for:`` cut to 2 s) scrapes
a broker while the test stops a subscription's consumer and then the key-window
namespace's Redis, and both alerts fire through Prometheus's HTTP API. The rules'
queries and the dashboard's run in that Prometheus too, naming only exported families.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import subprocess
import threading
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest

from dedup_broker.devservers import RedisService, provide_redis
from harness.admin_http import create_namespace, http_request
from harness.broker_process import BrokerProcess, free_port
from tests.integration.conftest import serve
from tests.integration.system_topics.deletion_helpers import wait_until
from tests.metric_names import (
    RULES,
    WORKER_FAMILIES,
    dashboard_expressions,
    exposed_families,
    unknown_names,
)

PROMETHEUS = shutil.which("prometheus")
PROMTOOL = shutil.which("promtool")
pytestmark = pytest.mark.skipif(
    PROMETHEUS is None or PROMTOOL is None,
    reason="Prometheus is not installed (Debian: apt-get install prometheus; .ci/run does)",
)

ALERTS = {"DedupBrokerBacklogGrowing", "DedupBrokerKeyWindowRedisUnreachable"}
KEY_WINDOW_NAMESPACE = "public/alerts"


class Prometheus:
    """``prometheus`` on a free loopback port, started and stopped by its pid."""

    def __init__(self, folder: Path, target: str) -> None:
        self.port = free_port()
        rules = folder / "rules.yml"
        rules.write_text(re.sub(r"(?m)^(\s+for:) \S+$", r"\1 2s", RULES.read_text()))
        config = folder / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            f"rule_files: [{rules}]\n"
            "scrape_configs:\n  - job_name: dedup-broker\n"
            f"    static_configs: [{{targets: ['{target}']}}]\n"
        )
        assert PROMETHEUS is not None
        self._log = (folder / "prometheus.log").open("wb")
        self.process = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={config}",
                f"--storage.tsdb.path={folder / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )

    def api(self, path: str, **query: str) -> Any:
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}?{urllib.parse.urlencode(query)}"
        with urllib.request.urlopen(url, timeout=10) as response:
            answer = json.loads(response.read())
        assert answer["status"] == "success", answer
        return answer["data"]

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2):
                return True
        except OSError:
            return False

    def firing(self) -> set[str]:
        alerts = self.api("alerts")["alerts"]
        return {a["labels"]["alertname"] for a in alerts if a["state"] == "firing"}

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=30)
        self._log.close()


@pytest.fixture(scope="module")
def own_redis() -> Iterator[RedisService]:
    """A Redis of this module's own: the last test stops it."""
    service = provide_redis(controllable=True)
    try:
        yield service
    finally:
        service.close()


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("prometheus")


@pytest.fixture(scope="module")
def broker(kafka_bootstrap: str, own_redis: RedisService, folder: Path) -> Iterator[BrokerProcess]:
    yield from serve(
        kafka_bootstrap, folder, redis_url=own_redis.url, stats_update_frequency_in_secs=1
    )


@pytest.fixture(scope="module")
def prometheus(broker: BrokerProcess, folder: Path) -> Iterator[Prometheus]:
    server = Prometheus(folder, broker.http_url.removeprefix("http://"))
    try:
        wait_until(server.ready, 60, "Prometheus ready")
        yield server
    finally:
        server.stop()


def test_promtool_accepts_the_rules() -> None:
    assert PROMTOOL is not None
    checked = subprocess.run(
        [PROMTOOL, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_rules_and_the_dashboard_run_on_exported_families(
    broker: BrokerProcess, prometheus: Prometheus
) -> None:
    with urllib.request.urlopen(broker.http_url + "/metrics", timeout=30) as response:
        families = dict(exposed_families(response.read().decode()))
    families |= {name: kind for name, kind, _ in WORKER_FAMILIES}  # the worker's own scrape
    groups = prometheus.api("rules")["groups"]
    rules = [rule for group in groups for rule in group["rules"]]
    assert len(rules) == 14
    for rule in rules:
        assert rule["health"] != "err", rule
        assert unknown_names(rule["query"], families) == set(), rule["name"]
    variables = {"$__rate_interval": "1m", "$cluster": ".*", "$namespace": ".*"}
    for expression in dashboard_expressions():
        if expression.startswith("label_values("):
            continue  # Grafana's own function, not PromQL
        for variable, value in variables.items():
            expression = expression.replace(variable, value)
        prometheus.api("query", query=expression)  # it parses and runs


def _publish(service_url: str, topic: str, stop: threading.Event) -> None:
    """Send until ``stop``, on a client of its own (a failed send makes the client drop
    its connection); sends that fail (Redis down) are the point, not a failure."""
    client = pulsar.Client(service_url, operation_timeout_seconds=30)
    producer = client.create_producer(
        topic, batching_enabled=False, block_if_queue_full=False, send_timeout_millis=3000
    )
    sequence = 0
    while not stop.wait(0.05):
        with contextlib.suppress(pulsar.PulsarException):
            producer.send_async(f"{topic}-{sequence}".encode(), lambda *_: None)
        sequence += 1
    client.close()


def test_a_stopped_consumer_and_a_lost_redis_fire_their_alerts(
    broker: BrokerProcess, own_redis: RedisService, prometheus: Prometheus
) -> None:
    """Last in the module: it stops the module's Redis."""
    create_namespace(broker.http_url, KEY_WINDOW_NAMESPACE, broker.cluster_name)
    policy = json.dumps({"enabled": True, "keySource": "content"}).encode()
    path = f"/admin/v2/namespaces/{KEY_WINDOW_NAMESPACE}/keyDeduplication"
    assert http_request("POST", broker.http_url + path, policy)[0] == 204
    backlog = f"persistent://public/default/backlog-{uuid.uuid4().hex[:8]}"
    keyed = f"persistent://{KEY_WINDOW_NAMESPACE}/keyed-{uuid.uuid4().hex[:8]}"
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=30)
    stop = threading.Event()
    publishers = [
        threading.Thread(target=_publish, args=(broker.service_url, topic, stop), daemon=True)
        for topic in (backlog, keyed)
    ]
    try:
        client.subscribe(backlog, "stopped").close()  # the consumer is gone, the backlog grows
        client.create_producer(keyed).send(b"while Redis answers")
        for thread in publishers:
            thread.start()
        wait_until(lambda: prometheus.api("query", query="up")["result"] != [], 60, "a scrape")
        own_redis.stop()
        started = time.monotonic()
        wait_until(lambda: prometheus.firing() >= ALERTS, 90, f"alerts {ALERTS}")
        print(f"both alerts firing {time.monotonic() - started:.1f} s after Redis stopped")
    finally:
        stop.set()
        for thread in publishers:
            if thread.is_alive():
                thread.join(10)
        client.close()
