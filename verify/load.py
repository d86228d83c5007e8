"""The load: one producer per topic, each sending ids 0, 1, 2, ... at a steady rate and
recording every acknowledgement in the history.

Ids are the messages' identity: the payload starts with ``<id>|``, PIP-6 producers use the
id as the sequence id, and a key-window producer as its ``event-id`` property. The
checkpoint topic's producer restarts every few seconds from a checkpoint behind what it
sent, with batching on, so its batches hold ids stored already and new ones.
"""

from __future__ import annotations

import datetime
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

import pulsar

from verify.history import History

log = logging.getLogger(__name__)

TICK_SECONDS = 0.05
"""Producers send what is due every tick, so that batches hold several messages."""
KEYS = 40
"""Keys of the keyed and partitioned topics."""
DELAY_SECONDS = 2.0
"""Every third message of a delayed topic is delivered this much later."""
CHUNKED_SIZE = 600 * 1024
EVENT_ID = "event-id"
RESTART_EVERY_SECONDS = 5.0
"""How often the checkpoint topic's producer restarts."""
CHECKPOINT_BACK = 300
"""At most this many ids are sent again after a restart (from a checkpoint behind)."""


class Kind(Enum):
    """What a topic's producer does; the topic's tag starts with it."""

    BATCHED = "batched"
    SINGLE = "single"
    PARTITIONED = "partitioned"
    KEYED = "keyed"
    KEY_WINDOW = "keywindow"
    CHUNKED = "chunked"
    DELAYED = "delayed"
    CHECKPOINT = "checkpoint"

    def rate(self, base: float) -> float:
        """Messages per second, given the profile's batched rate."""
        return {
            Kind.BATCHED: base,
            Kind.CHECKPOINT: base,
            Kind.PARTITIONED: base,
            Kind.SINGLE: base / 5,
            Kind.KEYED: base / 5,
            Kind.DELAYED: base / 5,
            Kind.KEY_WINDOW: base / 10,
            Kind.CHUNKED: 1.0,
        }[self]


PARTITIONS = 3


def payload(message_id: int, size: int = 0) -> bytes:
    head = b"%d|" % message_id
    return head + b"x" * max(0, size - len(head))


def id_of(data: bytes) -> int:
    return int(data.split(b"|", 1)[0])


def key_of(kind: Kind, message_id: int) -> str:
    """The message key ('' for kinds without keys)."""
    if kind in (Kind.KEYED, Kind.PARTITIONED):
        return f"k{message_id % KEYS}"
    return ""


def last_per_key(kind: Kind, sent: int) -> dict[str, int]:
    """Each key's last id among ids ``0 .. sent-1``."""
    return {key_of(kind, i): i for i in range(max(0, sent - KEYS), sent)}


SENT_AT = "sent-at"
"""Property of a delayed message: epoch ms just before the send call. The client computes
``deliver_at`` inside the call, so the message is due no earlier than this plus its delay
(its publish time may be later: a send blocked on a full queue stamps it when it enters)."""


def delay_of(kind: Kind, message_id: int) -> float:
    return DELAY_SECONDS if kind is Kind.DELAYED and message_id % 3 == 0 else 0.0


@dataclass
class Topic:
    tag: str
    name: str
    kind: Kind


class Load:
    """Sends the ids of one topic from a thread until ``stop()``; never gives up on an id
    (PIP-6 producers: ``send_timeout_millis=0``; the key-window producer resends a failed
    event with the same ``event-id``, as a webhook source would)."""

    def __init__(self, client: pulsar.Client, history: History, topic: Topic, rate: float) -> None:
        self.client = client
        self.history = history
        self.topic = topic
        self.rate = rate
        self.sent = 0
        self.acked = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._abort = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=f"load-{topic.tag}", daemon=True)
        self._producer: pulsar.Producer | None = None
        self._acked_ids: set[int] = set()
        """Ids acknowledged so far (a resent id is acknowledged again: counted once)."""

    def start(self) -> Load:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def drain(self, timeout: float) -> bool:
        """After ``stop()``: wait until every sent id is acknowledged."""
        self._thread.join(timeout)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if self.acked + len(self.errors) >= self.sent:
                    return True
            time.sleep(0.2)
        return False

    def close(self) -> None:
        self._abort.set()
        self._stop.set()
        if self._producer is not None:
            try:
                self._producer.close()
            except pulsar.PulsarException as exc:
                log.info("closing the producer of %s: %s", self.topic.tag, exc)

    # --- sending --------------------------------------------------------------------
    def _run(self) -> None:
        try:
            if self.topic.kind is Kind.KEY_WINDOW:
                self._run_key_window()
            else:
                self._run_pip6()
        except Exception as exc:  # reported in the run's summary
            log.exception("load on %s stopped", self.topic.tag)
            self.errors.append(f"load stopped: {exc!r}")

    def _due(self, started: float) -> int:
        return int((time.monotonic() - started) * self.rate) + 1

    def _run_pip6(self) -> None:
        producer = self._pip6_producer()
        rng = random.Random(self.topic.tag)
        started = restarted = time.monotonic()
        while not self._stop.is_set():
            if (
                self.topic.kind is Kind.CHECKPOINT
                and time.monotonic() - restarted >= RESTART_EVERY_SECONDS
            ):
                producer = self._restart_from_checkpoint(producer, rng)
                restarted = time.monotonic()
            for message_id in range(self.sent, self._due(started)):
                self._send_pip6(producer, message_id)
                with self._lock:
                    self.sent = message_id + 1
                self.history.sent(self.topic.tag, self.sent)
            time.sleep(TICK_SECONDS)

    def _pip6_producer(self) -> pulsar.Producer:
        kind = self.topic.kind
        producer = self.client.create_producer(
            self.topic.name,
            producer_name=f"verify-{self.topic.tag}",
            send_timeout_millis=0,
            # The partitioned topic's producer batches by key (for Key_Shared): one run of
            # ids goes out as a batch per key, which PIP-6 stores whole.
            batching_enabled=kind in (Kind.BATCHED, Kind.CHECKPOINT, Kind.PARTITIONED),
            batching_type=(
                pulsar.BatchingType.KeyBased
                if kind is Kind.PARTITIONED
                else pulsar.BatchingType.Default
            ),
            batching_max_messages=1000,
            batching_max_publish_delay_ms=5,
            chunking_enabled=kind is Kind.CHUNKED,
            block_if_queue_full=True,
            max_pending_messages=5000,
        )
        self._producer = producer
        return producer

    def _send_pip6(self, producer: pulsar.Producer, message_id: int) -> None:
        kind = self.topic.kind
        key = key_of(kind, message_id)
        delay = delay_of(kind, message_id)
        producer.send_async(
            payload(message_id, CHUNKED_SIZE if kind is Kind.CHUNKED else 0),
            self._acked_callback(message_id, key),
            properties={SENT_AT: str(int(time.time() * 1000))} if delay else None,
            partition_key=key or None,
            sequence_id=message_id,
            deliver_after=datetime.timedelta(seconds=delay) if delay else None,
        )

    def _restart_from_checkpoint(
        self, producer: pulsar.Producer, rng: random.Random
    ) -> pulsar.Producer:
        """The application stops (what it sent is acknowledged first), starts a producer
        of the same name again and resends from its last checkpoint, up to
        ``CHECKPOINT_BACK`` ids behind. Id 0 is never resent: the official Python client
        takes an explicit sequence id 0 for "none" and numbers the message itself."""
        producer.flush()
        producer.close()
        while True:
            try:
                restarted = self._pip6_producer()
                break
            except (pulsar.Timeout, pulsar.ProducerBusy):
                # A long outage, or the broker still holds the closed producer of this
                # name after a fault: the application starts it again.
                log.info("%s: producer not created; trying again", self.topic.tag)
                if self._stop.is_set():
                    raise
                time.sleep(0.2)
        resume = max(1, self.sent - rng.randint(1, CHECKPOINT_BACK))
        for message_id in range(resume, self.sent):
            self._send_pip6(restarted, message_id)
        return restarted

    def _acked_callback(
        self, message_id: int, key: str
    ) -> Callable[[pulsar.Result, pulsar.MessageId], None]:
        def done(result: pulsar.Result, _message_id: pulsar.MessageId) -> None:
            if result == pulsar.Result.Ok:
                with self._lock:
                    if message_id in self._acked_ids:
                        return  # sent again from a checkpoint
                    self._acked_ids.add(message_id)
                    self.acked += 1
                self.history.acked(self.topic.tag, message_id, key)
            else:
                with self._lock:
                    self.errors.append(f"id {message_id}: {result}")

        return done

    def _run_key_window(self) -> None:
        """Synchronous sends keyed by ``event-id``; about one event in five is sent again
        later (a source's retry), and a failed send is repeated until acknowledged."""
        producer = self.client.create_producer(
            self.topic.name, batching_enabled=False, send_timeout_millis=10_000
        )
        self._producer = producer
        rng = random.Random(self.topic.tag)
        started = time.monotonic()
        while not self._stop.is_set():
            for message_id in range(self.sent, self._due(started)):
                with self._lock:
                    self.sent = message_id + 1
                self.history.sent(self.topic.tag, self.sent)
                if not self._send_event(producer, message_id):
                    return
                self.history.acked(self.topic.tag, message_id)
                with self._lock:
                    self.acked += 1
                if message_id > 10 and rng.random() < 0.2:
                    self._send_event(producer, rng.randrange(message_id - 10, message_id))
            time.sleep(TICK_SECONDS)

    def _send_event(self, producer: pulsar.Producer, message_id: int) -> bool:
        """Until acknowledged (True), or given up at ``close()`` (False); a stopped load
        still retries what it was sending, so that the drain ends with it acknowledged."""
        while True:
            try:
                producer.send(payload(message_id), properties={EVENT_ID: str(message_id)})
                return True
            except pulsar.PulsarException as exc:
                log.debug("key-window send of %d failed: %s", message_id, exc)
                if self._abort.wait(0.5):
                    return False
