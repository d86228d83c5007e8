"""Helpers for ledger deletion tests: a broker and workers of one cluster, observations."""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient

from dedup_broker.app.deletion_worker import run_doctor as check
from dedup_broker.config import BrokerConfig
from harness.admin_http import http_request
from harness.broker_process import BrokerProcess
from harness.worker_process import WorkerProcess

SMALL_LEDGERS: dict[str, object] = {
    "managed_ledger_max_entries_per_ledger": 5,
    "managed_ledger_min_ledger_rollover_time_minutes": 0,
    "two_phase_deletion_reconsume_later_in_seconds": 1,
    "managed_ledger_default_mark_delete_rate_limit": 20,
}


class Cluster:
    """One cluster name shared by a broker and any number of workers."""

    def __init__(self, bootstrap: str, tmp_path: Path, **settings: object) -> None:
        self.bootstrap = bootstrap
        self.name = f"ld-{uuid.uuid4().hex[:10]}"
        self.tmp_path = tmp_path
        self.settings = SMALL_LEDGERS | settings
        self.broker = BrokerProcess(bootstrap, self.name, dict(self.settings), tmp_path)
        self.workers: list[WorkerProcess] = []
        self.admin = AdminClient({"bootstrap.servers": bootstrap})

    def add_worker(self, **settings: object) -> WorkerProcess:
        worker = WorkerProcess(
            self.bootstrap, self.name, dict(self.settings) | settings, self.tmp_path
        )
        worker.start()
        self.workers.append(worker)
        return worker

    def config(self) -> BrokerConfig:
        env = self.broker.environment()
        return BrokerConfig.load(environ=env)

    def stop(self) -> None:
        for worker in self.workers:
            worker.stop()
        self.broker.stop()
        topics = [t for t in self.admin.list_topics(timeout=10).topics if t.startswith(self.name)]
        if topics:
            for future in self.admin.delete_topics(topics, operation_timeout=30).values():
                future.exception()

    # --- observations -----------------------------------------------------------------
    def ledger_topics(self) -> set[int]:
        pattern = re.compile(re.escape(self.name) + r"\.ledger\.(\d+)")
        topics = self.admin.list_topics(timeout=10).topics
        return {int(m.group(1)) for t in topics if (m := pattern.fullmatch(t))}

    def admin_json(self, method: str, path: str, body: bytes | None = None) -> Any:
        status, data = http_request(method, self.broker.http_url + path, body)
        assert status in (200, 204), (status, data)
        return json.loads(data) if data else None

    def ledgers_of(self, topic: str) -> list[int]:
        path = "/admin/v2/persistent/" + topic.removeprefix("persistent://") + "/internalStats"
        return [ledger["ledgerId"] for ledger in self.admin_json("GET", path)["ledgers"]]

    def trim(self, topic: str) -> None:
        path = "/admin/v2/persistent/" + topic.removeprefix("persistent://") + "/trim"
        self.admin_json("POST", path)

    def in_flight(self) -> int:
        stats = self.admin_json("GET", "/admin/v2/ledger-deletion/stats")
        return int(stats["estimatedInFlightDeletions"])

    def doctor(self) -> dict[str, Any]:
        return check(self.config())


def metric(url: str, name: str, labels: str = "") -> float:
    """One sample of a Prometheus text exposition (0 when absent)."""
    status, body = http_request("GET", url + "/metrics")
    assert status == 200
    wanted = name + (f"{{{labels}}}" if labels else "")
    for line in body.decode().splitlines():
        if line.startswith(wanted + " "):
            return float(line.split()[-1])
    return 0.0


def wait_until(condition: Callable[[], bool], timeout: float = 60, what: str = "") -> None:
    """Poll ``condition`` (bounded in time); fail with ``what`` if it never holds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what or condition}")
