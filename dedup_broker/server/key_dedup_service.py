"""Key-window deduplication for the whole broker: policies, scopes, the Redis client, metrics.

Policies are stored like every other policy (the compacted policies table) under the
name ``keyDeduplication``, at namespace and topic level; topic > namespace > broker
configuration. A partition follows its partitioned topic.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from prometheus_client import Counter, Gauge, Histogram

from dedup_broker.dedup.key_store import KeyStore
from dedup_broker.dedup.key_window import (
    KeyDedupPolicy,
    KeySource,
    OnRedisUnavailable,
    Scope,
    parse_window,
)
from dedup_broker.server.key_dedup_scope import KeyScope
from dedup_broker.server.topic_name import TopicName

if TYPE_CHECKING:
    from dedup_broker.server.broker import BrokerService

log = logging.getLogger(__name__)

POLICY = "keyDeduplication"

REDIS_LATENCY_BUCKETS = (0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5, 1.0)


class KeyDedupService:
    def __init__(self, broker: BrokerService) -> None:
        self.broker = broker
        self.config = broker.config
        self.scopes: dict[str, KeyScope] = {}
        self._store: KeyStore | None = None
        self.accepted_without_redis = 0
        self.pending_ttl_ms = self.config.key_deduplication_pending_timeout_seconds * 1000
        c = self.config
        self.defaults = KeyDedupPolicy(
            enabled=c.broker_key_deduplication_enabled,
            key_source=KeySource.parse(c.key_deduplication_key_source),
            window_ms=parse_window(c.key_deduplication_window),
            scope=Scope(c.key_deduplication_scope),
            on_redis_unavailable=OnRedisUnavailable(c.key_deduplication_on_redis_unavailable),
        )
        r = broker.metrics.registry
        self.dropped = Counter(
            "dedup_broker_key_dedup_repeats_dropped_total",
            "Messages dropped as repeats of a key stored within its window",
            registry=r,
        )
        self.redis_latency = Histogram(
            "dedup_broker_key_dedup_redis_latency_seconds",
            "Duration of one Redis round trip of key deduplication",
            buckets=REDIS_LATENCY_BUCKETS,
            registry=r,
        )
        self.redis_errors = Counter(
            "dedup_broker_key_dedup_redis_errors_total",
            "Redis calls that failed or timed out",
            registry=r,
        )
        round_trips = Gauge(
            "dedup_broker_key_dedup_redis_round_trips_total", "Redis round trips so far", registry=r
        )
        round_trips.set_function(lambda: float(self._store.round_trips if self._store else 0))
        tracked = Gauge(
            "dedup_broker_key_dedup_keys_tracked",
            "Keys in the window stored by this broker, per scope",
            ("scope",),
            registry=r,
        )
        self._tracked_gauge = tracked

    @property
    def store(self) -> KeyStore:
        if self._store is None:
            self._store = KeyStore(
                self.config.redis_url,
                timeout_seconds=self.config.key_deduplication_redis_timeout_seconds,
                cluster=self.config.redis_cluster_enabled,
                observe=self._observe,
            )
        return self._store

    def _observe(self, seconds: float, ok: bool) -> None:
        self.redis_latency.observe(seconds)
        if not ok:
            self.redis_errors.inc()

    # --- policies ---------------------------------------------------------------------
    def policy_for(self, topic: TopicName) -> KeyDedupPolicy:
        """Topic policy, else namespace policy, else the broker's defaults."""
        policies = self.broker.policies
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
            scope = KeyScope(self, scope_id, policy)
            self.scopes[scope_id] = scope
            tracked = scope.keys_tracked
            self._tracked_gauge.labels(scope=scope_id).set_function(lambda: float(tracked()))
        return scope

    def scope_released(self, scope: KeyScope) -> None:
        if scope.members:
            return
        if self.scopes.get(scope.scope_id) is scope:
            del self.scopes[scope.scope_id]
            self._tracked_gauge.remove(scope.scope_id)
        asyncio.get_running_loop().create_task(scope.close())

    async def member_names(self, scope: KeyScope) -> list[TopicName]:
        """Every topic whose effective policy puts it in ``scope`` (loaded or not)."""
        names: list[TopicName] = []
        for member in list(scope.members):
            names.append(member.topic.name)
        namespace = scope.scope_id.split("|")[1]
        kind, _, value = namespace.partition(":")
        if kind == "namespace":
            candidates = self.broker.topics_of_namespace(value)
        else:
            base = TopicName.parse(value)
            partitions = self.broker.partitions_of(base)
            candidates = (
                [str(base.partition(i)) for i in range(partitions)] if partitions else [str(base)]
            )
        for text in candidates:
            name = TopicName.parse(text)
            if not self.broker.topic_exists(name):
                continue
            policy = self.policy_for(name)
            same = policy.enabled and self.scope_id(name, policy) == scope.scope_id
            if same and all(str(n) != str(name) for n in names):
                names.append(name)
        return names

    def stale_owner(self, owner: bytes) -> bool:
        """A claim by an earlier load of a topic this broker serves now: its writer is gone."""
        load_id, _, ledger = owner.decode(errors="replace").partition(":")
        for topic in self.broker.topics.values():
            if topic.managed_ledger.name == ledger:
                return topic.key_dedup.load_id != load_id
        return False

    async def apply_policies(self) -> None:
        for topic in list(self.broker.topics.values()):
            await topic.key_dedup.apply_policy()

    def stats(self) -> dict[str, Any]:
        store = self._store
        return {
            "redisRoundTrips": store.round_trips if store else 0,
            "redisErrors": store.errors if store else 0,
            "acceptedWithoutRedis": self.accepted_without_redis,
            "scopes": {sid: s.stats() for sid, s in self.scopes.items()},
        }

    async def close(self) -> None:
        for scope in list(self.scopes.values()):
            await scope.close()
        if self._store is not None:
            await self._store.close()
