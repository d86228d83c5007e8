"""Apply each message of a topic once, by committing its id together with its results.

The broker already stores each message once (deduplication). What remains is the
consumer: a crash between "results written" and "message acknowledged" replays messages.
Here no acknowledgement exists at all. The consumer reads with the official client's
readers, one per partition, and runs the application's function and the update of that
partition's last processed position in one database transaction. After a restart it
reads each partition again from the entry of its stored position and skips every message
at or before it, so the results hold each message exactly once whatever was killed when.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import pulsar

from connectors.offset_store import PositionStore, open_store
from connectors.positions import NOTHING, Position, partition_index
from dedup_broker.errors import (
    ConfigError,
    MessageProcessingError,
    MessageRetriesExhaustedError,
    PositionStoreError,
    TopicReadError,
)

_log = logging.getLogger(__name__)

Handler = Callable[[Any, pulsar.Message], None]
"""``handler(cursor, message)``: write the message's results with ``cursor``; do not commit."""

DEFAULT_DATABASE = "pulsar-positions.db"


@dataclass(slots=True)
class ConsumerStats:
    """Counters since the consumer started."""

    applied: int = 0
    """Messages whose results were committed."""
    skipped: int = 0
    """Messages at or before a stored position (replays after a restart), not applied."""
    transactions: int = 0
    retries: int = 0


class _HandlerFailedError(Exception):
    def __init__(self, cause: BaseException, message: pulsar.Message, topic: str) -> None:
        super().__init__(str(cause))
        self.cause = cause
        self.message = message
        self.topic = topic


class EffectivelyOnceConsumer:
    """Reads ``topic`` (every partition) and applies each message once to a database.

    ``store`` is a ``PositionStore`` or anything ``open_store`` accepts (a SQLite path, a
    ``postgresql://`` URL). ``name`` identifies this consumer's positions in the store, so
    several applications can share one database; it defaults to the topic name.
    """

    def __init__(
        self,
        client: pulsar.Client,
        topic: str,
        handler: Handler,
        store: PositionStore | str | Path = DEFAULT_DATABASE,
        *,
        name: str | None = None,
        max_batch_messages: int = 100,
        max_attempts: int = 5,
        retry_backoff_seconds: float = 0.2,
        poll_interval_seconds: float = 0.02,
        receiver_queue_size: int = 1000,
    ) -> None:
        if max_batch_messages < 1 or max_attempts < 1:
            raise ConfigError("max_batch_messages and max_attempts must be at least 1")
        self.client = client
        self.topic = topic
        self.handler = handler
        self.store = open_store(store)
        self._owns_store = not isinstance(store, PositionStore)
        self.name = name or topic
        self.max_batch_messages = max_batch_messages
        self.max_attempts = max_attempts
        self.retry_backoff_seconds = retry_backoff_seconds
        self.poll_interval_seconds = poll_interval_seconds
        self.receiver_queue_size = receiver_queue_size
        self.stats = ConsumerStats()
        self._readers: dict[str, pulsar.Reader] = {}
        self._positions: dict[str, Position] = {}
        self._next_reader = 0

    # -- lifecycle --------------------------------------------------------------------

    def start(self) -> None:
        """Find the partitions, load their positions, open one reader per partition."""
        if self._readers:
            return
        try:
            partitions = list(self.client.get_topic_partitions(self.topic))
        except pulsar.PulsarException as exc:
            raise TopicReadError(f"cannot look up {self.topic}: {exc}") from exc
        self._run_db(lambda: self.store.ensure_schema(self.name, partitions))
        stored = self._run_db(lambda: self.store.positions(self.name))
        try:
            for partition in partitions:
                position = stored.get(partition, NOTHING)
                self._positions[partition] = position
                self._readers[partition] = self._open_reader(partition, position)
        except pulsar.PulsarException as exc:
            self._close_readers()
            raise TopicReadError(f"cannot open a reader on {self.topic}: {exc}") from exc
        _log.info(
            "consumer %s on %s resumes after %s",
            self.name,
            self.topic,
            {topic: str(pos) for topic, pos in self._positions.items()},
        )

    def _open_reader(self, partition: str, position: Position) -> pulsar.Reader:
        if position.is_before_everything:
            start, inclusive = pulsar.MessageId.earliest, False
        else:
            start, inclusive = position.entry_start(partition_index(partition)), True
        return self.client.create_reader(
            partition,
            start,
            start_message_id_inclusive=inclusive,
            receiver_queue_size=self.receiver_queue_size,
        )

    def close(self) -> None:
        """Close the readers (and the store if this consumer opened it)."""
        self._close_readers()
        if self._owns_store:
            self.store.close()

    def _close_readers(self) -> None:
        for reader in self._readers.values():
            try:
                reader.close()
            except pulsar.PulsarException as exc:
                _log.debug("closing a reader failed: %s", exc)
        self._readers.clear()

    def __enter__(self) -> EffectivelyOnceConsumer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    # -- consuming --------------------------------------------------------------------

    def positions(self) -> dict[str, Position]:
        """The last committed position of each partition (``NOTHING`` if none yet)."""
        return dict(self._positions)

    def run(
        self,
        *,
        stop: threading.Event | None = None,
        max_messages: int | None = None,
        idle_timeout: float | None = None,
    ) -> ConsumerStats:
        """Consume until ``stop`` is set, ``max_messages`` were applied in this call, or no
        message arrived for ``idle_timeout`` seconds (whichever first; none: forever)."""
        self.start()
        applied_before = self.stats.applied
        last_progress = time.monotonic()
        while stop is None or not stop.is_set():
            limit = None
            if max_messages is not None:
                limit = max_messages - (self.stats.applied - applied_before)
                if limit <= 0:
                    break
            if self.poll(0.5, limit=limit) > 0:
                last_progress = time.monotonic()
            elif idle_timeout is not None and time.monotonic() - last_progress >= idle_timeout:
                break
        return self.stats

    def poll(self, timeout: float, *, limit: int | None = None) -> int:
        """Read what is available (waiting up to ``timeout`` s for the first message),
        apply it in one transaction; return how many messages were read.

        When applying fails, the readers are closed: the next call reopens them from the
        stored positions, so no message after a failed one is applied before it.
        """
        self.start()
        size = self.max_batch_messages if limit is None else min(limit, self.max_batch_messages)
        batch = self._read_batch(timeout, max(1, size))
        if batch:
            try:
                self._apply(batch)
            except BaseException:
                self._close_readers()
                raise
        return len(batch)

    def _read_batch(self, timeout: float, size: int) -> list[tuple[str, pulsar.Message]]:
        batch: list[tuple[str, pulsar.Message]] = []
        deadline = time.monotonic() + timeout
        topics = list(self._readers)
        while True:
            self._fill(batch, topics, size)
            remaining = deadline - time.monotonic()
            if batch or remaining <= 0:
                return batch
            if len(topics) == 1:
                # One partition: block in the client instead of polling.
                message = self._read(topics[0], int(remaining * 1000) + 1)
                if message is not None:
                    batch.append((topics[0], message))
            else:
                time.sleep(min(self.poll_interval_seconds, remaining))

    def _fill(self, batch: list[tuple[str, pulsar.Message]], topics: list[str], size: int) -> None:
        """Take what the readers already hold, partitions in turn, up to ``size``."""
        idle = 0
        while len(batch) < size and idle < len(topics):
            topic = topics[self._next_reader % len(topics)]
            self._next_reader += 1
            message = self._read(topic, 0)
            if message is None:
                idle += 1
            else:
                idle = 0
                batch.append((topic, message))

    def _read(self, topic: str, timeout_ms: int) -> pulsar.Message | None:
        try:
            return self._readers[topic].read_next(timeout_ms)
        except pulsar.Timeout:
            return None
        except pulsar.PulsarException as exc:
            raise TopicReadError(f"reading {topic} failed: {exc}") from exc

    # -- applying ---------------------------------------------------------------------

    def _apply(self, batch: list[tuple[str, pulsar.Message]]) -> None:
        """One transaction for the batch; retried as a whole on transient failures."""
        for attempt in range(1, self.max_attempts + 1):
            try:
                applied, skipped, moved = self._apply_once(batch)
            except _HandlerFailedError as failure:
                retriable = bool(getattr(failure.cause, "retriable", False)) or (
                    self.store.is_transient(failure.cause)
                )
                mid = failure.message.message_id()
                if not retriable:
                    raise MessageProcessingError(
                        f"processing message {mid} of {failure.topic} failed: "
                        f"{type(failure.cause).__name__}: {failure.cause}"
                    ) from failure.cause
                if attempt == self.max_attempts:
                    raise MessageRetriesExhaustedError(
                        f"processing message {mid} of {failure.topic} failed "
                        f"{attempt} times: {failure.cause}"
                    ) from failure.cause
                last: BaseException = failure.cause
            except Exception as exc:
                if not self.store.is_transient(exc):
                    raise
                if attempt == self.max_attempts:
                    raise PositionStoreError(f"the database failed {attempt} times: {exc}") from exc
                last = exc
            else:
                self._positions.update(moved)
                self.stats.applied += applied
                self.stats.skipped += skipped
                self.stats.transactions += 1
                return
            self.stats.retries += 1
            delay = self.retry_backoff_seconds * 2 ** (attempt - 1)
            _log.warning("batch failed (attempt %d), retrying in %.2fs: %s", attempt, delay, last)
            time.sleep(delay)

    def _apply_once(
        self, batch: list[tuple[str, pulsar.Message]]
    ) -> tuple[int, int, dict[str, Position]]:
        topics = sorted({topic for topic, _ in batch})
        applied = skipped = 0
        with self.store.transaction() as cursor:
            current = self.store.load(cursor, self.name, topics)
            moved: dict[str, Position] = {}
            for topic, message in batch:
                position = Position.of(message.message_id())
                if position <= moved.get(topic, current[topic]):
                    skipped += 1
                    continue
                try:
                    self.handler(cursor, message)
                except Exception as exc:
                    raise _HandlerFailedError(exc, message, topic) from exc
                moved[topic] = position
                applied += 1
            for topic, position in moved.items():
                self.store.save(cursor, self.name, topic, position)
        return applied, skipped, moved

    def _run_db(self, action: Callable[[], Any]) -> Any:
        for attempt in range(1, self.max_attempts + 1):
            try:
                return action()
            except Exception as exc:
                if not self.store.is_transient(exc):
                    raise
                if attempt == self.max_attempts:
                    raise PositionStoreError(f"the database failed {attempt} times: {exc}") from exc
                time.sleep(self.retry_backoff_seconds * 2 ** (attempt - 1))
        raise AssertionError("unreachable")
