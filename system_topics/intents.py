"""The ``PendingDeleteLedgerInfo`` intent as a Python value, and its encoding.

Protobuf stays in this file; everything else handles :class:`DeletionIntent`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from google.protobuf.message import DecodeError

from dedup_broker.errors import PermanentError
from dedup_broker.storage.api import LedgerType, uid_from_longs, uid_to_longs
from system_topics import ledger_deletion_pb2 as pb

COMPONENTS = ("MANAGED_LEDGER", "MANAGED_CURSOR", "SCHEMA_STORAGE")


class CopyKind(enum.StrEnum):
    """The ``type`` label of the deletion metrics: which copy an intent deletes."""

    LEDGER = "ledger"
    OFFLOAD = "offload"

    @classmethod
    def of(cls, ledger_type: LedgerType) -> CopyKind:
        return cls.OFFLOAD if ledger_type is LedgerType.OFFLOAD_LEDGER else cls.LEDGER


class MalformedIntentError(PermanentError):
    """A record of the deletion topic is not a valid ``PendingDeleteLedgerInfo``."""


@dataclass(frozen=True, slots=True)
class DeletionIntent:
    """Delete one copy (Kafka or tiered storage) of one ledger."""

    topic_name: str
    """The managed ledger the ledger belonged to."""
    ledger_id: int
    component: str = "MANAGED_LEDGER"
    ledger_type: LedgerType = LedgerType.LEDGER
    cursor_name: str = ""
    schema_id: str = ""
    offload: dict[str, str] = field(default_factory=dict)
    """Offload driver name (key ``driver``), its properties, and ``uid`` for OFFLOAD_LEDGER."""


def encode_intent(intent: DeletionIntent) -> bytes:
    msg = pb.PendingDeleteLedgerInfo(
        topicName=intent.topic_name,
        ledgerComponent=intent.component,
        ledgerType=intent.ledger_type.value,
        ledgerId=intent.ledger_id,
    )
    if intent.cursor_name:
        msg.cursorName = intent.cursor_name
    if intent.schema_id:
        msg.schemaId = intent.schema_id
    if intent.offload:
        context = msg.offloadContext
        props = dict(intent.offload)
        try:
            # Pulsar's shape: the uid as two 64-bit halves; anything else stays a property.
            context.uidMsb, context.uidLsb = uid_to_longs(props["uid"])
            del props["uid"]
        except (KeyError, ValueError):
            pass
        context.complete = True
        context.driverMetadata.name = props.pop("driver", "")
        for key, value in sorted(props.items()):
            context.driverMetadata.properties.add(key=key, value=value)
    return msg.SerializeToString()


def decode_intent(data: bytes | None) -> DeletionIntent:
    """The intent in ``data``; MalformedIntentError if it is not one."""
    if not data:
        raise MalformedIntentError("empty record")
    try:
        msg = pb.PendingDeleteLedgerInfo.FromString(data)
    except (DecodeError, ValueError) as exc:
        raise MalformedIntentError(f"not a PendingDeleteLedgerInfo: {exc}") from None
    if not msg.IsInitialized():
        raise MalformedIntentError("required fields are missing")
    try:
        component = pb.LedgerComponent.Name(msg.ledgerComponent)
        ledger_type = LedgerType(pb.LedgerType.Name(msg.ledgerType))
    except ValueError as exc:
        raise MalformedIntentError(str(exc)) from None
    offload: dict[str, str] = {}
    if msg.HasField("offloadContext"):
        context = msg.offloadContext
        driver = context.driverMetadata
        offload = {kv.key: kv.value for kv in driver.properties}
        offload["driver"] = driver.name
        if context.HasField("uidMsb") and context.HasField("uidLsb"):
            offload["uid"] = uid_from_longs(context.uidMsb, context.uidLsb)
    return DeletionIntent(
        topic_name=msg.topicName,
        ledger_id=msg.ledgerId,
        component=component,
        ledger_type=ledger_type,
        cursor_name=msg.cursorName,
        schema_id=msg.schemaId,
        offload=offload,
    )
