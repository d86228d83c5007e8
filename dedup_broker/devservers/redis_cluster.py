"""A Redis Cluster on 127.0.0.1 from the system's ``redis-server`` and ``redis-cli``.

Several ``redis-server --cluster-enabled yes`` nodes, each in its own directory, joined
by ``redis-cli --cluster create`` (masters only, no replicas: enough to show that a
client follows slots across nodes). For tests and development of the Redis Cluster path
of key-window deduplication.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from dedup_broker.devservers import pieces, process
from dedup_broker.devservers.redis import NativeRedis
from dedup_broker.errors import DevServerError


class _ClusterNode(NativeRedis):
    def argv(self, executable: str) -> list[str]:
        return [
            *super().argv(executable),
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            str(self.data_dir / "nodes.conf"),
            "--cluster-node-timeout",
            "5000",
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
    """``nodes`` masters (at least 3, Redis Cluster's minimum) on free loopback ports."""

    def __init__(self, nodes: int = 3, data_dir: Path | str | None = None) -> None:
        if nodes < 3:
            raise DevServerError("a Redis Cluster needs at least 3 masters")
        self._owns_dir = data_dir is None
        self.data_dir = Path(data_dir or tempfile.mkdtemp(prefix="dedup-broker-redis-cluster-"))
        ports = _cluster_ports(nodes)
        self.nodes = [_ClusterNode(self.data_dir / f"node-{p}", port=p) for p in ports]

    @property
    def ports(self) -> list[int]:
        return [node.port for node in self.nodes]

    @property
    def url(self) -> str:
        """A URL the broker (``redisUrl``) and redis-py's cluster client understand."""
        return f"redis+cluster://127.0.0.1:{self.ports[0]}"

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
                    "0",
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
            if all(states):
                return
            time.sleep(0.2)
        raise DevServerError(f"Redis Cluster on {self.ports} not ready within {timeout:.0f} s")

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
