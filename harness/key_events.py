"""Events with repeats for key-window deduplication tests, demos and benchmarks.

A source that cannot replay sends some events twice (a webhook retried, a click counted
again) with no sequence ids: ``make_events`` builds such a stream, ``publish`` sends it
through the official client and resends whatever failed, and ``stored_event_ids`` reads
back what a topic holds.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Sequence

import pulsar

KEY_PROPERTY = "event-id"


def make_events(unique: int, repeats: int, seed: int = 7, prefix: str = "ev") -> list[str]:
    """``unique`` event ids plus ``repeats`` extra copies of random ones, shuffled."""
    rng = random.Random(seed)
    ids = [f"{prefix}-{i}" for i in range(unique)]
    stream = ids + [rng.choice(ids) for _ in range(repeats)]
    rng.shuffle(stream)
    return stream


def payload_of(event_id: str, copy: int, content_keyed: bool) -> bytes:
    """Content-keyed events repeat byte for byte; property-keyed ones differ per copy."""
    return event_id.encode() if content_keyed else f"{event_id}|copy-{copy}".encode()


def event_id_of(message: pulsar.Message) -> str:
    props = message.properties()
    if KEY_PROPERTY in props:
        return str(props[KEY_PROPERTY])
    return str(message.data().decode().split("|", 1)[0])


class Publisher:
    """Sends a stream asynchronously, resending failed sends until every one is Ok."""

    def __init__(
        self,
        producers: Sequence[pulsar.Producer],
        events: Sequence[str],
        content_keyed: bool = False,
        rate: float = 0.0,
    ) -> None:
        """``rate``: events per second (0: as fast as the client takes them)."""
        self.producers = list(producers)
        self.rate = rate
        self.events = list(events)
        self.content_keyed = content_keyed
        self.acknowledged = 0
        self.failures = 0
        self._lock = threading.Lock()
        self._retry: list[int] = []
        self._done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Publisher:
        self.thread.start()
        return self

    def _send(self, index: int) -> None:
        producer = self.producers[index % len(self.producers)]
        event = self.events[index]

        def callback(result: pulsar.Result, _mid: pulsar.MessageId) -> None:
            with self._lock:
                if result == pulsar.Result.Ok:
                    self.acknowledged += 1
                    if self.acknowledged == len(self.events):
                        self._done.set()
                else:
                    self.failures += 1
                    self._retry.append(index)

        properties = {} if self.content_keyed else {KEY_PROPERTY: event}
        producer.send_async(
            payload_of(event, index, self.content_keyed), callback, properties=properties
        )

    def _run(self) -> None:
        started = time.monotonic()
        for index in range(len(self.events)):
            if self.rate > 0:
                ahead = started + index / self.rate - time.monotonic()
                if ahead > 0:
                    time.sleep(ahead)
            self._send(index)
        deadline = time.monotonic() + 600
        while not self._done.is_set() and time.monotonic() < deadline:
            with self._lock:
                retry, self._retry = self._retry, []
            for index in retry:
                time.sleep(0.05)
                self._send(index)
            self._done.wait(0.1)

    def wait_for(self, count: int, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while self.acknowledged < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {self.acknowledged} of {count} sends acknowledged")
            time.sleep(0.02)

    def wait(self, timeout: float = 300) -> None:
        self.wait_for(len(self.events), timeout)
        for producer in self.producers:
            producer.flush()


def stored_event_ids(
    client: pulsar.Client, topic: str, read: Callable[[pulsar.Message], str] = event_id_of
) -> list[str]:
    """Every message a topic holds, as event ids, in read order."""
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    out: list[str] = []
    try:
        while reader.has_message_available():
            out.append(read(reader.read_next(20_000)))
    finally:
        reader.close()
    return out


def drain_partition(
    client: pulsar.Client,
    topic: str,
    read: Callable[[pulsar.Message], str] = event_id_of,
    timeout_ms: int = 10_000,
) -> list[str]:
    """Every message of one partition (a ``...-partition-N`` topic), oldest first."""
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    out: list[str] = []
    try:
        while reader.has_message_available():
            out.append(read(reader.read_next(timeout_ms)))
    finally:
        reader.close()
    return out


def producer_for(client: pulsar.Client, topic: str, batching: bool = True) -> pulsar.Producer:
    """A producer with no sequence ids of its own that never gives up on a send."""
    return client.create_producer(
        topic,
        batching_enabled=batching,
        batching_max_messages=200,
        batching_max_publish_delay_ms=5,
        max_pending_messages=2000,
        block_if_queue_full=True,
        send_timeout_millis=0,
    )
