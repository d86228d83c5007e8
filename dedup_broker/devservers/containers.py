"""Kafka (one node or a KRaft cluster), Redis and the broker in containers (testcontainers).

Every container runs with host networking and binds 127.0.0.1 on free ports: no bridge,
no NAT, no traffic off loopback, and the addresses Kafka and the broker advertise are the
ones clients on the host use. The images are the ones ``images`` builds on this machine
when the engine has them (nothing can be pulled here), else the public ones
(``apache/kafka``, ``redis``), which take the same configuration. Each container is
labelled with the pid of the process that started it: its owner removes it, and
``remove_orphans`` removes those whose owner died (there is no Ryuk: it would have to be
pulled).

Detection must never hang: a ``docker`` CLI without an engine, a dead ``DOCKER_HOST`` or
an unreachable remote engine all count as "no Docker" within a couple of seconds.
"""

from __future__ import annotations

import base64
import logging
import os
import threading
import time
import urllib.request
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dedup_broker.config import ENV_PREFIX
from dedup_broker.devservers import images, process
from dedup_broker.devservers.distribution import KAFKA_VERSION
from dedup_broker.devservers.docker_engine import docker_sdk
from dedup_broker.errors import DevServerError

DOCKER_SOCKET = Path("/var/run/docker.sock")
KAFKA_STARTUP_TIMEOUT_SECONDS = 240
BROKER_STARTUP_TIMEOUT_SECONDS = 90
PUBLIC_KAFKA_IMAGE = f"apache/kafka:{KAFKA_VERSION}"
PUBLIC_REDIS_IMAGE = "redis:7"
OWNER_LABEL = "org.dedup-broker.owner-pid"
"""The pid of the process that started a container (compose.local.yaml sets it from
``DEDUP_LOCAL_OWNER_PID``)."""
COMPOSE_PROJECT_LABEL = "com.docker.compose.project"

_log = logging.getLogger(__name__)
# Ryuk (testcontainers' reaper) is an image to pull; our containers are removed by their
# owners and by remove_orphans(). An explicit TESTCONTAINERS_RYUK_DISABLED still wins.
os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")


def docker_available(timeout: float = 2.0) -> bool:
    """True when a Docker engine answers a ping within ``timeout`` seconds."""
    if not os.environ.get("DOCKER_HOST") and not DOCKER_SOCKET.exists():
        return False
    answer: list[bool] = []

    def probe() -> None:
        try:
            client = docker_sdk().from_env(timeout=max(1, int(timeout)))
            try:
                answer.append(bool(client.ping()))
            finally:
                client.close()
        except Exception:
            answer.append(False)

    # The client's own timeout does not cover every step (e.g. ssh:// hosts), so the
    # whole probe is bounded from outside; a stuck probe thread is simply abandoned.
    thread = threading.Thread(target=probe, name="docker-probe", daemon=True)
    thread.start()
    thread.join(timeout + 1.0)
    return bool(answer and answer[0])


def local_or_public(local: str, public: str) -> str:
    """``local`` when the engine has it (built by ``make images``), else ``public``."""
    client = docker_sdk().from_env()
    try:
        client.images.get(local)
        return local
    except Exception:
        return public
    finally:
        client.close()


def remove_orphans() -> list[str]:
    """Removes our containers whose owning process is gone (and the volumes of compose
    projects they belonged to); their names."""
    client = docker_sdk().from_env()
    removed = []
    projects = set()
    try:
        for container in client.containers.list(all=True, filters={"label": OWNER_LABEL}):
            try:
                owner = int(container.labels.get(OWNER_LABEL, ""))
            except ValueError:
                continue  # started by hand (e.g. compose_local): not ours to remove
            if owner != os.getpid() and not process.pid_alive(owner):
                container.remove(force=True, v=True)
                removed.append(str(container.name))
                projects.add(container.labels.get(COMPOSE_PROJECT_LABEL))
        for project in projects - {None}:
            label = f"{COMPOSE_PROJECT_LABEL}={project}"
            for volume in client.volumes.list(filters={"label": label}):
                volume.remove(force=True)
    finally:
        client.close()
    return removed


class HostContainer:
    """One container on the host's network: started, killed (SIGKILL), started again on
    the same file system, removed."""

    def __init__(
        self,
        image: str,
        role: str,
        env: Mapping[str, str],
        command: Sequence[str] | None = None,
    ) -> None:
        from testcontainers.core.container import DockerContainer

        self.name = f"dedup-{role}-{uuid.uuid4().hex[:8]}"
        self._container: Any = (
            DockerContainer(image)
            .with_name(self.name)
            .with_envs(**env)
            .with_kwargs(network_mode="host", labels={OWNER_LABEL: str(os.getpid())})
        )
        if command is not None:
            self._container = self._container.with_command(list(command))
        self._started = False

    def start(self) -> None:
        """Creates and starts the container (a killed one is started again)."""
        if self._started:
            self._wrapped().start()
            return
        self._container.start()
        self._started = True

    def kill(self) -> None:
        """SIGKILL to the container's process, as a crashed host would."""
        self._wrapped().kill()

    @property
    def running(self) -> bool:
        wrapped = self._wrapped()
        wrapped.reload()
        return bool(wrapped.status == "running")

    def logs(self, lines: int = 60) -> str:
        if not self._started:
            return ""
        raw = self._wrapped().logs(tail=lines)
        return bytes(raw).decode(errors="replace")

    def remove(self) -> None:
        """Removes the container and its anonymous volumes; safe to call twice."""
        if not self._started:
            return
        self._started = False
        try:
            self._container.stop()
        except Exception as exc:
            _log.warning("removing container %s: %s", self.name, exc)

    def _wrapped(self) -> Any:
        return self._container.get_wrapped_container()


def new_cluster_id() -> str:
    """A random Kafka cluster id (a UUID in unpadded base64url) that does not start with
    ``-``: the storage tool's ``--cluster-id`` would take such an id for an option (Kafka's
    own random ids avoid it for that reason)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def kafka_environment(props: Mapping[str, str]) -> dict[str, str]:
    """Server properties as the Kafka images take them: ``KAFKA_`` + the key upper-cased,
    ``_`` written ``__``, ``-`` written ``___`` and ``.`` written ``_``."""
    env = {}
    for key, value in props.items():
        name = key.replace("_", "__").replace("-", "___").replace(".", "_").upper()
        env[f"KAFKA_{name}"] = value
    return env


def kafka_node_properties(
    node_id: int, ports: Sequence[int], controller_ports: Sequence[int]
) -> dict[str, str]:
    """Node ``node_id`` (from 1) of a KRaft cluster of ``len(ports)`` combined nodes on
    loopback: replication up to 3 and ``min.insync.replicas`` 2 from three nodes on, no
    unclean elections, and the short timeouts kill tests want."""
    nodes = len(ports)
    port, controller_port = ports[node_id - 1], controller_ports[node_id - 1]
    replication = str(min(3, nodes))
    min_isr = "2" if nodes >= 3 else "1"
    voters = ",".join(
        f"{index}@127.0.0.1:{cport}" for index, cport in enumerate(controller_ports, 1)
    )
    return {
        "node.id": str(node_id),
        "process.roles": "broker,controller",
        "controller.quorum.voters": voters,
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": "/var/lib/kafka/data",
        "num.partitions": "1",
        "default.replication.factor": replication,
        "min.insync.replicas": min_isr,
        "unclean.leader.election.enable": "false",
        "offsets.topic.replication.factor": replication,
        "offsets.topic.num.partitions": "10",
        "transaction.state.log.replication.factor": replication,
        "transaction.state.log.min.isr": min_isr,
        "share.coordinator.state.topic.replication.factor": replication,
        "share.coordinator.state.topic.min.isr": min_isr,
        "group.initial.rebalance.delay.ms": "0",
        "group.min.session.timeout.ms": "1000",
        "auto.create.topics.enable": "false",
        "delete.topic.enable": "true",
        "broker.session.timeout.ms": "5000",
        "broker.heartbeat.interval.ms": "1000",
        "log.cleaner.backoff.ms": "1000",
    }


class KafkaClusterInDocker:
    """A KRaft Kafka of ``nodes`` containers (each broker and controller), node ids 1..n."""

    def __init__(
        self,
        nodes: int = 1,
        *,
        image: str | None = None,
        heap: str = "384m",
        extra_properties: Mapping[str, str] | None = None,
    ) -> None:
        picked = process.free_ports(2 * nodes)
        self.ports = picked[:nodes]
        self.controller_ports = picked[nodes:]
        self.image = image or local_or_public(images.KAFKA_IMAGE, PUBLIC_KAFKA_IMAGE)
        cluster_id = new_cluster_id()
        self.nodes: dict[int, HostContainer] = {}
        for node_id in range(1, nodes + 1):
            props = kafka_node_properties(node_id, self.ports, self.controller_ports)
            props.update(extra_properties or {})
            env = kafka_environment(props) | {
                "CLUSTER_ID": cluster_id,
                "KAFKA_HEAP_OPTS": f"-Xmx{heap} -Xms{heap}",
            }
            self.nodes[node_id] = HostContainer(self.image, f"kafka-{node_id}", env)

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"127.0.0.1:{port}" for port in self.ports)

    def start(self, timeout: float = KAFKA_STARTUP_TIMEOUT_SECONDS) -> str:
        """Starts every node and waits until the cluster lists them all; the bootstrap
        address."""
        try:
            for node in self.nodes.values():
                node.start()
            self.wait_for_nodes(len(self.nodes), timeout)
        except BaseException:
            self.stop()
            raise
        return self.bootstrap_servers

    def wait_for_nodes(self, count: int, timeout: float) -> None:
        """Until a metadata request lists ``count`` live brokers."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient(
            # Refused connections while the nodes start are expected: not logged.
            {"bootstrap.servers": self.bootstrap_servers, "socket.timeout.ms": 3000, "log_level": 0}
        )
        deadline = time.monotonic() + timeout
        while True:
            try:
                if len(admin.list_topics(timeout=3).brokers) >= count:
                    return
            except Exception as exc:
                _log.debug("Kafka containers not ready yet: %s", exc)
            if time.monotonic() > deadline:
                logs = "\n".join(f"--- {n.name}\n{n.logs(20)}" for n in self.nodes.values())
                raise DevServerError(
                    f"Kafka containers did not list {count} brokers within {timeout:.0f} s\n" + logs
                )
            time.sleep(0.5)

    def kill(self, node_id: int) -> None:
        """SIGKILL to one node's JVM (its container stops, its data stays)."""
        self.nodes[node_id].kill()

    def start_node(self, node_id: int) -> None:
        """Starts a killed node again on its data."""
        self.nodes[node_id].start()

    def stop(self) -> None:
        for node in self.nodes.values():
            node.remove()


class BrokerInDocker:
    """The broker image (``serve``, or another command such as ``deletion-worker``) on
    Kafka ``kafka_bootstrap``; configured through ``DEDUP_BROKER_*`` variables."""

    health_path = "/admin/v2/brokers/health"

    def __init__(
        self,
        kafka_bootstrap: str,
        cluster_name: str,
        settings: Mapping[str, object] | None = None,
        *,
        image: str = images.BROKER_IMAGE,
        command: Sequence[str] = ("serve",),
    ) -> None:
        self.port, self.http_port = process.free_ports(2)
        values: dict[str, object] = {
            "cluster_name": cluster_name,
            "kafka_bootstrap_servers": kafka_bootstrap,
            "bind_address": "127.0.0.1",
            "advertised_address": "127.0.0.1",
            "broker_service_port": self.port,
            "web_service_port": self.http_port,
            # A killed broker's slots move at once; a frozen one's after this.
            "cluster_peer_timeout_millis": 3000,
        }
        values.update(settings or {})
        env = {
            ENV_PREFIX + name.upper(): str(value).lower() if isinstance(value, bool) else str(value)
            for name, value in values.items()
        }
        self.container = HostContainer(image, "broker", env, command)

    @property
    def service_url(self) -> str:
        return f"pulsar://127.0.0.1:{self.port}"

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def start(self, timeout: float = BROKER_STARTUP_TIMEOUT_SECONDS) -> None:
        """Starts (or starts again) the container and waits for the health check."""
        self.container.start()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(self.http_url + self.health_path, timeout=2) as reply:
                    if reply.status == 200:
                        return
            except OSError:
                pass
            if not self.container.running:
                break
            time.sleep(0.3)
        raise DevServerError(
            f"broker container {self.container.name} not healthy:\n{self.container.logs()}"
        )

    def kill(self) -> None:
        self.container.kill()

    def stop(self) -> None:
        self.container.remove()


class KafkaInDocker:
    """A single-node KRaft Kafka container; removed again by ``stop()``."""

    def __init__(self) -> None:
        self._cluster: KafkaClusterInDocker | None = None

    def start(self) -> str:
        """Start the container and return its bootstrap address."""
        cluster = KafkaClusterInDocker(1)
        try:
            address = cluster.start()
        except Exception as exc:
            raise DevServerError(f"Kafka container did not start: {exc}") from exc
        self._cluster = cluster
        return address

    def stop(self) -> None:
        if self._cluster is not None:
            cluster, self._cluster = self._cluster, None
            cluster.stop()


class RedisInDocker:
    """A Redis container on 127.0.0.1 without persistence; removed again by ``stop()``."""

    def __init__(self, image: str | None = None) -> None:
        self.port = process.free_ports(1)[0]
        self.image = image or local_or_public(images.REDIS_IMAGE, PUBLIC_REDIS_IMAGE)
        command = ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port)]
        command += ["--save", "", "--appendonly", "no"]
        self._container: HostContainer | None = HostContainer(self.image, "redis", {}, command)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 30.0) -> str:
        """Start the container and return its ``redis://`` URL once it answers."""
        assert self._container is not None, "stopped"
        try:
            self._container.start()
            if not process.wait_until(lambda: process.port_accepts(self.port), timeout):
                raise DevServerError(f"no answer on port {self.port}:\n{self._container.logs()}")
        except Exception as exc:
            self.stop()
            raise DevServerError(f"Redis container did not start: {exc}") from exc
        return self.url

    def stop(self) -> None:
        if self._container is not None:
            container, self._container = self._container, None
            container.remove()
