"""Pulsar's ledger rollover rules."""

from __future__ import annotations

import pytest

from dedup_broker.config import BrokerConfig
from dedup_broker.errors import ConfigError
from dedup_broker.storage.ledger.rollover import RolloverPolicy

MIN = 60_000.0


def policy() -> RolloverPolicy:
    return RolloverPolicy(
        max_entries=100, max_size_bytes=1000, min_age_ms=10 * MIN, max_age_ms=240 * MIN
    )


def test_full_ledger_waits_for_min_age() -> None:
    rules = policy()
    assert not rules.should_rollover(100, 10, 9 * MIN)
    assert rules.should_rollover(100, 10, 10 * MIN)
    assert rules.should_rollover(5, 1000, 10 * MIN)
    assert not rules.should_rollover(99, 999, 100 * MIN)


def test_old_ledger_rolls_over_only_with_entries() -> None:
    rules = policy()
    assert rules.should_rollover(1, 1, 240 * MIN)
    assert not rules.should_rollover(0, 0, 1000 * MIN)


def test_next_check() -> None:
    rules = policy()
    assert rules.next_check_in_ms(0) == 10 * MIN
    assert rules.next_check_in_ms(11 * MIN) == 229 * MIN
    assert rules.next_check_in_ms(241 * MIN) is None


def test_from_config_units() -> None:
    config = BrokerConfig(
        managed_ledger_max_entries_per_ledger=7,
        managed_ledger_max_size_per_ledger_mbytes=2,
        managed_ledger_min_ledger_rollover_time_minutes=0.5,
        managed_ledger_max_ledger_rollover_time_minutes=3,
    )
    assert RolloverPolicy.from_config(config) == RolloverPolicy(7, 2 * 1024 * 1024, 30_000, 180_000)


def test_inactive_ledgers_close_only_when_asked_for_and_holding_entries() -> None:
    off = policy()
    assert not off.lazy and not off.inactive(5, 10**9)
    lazy = RolloverPolicy(100, 1000, 10 * MIN, 240 * MIN, inactive_ms=60_000)
    assert lazy.lazy
    assert not lazy.inactive(5, 59_999)
    assert lazy.inactive(5, 60_000)
    assert not lazy.inactive(0, 10**9)  # an empty ledger: nothing to close for


def test_inactive_rollover_from_config_and_refused_when_negative() -> None:
    config = BrokerConfig(managed_ledger_inactive_ledger_rollover_time_seconds=90)
    assert RolloverPolicy.from_config(config).inactive_ms == 90_000
    with pytest.raises(ConfigError, match="managedLedgerInactiveLedgerRolloverTimeSeconds"):
        BrokerConfig.load(
            environ={}, overrides={"managedLedgerInactiveLedgerRolloverTimeSeconds": "-1"}
        )
