"""The schema registry: every topic's schema versions, in the compacted policies table.

Each version is one key, ``schemas/{tenant}/{namespace}/{topic}/{version}``, holding
``{"type", "data" (base64), "properties", "timestamp"}``; a partition uses its
partitioned topic's schemas. Versions count 0, 1, 2... and travel on the wire as 8-byte
big-endian numbers (Pulsar's ``LongSchemaVersion``). Deleting a topic's schemas removes
its versions and remembers the next number (``schema-next/...``), so a version number
is never given to two schemas: messages carry the version they were written with. The
broker deletes a topic's schemas when it deletes the topic (a partitioned topic's with
the partitioned topic, not with one of its partitions).
"""

from __future__ import annotations

import base64
import binascii
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dedup_broker.config import BrokerConfig
from dedup_broker.domain_base.names import TopicName
from dedup_broker.domain_base.policies import Policies
from dedup_broker.domain_base.topic_policies import BadPolicyError, Level, TopicPolicy
from dedup_broker.errors import ConfigError
from dedup_broker.name_locks import NameLocks
from dedup_broker.schema.compatibility import (
    CompatibilityStrategy,
    IncompatibleSchemaError,
    InvalidStrategyError,
    SchemaInfo,
    SchemaNotFoundError,
    SchemaType,
    check_compatible,
    validate,
)

SCHEMA_KEY = "schemas/"
NEXT_VERSION_KEY = "schema-next/"
STRATEGY_POLICY = "schema_compatibility_strategy"
"""The namespace and topic policy (Pulsar's ``schema_compatibility_strategy`` field)."""
VALIDATION_ENFORCED_POLICY = "schema_validation_enforced"
VERSION_BYTES = 8


def version_bytes(version: int) -> bytes:
    """Pulsar's ``LongSchemaVersion`` on the wire."""
    return version.to_bytes(VERSION_BYTES, "big", signed=True)


def version_of(raw: bytes) -> int | None:
    """The version a wire ``schema_version`` names (``None``: empty or not 8 bytes)."""
    if len(raw) != VERSION_BYTES:
        return None
    return int.from_bytes(raw, "big", signed=True)


def default_strategy(config: BrokerConfig) -> CompatibilityStrategy:
    """``schemaCompatibilityStrategy``, validated (a ``ConfigError`` at start)."""
    try:
        return CompatibilityStrategy.parse(config.schema_compatibility_strategy)
    except InvalidStrategyError as exc:
        raise ConfigError(f"schemaCompatibilityStrategy: {exc}") from None


def _strategy_body(value: object, level: Level, config: BrokerConfig) -> str | None:
    """A strategy's name (``UNDEFINED``: none, the namespace's applies)."""
    if not isinstance(value, str):
        raise BadPolicyError(f"expected a schema compatibility strategy, got {value!r}")
    if value.strip().upper() == "UNDEFINED":
        return None
    return CompatibilityStrategy.parse(value).value


def _flag(value: object, level: Level, config: BrokerConfig) -> bool:
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    if not isinstance(value, bool):
        raise BadPolicyError(f"expected true or false, got {value!r}")
    return value


TOPIC_POLICIES = (
    TopicPolicy(
        STRATEGY_POLICY,
        "schemaCompatibilityStrategy",
        None,  # the namespace's routes are http/schema.py's
        _strategy_body,
        lambda config: default_strategy(config).value,
    ),
    TopicPolicy(
        VALIDATION_ENFORCED_POLICY,
        "schemaValidationEnforced",
        "schemaValidationEnforced",
        _flag,
        lambda config: config.is_schema_validation_enforced,
        namespace_unset=False,
    ),
)
"""A topic's schema policies (``http/topic_policies.py`` serves them): its compatibility
strategy, and whether producers without a schema are refused once it has one."""


@dataclass(frozen=True)
class StoredSchema:
    version: int
    info: SchemaInfo
    timestamp: int
    """Milliseconds since the epoch when the version was registered."""

    def to_json(self) -> dict[str, Any]:
        return {
            "type": self.info.type.value,
            "data": base64.b64encode(self.info.data).decode("ascii"),
            "properties": dict(sorted(self.info.properties.items())),
            "timestamp": self.timestamp,
        }

    @classmethod
    def from_json(cls, version: int, raw: bytes) -> StoredSchema:
        body = json.loads(raw)
        info = SchemaInfo(
            SchemaType.parse(str(body["type"])),
            base64.b64decode(body.get("data", "")),
            {str(k): str(v) for k, v in dict(body.get("properties") or {}).items()},
        )
        return cls(version, info, int(body.get("timestamp", 0)))


class SchemaRegistry:
    def __init__(
        self,
        config: BrokerConfig,
        policies: Policies,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.policies = policies
        self.default_strategy = default_strategy(config)
        self._clock = clock
        self._locks = NameLocks()

    # --- strategies -------------------------------------------------------------------
    def namespace_strategy(self, namespace: str) -> CompatibilityStrategy | None:
        stored = self.policies.namespace_value(namespace, STRATEGY_POLICY)
        if isinstance(stored, str):
            try:
                return CompatibilityStrategy.parse(stored)
            except InvalidStrategyError:
                return None
        return None

    async def set_namespace_strategy(
        self, namespace: str, strategy: CompatibilityStrategy | None
    ) -> None:
        value = strategy.value if strategy is not None else None
        await self.policies.set_namespace_value(namespace, STRATEGY_POLICY, value)

    def strategy_of(self, topic: TopicName) -> CompatibilityStrategy:
        """The topic's strategy, else its namespace's, else the broker's
        ``schemaCompatibilityStrategy``."""
        stored = self.policies.topic_value(topic, STRATEGY_POLICY)
        if isinstance(stored, str):
            try:
                return CompatibilityStrategy.parse(stored)
            except InvalidStrategyError:
                pass
        return self.namespace_strategy(topic.namespace_name) or self.default_strategy

    def validation_enforced(self, topic: TopicName) -> bool:
        """``schemaValidationEnforced`` of the topic, else its namespace, else the broker's
        ``isSchemaValidationEnforced``."""
        stored = self.policies.effective(topic, VALIDATION_ENFORCED_POLICY)
        return stored if isinstance(stored, bool) else self.config.is_schema_validation_enforced

    # --- reads ------------------------------------------------------------------------
    @staticmethod
    def _prefix(topic: TopicName) -> str:
        base = topic.partitioned_base
        return f"{SCHEMA_KEY}{base.tenant}/{base.namespace}/{base.local_name}/"

    @staticmethod
    def _next_key(topic: TopicName) -> str:
        base = topic.partitioned_base
        return f"{NEXT_VERSION_KEY}{base.tenant}/{base.namespace}/{base.local_name}"

    def versions(self, topic: TopicName) -> list[StoredSchema]:
        """Every stored version, oldest first."""
        prefix = self._prefix(topic)
        found: list[StoredSchema] = []
        for key, raw in self.policies.table.items(prefix):
            number = key[len(prefix) :]
            if not number.isdigit():
                continue
            try:
                found.append(StoredSchema.from_json(int(number), raw))
            except (ValueError, KeyError, TypeError, binascii.Error, IncompatibleSchemaError):
                continue
        return sorted(found, key=lambda s: s.version)

    def latest(self, topic: TopicName) -> StoredSchema | None:
        versions = self.versions(topic)
        return versions[-1] if versions else None

    def get(self, topic: TopicName, version: int | None = None) -> StoredSchema:
        """The version asked for (the latest when ``None``); ``SchemaNotFoundError``."""
        versions = self.versions(topic)
        if version is None:
            if versions:
                return versions[-1]
        else:
            for stored in versions:
                if stored.version == version:
                    return stored
        raise SchemaNotFoundError("Schema not found")

    def find(self, topic: TopicName, schema: SchemaInfo) -> StoredSchema | None:
        """The version holding this very schema, if any."""
        return next((s for s in self.versions(topic) if s.info.same_as(schema)), None)

    def is_compatible(self, topic: TopicName, schema: SchemaInfo) -> bool:
        """Whether ``schema`` could be registered now (or is already)."""
        if self.find(topic, schema) is not None:
            return True
        try:
            validate(schema)
            check_compatible(
                schema, [s.info for s in self.versions(topic)], self.strategy_of(topic)
            )
        except IncompatibleSchemaError:
            return False
        return True

    # --- writes -----------------------------------------------------------------------
    async def register(
        self, topic: TopicName, schema: SchemaInfo, *, auto_update: bool = True
    ) -> StoredSchema:
        """The version of ``schema``: the existing one when registered already, else a
        new version if compatible (``IncompatibleSchemaError`` otherwise). With
        ``auto_update`` off, a topic that has a schema takes no new one."""
        validate(schema)
        async with self._locks.hold(self._prefix(topic)):
            found = self.find(topic, schema)
            if found is not None:
                return found
            await self.policies.table.refresh()  # versions another broker added
            found = self.find(topic, schema)
            if found is not None:
                return found
            versions = self.versions(topic)
            if versions and not auto_update:
                raise IncompatibleSchemaError(
                    "Schema not found and schema auto updating is disabled."
                )
            check_compatible(schema, [s.info for s in versions], self.strategy_of(topic))
            stored = StoredSchema(
                self._next_version(topic, versions), schema, int(self._clock() * 1000)
            )
            await self.policies.table.put(
                f"{self._prefix(topic)}{stored.version}",
                json.dumps(stored.to_json(), sort_keys=True).encode(),
            )
            return stored

    def _next_version(self, topic: TopicName, versions: list[StoredSchema]) -> int:
        following = versions[-1].version + 1 if versions else 0
        raw = self.policies.table.get(self._next_key(topic))
        remembered = int(json.loads(raw).get("next", 0)) if raw else 0
        return max(following, remembered)

    async def delete(self, topic: TopicName) -> int | None:
        """Remove every version; the last version deleted (``None``: there was none)."""
        async with self._locks.hold(self._prefix(topic)):
            await self.policies.table.refresh()  # versions another broker added
            versions = self.versions(topic)
            if not versions:
                return None
            last = versions[-1].version
            await self.policies.table.put(
                self._next_key(topic), json.dumps({"next": last + 1}).encode()
            )
            for stored in versions:
                await self.policies.table.delete(f"{self._prefix(topic)}{stored.version}")
            return last

    # --- clients ----------------------------------------------------------------------
    async def for_producer(self, topic: TopicName, schema: SchemaInfo | None) -> bytes:
        """The ``schema_version`` a PRODUCER_SUCCESS carries (empty: no schema).

        A producer without a schema is accepted on any topic unless the topic has a
        schema and its ``schemaValidationEnforced`` (``validation_enforced``) holds. A
        schema it names is registered whatever its type, ``NONE`` too, as Pulsar does:
        the Go client's ``BytesSchema`` names ``NONE``, writes the version it gets into
        its messages and its consumers ask for that version."""
        if schema is None or schema.type in (SchemaType.BYTES, SchemaType.AUTO_CONSUME):
            if self.validation_enforced(topic) and self.latest(topic) is not None:
                raise IncompatibleSchemaError(
                    f"producers to {topic} must use a schema (isSchemaValidationEnforced)"
                )
            return b""
        auto_update = self.config.is_allow_auto_update_schema_enabled
        stored = await self.register(topic, schema, auto_update=auto_update)
        return version_bytes(stored.version)

    async def for_consumer(self, topic: TopicName, schema: SchemaInfo | None) -> None:
        """A consumer's schema: registered when the topic has none (and automatic updates
        are allowed), else it must be one of the topic's versions or compatible with
        them; a consumer without a schema is always accepted."""
        if schema is None or not schema.has_schema:
            return
        validate(schema)
        if self.find(topic, schema) is not None:
            return
        versions = self.versions(topic)
        if not versions:
            if self.config.is_allow_auto_update_schema_enabled:
                await self.register(topic, schema)
            return
        check_compatible(schema, [s.info for s in versions], self.strategy_of(topic))
