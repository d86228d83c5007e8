"""Topic listings for pattern (regex) subscriptions: filtering, Pulsar's listing hash, and
watches that tell a client about topics created or deleted after it subscribed.

Topics may be created through any broker of the cluster, so a watch does not rely on this
broker seeing the creation: while watches exist, the listing is re-read from the shared
metadata every ``WATCH_INTERVAL_SECONDS`` and each watch hears what changed for it.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

from dedup_broker.domain_base.names import TopicName
from dedup_broker.errors import BrokerError
from dedup_broker.protocol.checksum import crc32c

log = logging.getLogger(__name__)

WATCH_INTERVAL_SECONDS = 1.0
SCHEME_SEPARATOR = "://"


def topics_hash(topics: Iterable[str]) -> str:
    """The hash Pulsar gives a listing (CRC32C over the sorted names, Guava's hex), so a
    client can tell an unchanged listing without the names."""
    value = 0
    for topic in sorted(topics):
        value = crc32c(topic.encode(), value)
    return value.to_bytes(4, "little").hex()


def compile_pattern(pattern: str) -> re.Pattern[str] | None:
    """The topics pattern as Pulsar applies it: without the domain scheme, matching the
    whole name; ``None`` when it is no regex this broker can evaluate."""
    if SCHEME_SEPARATOR in pattern:
        shortened = pattern.split(SCHEME_SEPARATOR, 1)[1]
        pattern = f"^{shortened}" if "^" in pattern else shortened
    try:
        return re.compile(pattern)
    except re.error:
        return None


def filter_topics(topics: Iterable[str], pattern: re.Pattern[str]) -> list[str]:
    """Topics (partitions by their partitioned topic's name) that match ``pattern``."""
    out = []
    for topic in topics:
        base = str(TopicName.parse(topic).partitioned_base)
        if pattern.fullmatch(base.split(SCHEME_SEPARATOR, 1)[1]):
            out.append(topic)
    return out


TopicUpdate = Callable[[list[str], list[str], str], None]
"""Called with (new topics, deleted topics, hash of the whole listing) after a change."""
Listing = Callable[[str, bool], Awaitable[list[str]]]
"""The persistent topics of a namespace; ``True``: re-read the shared metadata first."""


@dataclass(eq=False)
class TopicListWatch:
    namespace: str
    pattern: re.Pattern[str]
    on_update: TopicUpdate
    topics: set[str] = field(default_factory=set)

    @property
    def hash(self) -> str:
        return topics_hash(self.topics)


class TopicListWatches:
    """Every watch of one broker, polled together."""

    def __init__(self, listing: Listing) -> None:
        self._listing = listing
        self._watches: set[TopicListWatch] = set()
        self._poller: asyncio.Task[None] | None = None

    async def watch(
        self, namespace: str, pattern: re.Pattern[str], on_update: TopicUpdate
    ) -> TopicListWatch:
        """A watch of the namespace's topics that match; its ``topics`` are those now."""
        current = filter_topics(await self._listing(namespace, True), pattern)
        watch = TopicListWatch(namespace, pattern, on_update, set(current))
        self._watches.add(watch)
        if self._poller is None or self._poller.done():
            self._poller = asyncio.get_running_loop().create_task(self._poll())
        return watch

    def unwatch(self, watch: TopicListWatch) -> None:
        self._watches.discard(watch)

    async def close(self) -> None:
        self._watches.clear()
        if self._poller is not None:
            self._poller.cancel()

    async def _poll(self) -> None:
        while self._watches:
            await asyncio.sleep(WATCH_INTERVAL_SECONDS)
            try:
                await self.check_now()
            except BrokerError as exc:
                log.warning("refreshing topic listings for watches: %s", exc)

    async def check_now(self) -> None:
        """Re-read the listings and tell each watch what changed for it."""
        listings: dict[str, list[str]] = {}
        refresh = True
        for watch in list(self._watches):
            if watch.namespace not in listings:
                listings[watch.namespace] = await self._listing(watch.namespace, refresh)
                refresh = False
            current = set(filter_topics(listings[watch.namespace], watch.pattern))
            if current == watch.topics or watch not in self._watches:
                continue
            new, deleted = sorted(current - watch.topics), sorted(watch.topics - current)
            watch.topics = current
            watch.on_update(new, deleted, watch.hash)
