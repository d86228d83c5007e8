"""Kafka and Redis in containers (testcontainers), used where a Docker engine answers.

Detection must never hang: a ``docker`` CLI without an engine, a dead ``DOCKER_HOST`` or
an unreachable remote engine all count as "no Docker" within a couple of seconds.
"""

from __future__ import annotations

import importlib
import os
import threading
from pathlib import Path
from typing import Any

from dedup_broker.errors import DevServerError

DOCKER_SOCKET = Path("/var/run/docker.sock")
KAFKA_STARTUP_TIMEOUT_SECONDS = 90


def docker_available(timeout: float = 2.0) -> bool:
    """True when a Docker engine answers a ping within ``timeout`` seconds."""
    if not os.environ.get("DOCKER_HOST") and not DOCKER_SOCKET.exists():
        return False
    answer: list[bool] = []

    def probe() -> None:
        try:
            # Imported by name: the SDK is untyped, and a top-level ``docker/`` folder of
            # Dockerfiles must not shadow it for the type checker.
            docker = importlib.import_module("docker")
            client = docker.from_env(timeout=max(1, int(timeout)))
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


class KafkaInDocker:
    """A single-node KRaft Kafka container; removed again by ``stop()``."""

    def __init__(self) -> None:
        self._container: Any = None

    def start(self) -> str:
        """Start the container and return its bootstrap address."""
        kafka_container = _import_kafka_container()
        container = (
            kafka_container()
            .with_kraft()
            .with_env("KAFKA_AUTO_CREATE_TOPICS_ENABLE", "false")
            .with_env("KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS", "0")
        )
        try:
            container.start(timeout=KAFKA_STARTUP_TIMEOUT_SECONDS)
        except Exception as exc:
            _stop_quietly(container)
            raise DevServerError(f"Kafka container did not start: {exc}") from exc
        self._container = container
        return str(container.get_bootstrap_server())

    def stop(self) -> None:
        if self._container is not None:
            container, self._container = self._container, None
            container.stop()


class RedisInDocker:
    """A Redis container without persistence; removed again by ``stop()``."""

    def __init__(self) -> None:
        self._container: Any = None

    def start(self) -> str:
        """Start the container and return its ``redis://`` URL."""
        redis_container = _import_redis_container()
        container = redis_container().with_command("redis-server --save '' --appendonly no")
        try:
            container.start()
        except Exception as exc:
            _stop_quietly(container)
            raise DevServerError(f"Redis container did not start: {exc}") from exc
        self._container = container
        host = container.get_container_host_ip()
        port = container.get_exposed_port(6379)
        return f"redis://{host}:{port}/0"

    def stop(self) -> None:
        if self._container is not None:
            container, self._container = self._container, None
            container.stop()


def _stop_quietly(container: Any) -> None:
    try:
        container.stop()
    except Exception:
        return


def _import_kafka_container() -> Any:
    try:
        from testcontainers.community.kafka import KafkaContainer
    except ImportError:
        try:
            from testcontainers.kafka import KafkaContainer
        except ImportError as exc:
            raise DevServerError(
                "Docker is available but testcontainers[kafka] is not installed"
            ) from exc
    return KafkaContainer


def _import_redis_container() -> Any:
    try:
        from testcontainers.community.redis import RedisContainer
    except ImportError:
        try:
            from testcontainers.redis import RedisContainer
        except ImportError as exc:
            raise DevServerError(
                "Docker is available but testcontainers[redis] is not installed"
            ) from exc
    return RedisContainer
