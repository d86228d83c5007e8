"""Wire values of ledger statuses and types; cluster topic names and the broker registry."""

from __future__ import annotations

import json

from dedup_broker.storage import formats
from dedup_broker.storage.formats import broker_key, broker_record, broker_urls
from dedup_broker.storage.values import LedgerStatus, LedgerType, Position


def test_statuses_and_types_keep_their_wire_strings() -> None:
    assert [s.value for s in LedgerStatus] == ["in-use", "pending", "deletable"]
    assert [t.value for t in LedgerType] == ["LEDGER", "OFFLOAD_LEDGER"]
    assert json.dumps({"status": LedgerStatus.IN_USE}) == '{"status": "in-use"}'
    assert LedgerStatus("deletable") is LedgerStatus.DELETABLE
    assert LedgerType("OFFLOAD_LEDGER") is LedgerType.OFFLOAD_LEDGER


def test_ledger_topic_names_round_trip_and_foreign_names_are_refused() -> None:
    assert formats.ledger_topic("c1", 42) == "c1.ledger.42"
    assert formats.ledger_id_of_topic("c1", "c1.ledger.42") == 42
    assert formats.ledger_id_of_topic("c1", "c1.ledger.0") == 0
    for foreign in (
        "c2.ledger.42",
        "c1.ledger-ids",
        "c1.ledger.",
        "c1.ledger.042",
        "c1.ledger.-1",
        "c1.ledger.4x",
        "c1.ledger.٤٢",  # digits, but not ASCII ones
        "c1.managed-ledgers",
        "c1x.ledger.42",
    ):
        assert formats.ledger_id_of_topic("c1", foreign) is None, foreign
    # A cluster name with dots is matched whole, not as a pattern.
    assert formats.ledger_id_of_topic("a.b", "a.b.ledger.7") == 7
    assert formats.ledger_id_of_topic("a.b", "axb.ledger.7") is None


def test_internal_topic_names() -> None:
    assert formats.ledger_ids_topic("c") == "c.ledger-ids"
    assert formats.managed_ledgers_topic("c") == "c.managed-ledgers"
    assert formats.cursors_topic("c") == "c.cursors"
    assert formats.policies_topic("c") == "c.policies"


def test_broker_registry_entries() -> None:
    entries = [
        (broker_key("b2", 6650), broker_record("http://b2:8080", "b2:6650/7")),
        (broker_key("b1", 6650), broker_record("http://b1:8080", "b1:6650/3")),
        (broker_key("b1", 6651), broker_record("http://b1:8080", "b1:6651/4")),
        ("brokers/broken", b"{not json"),
        ("brokers/no-url", b'{"brokerId": "x"}'),
        ("namespaces/public/default", b'{"webServiceUrl": "http://not-a-broker"}'),
    ]
    assert broker_key("b1", 6650) == "brokers/b1:6650"
    assert broker_urls(entries) == ["http://b1:8080", "http://b2:8080"]


def test_positions_read_back_as_written() -> None:
    for position in (Position(0, -1), Position(7, 0), Position(2**40, 123_456)):
        assert Position.parse(str(position)) == position
