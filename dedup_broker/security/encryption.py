"""A namespace's ``encryption_required`` policy (``pulsar-admin namespaces
set-encryption-required``): its producers must encrypt (the clients announce it when they
attach; a producer that does not is refused with ``MetadataError``, as on Pulsar)."""

from __future__ import annotations

from dedup_broker.domain_base.names import TopicName
from dedup_broker.domain_base.policies import Policies
from dedup_broker.errors import PermanentError

ENCRYPTION_REQUIRED = "encryption_required"


class EncryptionRequiredError(PermanentError):
    """A producer without encryption on a namespace that requires it."""


def encryption_required(policies: Policies, namespace: str) -> bool:
    return bool(policies.namespace_value(namespace, ENCRYPTION_REQUIRED))


def check_producer_encryption(policies: Policies, topic: TopicName, encrypted: bool) -> None:
    if not encrypted and encryption_required(policies, topic.namespace_name):
        raise EncryptionRequiredError(f"Encryption is required in {topic}")
