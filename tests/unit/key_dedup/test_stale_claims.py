"""When a claim left by an earlier load of a topic may be taken over: only once the topic's
new load has replayed its log (the claimed key may lie there, stored)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from dedup_broker.config import BrokerConfig
from dedup_broker.domain_base.names import TopicName
from dedup_broker.domain_base.policies import Policies
from dedup_broker.key_dedup.metrics import KeyDedupMetrics
from dedup_broker.key_dedup.scope import ScopeMember
from dedup_broker.key_dedup.service import KeyDedupService
from dedup_broker.key_dedup.store import KeyStore
from dedup_broker.metrics_registry import new_registry
from harness.memory_table import MemoryTable


@dataclass
class _Ledger:
    name: str


@dataclass
class _Load:
    """A loaded topic's key deduplication, as the service sees it."""

    ledger: _Ledger
    owner: bytes
    recovered: bool = False


@dataclass
class _Directory:
    loaded: list[_Load] = field(default_factory=list)

    def topics_of_namespace(self, namespace: str) -> list[str]:
        return []

    def partitions_of(self, name: TopicName) -> int:
        return 0

    def topic_exists(self, name: TopicName) -> bool:
        return False

    async def key_dedup_of(self, name: TopicName) -> ScopeMember:
        raise AssertionError("not loaded here")

    def loaded_key_dedups(self) -> Sequence[ScopeMember]:
        return self.loaded  # type: ignore[return-value]

    async def apply_key_dedup_policies(self) -> None:
        return None


def _service(directory: _Directory) -> KeyDedupService:
    config = BrokerConfig()
    service = KeyDedupService(
        config,
        KeyStore(config.redis_url),
        Policies(MemoryTable().as_metadata_table()),
        KeyDedupMetrics(new_registry()),
    )
    service.bind(directory)
    return service


def test_an_earlier_loads_claim_is_stale_only_after_the_new_load_replayed_its_log() -> None:
    ledger = "public/kd/persistent/t0"
    earlier = f"aaaaaaaaaaaa:{ledger}".encode()
    now = _Load(_Ledger(ledger), f"bbbbbbbbbbbb:{ledger}".encode())
    service = _service(_Directory([now]))
    # Replaying: the claimed key may be in the log, stored; the claim stands.
    assert not service.stale_owner(earlier)
    now.recovered = True
    assert service.stale_owner(earlier)
    # The load's own claims are never stale; nor those of topics not loaded here.
    assert not service.stale_owner(now.owner)
    assert not service.stale_owner(b"cccccccccccc:public/kd/persistent/t1")
