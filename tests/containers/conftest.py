"""The container tier: Kafka, Redis and the broker as containers of the images built on
this machine (``make images``), started with testcontainers on host networking.

Skipped, with the reason, when no Docker engine answers or an image is missing, so that
``make test`` passes on machines without Docker; ``make test-containers`` starts an engine,
builds the images and sets ``DEDUP_BROKER_REQUIRE_DOCKER=1``, which turns those skips into
failures. Ryuk is off (it would have to be pulled): every fixture removes its containers,
and containers left by a killed earlier run are removed at the start.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from types import FrameType

import pytest

from dedup_broker.devservers.container_tier import REQUIRE_ENV
from dedup_broker.devservers.containers import (
    KafkaClusterInDocker,
    docker_available,
    remove_orphans,
)
from dedup_broker.devservers.docker_engine import docker_sdk
from dedup_broker.devservers.images import missing_images

os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")


def _unavailable() -> str | None:
    """Why the tier cannot run here, or None."""
    if not docker_available(timeout=3.0):
        return (
            "no Docker engine answers (DOCKER_HOST or /var/run/docker.sock); "
            "`make test-containers` starts one, builds the images and runs this tier"
        )
    client = docker_sdk().from_env()
    try:
        missing = missing_images(client)
    finally:
        client.close()
    if missing:
        return f"images not built: {', '.join(missing)} (`make images` builds them)"
    return None


def _interrupt_on_sigterm() -> None:
    """SIGTERM ends the run like Ctrl-C, so fixtures still remove their containers."""
    if threading.current_thread() is not threading.main_thread():
        return

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupt)


@pytest.fixture(scope="session", autouse=True)
def docker_engine() -> None:
    """Skips (or, under ``make test-containers``, fails) the tier without Docker."""
    reason = _unavailable()
    if reason is not None:
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    remove_orphans()
    _interrupt_on_sigterm()


@pytest.fixture(scope="session")
def kafka_single(docker_engine: None) -> Iterator[KafkaClusterInDocker]:
    """One Kafka container (KRaft, one node) for the tests that do not kill Kafka; each
    test names its own cluster, so they share it without meeting."""
    kafka = KafkaClusterInDocker(1)
    kafka.start()
    try:
        yield kafka
    finally:
        kafka.stop()
