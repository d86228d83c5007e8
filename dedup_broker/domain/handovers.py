"""Where the clients of topics leaving this broker are sent (PIP-307): this broker for an
unload, a slot's new owner once the group names it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from dedup_broker.cluster.membership import BrokerAddress
from dedup_broker.cluster.service import Cluster
from dedup_broker.config import BrokerConfig
from dedup_broker.domain_base.handover import Destination, ServiceUrls, known
from dedup_broker.domain_base.names import TopicName


class Handovers:
    def __init__(self, config: BrokerConfig, cluster: Cluster | None) -> None:
        self._config = config
        self._cluster = cluster
        self._pending: set[Destination] = set()
        """Destinations of slots that left, while not known yet."""

    def here(self) -> Destination | None:
        """This broker (an unloaded topic stays here)."""
        if self._cluster is None:
            return None
        return known(self._urls(self._cluster.address))

    def of_slots(self) -> Callable[[TopicName], Destination | None]:
        """Each topic's slot's next owner, asked once per slot."""
        cluster = self._cluster
        if cluster is None:
            return lambda _: None
        destinations: dict[int, Destination] = {}

        def destination(name: TopicName) -> Destination:
            slot = cluster.slot_of(name)
            if slot not in destinations:
                future = asyncio.ensure_future(self._next_broker(cluster, slot))
                self._pending.add(future)
                future.add_done_callback(self._pending.discard)
                destinations[slot] = future
            return destinations[slot]

        return destination

    async def _next_broker(self, cluster: Cluster, slot: int) -> ServiceUrls | None:
        owner = await cluster.new_owner(slot)
        return self._urls(owner) if owner is not None else None

    def _urls(self, broker: BrokerAddress) -> ServiceUrls | None:
        """The URLs clients are sent to; none with ``advertisedListeners``, where each
        client needs its own listener's (it looks the topic up instead)."""
        if self._config.advertised_listeners:
            return None
        return ServiceUrls(broker.service_url, broker.service_url_tls)

    async def sent(self, timeout: float) -> None:
        """Until the clients of every slot that left were told where to go."""
        if self._pending:
            await asyncio.wait(list(self._pending), timeout=timeout)
