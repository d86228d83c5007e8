"""Deduplication's state machine on the in-memory storage (the real ManagedCursor on an
in-memory managed ledger), with a clock the tests move."""

from __future__ import annotations

from typing import Any

from dedup_broker.config import BrokerConfig
from dedup_broker.pip6.state import DEDUP_CURSOR, MessageDeduplication
from dedup_broker.storage import formats
from harness.client_commands import message_block
from harness.memory_ledger import MemoryLedger
from harness.memory_storage import MemoryStorage

LEDGER_NAME = "public/default/persistent/t"
FIRST_LEDGER_ID = 3

message = message_block
"""A stored message block as a producer would have sent it."""


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def new_ledger(**settings: Any) -> MemoryLedger:
    """An empty managed ledger whose first ledger is ``FIRST_LEDGER_ID``."""
    config = BrokerConfig().with_overrides(**settings)
    return MemoryStorage(config, first_ledger_id=FIRST_LEDGER_ID).ledger(LEDGER_NAME)


def make_dedup(
    ledger: MemoryLedger | None = None,
    clock: FakeClock | None = None,
    **settings: Any,
) -> tuple[MessageDeduplication, MemoryLedger, FakeClock]:
    ledger = ledger or new_ledger()
    clock = clock or FakeClock()
    config = BrokerConfig().with_overrides(**settings)
    return MessageDeduplication(config, ledger, clock=clock), ledger, clock  # type: ignore[arg-type]


def snapshots(ledger: MemoryLedger) -> list[formats.CursorRecord]:
    """The snapshots stored on the dedup cursor, oldest first (its creation, at no entry,
    is not one)."""
    return [r for r in ledger.cursor_writes(DEDUP_CURSOR) if r.mark_delete.entry_id >= 0]
