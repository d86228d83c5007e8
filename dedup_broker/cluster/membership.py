"""Membership and slot ownership through Kafka's group coordinator.

Every broker of a cluster is a member of the consumer group ``{cluster}.owners`` on the
topic ``{cluster}.owners``, whose partitions stand for the ownership slots. Kafka detects
failures (``metadataStoreSessionTimeoutMillis``) and assigns the partitions; the
cooperative sticky assignor moves as few slots as possible when a broker joins or leaves.
No record is ever written to the topic: only the assignment matters.

Ordering is what makes a handover safe: librdkafka calls the revoke callback before the
member rejoins, and the coordinator gives a revoked slot to another member only after
that rejoin. The callback blocks (on the poll thread) until the broker has unloaded the
slot's topics, so the old owner has let go before the new one is told. A member that was
expelled (paused, cut off) cannot know in time: the write fence covers that case. A member
whose session expired is told its slots were *lost*: the group may already have given
them on, or may give them back (the broker decides what to keep, ``service.py``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

from dedup_broker.config import BrokerConfig
from dedup_broker.kafka_logging import kafka_logger

log = logging.getLogger(__name__)

SlotsHandler = Callable[[frozenset[int]], Coroutine[Any, Any, None]]
MEMBER_PREFIX = "dedup-broker@"
_POLL_SECONDS = 0.2
HEARTBEAT_MS = 500


def rebalance_timeout_ms(config: BrokerConfig) -> int:
    """How long the group waits for its members to rejoin in a rebalance (librdkafka
    sends ``max.poll.interval.ms``): above the longest revocation (unloading a slot's
    topics, bounded by ``brokerShutdownTimeoutMs``) and the session."""
    return max(300_000, config.metadata_store_session_timeout_millis)


def owners_topic(cluster_name: str) -> str:
    return f"{cluster_name}.owners"


def owners_group(cluster_name: str) -> str:
    return f"{cluster_name}.owners"


@dataclass(frozen=True, slots=True)
class BrokerAddress:
    """How clients reach a broker: its advertised host and ports (0: that plain port is
    off; None: no TLS port)."""

    host: str
    broker_port: int
    web_port: int
    instance: str = ""
    """Tells two processes on the same address apart (a restart is another member)."""
    broker_port_tls: int | None = None
    web_port_tls: int | None = None

    @property
    def service_url(self) -> str:
        """The plain Pulsar URL, or the TLS one when the broker has no plain port."""
        if not self.broker_port and self.broker_port_tls is not None:
            return f"pulsar+ssl://{self.host}:{self.broker_port_tls}"
        return f"pulsar://{self.host}:{self.broker_port}"

    @property
    def service_url_tls(self) -> str | None:
        if self.broker_port_tls is None:
            return None
        return f"pulsar+ssl://{self.host}:{self.broker_port_tls}"

    @property
    def web_url(self) -> str:
        """The plain HTTP URL, or the HTTPS one when the broker has no plain port."""
        if not self.web_port and self.web_port_tls is not None:
            return f"https://{self.host}:{self.web_port_tls}"
        return f"http://{self.host}:{self.web_port}"

    @property
    def web_url_tls(self) -> str | None:
        if self.web_port_tls is None:
            return None
        return f"https://{self.host}:{self.web_port_tls}"

    @property
    def broker_id(self) -> str:
        """Pulsar's broker id in listings: ``host:webServicePort`` (the TLS one without)."""
        return f"{self.host}:{self.web_port or self.web_port_tls}"

    def same_endpoint(self, other: BrokerAddress) -> bool:
        """Reached at the same address and ports (whichever process it is)."""
        return (self.host, self.broker_port, self.broker_port_tls) == (
            other.host,
            other.broker_port,
            other.broker_port_tls,
        )

    def member_tag(self) -> str:
        """Carried as the Kafka ``client.id`` so that a group description names it:
        ``dedup-broker@host|port|web|instance``, the instance followed by
        ``;tls=<port>`` and ``;webtls=<port>`` when there are TLS ports (brokers that do
        not know them read them as part of the instance)."""
        instance = self.instance
        if self.broker_port_tls is not None:
            instance += f";tls={self.broker_port_tls}"
        if self.web_port_tls is not None:
            instance += f";webtls={self.web_port_tls}"
        return f"{MEMBER_PREFIX}{self.host}|{self.broker_port}|{self.web_port}|{instance}"

    @classmethod
    def from_member_tag(cls, tag: str) -> BrokerAddress | None:
        if not tag.startswith(MEMBER_PREFIX):
            return None
        try:
            host, broker_port, web_port, rest = tag[len(MEMBER_PREFIX) :].rsplit("|", 3)
            instance, *extras = rest.split(";")
            ports: dict[str, int] = {}
            for extra in extras:
                key, sep, value = extra.partition("=")
                if sep and key in ("tls", "webtls"):
                    ports[key] = int(value)
            return cls(
                host,
                int(broker_port),
                int(web_port),
                instance,
                ports.get("tls"),
                ports.get("webtls"),
            )
        except ValueError:
            return None


class Membership:
    """This broker's seat in the owners group; calls back as slots come and go."""

    def __init__(
        self,
        config: BrokerConfig,
        address: BrokerAddress,
        on_assigned: SlotsHandler,
        on_revoked: SlotsHandler,
        on_lost: SlotsHandler,
    ) -> None:
        self._config = config
        self._on_assigned = on_assigned
        self._on_revoked = on_revoked
        self._on_lost = on_lost
        self._member_id: str | None = None
        self._lost_before = False
        """Slots were lost: the next assignment is reported even when empty (it settles
        which of them are still this member's)."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._first_assignment = threading.Event()
        self.owned: frozenset[int] = frozenset()
        self.rebalances = 0
        """Assignments and revocations seen so far (the directory refreshes on a change)."""
        session_ms = config.metadata_store_session_timeout_millis
        conf: dict[str, Any] = {
            **config.kafka_connection(),
            "group.id": owners_group(config.cluster_name),
            "client.id": address.member_tag(),
            "partition.assignment.strategy": "cooperative-sticky",
            "session.timeout.ms": session_ms,
            # Members learn of a rebalance from their next heartbeat: frequent heartbeats
            # keep a handover short whatever the (long) session is.
            "heartbeat.interval.ms": max(min(session_ms // 4, HEARTBEAT_MS), 100),
            "max.poll.interval.ms": rebalance_timeout_ms(config),
            "enable.auto.commit": False,
            "auto.offset.reset": "latest",
            "allow.auto.create.topics": False,
            "logger": kafka_logger(),
        }
        self._consumer = Consumer(conf)

    async def start(self, timeout_seconds: float) -> None:
        """Join the group and wait for the first assignment (possibly empty)."""
        self._loop = asyncio.get_running_loop()
        self._consumer.subscribe(
            [owners_topic(self._config.cluster_name)],
            on_assign=self._assigned,
            on_revoke=self._revoked,
            on_lost=self._lost,
        )
        self._thread = threading.Thread(target=self._run, name="cluster-membership", daemon=True)
        self._thread.start()
        joined = await asyncio.to_thread(self._first_assignment.wait, timeout_seconds)
        if not joined:
            log.warning("no slot assignment within %.0fs; serving nothing yet", timeout_seconds)

    async def leave(self, timeout_seconds: float) -> None:
        """Leave the group: the revoke callback unloads every owned slot first."""
        self._stopping.set()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, timeout_seconds)

    def member_id(self) -> str | None:
        """This seat's member id in the group, as of the last poll: None before the first
        join, and after a lost session until the rejoin (librdkafka then asks for a new
        id). Read on the poll thread only: librdkafka's call waits on locks that a
        rebalance callback (which waits for the loop) may hold."""
        return self._member_id

    # --- poll thread ----------------------------------------------------------------
    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                self._consumer.poll(_POLL_SECONDS)
                self._member_id = self._consumer.memberid() or None
            except KafkaException as exc:
                log.warning("owners group: %s", exc)
            except Exception:
                log.exception("owners group poll failed")
        try:
            self._consumer.close()
        except (KafkaException, RuntimeError) as exc:
            log.warning("leaving the owners group: %s", exc)

    def _call(self, handler: SlotsHandler, slots: frozenset[int]) -> None:
        """Run ``handler`` on the loop and wait for it (bounded by the shutdown timeout)."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        timeout = self._config.broker_shutdown_timeout_ms / 1000
        try:
            future = asyncio.run_coroutine_threadsafe(handler(slots), loop)
            future.result(timeout)
        except concurrent.futures.TimeoutError:
            log.error("slots %s: handling did not finish within %.0fs", sorted(slots), timeout)
        except RuntimeError as exc:  # the loop is gone: the process is ending
            log.debug("slots %s not handled: %s", sorted(slots), exc)
        except Exception:
            log.exception("slots %s: handler failed", sorted(slots))

    def _assigned(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        slots = frozenset(p.partition for p in partitions)
        self.owned = self.owned | slots
        self.rebalances += 1
        if slots or self._lost_before:
            self._lost_before = False
            log.info("slots assigned: %s (now %s)", sorted(slots), sorted(self.owned))
            self._call(self._on_assigned, slots)
        self._first_assignment.set()

    def _revoked(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        slots = frozenset(p.partition for p in partitions)
        self.rebalances += 1
        if slots:
            log.info("slots revoked: %s", sorted(slots))
            self.owned = self.owned - slots
            self._call(self._on_revoked, slots)

    def _lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        slots = frozenset(p.partition for p in partitions)
        self.rebalances += 1
        if slots:
            log.warning("slots lost (session expired): %s", sorted(slots))
            self.owned = self.owned - slots
            self._member_id = None  # the old id: it must never be taken for the new one
            self._lost_before = True
            self._call(self._on_lost, slots)
