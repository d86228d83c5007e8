"""What a broker's topics wait for on a Kafka cluster, and how long each stopped.

A topic's acknowledgements wait for the leader of its current ledger's partition, the
leader of its slot's fences partition, the transaction coordinators of its slot's fence
(``__transaction_state`` partitions) and the leaders of the metadata tables its fence
commits write. A node's loss should stall only the topics one of whose partitions it led:
``dependencies`` names them, ``AckTimeline`` measures each topic's longest silence.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from dedup_broker.cluster.bundles import BundleMap
from dedup_broker.config import BrokerConfig
from dedup_broker.devservers.kafka_cluster import NativeKafkaCluster
from dedup_broker.domain_base.names import TopicName
from dedup_broker.storage import formats
from dedup_broker.storage.kafka.fencing import fence_partition, fence_transactional_ids
from harness.broker_process import BrokerProcess

TRANSACTION_STATE_PARTITIONS = 50
"""Kafka's ``transaction.state.log.num.partitions`` default."""


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (UTF-16 code units), as Kafka hashes ids to partitions."""
    value = 0
    encoded = text.encode("utf-16-be")
    for i in range(0, len(encoded), 2):
        value = (31 * value + int.from_bytes(encoded[i : i + 2], "big")) & 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def coordinator_partition(key: str, partitions: int) -> int:
    """The coordinator partition of a transactional id or group id (Kafka's ``Utils.abs``)."""
    return (java_string_hash(key) & 0x7FFFFFFF) % partitions


Partition = tuple[str, int]


def metadata_partitions(config: BrokerConfig) -> list[Partition]:
    """The tables every fence commit may write, and the owners group's coordinator."""
    cluster = config.cluster_name
    return [
        (formats.managed_ledgers_topic(cluster), 0),
        (formats.cursors_topic(cluster), 0),
        (formats.policies_topic(cluster), 0),
        (formats.ledger_ids_topic(cluster), 0),
    ]


def dependencies(
    config: BrokerConfig, topic: str, ledger_id: int, fence_partitions: int
) -> list[Partition]:
    """Every partition whose leader ``topic``'s acknowledgements wait for."""
    slot = BundleMap(config.default_number_of_namespace_bundles, config.cluster_ownership_slots)
    slot_number = slot.slot_of(TopicName.parse(topic))
    fences = formats.fences_topic(config.cluster_name)
    coordinators = [
        ("__transaction_state", coordinator_partition(tid, TRANSACTION_STATE_PARTITIONS))
        for tid in fence_transactional_ids(config.cluster_name, slot_number)
    ]
    return [
        (formats.ledger_topic(config.cluster_name, ledger_id), 0),
        (fences, fence_partition(slot_number, fence_partitions)),
        *coordinators,
        *metadata_partitions(config),
    ]


def current_ledger(http_url: str, topic: str) -> int:
    """The ledger ``topic`` appends to now (``internalStats``)."""
    name = TopicName.parse(topic)
    path = f"/admin/v2/persistent/{name.tenant}/{name.namespace}/{name.local_name}/internalStats"
    with urllib.request.urlopen(http_url + path, timeout=10) as answer:
        stats = json.loads(answer.read())
    return int(stats["ledgers"][-1]["ledgerId"])


@dataclass
class AckTimeline:
    """Acknowledgement times per topic, recorded from the client's callbacks."""

    times: dict[str, list[float]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def acknowledged(self, topic: str) -> None:
        now = time.monotonic()
        with self._lock:
            self.times.setdefault(topic, []).append(now)

    def longest_silence(self, topic: str, start: float, end: float) -> float:
        """The longest time without an acknowledgement of ``topic`` within [start, end]."""
        with self._lock:
            moments = [t for t in self.times.get(topic, []) if start <= t <= end]
        edges = [start, *moments, end]
        return max(later - earlier for earlier, later in itertools.pairwise(edges))

    def count(self, topic: str, start: float, end: float) -> int:
        with self._lock:
            return sum(1 for t in self.times.get(topic, []) if start <= t <= end)


def led_by(leaders: dict[Partition, int], partitions: Iterable[Partition], node: int) -> bool:
    """Whether ``node`` led any of ``partitions``."""
    return any(leaders.get(partition) == node for partition in partitions)


BUNDLES = 16
"""Bundles per namespace for these runs: the topics spread over many slots."""


def replicated_broker(
    cluster: NativeKafkaCluster, cluster_name: str, folder: Path
) -> BrokerProcess:
    """A broker on ``cluster`` as docs/deployment.md sets one up (replication 3), with
    PIP-6 deduplication on and ``BUNDLES`` bundles per namespace; not started."""
    return BrokerProcess(
        cluster.bootstrap_servers,
        cluster_name,
        settings={
            "kafka_replication_factor": 3,
            "default_number_of_namespace_bundles": BUNDLES,
            "broker_deduplication_enabled": True,
        },
        log_dir=folder,
    )


def partition_leaders(cluster: NativeKafkaCluster) -> dict[Partition, int]:
    """The leader of every partition of the cluster now (-1: none)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": cluster.running_bootstrap_servers()})
    metadata = admin.list_topics(timeout=20)
    return {
        (name, number): int(partition.leader)
        for name, topic in metadata.topics.items()
        for number, partition in topic.partitions.items()
    }
