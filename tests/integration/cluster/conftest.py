"""Fixtures and helpers for clusters of broker processes on the real Kafka."""

from __future__ import annotations

import itertools
import json
import threading
import time
import urllib.request
import uuid
from dataclasses import dataclass, field

import pulsar

from harness.broker_process import BrokerProcess
from harness.cluster_processes import ClusterProcesses


def get_json(url: str) -> object:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def owner_of(cluster: ClusterProcesses, topic: str, timeout: float = 30.0) -> BrokerProcess:
    """The running broker that serves ``topic`` now, as any broker's HTTP lookup says.

    While the cluster rebalances (a broker was just killed) a lookup may answer 503, or
    the broker asked may be going away: asked again, of a running broker, until
    ``timeout``."""
    tenant, namespace, local = topic.removeprefix("persistent://").split("/", 2)
    deadline = time.monotonic() + timeout
    while True:
        asked = cluster.running()[0]
        path = f"/lookup/v2/topic/persistent/{tenant}/{namespace}/{local}"
        try:
            data = get_json(asked.http_url + path)
        except OSError:  # urllib's HTTPError (503) and URLError are OSErrors
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
            continue
        assert isinstance(data, dict)
        port = int(str(data["brokerUrl"]).rsplit(":", 1)[-1])
        return next(b for b in cluster if b.port == port)


SPREAD_BUNDLES: dict[str, object] = {"default_number_of_namespace_bundles": 16}
"""Sixteen bundles a namespace. With the default four, one broker of two may own none of
a namespace's bundles: the group's assignor splits the slots, not the bundles."""


def topic_on_each_broker(cluster: ClusterProcesses, prefix: str) -> dict[str, BrokerProcess]:
    """A new topic (``prefix`` and a random suffix) on each running broker, with its owner,
    in the cluster's order (a cluster started with ``SPREAD_BUNDLES``)."""
    owners: dict[str, BrokerProcess] = {}
    for _ in range(200):
        topic = f"{prefix}{uuid.uuid4().hex[:8]}"
        owner = owner_of(cluster, topic)
        if owner not in owners.values():
            owners[topic] = owner
        if len(owners) == len(cluster.running()):
            order = list(cluster)
            return dict(sorted(owners.items(), key=lambda item: order.index(item[1])))
    raise AssertionError(f"200 topics found on {len(owners)} broker(s) only")


@dataclass
class AckLog:
    """Every acknowledged send of one PIP-6 producer, with the time it was acknowledged."""

    name: str
    acked: list[tuple[int, float]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def largest_gap(self, start: float, end: float) -> float:
        """The longest time without an acknowledgement within ``[start, end]``."""
        with self.lock:
            times = sorted(t for _, t in self.acked if start <= t <= end)
        points = [start, *times, end]
        return max(b - a for a, b in itertools.pairwise(points))


class SteadyProducer:
    """Sends ids 0..total-1 at a steady pace from a thread; never gives up
    (``send_timeout_millis=0``); records acknowledgements and errors."""

    def __init__(
        self, client: pulsar.Client, topic: str, name: str, total: int, per_second: float
    ) -> None:
        self.log = AckLog(name)
        self.total = total
        self.interval = 1.0 / per_second
        self.producer = client.create_producer(
            topic,
            producer_name=name,
            send_timeout_millis=0,
            batching_enabled=False,
            max_pending_messages=10_000,
        )
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> SteadyProducer:
        self.thread.start()
        return self

    def _run(self) -> None:
        def acked(index: int) -> object:
            def callback(result: pulsar.Result, _mid: pulsar.MessageId) -> None:
                with self.log.lock:
                    if result == pulsar.Result.Ok:
                        self.log.acked.append((index, time.monotonic()))
                    else:
                        self.log.errors.append(f"{index}: {result}")

            return callback

        next_at = time.monotonic()
        for i in range(self.total):
            self.producer.send_async(str(i).encode(), acked(i), sequence_id=i)
            next_at += self.interval
            time.sleep(max(next_at - time.monotonic(), 0))

    def wait(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        self.thread.join(timeout)
        while len(self.log.acked) + len(self.log.errors) < self.total:
            assert time.monotonic() < deadline, (
                f"{self.log.name}: {len(self.log.acked)} of {self.total} acknowledged"
            )
            time.sleep(0.05)


def read_all(client: pulsar.Client, topic: str) -> list[bytes]:
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    try:
        out = []
        while reader.has_message_available():
            out.append(reader.read_next(20_000).data())
        return out
    finally:
        reader.close()
