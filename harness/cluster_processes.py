"""Several brokers of one cluster, each in its own OS process (kill -9, SIGSTOP by pid)."""

from __future__ import annotations

import json
import signal
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from harness.broker_process import BrokerProcess


class ClusterProcesses:
    """``size`` brokers sharing one cluster name (and so one owners group) on one Kafka."""

    def __init__(
        self,
        kafka_bootstrap: str,
        log_dir: Path,
        size: int = 3,
        settings: dict[str, Any] | None = None,
        cluster_name: str | None = None,
        http_headers: dict[str, str] | None = None,
    ) -> None:
        self.kafka_bootstrap = kafka_bootstrap
        self.cluster_name = cluster_name or f"c-{uuid.uuid4().hex[:10]}"
        self.log_dir = log_dir
        self.settings = dict(settings or {})
        self.http_headers = dict(http_headers or {})
        """Sent with the cluster's own admin calls (credentials when authentication is on)."""
        self.brokers: list[BrokerProcess] = []
        for _ in range(size):
            self.add()

    def add(self) -> BrokerProcess:
        """A new broker of this cluster (not started)."""
        index = len(self.brokers)
        log_dir = self.log_dir / f"broker-{index}"
        log_dir.mkdir(parents=True, exist_ok=True)
        broker = BrokerProcess(
            self.kafka_bootstrap, self.cluster_name, settings=self.settings, log_dir=log_dir
        )
        self.brokers.append(broker)
        return broker

    def __iter__(self) -> Iterator[BrokerProcess]:
        return iter(self.brokers)

    def __getitem__(self, index: int) -> BrokerProcess:
        return self.brokers[index]

    def running(self) -> list[BrokerProcess]:
        return [b for b in self.brokers if b.process is not None and b.process.poll() is None]

    def start(self) -> None:
        for broker in self.brokers:
            broker.start()
        self.wait_settled()

    def stop(self) -> None:
        for broker in self.brokers:
            if broker.process is not None and broker.process.poll() is None:
                broker.process.send_signal(signal.SIGCONT)
            broker.stop()

    @property
    def service_url(self) -> str:
        """A client service URL naming every running broker."""
        hosts = ",".join(f"127.0.0.1:{b.port}" for b in self.running())
        return f"pulsar://{hosts}"

    def ownership(self, broker: BrokerProcess) -> dict[str, Any]:
        request = urllib.request.Request(
            broker.http_url + "/admin/v2/brokers/ownership/slots", headers=self.http_headers
        )
        with urllib.request.urlopen(request, timeout=10, context=broker.https_context) as response:
            result: dict[str, Any] = json.loads(response.read())
            return result

    def wait_settled(self, timeout: float = 60.0) -> None:
        """Until every running broker owns some slot and every slot has one owner."""
        deadline = time.monotonic() + timeout
        last: object = None
        while time.monotonic() < deadline:
            running = self.running()
            try:
                owned = [set(self.ownership(b)["ownedSlots"]) for b in running]
            except OSError as exc:
                last = exc
                time.sleep(0.3)
                continue
            slots = [s for group in owned for s in group]
            total = int(self.settings.get("cluster_ownership_slots", 16))
            if all(owned) and len(slots) == len(set(slots)) == total:
                return
            last = owned
            time.sleep(0.3)
        raise TimeoutError(f"cluster not settled after {timeout:.0f}s: {last}")
