"""When to close the current ledger and start a new one (Pulsar's rules)."""

from __future__ import annotations

from dataclasses import dataclass

from dedup_broker.config import BrokerConfig


@dataclass(frozen=True, slots=True)
class RolloverPolicy:
    """Limits of one ledger: a full ledger rolls over once it is old enough, and an old
    ledger rolls over once it holds anything, so ledgers can be trimmed in time."""

    max_entries: int
    max_size_bytes: int
    min_age_ms: float
    max_age_ms: float
    inactive_ms: float = 0
    """``managedLedgerInactiveLedgerRolloverTimeSeconds`` in ms; 0: off."""

    @classmethod
    def from_config(cls, config: BrokerConfig) -> RolloverPolicy:
        return cls(
            max_entries=config.managed_ledger_max_entries_per_ledger,
            max_size_bytes=config.managed_ledger_max_size_per_ledger_mbytes * 1024 * 1024,
            min_age_ms=config.managed_ledger_min_ledger_rollover_time_minutes * 60_000,
            max_age_ms=config.managed_ledger_max_ledger_rollover_time_minutes * 60_000,
            inactive_ms=config.managed_ledger_inactive_ledger_rollover_time_seconds * 1000,
        )

    @property
    def lazy(self) -> bool:
        """Ledgers are created by the append that needs one, not ahead of it: an idle
        ledger closes and nothing replaces it until the next append."""
        return self.inactive_ms > 0

    def inactive(self, entries: int, idle_ms: float) -> bool:
        """Close a ledger holding entries that nothing was appended to for a while."""
        return self.lazy and entries > 0 and idle_ms >= self.inactive_ms

    def is_full(self, entries: int, size: int) -> bool:
        return entries >= self.max_entries or size >= self.max_size_bytes

    def should_rollover(self, entries: int, size: int, age_ms: float) -> bool:
        if self.is_full(entries, size) and age_ms >= self.min_age_ms:
            return True
        return age_ms >= self.max_age_ms and entries > 0

    def next_check_in_ms(self, age_ms: float) -> float | None:
        """How long until age alone may change the answer (None: it never will again)."""
        for threshold in sorted((self.min_age_ms, self.max_age_ms)):
            if age_ms < threshold:
                return threshold - age_ms
        return None
