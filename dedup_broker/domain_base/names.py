"""Pulsar topic names: full (``persistent://tenant/ns/topic``,
``non-persistent://tenant/ns/topic``) and short forms."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from enum import StrEnum
from urllib.parse import quote, unquote

from dedup_broker.errors import InvalidTopicNameError

PARTITION_SUFFIX = "-partition-"
NAME_PART = re.compile(r"[A-Za-z0-9_=:.\-]+")
_LOCAL_NAME = re.compile(r"[^/\s][^\s]*")


class TopicDomain(StrEnum):
    """Where a topic's messages live: stored (Kafka) or only in the broker's memory."""

    PERSISTENT = "persistent"
    NON_PERSISTENT = "non-persistent"


@dataclass(frozen=True, slots=True)
class TopicName:
    tenant: str
    namespace: str
    local_name: str
    domain: TopicDomain = TopicDomain.PERSISTENT

    @classmethod
    def parse(
        cls, text: str, default_tenant: str = "public", default_namespace: str = "default"
    ) -> TopicName:
        """Accept ``topic``, ``tenant/ns/topic`` and ``{domain}://tenant/ns/topic``
        (short forms are persistent)."""
        raw = text.strip()
        if not raw:
            raise InvalidTopicNameError("topic name is empty")
        domain = TopicDomain.PERSISTENT
        if "://" in raw:
            scheme, _, raw = raw.partition("://")
            try:
                domain = TopicDomain(scheme)
            except ValueError:
                raise InvalidTopicNameError(
                    f"unknown topic domain {scheme!r} in {text!r}"
                ) from None
            parts = raw.split("/", 2)
            if len(parts) != 3:
                raise InvalidTopicNameError(
                    f"expected {domain}://tenant/namespace/topic, got {text!r}"
                )
        else:
            parts = raw.split("/", 2)
            if len(parts) == 1:
                parts = [default_tenant, default_namespace, parts[0]]
            elif len(parts) != 3:
                raise InvalidTopicNameError(
                    f"expected 'topic' or 'tenant/namespace/topic', got {text!r}"
                )
        tenant, namespace, local = parts
        for label, part in (("tenant", tenant), ("namespace", namespace)):
            if not NAME_PART.fullmatch(part):
                raise InvalidTopicNameError(f"invalid {label} {part!r} in topic {text!r}")
        if not _LOCAL_NAME.fullmatch(local) or len(local) > 1024:
            raise InvalidTopicNameError(f"invalid topic name {local!r} in {text!r}")
        # every loaded topic keeps its name: its tenant and namespace are shared strings
        return cls(sys.intern(tenant), sys.intern(namespace), local, domain)

    @property
    def is_persistent(self) -> bool:
        return self.domain is TopicDomain.PERSISTENT

    @property
    def namespace_name(self) -> str:
        return f"{self.tenant}/{self.namespace}"

    @property
    def partition_index(self) -> int:
        """The partition number of ``...-partition-N``, or -1."""
        base, sep, index = self.local_name.rpartition(PARTITION_SUFFIX)
        if sep and base and index.isdigit():
            return int(index)
        return -1

    @property
    def is_partition(self) -> bool:
        return self.partition_index >= 0

    @property
    def partitioned_base(self) -> TopicName:
        """The partitioned topic this partition belongs to (itself if not a partition)."""
        if not self.is_partition:
            return self
        base = self.local_name.rpartition(PARTITION_SUFFIX)[0]
        return TopicName(self.tenant, self.namespace, base, self.domain)

    def partition(self, index: int) -> TopicName:
        return TopicName(
            self.tenant, self.namespace, f"{self.local_name}{PARTITION_SUFFIX}{index}", self.domain
        )

    @property
    def managed_ledger_name(self) -> str:
        """Storage name, shaped like Pulsar's ``tenant/ns/persistent/topic``."""
        return f"{self.tenant}/{self.namespace}/{self.domain}/{quote(self.local_name, safe='')}"

    @classmethod
    def from_managed_ledger_name(cls, name: str) -> TopicName | None:
        """The topic a managed ledger stores; ``None`` if ``name`` is not shaped like one."""
        parts = name.split("/")
        if len(parts) != 4 or parts[2] != "persistent":
            return None
        try:
            return cls.parse(f"persistent://{parts[0]}/{parts[1]}/{unquote(parts[3])}")
        except InvalidTopicNameError:
            return None

    def __str__(self) -> str:
        return f"{self.domain}://{self.tenant}/{self.namespace}/{self.local_name}"
