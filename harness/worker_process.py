"""A ledger deletion worker in its own OS process (``dedup-broker deletion-worker``)."""

from __future__ import annotations

from pathlib import Path

from dedup_broker.config import ENV_PREFIX
from harness.broker_process import BrokerProcess


class WorkerProcess(BrokerProcess):
    """Same settings as the brokers of its cluster; ``http_url`` serves ``/metrics``."""

    command = ("deletion-worker",)
    health_path = "/health"

    @property
    def http_url(self) -> str:
        """The worker's own plain ``/metrics`` port, whatever the brokers' web ports."""
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def log_path(self) -> Path:
        return self.log_dir / f"worker-{id(self)}-{self.starts}.log"

    def environment(self) -> dict[str, str]:
        env = super().environment()
        env[ENV_PREFIX + "DELETION_WORKER_WEB_SERVICE_PORT"] = str(self.http_port)
        return env
