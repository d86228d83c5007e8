"""What a subscription sends again: how often each position went out, and the replay set
(positions to send again before anything new: a Shared or Key_Shared consumer left,
nacked or asked to redeliver, a delayed message came due)."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from dedup_broker.errors import BrokerError
from dedup_broker.storage.api import Entry, ManagedCursor, ManagedLedger, Position

log = logging.getLogger(__name__)


_NONE_COUNTED: dict[Position, int] = {}
"""Shared by every subscription that never sent anything again (never written to)."""


class Redeliveries:
    """Empty until the first redelivery: most subscriptions never send anything again."""

    __slots__ = ("_replay", "counts")

    def __init__(self) -> None:
        self.counts: dict[Position, int] = _NONE_COUNTED
        self._replay: set[Position] | None = None

    @property
    def replay(self) -> set[Position]:
        if self._replay is None:
            self._replay = set()
        return self._replay

    def waiting(self) -> bool:
        """Whether positions wait to be sent again."""
        return bool(self._replay)

    def count(self, positions: Iterable[Position]) -> None:
        """These positions go out once more."""
        for position in positions:
            if self.counts is _NONE_COUNTED:
                self.counts = {}
            self.counts[position] = self.counts.get(position, 0) + 1

    def acknowledged(self, position: Position) -> None:
        self.counts.pop(position, None)
        if self._replay:
            self._replay.discard(position)

    def acknowledged_up_to(self, position: Position) -> None:
        for p in [p for p in self.counts if p <= position]:
            del self.counts[p]
        if self._replay:
            self._replay = {p for p in self._replay if p > position}

    def clear(self) -> None:
        if self._replay:
            self._replay.clear()
        self.counts = _NONE_COUNTED

    async def read(
        self, budget: int, cursor: ManagedCursor, ledger: ManagedLedger, subscription: str
    ) -> list[Entry]:
        """The first ``budget`` positions of the replay set that are still unacknowledged,
        in position order; a retriable read failure puts its position back and raises."""
        positions = sorted(self.replay)[:budget]
        entries = []
        for position in positions:
            self.replay.discard(position)
            if cursor.is_acknowledged(position):
                continue
            try:
                entries.append(await ledger.read_entry(position))
            except BrokerError as exc:
                if exc.retriable:
                    self.replay.add(position)
                    raise
                log.warning("dropping redelivery of %s on %s: %s", position, subscription, exc)
        return entries
