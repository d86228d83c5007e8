"""Reading paths that run while the load and the faults do: durable subscriptions of
each type, a Reader resumed from the id it stored, a TableView.

Each records every delivery in the history, acknowledges as an application would, and
keeps the set of ids it has seen so the run knows when it has caught up.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable

import pulsar

from verify.check import Mode, PathSpec
from verify.history import History
from verify.load import SENT_AT, Kind, Topic, delay_of, id_of

log = logging.getLogger(__name__)

RECEIVE_MS = 500
EARLY_TOLERANCE_SECONDS = 0.05


class LivePath:
    """What the run asks of every live path."""

    spec: PathSpec

    def __init__(self, history: History, spec: PathSpec) -> None:
        self.history = history
        self.spec = spec
        self.seen: set[int] = set()
        self.errors: list[str] = []
        self.extras: dict[str, int] = {}
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        history.path(spec)

    def _thread(self, target: Callable[[], None], name: str) -> None:
        thread = threading.Thread(target=self._guarded(target), name=name, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _guarded(self, target: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                target()
            except Exception as exc:  # reported in the run's summary
                log.exception("path %s on %s stopped", self.spec.path, self.spec.topic)
                self.errors.append(repr(exc))

        return run

    def record(self, message_id: int, consumer: int = 0, group: str = "") -> None:
        self.seen.add(message_id)
        self.history.delivered(self.spec, message_id, consumer, group)

    def caught_up(self, sent: int) -> bool:
        return len(self.seen) >= sent

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=60)

    def settle(self, client: pulsar.Client, quiet_seconds: float) -> None:
        """After ``stop()``: check what is left once acknowledgements settled."""


class SubscriptionPath(LivePath):
    """A durable subscription of one type with ``consumers`` consumers from Earliest."""

    def __init__(
        self,
        client: pulsar.Client,
        history: History,
        topic: Topic,
        path: str,
        consumer_type: pulsar.ConsumerType,
        *,
        consumers: int = 1,
        cumulative: bool = False,
        ordered: bool = True,
        group_by_key: bool = False,
    ) -> None:
        super().__init__(history, PathSpec(path, topic.tag, Mode.AT_LEAST_ONCE, ordered))
        self.topic = topic
        self.consumer_type = consumer_type
        self.cumulative = cumulative
        self.group_by_key = group_by_key
        self.subscription = f"verify-{path}"
        self.consumers = [self._subscribe(client, index) for index in range(consumers)]
        self.extras["early"] = 0
        for index, consumer in enumerate(self.consumers):
            self._thread(
                lambda index=index, consumer=consumer: self._consume(index, consumer),  # type: ignore[misc]
                name=f"{path}-{topic.tag}-{index}",
            )

    def _subscribe(self, client: pulsar.Client, index: int) -> pulsar.Consumer:
        return client.subscribe(
            self.topic.name,
            self.subscription,
            consumer_type=self.consumer_type,
            consumer_name=f"c{index}",
            initial_position=pulsar.InitialPosition.Earliest,
        )

    def _consume(self, index: int, consumer: pulsar.Consumer) -> None:
        while not self._stop.is_set():
            try:
                message = consumer.receive(timeout_millis=RECEIVE_MS)
            except pulsar.Timeout:
                continue
            except pulsar.PulsarException as exc:  # the client recovers by itself
                log.info("%s on %s: receive failed: %s", self.spec.path, self.spec.topic, exc)
                self._stop.wait(1.0)
                continue
            message_id = id_of(message.data())
            self._check_delay(message, message_id)
            group = message.partition_key() if self.group_by_key else ""
            self.record(message_id, index, group)
            if self.cumulative:
                consumer.acknowledge_cumulative(message)
            else:
                consumer.acknowledge(message)

    def _check_delay(self, message: pulsar.Message, message_id: int) -> None:
        delay = delay_of(self.topic.kind, message_id)
        if not delay:
            return
        due = int(message.properties()[SENT_AT]) / 1000 + delay
        if time.time() < due - EARLY_TOLERANCE_SECONDS:
            self.extras["early"] += 1

    def stop(self) -> None:
        super().stop()
        for consumer in self.consumers:
            try:
                consumer.close()
            except pulsar.PulsarException as exc:
                log.info("closing a consumer of %s: %s", self.spec.topic, exc)

    def settle(self, client: pulsar.Client, quiet_seconds: float) -> None:
        """Everything acknowledged stays acknowledged: a new consumer of the subscription
        receives nothing (each message it gets is recorded as delivered again)."""
        consumer = self._subscribe(client, 0)
        try:
            while True:
                try:
                    message = consumer.receive(timeout_millis=int(quiet_seconds * 1000))
                except pulsar.Timeout:
                    return
                group = message.partition_key() if self.group_by_key else ""
                self.history.delivered(self.spec, id_of(message.data()), 0, group, settle=True)
                consumer.acknowledge(message)
        finally:
            consumer.close()


class ResumedReaderPath(LivePath):
    """The effectively-once pattern by hand: a Reader reads a stretch, its last id is
    stored, and a new Reader starts from that id (exclusive), again and again."""

    STRETCH = 2_000

    def __init__(self, client: pulsar.Client, history: History, topic: Topic) -> None:
        super().__init__(history, PathSpec("reader-resumed", topic.tag, Mode.EXACTLY_ONCE, True))
        self.client = client
        self.topic = topic
        self.stored: pulsar.MessageId = pulsar.MessageId.earliest
        self.extras["readers"] = 0
        self._thread(self._run, name=f"reader-resumed-{topic.tag}")

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                reader = self.client.create_reader(
                    self.topic.name, self.stored, receiver_queue_size=1000
                )
            except pulsar.PulsarException as exc:  # the cluster is moving: try again
                log.info("reader-resumed on %s: %s", self.spec.topic, exc)
                self._stop.wait(1.0)
                continue
            self.extras["readers"] += 1
            try:
                for _ in range(self.STRETCH):
                    if self._stop.is_set():
                        break
                    try:
                        message = reader.read_next(RECEIVE_MS * 4)
                    except pulsar.PulsarException:  # a timeout, or the reader failed
                        break
                    self.record(id_of(message.data()))
                    self.stored = message.message_id()
            finally:
                with contextlib.suppress(pulsar.PulsarException):
                    reader.close()


class TableViewPath(LivePath):
    """A TableView open through the whole run; at the end its value of every key is
    checked against the key's last acknowledged message."""

    def __init__(self, client: pulsar.Client, history: History, topic: Topic) -> None:
        super().__init__(history, PathSpec("tableview", topic.tag, Mode.LATEST_PER_KEY, False))
        self.view = client.create_table_view(topic.name)

    def values(self) -> dict[str, int]:
        out: dict[str, int] = {}
        self.view.for_each(lambda key, value: out.__setitem__(key, id_of(value)))
        return out

    def caught_up_with(self, last: dict[str, int]) -> bool:
        return self.values() == last

    def finish(self) -> None:
        for key, message_id in sorted(self.values().items()):
            self.record(message_id, 0, key)
        self.view.close()


def live_paths(client: pulsar.Client, history: History, topic: Topic) -> list[LivePath]:
    """The live paths a topic of each kind is read by."""
    kind = topic.kind
    sub = pulsar.ConsumerType
    if kind is Kind.BATCHED:
        return [
            SubscriptionPath(client, history, topic, "exclusive", sub.Exclusive),
            ResumedReaderPath(client, history, topic),
        ]
    if kind is Kind.CHECKPOINT:
        return [SubscriptionPath(client, history, topic, "exclusive", sub.Exclusive)]
    if kind is Kind.SINGLE:
        return [
            SubscriptionPath(
                client, history, topic, "failover", sub.Failover, consumers=2, cumulative=True
            )
        ]
    if kind is Kind.PARTITIONED:
        return [
            SubscriptionPath(
                client, history, topic, "key-shared", sub.KeyShared, consumers=2, group_by_key=True
            )
        ]
    if kind is Kind.KEYED:
        return [TableViewPath(client, history, topic)]
    if kind is Kind.KEY_WINDOW:
        return [
            SubscriptionPath(
                client, history, topic, "shared", sub.Shared, consumers=2, ordered=False
            )
        ]
    if kind is Kind.CHUNKED:
        return [SubscriptionPath(client, history, topic, "exclusive", sub.Exclusive)]
    return [
        SubscriptionPath(
            client, history, topic, "shared-delayed", sub.Shared, consumers=2, ordered=False
        )
    ]
