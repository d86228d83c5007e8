"""The servers of a run, all started here and stopped by pid: a 3-node Kafka (replicated
as in production) whose nodes the run may kill, freeze and restart, a Redis it may
restart (a primary with two replicas under three Sentinels when the profile fails Redis
over), and a cluster of brokers on them; plus the admin calls the run makes."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pulsar

from dedup_broker.devservers.kafka_cluster import NativeKafkaCluster
from dedup_broker.devservers.redis import NativeRedis
from dedup_broker.devservers.redis_sentinel import NativeRedisSentinel
from harness.broker_process import BrokerProcess
from harness.cluster_processes import ClusterProcesses
from verify.profiles import Profile

log = logging.getLogger(__name__)

MAX_MESSAGE_SIZE = 256 * 1024
"""Small, so that chunked messages have several chunks without huge payloads."""
REDIS_FAILOVER = "redis-failover"
KAFKA_DISK_FULL = "kafka-disk-full"
NODE_DISK = "16g"
"""Each Kafka node's tmpfs when a node's disk is to fill up: room for a long run's data
(memory holds only what is stored); the fault shrinks it to what is used."""
SENTINEL_DOWN_AFTER_MS = 3000
"""Longer than a ``redis-restart``'s 1 s stop, so that a restart is no failover."""


def broker_settings(profile: Profile, redis_url: str) -> dict[str, Any]:
    return {
        "broker_deduplication_enabled": True,
        "kafka_replication_factor": 3,
        "managed_ledger_max_entries_per_ledger": profile.entries_per_ledger,
        "managed_ledger_min_ledger_rollover_time_minutes": 0,
        # Nothing is trimmed: every reading path must find the whole history.
        "default_retention_time_in_minutes": -1,
        "default_retention_size_in_mb": -1,
        "max_message_size": MAX_MESSAGE_SIZE,
        "redis_url": redis_url,
    }


def pulsar_client(service_url: str, log_file: Path, timeout_seconds: int = 120) -> pulsar.Client:
    """An official client whose log goes to ``log_file`` (kept with the run)."""
    return pulsar.Client(
        service_url,
        operation_timeout_seconds=timeout_seconds,
        logger=pulsar.FileLogger(pulsar.LoggerLevel.Info, str(log_file)),
    )


class Servers:
    """Kafka, Redis and ``brokers`` brokers, under ``run_dir``."""

    def __init__(self, run_dir: Path, profile: Profile, brokers: int = 3) -> None:
        self.run_dir = run_dir
        self.kafka = NativeKafkaCluster(
            run_dir / "kafka",
            nodes=3,
            heap="512m",
            startup_timeout=180,
            disk_size=NODE_DISK if _fills_disks(profile) else None,
        )
        self.redis = NativeRedis(run_dir / "redis")
        self.sentinel: NativeRedisSentinel | None = None
        """With a ``redis-failover`` fault: the Redis of the run (``redis`` is unused)."""
        if not profile.faults or REDIS_FAILOVER in profile.faults:
            self.sentinel = NativeRedisSentinel(
                replicas=2,
                data_dir=run_dir / "redis",
                down_after_ms=SENTINEL_DOWN_AFTER_MS,
                failover_timeout_ms=10_000,
            )
        self.profile = profile
        self.size = brokers
        self.cluster: ClusterProcesses | None = None

    def start(self) -> None:
        """Kafka; with brokers, Redis and the cluster too."""
        self.kafka.start()
        if not self.size:
            return
        self.redis_up()
        url = self.redis.url if self.sentinel is None else self.sentinel.url
        self.cluster = ClusterProcesses(
            self.kafka.bootstrap_servers,
            self.run_dir / "brokers",
            size=self.size,
            settings=broker_settings(self.profile, url),
        )
        self.cluster.start()

    def stop(self) -> None:
        """Stop everything; the data stays for a look at a failed run (``discard_data``)."""
        if self.cluster is not None:
            self.cluster.stop()
        if self.redis.pid is not None:
            _signal(self.redis.pid, signal.SIGCONT)
        self.redis.stop()
        if self.sentinel is not None:
            self.sentinel.stop()
        self.kafka.stop()  # frozen nodes are woken first
        self.kafka.unmount_disks()  # a tmpfs keeps a failed run's Kafka data in memory

    def redis_up(self) -> None:
        """Redis (every process of the Sentinel group) started if it is not running."""
        if self.sentinel is not None:
            self.sentinel.start(timeout=120)
        elif self.redis.pid is None:
            self.redis.start()

    def stop_redis_empty(self) -> str:
        """Redis stopped, to be started again empty (``redis_up`` after a second): one
        Redis without persistence, or the Sentinel group's primary with its data removed
        (too short a stop for a failover: its replicas resync from it and are empty too)."""
        if self.sentinel is None:
            self.redis.stop()
            return "redis"
        primary = self.sentinel.primary()
        primary.stop()
        primary.wipe()
        return f"redis-{primary.port}"

    def fail_over_redis(self) -> str:
        """kill -9 of the Sentinel group's primary; once a replica is promoted, the killed
        node comes back as a replica."""
        assert self.sentinel is not None, "redis-failover needs the Sentinel group"
        old = self.sentinel.kill_primary()
        new = self.sentinel.wait_for_failover(old, timeout=60)
        log.info("Sentinel promoted %d after the kill of %d", new.port, old.port)
        self.sentinel.start(timeout=120)
        return f"redis-{old.port}->{new.port}"

    def discard_data(self) -> None:
        for node in self.kafka.nodes:
            shutil.rmtree(node.log_dir, ignore_errors=True)
        shutil.rmtree(self.run_dir / "redis", ignore_errors=True)

    @property
    def brokers(self) -> list[BrokerProcess]:
        assert self.cluster is not None
        return list(self.cluster)

    @property
    def service_url(self) -> str:
        """Every broker of the cluster, running or not (as users configure clients)."""
        hosts = ",".join(f"127.0.0.1:{b.port}" for b in self.brokers)
        return f"pulsar://{hosts}"

    def admin_url(self) -> str:
        """A running broker's HTTP address."""
        assert self.cluster is not None
        running = self.cluster.running()
        return (running[0] if running else self.brokers[0]).http_url


def _fills_disks(profile: Profile) -> bool:
    """A ``kafka-disk-full`` fault needs the nodes' log directories on tmpfs disks,
    which only root can mount; without root the fault is left out."""
    wanted = not profile.faults or KAFKA_DISK_FULL in profile.faults
    if wanted and os.geteuid() != 0:
        log.warning("%s left out: mounting the nodes' disks needs root", KAFKA_DISK_FULL)
        return False
    return wanted


def _signal(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)


def freeze(pid: int | None, seconds: float) -> None:
    """SIGSTOP ``pid`` for ``seconds``, then SIGCONT."""
    if pid is None:
        return
    _signal(pid, signal.SIGSTOP)
    try:
        time.sleep(seconds)
    finally:
        _signal(pid, signal.SIGCONT)


def http_call(method: str, url: str, body: bytes | None = None) -> tuple[int, bytes]:
    """``(status, body)``, following 307/308 redirects with the same method and body (as
    Pulsar's admin clients do; urllib follows them for GET only)."""
    for _ in range(5):
        request = urllib.request.Request(url, data=body, method=method)
        request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return int(response.status), response.read()
        except urllib.error.HTTPError as exc:
            location = exc.headers.get("Location")
            if exc.code in (307, 308) and location:
                url = urllib.parse.urljoin(url, location)
                continue
            return exc.code, exc.read()
    return 0, b"too many redirects"


class Admin:
    """The admin REST calls of a run, asked of any running broker (redirects followed),
    retried while the cluster moves."""

    def __init__(self, servers: Servers) -> None:
        self.servers = servers

    def call(
        self, method: str, path: str, body: object = None, *, ok: tuple[int, ...] = (200, 204)
    ) -> bytes:
        data = None if body is None else json.dumps(body).encode()
        deadline = time.monotonic() + 120
        while True:
            url = self.servers.admin_url() + path
            try:
                status, answer = http_call(method, url, data)
            except OSError as exc:
                status, answer = 0, str(exc).encode()
            if status in ok:
                return answer
            if time.monotonic() > deadline:
                raise RuntimeError(f"{method} {path}: {status} {answer[:300]!r}")
            time.sleep(1.0)

    @staticmethod
    def topic_path(topic: str) -> str:
        return "/admin/v2/persistent/" + topic.removeprefix("persistent://")

    def create_partitioned(self, topic: str, partitions: int) -> None:
        self.call("PUT", self.topic_path(topic) + "/partitions", partitions, ok=(200, 204, 409))

    def key_window(self, topic: str, key_source: str, window: str) -> None:
        policy = {"enabled": True, "keySource": key_source, "window": window}
        self.call("POST", self.topic_path(topic) + "/keyDeduplication", policy)

    def unload(self, topic: str) -> None:
        self.call("PUT", self.topic_path(topic) + "/unload", ok=(200, 204, 404))

    def compact(self, topic: str, timeout: float = 120.0) -> str:
        """Compact ``topic`` and wait for the outcome (``SUCCESS`` or the error)."""
        self.call("PUT", self.topic_path(topic) + "/compaction", ok=(200, 204, 409))
        deadline = time.monotonic() + timeout
        status: dict[str, Any] = {}
        while time.monotonic() < deadline:
            status = json.loads(self.call("GET", self.topic_path(topic) + "/compaction"))
            if status.get("status") in ("SUCCESS", "ERROR"):
                break
            time.sleep(0.5)
        return str(status.get("status")) + (
            f": {status['lastError']}" if status.get("lastError") else ""
        )

    def internal_stats(self, topic: str) -> dict[str, Any]:
        result: dict[str, Any] = json.loads(
            self.call("GET", self.topic_path(topic) + "/internalStats")
        )
        return result
