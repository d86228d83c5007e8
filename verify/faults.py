"""Faults, one at a time, from a thread: brokers killed, frozen, restarted, topics
unloaded, Kafka nodes killed, frozen or restarted one after another, a Kafka node's disk full,
Redis restarted empty, a Sentinel primary killed -9 (a replica promoted)."""

from __future__ import annotations

import functools
import logging
import random
import threading
import time
from collections.abc import Callable
from enum import Enum

from dedup_broker.devservers.process import wait_until
from harness.broker_process import BrokerProcess
from verify.check import Fault
from verify.environment import Admin, Servers, freeze
from verify.history import History
from verify.profiles import Profile

log = logging.getLogger(__name__)


DISK_FULL_SECONDS = 60.0
"""How long a node with a full disk may take to fail a write and stop (a loaded node
writes within a second)."""


class FaultKind(Enum):
    KILL = "kill-9"
    PAUSE = "sigstop"
    RESTART = "restart"
    UNLOAD = "unload"
    KAFKA_NODE_KILL = "kafka-node-kill-9"
    KAFKA_PAUSE = "kafka-sigstop"
    KAFKA_ROLLING = "kafka-rolling-restart"
    KAFKA_DISK_FULL = "kafka-disk-full"
    REDIS_RESTART = "redis-restart"
    REDIS_FAILOVER = "redis-failover"


WEIGHTS = {
    FaultKind.KILL: 4,
    FaultKind.PAUSE: 2,
    FaultKind.RESTART: 1,
    FaultKind.UNLOAD: 1,
    FaultKind.KAFKA_NODE_KILL: 2,
    FaultKind.KAFKA_PAUSE: 1,
    FaultKind.KAFKA_ROLLING: 1,
    FaultKind.KAFKA_DISK_FULL: 1,
    FaultKind.REDIS_RESTART: 1,
    FaultKind.REDIS_FAILOVER: 1,
}


class Faults:
    """Injects faults until ``stop()``: each kind once first (in a random order), then
    drawn by weight; every broker fault leaves the others running."""

    def __init__(
        self, servers: Servers, admin: Admin, history: History, profile: Profile, topics: list[str]
    ) -> None:
        self.servers = servers
        self.admin = admin
        self.history = history
        self.profile = profile
        self.topics = topics
        self.rng = random.Random(profile.seed)
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="faults", daemon=True)

    def start(self) -> Faults:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=300)

    def _kinds(self) -> list[FaultKind]:
        chosen = self.profile.faults
        kinds = [k for k in FaultKind if not chosen or k.value in chosen]
        if self.servers.kafka.disk_size is None:  # no disks to fill (not root)
            kinds = [k for k in kinds if k is not FaultKind.KAFKA_DISK_FULL]
        return kinds

    def _run(self) -> None:
        kinds = self._kinds()
        pending = list(kinds)
        self.rng.shuffle(pending)
        first = [k for k in kinds if k.value in self.profile.first_faults]
        first.sort(key=lambda k: self.profile.first_faults.index(k.value))
        pending = first + [k for k in pending if k not in first]
        weights = [WEIGHTS[k] for k in kinds]
        while not self._stop.wait(self.rng.uniform(*self.profile.fault_every)):
            kind = pending.pop(0) if pending else self.rng.choices(kinds, weights=weights)[0]
            started = self.history.now()
            try:
                target = self._inject(kind)
            except Exception as exc:  # reported in the run's summary
                log.exception("fault %s failed", kind.value)
                self.errors.append(f"{kind.value}: {exc!r}")
                target = "?"
            fault = Fault(kind.value, target, round(started, 3), round(self.history.now(), 3))
            self.history.fault(fault)
            log.info("fault %s on %s: %.1fs", kind.value, target, fault.ended - fault.at)

    def _inject(self, kind: FaultKind) -> str:
        cluster = self.servers.cluster
        assert cluster is not None
        brokers = cluster.running()
        broker = self.rng.choice(brokers)
        name = f"broker-{self.servers.brokers.index(broker)}"
        if kind is FaultKind.KILL:
            broker.kill()
            _again(lambda: _bring_up(broker), f"starting {name}")
            return name
        if kind is FaultKind.PAUSE:
            assert broker.process is not None
            freeze(broker.process.pid, self.profile.pause_seconds)
            return name
        if kind is FaultKind.RESTART:
            broker.stop()
            _again(lambda: _bring_up(broker), f"starting {name}")
            return name
        if kind is FaultKind.UNLOAD:
            topic = self.rng.choice(self.topics)
            self.admin.unload(topic)
            return topic
        kafka = self.servers.kafka
        if kind in (FaultKind.KAFKA_NODE_KILL, FaultKind.KAFKA_PAUSE):
            # Any node of three leads some ledgers, fence partitions, coordinators.
            node = self.rng.randint(1, len(kafka.nodes))
            if kind is FaultKind.KAFKA_PAUSE:
                freeze(kafka.node(node).pid, self.profile.kafka_pause_seconds)
            else:
                kafka.kill_node(node)
                _again(lambda: kafka.start_node(node), f"starting Kafka node {node}")
            return f"kafka-{node}"
        if kind is FaultKind.KAFKA_DISK_FULL:
            node = self.rng.randint(1, len(kafka.nodes))
            kafka.fill_disk(node)
            stopped = wait_until(lambda: not kafka.node(node).running, DISK_FULL_SECONDS)
            kafka.free_disk(node)
            if not stopped:
                raise RuntimeError(f"Kafka node {node} kept running on a full disk")
            _again(lambda: kafka.start_node(node), f"starting Kafka node {node}")
            return f"kafka-{node}"
        if kind is FaultKind.KAFKA_ROLLING:
            for node in range(1, len(kafka.nodes) + 1):
                kafka.stop_node(node)
                _again(functools.partial(kafka.start_node, node), f"starting Kafka node {node}")
            return "kafka"
        if kind is FaultKind.REDIS_FAILOVER:
            return self.servers.fail_over_redis()
        target = self.servers.stop_redis_empty()
        time.sleep(1.0)
        _again(self.servers.redis_up, "starting Redis")
        return target


def _bring_up(broker: BrokerProcess) -> None:
    """Start the broker; one whose last start was only slow (still running, not ready in
    time) is waited for again rather than started twice."""
    if broker.process is not None and broker.process.poll() is None:
        broker.wait_ready(120)
    else:
        broker.start(timeout=120)


def _again(start: Callable[[], None], what: str, attempts: int = 5) -> None:
    """A server that is slow to come back (a loaded machine) is started again: a fault
    must never leave it down for the rest of the run."""
    for attempt in range(1, attempts + 1):
        try:
            start()
            return
        except Exception as exc:
            if attempt == attempts:
                raise
            log.warning("%s failed (attempt %d of %d): %s", what, attempt, attempts, exc)
            time.sleep(5.0)
