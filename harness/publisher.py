"""A PIP-6 publisher for tests: fixed producer name, sequence ids 0..n-1, never gives up.

With ``send_timeout_millis=0`` the official client resends whatever it has not seen
acknowledged, across broker restarts and failovers; the broker's deduplication must store
each id exactly once.
"""

from __future__ import annotations

import threading
import time

import pulsar

RECEIVE_MS = 20_000


class Publisher:
    """Sends ids 0..total-1 from a thread; records which sends were acknowledged."""

    def __init__(
        self,
        client: pulsar.Client,
        topic: str,
        total: int,
        batching: bool,
        name: str = "chaos-source",
    ) -> None:
        self.producer = client.create_producer(
            topic,
            producer_name=name,
            send_timeout_millis=0,
            batching_enabled=batching,
            batching_max_messages=20,
            max_pending_messages=200,
            block_if_queue_full=True,
        )
        self.total = total
        self.acknowledged = 0
        self.errors: list[BaseException] = []
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        done = threading.Semaphore(0)

        def callback(result: pulsar.Result, _msg_id: pulsar.MessageId) -> None:
            if result != pulsar.Result.Ok:
                self.errors.append(RuntimeError(str(result)))
            self.acknowledged += 1
            done.release()

        try:
            for i in range(self.total):
                self.producer.send_async(str(i).encode(), callback, sequence_id=i)
            for _ in range(self.total):
                done.acquire(timeout=300)
        except BaseException as exc:
            self.errors.append(exc)

    def wait_for(self, count: int, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while self.acknowledged < count:
            assert time.monotonic() < deadline, f"stuck at {self.acknowledged}"
            time.sleep(0.02)


def stored_ids(client: pulsar.Client, topic: str) -> list[int]:
    """Every message of ``topic`` read back as an integer, in stored order."""
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    out = []
    while reader.has_message_available():
        out.append(int(reader.read_next(RECEIVE_MS).data()))
    return out
