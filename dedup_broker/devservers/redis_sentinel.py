"""A Redis primary with replicas under three Sentinels, on 127.0.0.1, from ``redis-server``.

The data nodes (a primary and its ``replicaof`` replicas) append and fsync every write
(``appendonly yes``, ``appendfsync always``); the Sentinels are the same binary run with
``--sentinel``, with a short ``down-after-milliseconds``, so that a ``kill_primary()``
(SIGKILL) is followed within seconds by the promotion of a replica. Replication is
asynchronous: writes the primary acknowledged in the moment before it died may not have
reached the replica promoted in its place (docs/key-deduplication.md measures it).

Each process has its own directory and config file (the Sentinels rewrite theirs and the
data nodes' as roles change), so a killed node started again rejoins as a replica. Only
the processes started here are ever signalled, by pid.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from dedup_broker.devservers import process
from dedup_broker.devservers.redis import NativeRedis
from dedup_broker.errors import DevServerError

_log = logging.getLogger(__name__)

MASTER_NAME = "dedup"


class _ConfiguredRedis(NativeRedis):
    """A ``redis-server`` started from a config file written on its first start (kept
    after that: Sentinel rewrites it when the node's role changes)."""

    def config_lines(self) -> list[str]:
        return [
            f"port {self.port}",
            "bind 127.0.0.1",
            f'dir "{self.data_dir}"',
            "daemonize no",
            'logfile ""',
        ]

    @property
    def config_path(self) -> Path:
        return self.data_dir / "redis.conf"

    def argv(self, executable: str) -> list[str]:
        if not self.config_path.exists():
            self.data_dir.mkdir(parents=True, exist_ok=True)
            self.config_path.write_text("\n".join(self.config_lines()) + "\n")
        return [executable, str(self.config_path)]


class SentinelDataNode(_ConfiguredRedis):
    """A primary (``replica_of`` None) or a replica, persistent."""

    def __init__(self, data_dir: Path, port: int, replica_of: int | None) -> None:
        super().__init__(data_dir, port=port, persistent=True, stop_timeout=10.0)
        self.replica_of = replica_of

    def config_lines(self) -> list[str]:
        lines = [
            *super().config_lines(),
            "appendonly yes",
            "appendfsync always",
            'save ""',
            # A replica's first sync starts at once, not after the default 5 s wait.
            "repl-diskless-sync-delay 0",
        ]
        if self.replica_of is not None:
            lines.append(f"replicaof 127.0.0.1 {self.replica_of}")
        return lines

    def wipe(self) -> None:
        """Forget the node's data (it must be stopped): started again, it is empty."""
        if self.running:
            raise DevServerError("wipe() of a running Redis")
        shutil.rmtree(self.data_dir / "appendonlydir", ignore_errors=True)
        (self.data_dir / "dump.rdb").unlink(missing_ok=True)


class SentinelNode(_ConfiguredRedis):
    """``redis-server <conf> --sentinel`` watching the group's primary."""

    def __init__(
        self,
        data_dir: Path,
        port: int,
        primary_port: int,
        quorum: int,
        down_after_ms: int,
        failover_timeout_ms: int,
        master_name: str,
    ) -> None:
        super().__init__(data_dir, port=port, stop_timeout=10.0)
        self.primary_port = primary_port
        self.quorum = quorum
        self.down_after_ms = down_after_ms
        self.failover_timeout_ms = failover_timeout_ms
        self.master_name = master_name

    def config_lines(self) -> list[str]:
        name = self.master_name
        return [
            *super().config_lines(),
            f"sentinel monitor {name} 127.0.0.1 {self.primary_port} {self.quorum}",
            f"sentinel down-after-milliseconds {name} {self.down_after_ms}",
            f"sentinel failover-timeout {name} {self.failover_timeout_ms}",
            f"sentinel parallel-syncs {name} 1",
        ]

    def argv(self, executable: str) -> list[str]:
        return [*super().argv(executable), "--sentinel"]


class NativeRedisSentinel:
    """A primary, ``replicas`` replicas and ``sentinels`` Sentinels on free loopback ports.

    ``url`` is the ``redis+sentinel://`` URL of the group (``redisUrl``).
    """

    def __init__(
        self,
        replicas: int = 2,
        sentinels: int = 3,
        data_dir: Path | str | None = None,
        *,
        master_name: str = MASTER_NAME,
        down_after_ms: int = 1000,
        failover_timeout_ms: int = 5000,
    ) -> None:
        if replicas < 1:
            raise DevServerError("a Sentinel group needs at least one replica to promote")
        if sentinels < 1:
            raise DevServerError("a Sentinel group needs at least one Sentinel")
        self._owns_dir = data_dir is None
        self.data_dir = Path(data_dir or tempfile.mkdtemp(prefix="dedup-broker-redis-sentinel-"))
        self.master_name = master_name
        ports = process.free_ports(1 + replicas + sentinels)
        primary = ports[0]
        self.nodes = [
            SentinelDataNode(
                self.data_dir / f"node-{i}", port, replica_of=None if i == 0 else primary
            )
            for i, port in enumerate(ports[: 1 + replicas])
        ]
        self.sentinels = [
            SentinelNode(
                self.data_dir / f"sentinel-{i}",
                port,
                primary_port=primary,
                quorum=sentinels // 2 + 1,
                down_after_ms=down_after_ms,
                failover_timeout_ms=failover_timeout_ms,
                master_name=master_name,
            )
            for i, port in enumerate(ports[1 + replicas :])
        ]

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)
        return f"redis+sentinel://{hosts}/{self.master_name}/0"

    @property
    def pids(self) -> dict[str, int | None]:
        """``node-<i>`` and ``sentinel-<i>`` to the pid of each process (None: not running)."""
        out = {f"node-{i}": node.pid for i, node in enumerate(self.nodes)}
        out.update({f"sentinel-{i}": s.pid for i, s in enumerate(self.sentinels)})
        return out

    def start(self, timeout: float = 60.0) -> None:
        """Every process not running, then until the Sentinels agree on a primary that
        every running replica follows (and the Sentinels know each other)."""
        try:
            for server in [*self.nodes, *self.sentinels]:
                if not server.running:
                    server.start()
            self.wait_healthy(timeout)
        except BaseException:
            self.stop()
            raise
        _log.info("Redis Sentinel group up at %s (%s)", self.url, self.pids)

    def wait_healthy(self, timeout: float = 60.0) -> SentinelDataNode:
        """Until the Sentinels agree on a live primary, each sees all the others, and every
        running replica's link to the primary is up; returns the primary."""
        deadline = time.monotonic() + timeout
        problem = "not asked yet"
        while time.monotonic() < deadline:
            problem = self._health_problem()
            if not problem:
                return self.primary()
            time.sleep(0.2)
        raise DevServerError(f"Redis Sentinel group not healthy in {timeout:.0f} s: {problem}")

    def _health_problem(self) -> str:
        import redis

        running = [s for s in self.sentinels if s.running]
        seen: list[int] = []
        for sentinel in running:
            state = _sentinel_call(sentinel.port, "SENTINEL", "MASTER", self.master_name)
            if not isinstance(state, dict):
                return f"Sentinel {sentinel.port} does not answer"
            if int(state.get("num-other-sentinels", 0)) < len(running) - 1:
                return f"Sentinel {sentinel.port} does not see the other Sentinels yet"
            if "s_down" in str(state.get("flags", "")) or "o_down" in str(state.get("flags", "")):
                return f"Sentinel {sentinel.port} sees the primary down"
            seen.append(int(state["port"]))
        if not seen or len(set(seen)) != 1:
            return f"Sentinels disagree on the primary: {seen}"
        primary = self._node(seen[0])
        if primary is None or not primary.running:
            return f"the primary {seen[0]} is not running"
        for node in self.nodes:
            if not node.running:
                continue
            try:
                client = redis.Redis(port=node.port, socket_timeout=1.0)
                try:
                    info = client.info("replication")
                finally:
                    client.close()
            except redis.RedisError as exc:
                return f"Redis {node.port}: {exc}"
            if node is primary:
                if info.get("role") != "master":
                    return f"the primary {node.port} answers as {info.get('role')}"
            elif info.get("master_port") != primary.port or info.get("master_link_status") != "up":
                return f"replica {node.port} does not follow {primary.port} yet"
        return ""

    def primary_port(self) -> int:
        """The primary's port, as most Sentinels that answer name it."""
        votes: Counter[int] = Counter()
        for sentinel in self.sentinels:
            if not sentinel.running:
                continue
            answer = _sentinel_call(
                sentinel.port, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.master_name
            )
            if isinstance(answer, (list, tuple)) and len(answer) == 2:
                votes[int(answer[1])] += 1
        if not votes:
            raise DevServerError("no Sentinel names a primary")
        return votes.most_common(1)[0][0]

    def primary(self) -> SentinelDataNode:
        port = self.primary_port()
        node = self._node(port)
        if node is None:
            raise DevServerError(f"the Sentinels name {port}, no node of this group")
        return node

    def replicas(self) -> list[SentinelDataNode]:
        primary = self.primary()
        return [node for node in self.nodes if node is not primary]

    def kill_primary(self) -> SentinelDataNode:
        """kill -9 of the node the Sentinels call primary; returns it (``start()`` it to
        bring it back: it rejoins as a replica of whichever node was promoted)."""
        node = self.primary()
        pid = node.pid
        node.kill()
        _log.info("killed the Redis primary %d (pid %s)", node.port, pid)
        return node

    def wait_for_failover(self, old: SentinelDataNode, timeout: float = 30.0) -> SentinelDataNode:
        """Until the Sentinels name another primary and it answers as one; returns it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                node = self.primary()
            except DevServerError:
                node = old
            if node is not old and node.running and _role(node.port) == "master":
                return node
            time.sleep(0.1)
        raise DevServerError(f"no replica promoted within {timeout:.0f} s of losing {old.port}")

    def _node(self, port: int) -> SentinelDataNode | None:
        return next((node for node in self.nodes if node.port == port), None)

    def stop(self) -> None:
        """Stop the Sentinels (so that they start no failover), then the data nodes."""
        for server in [*self.sentinels, *self.nodes]:
            server.stop()

    def close(self) -> None:
        self.stop()
        if self._owns_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> NativeRedisSentinel:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"NativeRedisSentinel({self.url}, {self.pids})"


def _sentinel_call(port: int, *command: str) -> Any:
    """``command``'s answer from the Sentinel on ``port`` (None when it does not answer)."""
    import redis

    client = redis.Redis(
        port=port, socket_timeout=1.0, socket_connect_timeout=1.0, decode_responses=True
    )
    try:
        return client.execute_command(*command)  # type: ignore[no-untyped-call]
    except redis.RedisError:
        return None
    finally:
        client.close()


def _role(port: int) -> str:
    import redis

    client = redis.Redis(port=port, socket_timeout=1.0, socket_connect_timeout=1.0)
    try:
        return str(client.info("replication").get("role", ""))
    except redis.RedisError:
        return ""
    finally:
        client.close()
