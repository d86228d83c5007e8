"""Who is in the cluster and who owns which slot, read from Kafka's group description.

The group coordinator already knows every live member and its assignment; each member's
``client.id`` carries its advertised address. A short-lived cache keeps lookups cheap;
a slot with no owner (a rebalance in progress) is asked again shortly after.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

from dedup_broker.cluster.group_reader import GroupReader
from dedup_broker.cluster.membership import BrokerAddress, owners_group, owners_topic
from dedup_broker.config import BrokerConfig
from dedup_broker.errors import ServiceNotReadyError

log = logging.getLogger(__name__)

CACHE_SECONDS = 1.0
OWNER_WAIT_SECONDS = 5.0
_RETRY_SECONDS = 0.2


@dataclass(frozen=True)
class ClusterView:
    """One reading of the group: live brokers and the slots each owns."""

    brokers: list[BrokerAddress] = field(default_factory=list)
    owners: dict[int, BrokerAddress] = field(default_factory=dict)
    stable: bool = True
    read_at: float = 0.0
    members: dict[str, BrokerAddress] = field(default_factory=dict)
    """Kafka's ``member.id`` of each broker in the group."""


class Directory:
    def __init__(self, config: BrokerConfig) -> None:
        self._group = owners_group(config.cluster_name)
        self._topic = owners_topic(config.cluster_name)
        connection = {
            **config.kafka_connection(),
            "client.id": f"{config.cluster_name}.cluster-directory",
        }
        self._reader = GroupReader(connection, self._group, config.kafka_request_timeout_ms / 1000)
        self._view = ClusterView()
        self._reading: asyncio.Future[ClusterView] | None = None

    async def view(self, max_age: float = CACHE_SECONDS) -> ClusterView:
        """The group as Kafka describes it, at most ``max_age`` seconds old."""
        if time.monotonic() - self._view.read_at <= max_age:
            return self._view
        if self._reading is None:
            self._reading = asyncio.ensure_future(self._read())
        reading = self._reading
        try:
            return await asyncio.shield(reading)
        finally:
            if self._reading is reading and reading.done():
                self._reading = None

    @property
    def last(self) -> ClusterView:
        """The latest reading, however old."""
        return self._view

    def invalidate(self) -> None:
        view = self._view
        self._view = ClusterView(view.brokers, view.owners, False, 0.0, view.members)

    async def _read(self) -> ClusterView:
        description = await self._reader.describe()
        brokers: dict[str, BrokerAddress] = {}
        owners: dict[int, BrokerAddress] = {}
        members: dict[str, BrokerAddress] = {}
        for member in description.members:
            address = BrokerAddress.from_member_tag(member.client_id)
            if address is None:
                continue
            brokers[address.broker_id] = address
            members[member.member_id] = address
            for topic, partition in member.partitions:
                if topic == self._topic:
                    owners[partition] = address
        view = ClusterView(
            sorted(brokers.values(), key=lambda b: b.broker_id),
            owners,
            stable=description.state.upper() == "STABLE",
            read_at=time.monotonic(),
            members=members,
        )
        self._view = view
        return view

    async def owner_of(self, slot: int, wait_seconds: float = OWNER_WAIT_SECONDS) -> BrokerAddress:
        """The broker owning ``slot``; during a rebalance, wait a little for one."""
        deadline = time.monotonic() + wait_seconds
        view = await self.view()
        while True:
            owner = view.owners.get(slot)
            if owner is not None:
                return owner
            if time.monotonic() >= deadline:
                raise ServiceNotReadyError(
                    f"no broker owns slot {slot} yet (the cluster is rebalancing)"
                )
            await asyncio.sleep(_RETRY_SECONDS)
            view = await self.view(max_age=0)

    async def close(self) -> None:
        reading = self._reading
        if reading is not None and not reading.done():
            reading.cancel()
        await self._reader.close()
