"""Delete phase: the deletion worker, a Kafka consumer group over the main and RETRY topics.

Any number of workers share the partitions. Each intent is decoded once, checked
(``checks.IntentChecker``, against storage's ``LedgerCatalog``), the outcome is turned
into ack / retry / dead-letter (``decision.decide``), and the record is committed only
after its RETRY or DLQ copy was acknowledged by Kafka. The worker is given its
collaborators; ``dedup_broker/app/deletion_worker.py`` builds them. A RETRY record is held until due
(its timestamp + ``DELAY_TIME``): its partition is paused and rewound, so the main topic
keeps flowing meanwhile.

Intents are worked on a batch at a time (up to ``_BATCH`` records of one ``consume``),
all of a batch at once: each intent costs several round trips (the owner's answer, the
stored list, Kafka's topic deletion), and one at a time a worker deleted about three
ledgers a second, far fewer than a cluster trimming idle topics lets go. A partition's
records are committed after the batch, up to the first one not done (its copy to RETRY
failed: it is read again after a pause); working an intent twice is harmless (a ledger
already gone is acknowledged), as it must be anyway after a worker crash.

The worker runs on an event loop; the consumer's blocking calls (consume, commit, close)
run in a thread, one at a time, so its rebalance callbacks never race the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from dedup_broker.config import BrokerConfig
from dedup_broker.errors import StorageError
from dedup_broker.storage.api import RecordSender
from system_topics.checks import IntentChecker
from system_topics.decision import Action, Outcome, Verdict, decide
from system_topics.intents import CopyKind, DeletionIntent, MalformedIntentError, decode_intent
from system_topics.topics import (
    DELAY_TIME,
    ORIGIN_MESSAGE_ID,
    REAL_TOPIC,
    RECONSUME_TIMES,
    DeletionTopics,
)
from system_topics.worker_metrics import WorkerMetrics

log = logging.getLogger(__name__)

_POLL_S = 0.5
_BATCH = 64
"""Records taken by one ``consume`` and worked on together."""
_FORWARD_TIMEOUT_S = 30.0
LAG_SECONDS = 10.0
"""How often the group's lag is measured for ``/metrics``."""


@dataclass(slots=True)
class _Held:
    offset: int
    due: float


def _header(msg: Message, name: str) -> str | None:
    headers = msg.headers() or []
    pairs = headers.items() if isinstance(headers, dict) else headers
    for key, value in pairs:
        if key == name and value is not None:
            return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
    return None


def _where(msg: Message) -> tuple[str, int, int]:
    """(topic, partition, offset) of a consumed record."""
    topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
    assert topic is not None and partition is not None and offset is not None
    return topic, partition, offset


def _int_header(msg: Message, name: str, default: int) -> int:
    text = _header(msg, name)
    try:
        return int(text) if text is not None else default
    except ValueError:
        return default


def worker_consumer_settings(config: BrokerConfig, topics: DeletionTopics) -> dict[str, object]:
    """The group consumer's settings: offsets are committed by hand, after the outcome."""
    return {
        **config.kafka_connection(),
        "group.id": topics.group,
        "client.id": f"{config.cluster_name}.deletion-worker",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "allow.auto.create.topics": False,
        "session.timeout.ms": 10000,
        "heartbeat.interval.ms": 1000,
    }


class DeletionWorker:
    def __init__(
        self,
        config: BrokerConfig,
        consumer: Consumer,
        checker: IntentChecker,
        forwarder: RecordSender,
        metrics: WorkerMetrics,
        lag: Callable[[], Mapping[str, int]] | None = None,
    ) -> None:
        """``consumer``: not subscribed yet (see :func:`worker_consumer_settings`);
        ``forwarder`` writes the RETRY and DLQ copies; ``lag`` (blocking) counts the
        records the group has not committed, per topic (``lag.group_lag``)."""
        self.topics = DeletionTopics.from_config(config)
        self.metrics = metrics
        self._delay_ms = config.two_phase_deletion_reconsume_later_in_seconds * 1000
        self._max_retries = config.two_phase_deletion_max_retry_delete_count
        self._consumer = consumer
        self._checker = checker
        self._forwarder = forwarder
        self._held: dict[tuple[str, int], _Held] = {}
        self._lag = lag

    async def run(self, stop: asyncio.Event) -> None:
        """Work intents until ``stop`` is set; the consumer is closed at the end."""
        self._consumer.subscribe(
            [self.topics.main, self.topics.retry], on_revoke=self._revoked, on_lost=self._revoked
        )
        log.info("deletion worker consuming %s and %s", self.topics.main, self.topics.retry)
        measuring = asyncio.ensure_future(self._measure_lag(stop))
        try:
            while not stop.is_set():
                self._resume_due()
                batch = await asyncio.to_thread(self._consumer.consume, _BATCH, _POLL_S)
                runs: dict[tuple[str, int], list[Message]] = {}
                for msg in batch:
                    error = msg.error()
                    if error is not None:
                        if error.code() != KafkaError._PARTITION_EOF:
                            log.warning("deletion worker: %s", error)
                        continue
                    runs.setdefault((msg.topic() or "", msg.partition() or 0), []).append(msg)
                if runs:
                    await self._work(list(runs.values()))
        finally:
            measuring.cancel()
            await asyncio.gather(measuring, return_exceptions=True)
            await asyncio.to_thread(self._consumer.close)

    async def _measure_lag(self, stop: asyncio.Event) -> None:
        """The group's lag every ``LAG_SECONDS``: what a stuck group lets grow."""
        measure = self._lag
        while measure is not None and not stop.is_set():
            try:
                lag = await asyncio.to_thread(measure)
            except (KafkaException, StorageError) as exc:
                log.debug("deletion worker: measuring the group's lag: %s", exc)
            else:
                for topic, records in lag.items():
                    self.metrics.lag.labels(topic=topic).set(records)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), LAG_SECONDS)

    async def _work(self, runs: list[list[Message]]) -> None:
        """Each partition's records of one batch, all worked on at once, then one commit
        of every partition's records up to its first one not done."""
        due = [self._due_records(run) for run in runs]
        results = await asyncio.gather(
            *(asyncio.gather(*(self._handle(msg) for msg in run)) for run in due)
        )
        commits: list[TopicPartition] = []
        for run, done in zip(due, results, strict=True):
            finished = 0
            for msg, ok in zip(run, done, strict=True):
                if not ok:
                    # Not copied: read it again shortly rather than lose it.
                    self._hold(msg, time.time() + 1)
                    break
                finished += 1
            if finished:
                topic, partition, offset = _where(run[finished - 1])
                commits.append(TopicPartition(topic, partition, offset + 1))
                self.metrics.acknowledged.inc(finished)
        if commits:
            await asyncio.to_thread(self._consumer.commit, offsets=commits, asynchronous=False)

    def _due_records(self, run: list[Message]) -> list[Message]:
        """The records of ``run`` that may be worked on now: a RETRY record not due yet is
        held (its partition paused and rewound to it), and so is everything after it."""
        for index, msg in enumerate(run):
            if msg.topic() != self.topics.retry:
                return run
            stamp = msg.timestamp()[1] / 1000
            due = stamp + _int_header(msg, DELAY_TIME, self._delay_ms) / 1000
            if due > time.time():
                self._hold(msg, due)
                return run[:index]
        return run

    # --- holding RETRY records until due ---------------------------------------------
    def _revoked(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            self._held.pop((tp.topic, tp.partition), None)

    def _hold(self, msg: Message, due: float) -> None:
        topic, partition, offset = _where(msg)
        tp = TopicPartition(topic, partition, offset)
        self._consumer.pause([tp])
        self._consumer.seek(tp)
        self._held[(topic, partition)] = _Held(offset, due)

    def _resume_due(self) -> None:
        now = time.time()
        for key, held in list(self._held.items()):
            if held.due <= now:
                del self._held[key]
                self._consumer.resume([TopicPartition(key[0], key[1])])

    # --- one intent ---------------------------------------------------------------------
    async def _handle(self, msg: Message) -> bool:
        """Work one intent; True once it is done (acknowledged, or copied to RETRY or the
        DLQ), False if its copy failed."""
        topic, partition, offset = _where(msg)
        from_retry = topic == self.topics.retry
        self.metrics.received.inc()
        times = _int_header(msg, RECONSUME_TIMES, 0) if from_retry else 0
        intent: DeletionIntent | None
        try:
            decoded = decode_intent(msg.value())
        except MalformedIntentError as exc:
            intent, outcome = None, Outcome(Verdict.MALFORMED, str(exc))
        else:
            intent, outcome = decoded, await self._checker.evaluate(decoded)
        action = decide(outcome.verdict, times, self._max_retries)
        log.info(
            "intent %s:%d:%d (%s) -> %s (%s) -> %s",
            topic,
            partition,
            offset,
            _subject(intent),
            outcome.verdict.value,
            outcome.detail,
            action.value,
        )
        if action is not Action.ACK and not await self._forward(msg, action, times):
            return False
        kind = CopyKind.of(intent.ledger_type) if intent is not None else CopyKind.LEDGER
        self.metrics.record(outcome.verdict, action, kind)
        return True

    async def _forward(self, msg: Message, action: Action, times: int) -> bool:
        """Copy to RETRY (times + 1) or the DLQ; True once Kafka acknowledged the copy."""
        topic, partition, offset = _where(msg)
        origin = _header(msg, ORIGIN_MESSAGE_ID) or f"{topic}:{partition}:{offset}"
        real = _header(msg, REAL_TOPIC) or topic
        target = self.topics.retry if action is Action.RETRY else self.topics.dead_letter
        headers = [
            (RECONSUME_TIMES, str(times + 1 if action is Action.RETRY else times).encode()),
            (DELAY_TIME, str(self._delay_ms).encode()),
            (REAL_TOPIC, real.encode()),
            (ORIGIN_MESSAGE_ID, origin.encode()),
        ]
        try:
            copy = self._forwarder.send(target, msg.value(), key=msg.key(), headers=headers)
            await asyncio.wait_for(copy, _FORWARD_TIMEOUT_S)
        except (StorageError, TimeoutError) as exc:
            log.warning("copy to %s failed: %s", target, str(exc) or "timeout")
            return False
        return True


def _subject(intent: DeletionIntent | None) -> str:
    """What an intent would delete, for the log line of its outcome."""
    if intent is None:
        return "malformed"
    return f"{intent.ledger_type.value} {intent.ledger_id} of {intent.topic_name}"
