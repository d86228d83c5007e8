"""The intent record: round trip, field numbers of PIP-186, malformed input."""

from __future__ import annotations

import pytest

from dedup_broker.storage.values import LedgerType
from system_topics import ledger_deletion_pb2 as pb
from system_topics.intents import (
    CopyKind,
    DeletionIntent,
    MalformedIntentError,
    decode_intent,
    encode_intent,
)

OFFLOAD_LEDGER = LedgerType.OFFLOAD_LEDGER


def test_round_trip_keeps_every_field() -> None:
    intents = [
        DeletionIntent("public/default/persistent/t", 7),
        DeletionIntent("ml", 9, component="MANAGED_CURSOR", cursor_name="sub"),
        DeletionIntent("ml", 10, component="SCHEMA_STORAGE", schema_id="s1"),
        DeletionIntent(
            "ml", 11, ledger_type=OFFLOAD_LEDGER, offload={"driver": "filesystem", "uid": "u"}
        ),
        DeletionIntent(
            "ml",
            12,
            ledger_type=OFFLOAD_LEDGER,
            offload={"driver": "filesystem", "uid": "9f0c2a8e-5b1d-4c3e-a7f6-0123456789ab"},
        ),
    ]
    for intent in intents:
        assert decode_intent(encode_intent(intent)) == intent


def test_field_numbers_follow_pip_186() -> None:
    fields = {f.name: f.number for f in pb.PendingDeleteLedgerInfo.DESCRIPTOR.fields}
    assert fields == {
        "topicName": 1,
        "ledgerComponent": 2,
        "cursorName": 3,
        "schemaId": 4,
        "ledgerType": 5,
        "ledgerId": 6,
        "offloadContext": 7,
    }
    assert pb.LedgerType.Value("OFFLOAD_LEDGER") == 1
    assert pb.LedgerComponent.Value("SCHEMA_STORAGE") == 2


@pytest.mark.parametrize("data", [None, b"", b"\xff\xff\xff", b"garbage that is not protobuf"])
def test_malformed_records_are_refused(data: bytes | None) -> None:
    with pytest.raises(MalformedIntentError):
        decode_intent(data)


def test_missing_required_fields_are_refused() -> None:
    partial = pb.PendingDeleteLedgerInfo(topicName="x").SerializePartialToString()
    with pytest.raises(MalformedIntentError):
        decode_intent(partial)


def test_offload_uid_is_stored_as_pulsar_does() -> None:
    uid = "ff0c2a8e-5b1d-4c3e-a7f6-0123456789ab"
    data = encode_intent(
        DeletionIntent("ml", 3, ledger_type=OFFLOAD_LEDGER, offload={"driver": "fs", "uid": uid})
    )
    context = pb.PendingDeleteLedgerInfo.FromString(data).offloadContext
    assert context.uidMsb < 0  # the high bit is set: a signed 64-bit half
    assert context.complete and context.driverMetadata.name == "fs"
    assert not context.driverMetadata.properties


def test_decoded_ledger_types_are_the_storage_enum() -> None:
    for ledger_type, kind in (
        (LedgerType.LEDGER, CopyKind.LEDGER),
        (LedgerType.OFFLOAD_LEDGER, CopyKind.OFFLOAD),
    ):
        decoded = decode_intent(encode_intent(DeletionIntent("ml", 1, ledger_type=ledger_type)))
        assert decoded.ledger_type is ledger_type
        assert CopyKind.of(decoded.ledger_type) is kind
    assert [t.value for t in LedgerType] == ["LEDGER", "OFFLOAD_LEDGER"]
