"""A Kafka cluster of several native nodes (KRaft, each node broker and controller).

Set up as production clusters are (docs/deployment.md): every topic replicated to three
nodes, two in sync before a write is acknowledged, no unclean leader election. Node
faults are the point of it: one node can be killed, frozen or restarted while the others
serve, and ``leader_of`` says which node a partition's writes wait for. With
``disk_size`` each node keeps its log on a tmpfs of that size (mounting needs root; it
holds in memory only what is stored), so that one node's disk can fill up
(``fill_disk``).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

from dedup_broker.devservers import process
from dedup_broker.devservers.kafka import NativeKafka, random_cluster_id
from dedup_broker.errors import DevServerError

DEFAULT_NODES = 3
FULL_MARGIN = 64 * 1024
"""Bytes a full disk still has: less than one batch of Kafka's writes."""


def replicated_properties(nodes: int) -> dict[str, str]:
    """Kafka settings of a cluster of ``nodes`` that survives the loss of one node
    without losing an acknowledged write (two nodes: none is lost, writes stop)."""
    replicas = min(nodes, 3)
    in_sync = max(1, replicas - 1)
    return {
        "default.replication.factor": str(replicas),
        "min.insync.replicas": str(in_sync),
        "offsets.topic.replication.factor": str(replicas),
        "transaction.state.log.replication.factor": str(replicas),
        "transaction.state.log.min.isr": str(in_sync),
        "share.coordinator.state.topic.replication.factor": str(replicas),
        "share.coordinator.state.topic.min.isr": str(in_sync),
        "unclean.leader.election.enable": "false",
        # Several nodes on one machine: each small, and every partition's leadership
        # given back to its preferred node soon after that node returns.
        "num.network.threads": "2",
        "num.io.threads": "4",
        "leader.imbalance.check.interval.seconds": "30",
    }


class NativeKafkaCluster:
    """``nodes`` Kafka JVMs on 127.0.0.1, one controller quorum, shared cluster id.

    ``data_dir`` holds one directory per node (``node-1`` ...); a temporary one is
    removed by ``close()``, a given one kept, so a cluster can be stopped and started
    again on the same addresses and data.
    """

    def __init__(
        self,
        data_dir: Path | str | None = None,
        *,
        nodes: int = DEFAULT_NODES,
        ports: Sequence[int] | None = None,
        controller_ports: Sequence[int] | None = None,
        heap: str = "384m",
        startup_timeout: float = 90.0,
        detached: bool = False,
        extra_properties: Mapping[str, str] | None = None,
        disk_size: str | None = None,
    ) -> None:
        """``disk_size`` (``512m``, ``2g``): each node's log directory is a tmpfs of that
        size, mounted at ``start()`` and unmounted by ``close()`` (root only)."""
        if nodes < 1:
            raise DevServerError(f"a Kafka cluster needs at least one node, not {nodes}")
        self._owns_dir = data_dir is None
        self.data_dir = (
            Path(tempfile.mkdtemp(prefix="dedup-broker-kafka-cluster-"))
            if data_dir is None
            else Path(data_dir).resolve()
        )
        picked = iter(process.free_ports(2 * nodes))
        client_ports = list(ports) if ports is not None else [next(picked) for _ in range(nodes)]
        quorum_ports = (
            list(controller_ports)
            if controller_ports is not None
            else [next(picked) for _ in range(nodes)]
        )
        if len(client_ports) != nodes or len(quorum_ports) != nodes:
            raise DevServerError(f"a cluster of {nodes} nodes needs {nodes} ports of each kind")
        voters = ",".join(
            f"{node_id}@127.0.0.1:{port}" for node_id, port in enumerate(quorum_ports, start=1)
        )
        settings = {**replicated_properties(nodes), **(extra_properties or {})}
        if disk_size is not None and os.geteuid() != 0:
            raise DevServerError(
                f"a node disk of {disk_size} is a tmpfs mount, and mounting needs root"
            )
        self.disk_size = disk_size
        cluster_id = self._cluster_id()
        self.nodes = [
            NativeKafka(
                self.data_dir / f"node-{node_id}",
                port=client_ports[node_id - 1],
                controller_port=quorum_ports[node_id - 1],
                heap=heap,
                startup_timeout=startup_timeout,
                detached=detached,
                extra_properties=settings,
                node_id=node_id,
                quorum_voters=voters,
                cluster_id=cluster_id,
            )
            for node_id in range(1, nodes + 1)
        ]

    def _cluster_id(self) -> str | None:
        """The id kept from an earlier start (nodes already formatted keep theirs)."""
        saved = self.data_dir / "cluster-id"
        return saved.read_text().strip() if saved.exists() else None

    # --- addresses --------------------------------------------------------------------
    @property
    def bootstrap_servers(self) -> str:
        """Every node's address: clients reach the cluster while any one of them serves."""
        return ",".join(node.bootstrap_servers for node in self.nodes)

    def node(self, node_id: int) -> NativeKafka:
        """The node with Kafka's ``node.id`` ``node_id`` (1-based)."""
        if not 1 <= node_id <= len(self.nodes):
            raise DevServerError(f"no node {node_id} in a cluster of {len(self.nodes)}")
        return self.nodes[node_id - 1]

    def leader_of(self, topic: str, partition: int = 0, timeout: float = 10.0) -> int:
        """The node id leading ``topic``'s ``partition`` now (-1 while it has none)."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.running_bootstrap_servers(), "log_level": 3})
        metadata = admin.list_topics(topic, timeout=timeout)
        found = metadata.topics.get(topic)
        if found is None or found.error is not None or partition not in found.partitions:
            raise DevServerError(f"no partition {topic}[{partition}] in the cluster")
        return int(found.partitions[partition].leader)

    def running_bootstrap_servers(self) -> str:
        """The addresses of the nodes running now (all of them when none runs)."""
        running = [node.bootstrap_servers for node in self.nodes if node.running]
        return ",".join(running) or self.bootstrap_servers

    # --- lifecycle --------------------------------------------------------------------
    def start(self) -> None:
        """Start every node not running, together: each waits for the quorum."""
        stopped = [node for node in self.nodes if not node.running]
        if not stopped:
            return
        if self.disk_size is not None:
            for node in stopped:
                self._mount_disk(node)
        if self._cluster_id() is None:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            cluster_id = random_cluster_id()
            (self.data_dir / "cluster-id").write_text(cluster_id + "\n")
            for node in self.nodes:
                node.cluster_id = cluster_id
        failures: list[BaseException] = []

        def start_node(node: NativeKafka) -> None:
            try:
                node.start()
            except BaseException as exc:  # reported below, after every node was tried
                failures.append(exc)

        threads = [threading.Thread(target=start_node, args=(node,)) for node in stopped]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if failures:
            self.kill()
            raise failures[0]

    def start_node(self, node_id: int) -> None:
        """Start one node again (after ``kill_node`` or ``stop_node``) on its old data."""
        self.node(node_id).start()

    def kill_node(self, node_id: int) -> None:
        """SIGKILL one node, as a crash would."""
        self.node(node_id).kill()

    def stop_node(self, node_id: int, timeout: float | None = None) -> None:
        """A clean shutdown of one node (its leaderships moved to others first)."""
        self.node(node_id).stop(timeout)

    def freeze_node(self, node_id: int) -> None:
        """SIGSTOP one node: alive to the operating system, silent to everyone else."""
        self._signal(node_id, signal.SIGSTOP)

    def thaw_node(self, node_id: int) -> None:
        """SIGCONT a frozen node."""
        self._signal(node_id, signal.SIGCONT)

    def _signal(self, node_id: int, signum: signal.Signals) -> None:
        pid = self.node(node_id).pid
        if pid is None:
            raise DevServerError(f"Kafka node {node_id} is not running")
        os.kill(pid, signum)

    # --- a node's disk -----------------------------------------------------------------
    def _mount_disk(self, node: NativeKafka) -> None:
        if os.path.ismount(node.log_dir):
            return
        node.log_dir.mkdir(parents=True, exist_ok=True)
        _run(
            "mount",
            "-t",
            "tmpfs",
            "-o",
            f"size={self.disk_size},mode=0700",
            "tmpfs",
            str(node.log_dir),
        )

    def fill_disk(self, node_id: int) -> int:
        """Leave node ``node_id``'s disk (its tmpfs) almost no room: it shrinks to what
        is used plus ``FULL_MARGIN``; the bytes used. Kafka then fails a write to that
        log directory within moments, takes the directory offline and, the cluster
        metadata being kept there too, stops."""
        log_dir = self.node(node_id).log_dir
        if self.disk_size is None or not os.path.ismount(log_dir):
            raise DevServerError("only a cluster started with disk_size has disks to fill")
        stats = os.statvfs(log_dir)
        used = (stats.f_blocks - stats.f_bfree) * stats.f_frsize
        _run("mount", "-o", f"remount,size={used + FULL_MARGIN}", str(log_dir))
        return used

    def free_disk(self, node_id: int) -> None:
        """Give node ``node_id``'s disk its size back (start the node again if it stopped)."""
        _run("mount", "-o", f"remount,size={self.disk_size}", str(self.node(node_id).log_dir))

    def unmount_disks(self) -> None:
        """Unmount the nodes' tmpfs disks (their data goes with them); nodes stopped first."""
        for node in self.nodes:
            if os.path.ismount(node.log_dir):
                _run("umount", "--lazy", str(node.log_dir))

    def kill(self) -> None:
        """SIGKILL every node."""
        for node in self.nodes:
            node.kill()

    def stop(self, timeout: float | None = None) -> None:
        """Stop every node, together: one by one, the last ones would wait for a quorum
        that is gone. A frozen node is woken first so that it can stop."""
        for node in self.nodes:
            if node.pid is not None:
                os.kill(node.pid, signal.SIGCONT)
        threads = [threading.Thread(target=node.stop, args=(timeout,)) for node in self.nodes]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def close(self) -> None:
        """Stop, unmount the nodes' disks, and remove the data directory if this object
        created it (a tmpfs disk's data goes with its mount)."""
        self.stop()
        self.unmount_disks()
        if self._owns_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        states = ", ".join(
            f"{node.node_id}:{'pid ' + str(node.pid) if node.running else 'stopped'}"
            for node in self.nodes
        )
        return f"NativeKafkaCluster({self.bootstrap_servers}, {states})"


def _run(*argv: str) -> None:
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise DevServerError(f"{' '.join(argv)} failed: {result.stderr.strip()}")
