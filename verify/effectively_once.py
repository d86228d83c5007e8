"""The effectively-once consumer as an application runs it: in a process of its own,
applying each message to a SQLite table in the transaction that stores its position,
killed with kill -9 now and then and started again.

``python -m verify.effectively_once SERVICE_URL TOPIC DATABASE`` is the application.
"""

from __future__ import annotations

import logging
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pulsar

from verify.check import Mode, PathSpec
from verify.environment import pulsar_client
from verify.history import History
from verify.live import LivePath
from verify.load import Topic, id_of

log = logging.getLogger(__name__)

TABLE = "applied"


class EffectivelyOncePath(LivePath):
    def __init__(self, service_url: str, history: History, topic: Topic, kill_every: float) -> None:
        super().__init__(history, PathSpec("effectively-once", topic.tag, Mode.EXACTLY_ONCE, True))
        self.database = history.run_dir / f"effectively-once-{topic.tag}.db"
        self.argv = [sys.executable, "-m", "verify.effectively_once", service_url, topic.name]
        self.argv.append(str(self.database))
        self.log_path = history.run_dir / f"effectively-once-{topic.tag}.log"
        self.kill_every = kill_every
        self.extras["kills"] = 0
        self._process: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self._start_worker()
        self._thread(self._kill_now_and_then, name=f"effectively-once-{topic.tag}")

    def _start_worker(self) -> None:
        with self.log_path.open("ab") as output:
            self._process = subprocess.Popen(
                self.argv, stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )

    def _kill_now_and_then(self) -> None:
        while not self._stop.wait(self.kill_every):
            with self._lock:
                assert self._process is not None
                self._process.send_signal(signal.SIGKILL)
                self._process.wait()
                self.extras["kills"] += 1
                self._start_worker()

    def applied(self) -> list[int]:
        if not self.database.exists():
            return []
        with sqlite3.connect(self.database, timeout=30) as connection:
            try:
                rows = connection.execute(f"SELECT id FROM {TABLE} ORDER BY rowid").fetchall()
            except sqlite3.OperationalError:  # the table is not there yet
                return []
        return [int(row[0]) for row in rows]

    def caught_up(self, sent: int) -> bool:
        return len(set(self.applied())) >= sent

    def stop(self) -> None:
        """Stop killing; the worker keeps applying until ``finish()``."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=60)

    def terminate(self) -> None:
        """Stop the worker (SIGTERM, SIGKILL after 30 s); safe to call more than once."""
        self._stop.set()
        with self._lock:
            if self._process is not None and self._process.poll() is None:
                self._process.terminate()
                try:
                    self._process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    self._process.kill()
                    self._process.wait()

    def finish(self) -> None:
        """Stop the worker and record what it applied, in the order it applied it."""
        self.terminate()
        if self._process is not None and self._process.returncode not in (0, -15, -9):
            self.errors.append(f"worker exited with {self._process.returncode}")
        for message_id in self.applied():
            self.record(message_id)


def main(argv: list[str]) -> int:
    from connectors.effectively_once import EffectivelyOnceConsumer
    from connectors.offset_store import open_store

    service_url, topic, database = argv
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    store = open_store(Path(database))
    with store.transaction() as cursor:
        cursor.execute(f"CREATE TABLE IF NOT EXISTS {TABLE} (id INTEGER NOT NULL)")

    def apply(cursor: Any, message: pulsar.Message) -> None:
        cursor.execute(f"INSERT INTO {TABLE} (id) VALUES (?)", (id_of(message.data()),))

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    client = pulsar_client(service_url, Path(database).with_suffix(".client.log"), 60)
    try:
        while not stop.is_set():
            try:
                with EffectivelyOnceConsumer(
                    client, topic, apply, store, name="verify"
                ) as consumer:
                    consumer.run(stop=stop)
            except Exception:  # the broker moved or failed: start again from the store
                log.exception("consumer failed; starting again")
                time.sleep(1.0)
    finally:
        client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
