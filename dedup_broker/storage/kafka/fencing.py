"""Write fences: Kafka's transactional producer fencing for one ownership slot.

A broker may lose a slot without knowing it (paused, cut off, stalled) while another
broker takes it over. Timing cannot rule that out; Kafka's transaction coordinator can.
Each slot has two ``transactional.id`` s, ``{cluster}.slot.{slot}`` and
``{cluster}.slot.{slot}.b``; taking the fence (``init_transactions`` on both) bumps their
epochs, aborts any open transaction of an earlier holder and makes every later commit of
that holder fail.

Two uses:

- **Acknowledgements.** Entries are written to ledger topics outside transactions (entry
  ids stay offsets, with no control records among them). A managed ledger with a fence
  resolves an append only once a fence record produced *after Kafka acknowledged the
  append*, inside a transaction of the fence, was acknowledged too (a proof) or
  committed. Either preceded the new owner's ``init_transactions``: that call returns
  only after Kafka aborted the old holder's open transaction, and the abort markers it
  writes carry a newer epoch, after which the fences partition refuses the old holder's
  records. So the append was stored before the new owner sealed the ledger and read its
  end: it lies within the recorded ledger. An append stored later lies past the recorded
  end, is never read, and its proof fails: no client hears of it.
- **Metadata.** Ledger lists and cursor positions of a fenced managed ledger are written
  inside the fence's transactions, and readers read committed records only: a late write
  of an old owner is aborted and never becomes visible.

Cost: every acknowledgement waits for one proof, a produce round trip (about 1-3 ms
here); proofs are pipelined, one in flight per slot, each covering every append
acknowledged before it was produced. The open transaction commits when metadata is
written and after at most ``OPEN_TRANSACTION_SPAN_S``, so it never nears Kafka's
transaction timeout. A commit (a round trip to the transaction coordinator plus
markers, about 15 ms) had been what every acknowledgement waited for. The two producers
take turns: a transactional id cannot begin its next transaction until Kafka has written
the markers of its last one (the coordinator answers ``CONCURRENT_TRANSACTIONS`` and
librdkafka backs off 20 ms at a time).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from dedup_broker.config import BrokerConfig
from dedup_broker.errors import OwnershipLostError, StorageError
from dedup_broker.kafka_logging import kafka_logger
from dedup_broker.storage import formats
from dedup_broker.storage.api import FenceWatcher
from dedup_broker.storage.kafka.common import max_record_bytes, storage_error

log = logging.getLogger(__name__)

TRANSACTION_TIMEOUT_MS = 15000
OPEN_TRANSACTION_SPAN_S = 1.0
"""An open transaction proves ownership for this long, then commits: far from
``transaction.timeout.ms``, past which Kafka would abort it and the fence be lost."""
_IDLE_WAIT_S = 0.5
SLOW_FENCE_STEP_S = 2.0
"""A proof or commit slower than this is logged: the acknowledgements of the slot's
topics waited for it (a Kafka node lost, a coordinator moving)."""


def fence_transactional_ids(cluster_name: str, slot: int) -> tuple[str, str]:
    """The slot's two transactional ids (used in turn; a new holder fences both)."""
    return f"{cluster_name}.slot.{slot}", f"{cluster_name}.slot.{slot}.b"


def fence_partition(slot: int, partitions: int) -> int:
    """The fences partition slot ``slot`` writes its records to."""
    return slot % partitions if partitions > 0 else 0


@dataclass(slots=True)
class _Send:
    topic: str
    value: bytes | None
    key: bytes | None
    partition: int
    future: asyncio.Future[int]
    offset: int = -1


class KafkaWriteFence:
    """The right to write for one slot; use :meth:`acquire` to take it."""

    def __init__(self, config: BrokerConfig, slot: int, loop: asyncio.AbstractEventLoop) -> None:
        self.slot = slot
        self._loop = loop
        self._topic = formats.fences_topic(config.cluster_name)
        self._commit_timeout_s = config.kafka_request_timeout_ms / 1000
        conf: dict[str, Any] = {
            **config.kafka_connection(),
            "client.id": f"{config.cluster_name}.fence-{slot}",
            "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 0,
            # A commit fails (abortable) once its records could not be delivered in this
            # time, instead of waiting for Kafka indefinitely.
            "message.timeout.ms": min(config.kafka_delivery_timeout_ms, TRANSACTION_TIMEOUT_MS),
            "message.max.bytes": max_record_bytes(config),
            "allow.auto.create.topics": False,
            "logger": kafka_logger(),
        }
        self._producers = [
            Producer({**conf, "transactional.id": transactional_id})
            for transactional_id in fence_transactional_ids(config.cluster_name, slot)
        ]
        self._turn = 0
        self._open: Producer | None = None
        """The producer whose transaction is open (its fence records prove ownership)."""
        self._opened_at = 0.0
        self._record_key = str(slot).encode()
        self._partition = 0
        """The fences partition of this slot's records (``fence_partition``)."""
        self._lock = threading.Condition()
        self._confirms: list[asyncio.Future[None]] = []
        self._sends: list[_Send] = []
        self._closing = False
        self.lost: BaseException | None = None
        self.commits = 0
        """Transactions committed so far."""
        self.proofs = 0
        """Fence records acknowledged inside an open transaction so far (one serves
        many appends; so does a commit)."""
        self._watchers: dict[FenceWatcher, None] = {}
        """In order of watching; a dict so that a closed managed ledger's watch goes
        (a slot's fence outlives the many topics loaded and unloaded under it)."""
        self._thread: threading.Thread | None = None

    @classmethod
    async def acquire(cls, config: BrokerConfig, slot: int) -> KafkaWriteFence:
        """Take the slot's fence: once this returns, no earlier holder commits again.

        Transactional calls run on the fence's own daemon thread and are never given a
        timeout: librdkafka must not destroy a producer while one is in progress, and a
        thread blocked while Kafka is unreachable must not hold up the process's exit.
        The caller's wait is bounded by ``kafkaRequestTimeoutMs``."""
        fence = cls(config, slot, asyncio.get_running_loop())
        initialized: asyncio.Future[None] = fence._loop.create_future()
        fence._thread = threading.Thread(
            target=fence._run, args=(initialized,), name=f"fence-{slot}", daemon=True
        )
        fence._thread.start()
        try:
            await asyncio.wait_for(asyncio.shield(initialized), fence._commit_timeout_s)
        except TimeoutError:
            fence._closing = True
            raise StorageError(
                f"taking the write fence of slot {slot}: Kafka did not answer "
                f"within {fence._commit_timeout_s:.0f}s"
            ) from None
        log.info("write fence of slot %d taken", slot)
        return fence

    # --- event loop side --------------------------------------------------------------
    def confirm(self) -> asyncio.Future[None]:
        """Resolves once a fence record produced after this call was acknowledged inside
        a transaction of the fence (a proof), or such a transaction committed."""
        future: asyncio.Future[None] = self._loop.create_future()
        with self._lock:
            if self._refusal() is not None:
                future.set_exception(self._refusal_error())
                return future
            self._confirms.append(future)
            self._lock.notify()
        return future

    def send(
        self, topic: str, value: bytes | None, *, key: bytes | None = None, partition: int = -1
    ) -> asyncio.Future[int]:
        """A record written in the next transaction; its offset once that committed."""
        future: asyncio.Future[int] = self._loop.create_future()
        with self._lock:
            if self._refusal() is not None:
                future.set_exception(self._refusal_error())
                return future
            self._sends.append(_Send(topic, value, key, partition, future))
            self._lock.notify()
        return future

    def watch(self, watcher: FenceWatcher) -> None:
        """``watcher.fence_lost(error)`` runs on the loop if the fence is lost (never on
        close). The watcher itself is kept, not a bound method made for it: every
        managed ledger of the slot watches."""
        self._watchers[watcher] = None

    def unwatch(self, watcher: FenceWatcher) -> None:
        self._watchers.pop(watcher, None)

    async def close(self, timeout_seconds: float = 5.0) -> None:
        """Release: no more transactions; what still waits fails."""
        with self._lock:
            self._closing = True
            self._lock.notify()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, timeout_seconds)

    def _refusal(self) -> str | None:
        if self.lost is not None:
            return f"the write fence of slot {self.slot} was taken by another broker"
        if self._closing:
            return f"slot {self.slot} was released by this broker"
        return None

    def _refusal_error(self) -> OwnershipLostError:
        return OwnershipLostError(self._refusal() or f"slot {self.slot} is not writable")

    # --- fence thread -----------------------------------------------------------------
    def _run(self, initialized: asyncio.Future[None]) -> None:
        self._partition = self._fence_partition()
        for producer in self._producers:
            while True:
                try:
                    producer.init_transactions()
                    break
                except KafkaException as exc:
                    cause = _kafka_error(exc)
                    if cause is not None and cause.retriable() and not self._closing:
                        continue  # "retry call to resume"
                    failure = storage_error(f"taking the write fence of slot {self.slot}", exc)
                    self._call_soon(_settle_future, initialized, failure)
                    return
        self._call_soon(_settle_future, initialized, None)
        while True:
            with self._lock:
                while not (self._confirms or self._sends or self._closing):
                    left = self._span_left()
                    if left <= 0:
                        break
                    self._lock.wait(min(_IDLE_WAIT_S, left))
                if self._closing:
                    confirms, sends = self._confirms, self._sends
                    self._confirms, self._sends = [], []
                    break
                confirms, sends = self._confirms, self._sends
                self._confirms, self._sends = [], []
            try:
                due = sends or self._span_left() <= 0
                started = time.monotonic()
                outcome = self._commit(sends) if due else self._prove()
                took = time.monotonic() - started
                if took > SLOW_FENCE_STEP_S:
                    step = "commit" if due else "proof"
                    log.warning("slot %d: a fence %s took %.1fs", self.slot, step, took)
            except Exception as exc:  # never leave waiters waiting on a dead thread
                log.exception("slot %d: write fence failed", self.slot)
                self.lost = exc
                outcome = self._refusal_error()
            self._call_soon(self._settle, confirms, sends, outcome)
            if outcome is not None and self.lost is not None:
                confirms, sends = [], []
                break
        error = self._refusal_error()
        self._call_soon(self._settle, confirms, sends, error)
        with self._lock:
            rest, more = self._confirms, self._sends
            self._confirms, self._sends = [], []
        if rest or more:
            self._call_soon(self._settle, rest, more, error)
        self._abandon()  # last: with Kafka unreachable it waits, and nobody waits on it

    def _fence_partition(self) -> int:
        """Slots spread over the fences partitions (one each where there are as many), so
        that the loss of a Kafka node stalls the acknowledgements of the slots whose
        partition it led, not all of them. Any partition proves as well as another: the
        new holder's aborts reach every partition of the open transaction. Partition 0
        when the count cannot be read."""
        try:
            metadata = self._producers[0].list_topics(self._topic, timeout=self._commit_timeout_s)
        except KafkaException:
            return 0
        found = metadata.topics.get(self._topic)
        count = len(found.partitions) if found is not None and found.error is None else 0
        return fence_partition(self.slot, count)

    def _span_left(self) -> float:
        """Seconds until the open transaction must be committed (the idle wait if none)."""
        if self._open is None:
            return _IDLE_WAIT_S
        return self._opened_at + OPEN_TRANSACTION_SPAN_S - time.monotonic()

    @property
    def _begun(self) -> Producer:
        """The producer a transaction was last begun on (to abort after a failure)."""
        return self._producers[1 - self._turn]

    def _begin(self) -> Producer:
        """The producer whose transaction is open, beginning one on the next producer
        in turn if none is (raises KafkaException)."""
        if self._open is None:
            producer = self._producers[self._turn]
            self._turn = 1 - self._turn
            producer.begin_transaction()
            self._open = producer
            self._opened_at = time.monotonic()
        return self._open

    def _prove(self) -> BaseException | None:
        """A fence record produced in the open transaction and acknowledged: the proof
        that no newer holder had taken the fence when it was stored; the error if not.

        A newer holder's ``init_transactions`` returns only once Kafka has aborted this
        open transaction, writing abort markers with a newer epoch into every partition
        the transaction holds, the fences partition among them; from then on the
        partition refuses this producer's records. So an acknowledged fence record was
        stored before the takeover completed, and so was every append Kafka had
        acknowledged before it was produced."""
        delivered: list[KafkaError | None] = []
        try:
            producer = self._begin()
            producer.produce(
                self._topic,
                b"",
                self._record_key,
                self._partition,
                on_delivery=lambda error, _msg: delivered.append(error),
            )
        except KafkaException as exc:
            return self._failed(self._begun, exc)
        except BufferError as exc:
            return self._abort(self._begun, StorageError(f"proof of slot {self.slot}: {exc}"))
        # Bounded by message.timeout.ms: the record is delivered or fails by then.
        try:
            producer.flush()
        except Exception as exc:  # a fatal error (fenced) surfaces from the callbacks
            kafka_exc = _kafka_exception(exc)
            if kafka_exc is None:
                raise
            return self._failed(producer, kafka_exc)
        if delivered == [None]:
            self.proofs += 1
            return None
        failure = delivered[0] if delivered else None
        what = f"proof of slot {self.slot} not stored"
        # A KafkaError built by librdkafka's callbacks cannot always be formatted by
        # f-strings (its type lacks __format__): storage_error names it by its own text.
        return self._abort(
            producer, StorageError(what) if failure is None else storage_error(what, failure)
        )

    def _commit(self, sends: list[_Send]) -> BaseException | None:
        """The open transaction (or a new one) committed with ``sends`` and a fence
        record; the error if it failed.

        Fatal errors (fenced by a newer holder above all) lose the fence for good; an
        abortable one aborts the transaction (its waiters fail, retriably); a retriable
        one retries the commit a few times, then aborts."""
        try:
            producer = self._begin()
            for record in sends:
                producer.produce(
                    record.topic,
                    record.value,
                    record.key,
                    record.partition,
                    on_delivery=_offset_into(record),
                )
            producer.produce(self._topic, b"", self._record_key, self._partition)
        except KafkaException as exc:
            return self._failed(self._begun, exc)
        except BufferError as exc:
            return self._abort(self._begun, StorageError(f"commit of slot {self.slot}: {exc}"))
        # A commit that timed out (Kafka unreachable) is resumed by calling it again,
        # never aborted while it is in progress: until it succeeds, Kafka says it cannot
        # (abortable, or the coordinator timed the transaction out), or the fence closes.
        while True:
            try:
                producer.commit_transaction()
                self._open = None
                self.commits += 1
                return None
            except Exception as failure:  # a fatal error may surface from the callbacks
                kafka_exc = _kafka_exception(failure)
                if kafka_exc is None:
                    raise
                error = _kafka_error(kafka_exc)
                if error is None or error.fatal() or not error.retriable():
                    return self._failed(producer, kafka_exc)
                if self._closing:
                    self._open = None
                    return self._refusal_error()
                log.warning("slot %d: commit not confirmed yet, retrying: %s", self.slot, kafka_exc)

    def _abandon(self) -> None:
        """Closing: abort the open transaction, which holds fence records only (a newer
        holder's ``init_transactions`` would abort it anyway). Like every transactional
        call it has no timeout: see :meth:`acquire`."""
        producer, self._open = self._open, None
        if producer is None or self.lost is not None:
            return
        try:
            producer.abort_transaction()
        except KafkaException as exc:
            log.info("slot %d: open transaction not aborted on close: %s", self.slot, exc)

    def _failed(self, producer: Producer, exc: KafkaException) -> BaseException:
        self._open = None
        error = _kafka_error(exc)
        if error is not None and error.txn_requires_abort() and not error.fatal():
            return self._abort(producer, storage_error(f"transaction of slot {self.slot}", exc))
        self.lost = exc
        log.error("slot %d: write fence lost: %s", self.slot, exc)
        return self._refusal_error()

    def _abort(self, producer: Producer, error: BaseException) -> BaseException:
        """Abort the open transaction (retried while Kafka is unreachable); ``error`` is
        what its waiters get. A fence whose transaction cannot be aborted is lost."""
        self._open = None
        while True:
            try:
                producer.abort_transaction()
                log.warning("slot %d: transaction aborted: %s", self.slot, error)
                return error
            except KafkaException as exc:
                kafka_error = _kafka_error(exc)
                retriable = kafka_error is not None and kafka_error.retriable()
                if not retriable or kafka_error is None or kafka_error.fatal() or self._closing:
                    self.lost = exc
                    log.error("slot %d: write fence lost (abort failed): %s", self.slot, exc)
                    return self._refusal_error()

    def _call_soon(self, callback: Callable[..., None], *args: Any) -> None:
        try:
            self._loop.call_soon_threadsafe(callback, *args)
        except RuntimeError:  # the loop is closed: the process is ending
            log.debug("slot %d: event loop closed; %s dropped", self.slot, callback)

    # --- back on the loop -------------------------------------------------------------
    def _settle(
        self,
        confirms: list[asyncio.Future[None]],
        sends: list[_Send],
        error: BaseException | None,
    ) -> None:
        for future in confirms:
            if not future.done():
                if error is None:
                    future.set_result(None)
                else:
                    future.set_exception(error)
        for record in sends:
            if record.future.done():
                continue
            if error is None:
                record.future.set_result(record.offset)
            else:
                record.future.set_exception(error)
        if error is not None and self.lost is not None:
            watchers, self._watchers = self._watchers, {}
            for watcher in watchers:
                try:
                    watcher.fence_lost(error)
                except Exception:
                    log.exception("slot %d: a fence watcher failed", self.slot)


def _settle_future(future: asyncio.Future[None], error: BaseException | None) -> None:
    if future.done():
        return
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(error)


def _kafka_exception(exc: BaseException) -> KafkaException | None:
    """The KafkaException behind ``exc``: confluent-kafka reports an error raised while
    it runs delivery callbacks as a SystemError caused by it."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, KafkaException):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def _kafka_error(exc: KafkaException) -> KafkaError | None:
    return exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None


def _offset_into(record: _Send) -> Callable[[KafkaError | None, Any], None]:
    def on_delivery(error: KafkaError | None, msg: Any) -> None:
        if error is None and msg is not None and msg.offset() is not None:
            record.offset = int(msg.offset())

    return on_delivery
