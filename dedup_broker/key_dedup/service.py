"""Key-window deduplication for the whole broker: policies, scopes, the Redis client, metrics.

Policies are stored like every other policy (the compacted policies table) under the
name ``keyDeduplication``, at namespace and topic level; topic > namespace > broker
configuration. A partition follows its partitioned topic.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Protocol

from dedup_broker.config import BrokerConfig
from dedup_broker.domain_base.names import TopicName
from dedup_broker.domain_base.policies import Policies
from dedup_broker.errors import ConfigError
from dedup_broker.key_dedup.metrics import KeyDedupMetrics
from dedup_broker.key_dedup.scope import KeyScope, ScopeMember
from dedup_broker.key_dedup.store import KeyStore
from dedup_broker.key_dedup.window import InvalidKeyDedupPolicyError, KeyDedupPolicy, Scope

log = logging.getLogger(__name__)

POLICY = "keyDeduplication"


def key_dedup_defaults(config: BrokerConfig) -> KeyDedupPolicy:
    """The broker-wide policy (``keyDeduplication*`` settings), validated like a policy."""
    try:
        policy = KeyDedupPolicy.from_json(
            {
                "keySource": config.key_deduplication_key_source,
                "window": config.key_deduplication_window,
                "scope": config.key_deduplication_scope,
                "onRedisUnavailable": config.key_deduplication_on_redis_unavailable,
            }
        )
    except InvalidKeyDedupPolicyError as exc:
        raise ConfigError(f"key deduplication settings: {exc}") from None
    return replace(policy, enabled=config.broker_key_deduplication_enabled)


class TopicDirectory(Protocol):
    """What key deduplication needs to know of the broker's topics (a scope spans many)."""

    def topics_of_namespace(self, namespace: str) -> list[str]: ...

    def partitions_of(self, name: TopicName) -> int: ...

    def topic_exists(self, name: TopicName) -> bool: ...

    async def key_dedup_of(self, name: TopicName) -> ScopeMember:
        """The topic's key deduplication, loading the topic if needed."""

    def loaded_key_dedups(self) -> Sequence[ScopeMember]:
        """Those of the loaded topics that have one (key deduplication was on there)."""

    async def apply_key_dedup_policies(self) -> None:
        """Every loaded topic follows its key deduplication policy as it is now."""


class KeyDedupService:
    def __init__(
        self,
        config: BrokerConfig,
        store: KeyStore,
        policies: Policies,
        metrics: KeyDedupMetrics,
    ) -> None:
        self.config = config
        self.store = store
        self.policies = policies
        self.metrics = metrics
        self._directory: TopicDirectory | None = None
        self.scopes: dict[str, KeyScope] = {}
        self.accepted_without_redis = 0
        self.pending_ttl_ms = config.key_deduplication_pending_timeout_seconds * 1000
        self.defaults = key_dedup_defaults(config)
        metrics.watch(self.scopes.values, lambda: store.round_trips)

    def bind(self, directory: TopicDirectory) -> None:
        """The broker whose topics this service deduplicates (set once, at wiring)."""
        self._directory = directory

    @property
    def directory(self) -> TopicDirectory:
        if self._directory is None:
            raise RuntimeError("key deduplication is not bound to a broker")
        return self._directory

    # --- policies ---------------------------------------------------------------------
    def policy_for(self, topic: TopicName) -> KeyDedupPolicy:
        """Topic policy, else namespace policy, else the broker's defaults."""
        policies = self.policies
        for value in (
            policies.topic_value(topic, POLICY),
            policies.namespace_value(topic.namespace_name, POLICY),
        ):
            if value is not None:
                return KeyDedupPolicy.from_json(value, self.defaults)
        return self.defaults

    def scope_id(self, topic: TopicName, policy: KeyDedupPolicy) -> str:
        """Scopes with another key source or window are other scopes (rebuilt from the log)."""
        if policy.scope is Scope.NAMESPACE:
            base = f"namespace:{topic.namespace_name}"
        else:
            base = f"topic:{topic.partitioned_base}"
        return f"{self.config.cluster_name}|{base}|{policy.key_source}|{policy.window_ms}"

    def scope_for(self, topic: TopicName, policy: KeyDedupPolicy) -> KeyScope:
        scope_id = self.scope_id(topic, policy)
        scope = self.scopes.get(scope_id)
        if scope is None or scope.closed:
            scope = KeyScope(
                scope_id,
                policy,
                self.store,
                self.config.key_deduplication_local_cache_size,
                self._load_members,
                single_writer=self.single_writer(topic, policy),
            )
            self.scopes[scope_id] = scope
            self.metrics.track_scope(scope_id, scope.keys_tracked)
        return scope

    def single_writer(self, topic: TopicName, policy: KeyDedupPolicy) -> bool:
        """A topic scope of a topic that is not partitioned is one managed ledger, written
        only by the broker owning (and having fenced) it. A partitioned topic's partitions
        and a namespace's topics may be owned by different brokers: those scopes claim."""
        return (
            policy.scope is Scope.TOPIC
            and not topic.is_partition
            and self.directory.partitions_of(topic) == 0
        )

    def scope_released(self, scope: KeyScope) -> None:
        if scope.members:
            return
        if self.scopes.get(scope.scope_id) is scope:
            del self.scopes[scope.scope_id]
            self.metrics.forget_scope(scope)
        asyncio.get_running_loop().create_task(scope.close())

    async def _load_members(self, scope: KeyScope) -> list[ScopeMember]:
        return [await self.directory.key_dedup_of(n) for n in await self.member_names(scope)]

    async def member_names(self, scope: KeyScope) -> list[TopicName]:
        """Every topic whose effective policy puts it in ``scope`` (loaded or not)."""
        names: list[TopicName] = []
        for member in list(scope.members):
            names.append(member.name)
        namespace = scope.scope_id.split("|")[1]
        kind, _, value = namespace.partition(":")
        if kind == "namespace":
            candidates = self.directory.topics_of_namespace(value)
        else:
            base = TopicName.parse(value)
            partitions = self.directory.partitions_of(base)
            candidates = (
                [str(base.partition(i)) for i in range(partitions)] if partitions else [str(base)]
            )
        for text in candidates:
            name = TopicName.parse(text)
            if not self.directory.topic_exists(name):
                continue
            policy = self.policy_for(name)
            same = policy.enabled and self.scope_id(name, policy) == scope.scope_id
            if same and all(str(n) != str(name) for n in names):
                names.append(name)
        return names

    def stale_owner(self, owner: bytes) -> bool:
        """A claim by an earlier load of a topic this broker serves now: its writer is gone.
        Only once the new load has replayed the log after its checkpoint: until then the
        claimed key may lie in that log, stored, and taking the claim over would store it
        a second time through another topic of the scope."""
        ledger = owner.decode(errors="replace").partition(":")[2]
        for member in self.directory.loaded_key_dedups():
            if member.ledger.name == ledger:
                return member.owner != owner and member.recovered
        return False

    async def apply_policies(self) -> None:
        await self.directory.apply_key_dedup_policies()

    def stats(self) -> dict[str, Any]:
        store = self.store
        return {
            "redisRoundTrips": store.round_trips,
            "redisErrors": store.errors,
            "acceptedWithoutRedis": self.accepted_without_redis,
            "scopes": {sid: s.stats() for sid, s in self.scopes.items()},
        }

    async def close(self) -> None:
        for scope in list(self.scopes.values()):
            await scope.close()
        await self.store.close()
