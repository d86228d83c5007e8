"""A Redis Cluster on 127.0.0.1 from the system's ``redis-server`` and ``redis-cli``.

Several ``redis-server --cluster-enabled yes`` nodes, each in its own directory, joined
by ``redis-cli --cluster create``: masters only by default (enough to show that a
client follows slots across nodes), or with ``replicas`` replicas each, which the cluster
promotes when their master dies (``kill_primary``). For tests and development of the
Redis Cluster path of key-window deduplication.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from dedup_broker.devservers import pieces, process
from dedup_broker.devservers.redis import NativeRedis
from dedup_broker.errors import DevServerError


class _ClusterNode(NativeRedis):
    node_timeout_ms = 5000

    def argv(self, executable: str) -> list[str]:
        return [
            *super().argv(executable),
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            str(self.data_dir / "nodes.conf"),
            "--cluster-node-timeout",
            str(self.node_timeout_ms),
            # A replica fails over however long it was cut off from its master (on a
            # busy machine a replica may lag past the default validity): tests kill
            # masters to see a replica take over, never to see the cluster give up.
            "--cluster-replica-validity-factor",
            "0",
        ]


BUS_OFFSET = 10000
"""Each node also listens on its port + 10000 (the cluster bus)."""


def _cluster_ports(count: int) -> list[int]:
    """Free ports whose bus port (port + 10000) is a valid, free port too."""
    chosen: list[int] = []
    for _ in range(200):
        for port in process.free_ports(count):
            bus = port + BUS_OFFSET
            if bus <= 65535 and port not in chosen and process.port_bindable(bus):
                chosen.append(port)
            if len(chosen) == count:
                return chosen
    raise DevServerError("no free loopback ports for a Redis Cluster")


class NativeRedisCluster:
    """``nodes`` masters (at least 3, Redis Cluster's minimum) on free loopback ports, each
    with ``replicas`` replicas (persistent then: appendonly, fsync always)."""

    def __init__(
        self,
        nodes: int = 3,
        data_dir: Path | str | None = None,
        *,
        replicas: int = 0,
        node_timeout_ms: int = 5000,
    ) -> None:
        """``node_timeout_ms``: how long a silent node takes to be failed over."""
        if nodes < 3:
            raise DevServerError("a Redis Cluster needs at least 3 masters")
        if replicas < 0:
            raise DevServerError("replicas must be >= 0")
        self._owns_dir = data_dir is None
        self.data_dir = Path(data_dir or tempfile.mkdtemp(prefix="dedup-broker-redis-cluster-"))
        self.replicas = replicas
        ports = _cluster_ports(nodes * (1 + replicas))
        self.nodes = [
            _ClusterNode(self.data_dir / f"node-{p}", port=p, persistent=replicas > 0)
            for p in ports
        ]
        for node in self.nodes:
            node.node_timeout_ms = node_timeout_ms

    @property
    def ports(self) -> list[int]:
        return [node.port for node in self.nodes]

    @property
    def url(self) -> str:
        """``redisUrl`` for the broker: every node, so that any one answering will do."""
        return "redis+cluster://" + ",".join(f"127.0.0.1:{port}" for port in self.ports)

    def start(self, timeout: float = 30.0) -> None:
        cli = pieces.redis_tool("redis-cli")
        try:
            for node in self.nodes:
                node.start()
            result = subprocess.run(
                [
                    cli,
                    "--cluster",
                    "create",
                    *(f"127.0.0.1:{p}" for p in self.ports),
                    "--cluster-replicas",
                    str(self.replicas),
                    "--cluster-yes",
                ],
                capture_output=True,
                stdin=subprocess.DEVNULL,
                timeout=timeout,
                check=False,
            )
            if result.returncode != 0:
                detail = (result.stdout + result.stderr).decode(errors="replace")[-2000:]
                raise DevServerError(f"redis-cli --cluster create failed:\n{detail}")
            self._wait_ok(cli, timeout)
        except BaseException:
            self.close()
            raise

    def _wait_ok(self, cli: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            states = []
            for port in self.ports:
                out = subprocess.run(
                    [cli, "-p", str(port), "cluster", "info"],
                    capture_output=True,
                    timeout=5,
                    check=False,
                ).stdout.decode(errors="replace")
                states.append("cluster_state:ok" in out)
            if all(states) and self._replicas_linked():
                return
            time.sleep(0.2)
        raise DevServerError(f"Redis Cluster on {self.ports} not ready within {timeout:.0f} s")

    def _replicas_linked(self) -> bool:
        """Every running replica's link to its master is up (trivially without replicas)."""
        if not self.replicas:
            return True
        view = self.cluster_nodes()
        replicas = [n for n in view if "slave" in n["flags"] and "fail" not in n["flags"]]
        return len(replicas) >= self.replicas * len(self.primaries()) and all(
            n["link_up"] for n in replicas
        )

    def cluster_nodes(self) -> list[dict[str, Any]]:
        """``CLUSTER NODES`` as a running node sees it: ``port``, ``flags``, ``link_up``."""
        import redis

        for node in self.nodes:
            if not node.running:
                continue
            client = redis.Redis(port=node.port, socket_timeout=2.0, decode_responses=True)
            try:
                answer: dict[str, dict[str, Any]] = client.execute_command(  # type: ignore[no-untyped-call]
                    "CLUSTER NODES"
                )
            except redis.RedisError:
                continue
            finally:
                client.close()
            return [
                {
                    "id": info["node_id"],
                    "port": int(address.rpartition(":")[2]),
                    "flags": str(info["flags"]).split(","),
                    "link_up": bool(info["connected"]),
                    "slots": list(info["slots"]),
                }
                for address, info in answer.items()
                if address.rpartition(":")[2].isdigit()  # a node joining has no address yet
            ]
        raise DevServerError("no node of the Redis Cluster answers")

    def primaries(self) -> list[int]:
        """Ports of the masters that serve slots and are not failed."""
        return sorted(
            n["port"]
            for n in self.cluster_nodes()
            if "master" in n["flags"] and "fail" not in n["flags"] and n["slots"]
        )

    def node(self, port: int) -> NativeRedis:
        return next(node for node in self.nodes if node.port == port)

    def kill_primary(self, port: int | None = None) -> NativeRedis:
        """kill -9 of a master (the first one, or ``port``'s); returns its node."""
        node = self.node(self.primaries()[0] if port is None else port)
        node.kill()
        return node

    def wait_for_failover(self, killed: NativeRedis, timeout: float = 30.0) -> list[int]:
        """Until a replica took over the killed master's slots and the cluster is ok
        again, as the running nodes see it; returns the masters' ports."""
        cli = pieces.redis_tool("redis-cli")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            view = self.cluster_nodes()
            masters = {n["port"] for n in view if "master" in n["flags"] and n["slots"]}
            if (
                killed.port not in masters
                and all(killed.port != n["port"] or "fail" in n["flags"] for n in view)
                and self._all_ok(cli)
            ):
                return sorted(masters)
            time.sleep(0.2)
        raise DevServerError(f"no replica took over {killed.port} within {timeout:.0f} s")

    def _all_ok(self, cli: str) -> bool:
        for node in self.nodes:
            if not node.running:
                continue
            out = subprocess.run(
                [cli, "-p", str(node.port), "cluster", "info"],
                capture_output=True,
                timeout=5,
                check=False,
            ).stdout.decode(errors="replace")
            if "cluster_state:ok" not in out:
                return False
        return True

    def close(self) -> None:
        for node in self.nodes:
            node.close()
        if self._owns_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> NativeRedisCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
