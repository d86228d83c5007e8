"""Cursors the broker keeps for itself: never shown or served as subscriptions."""

from __future__ import annotations

SYSTEM_CURSOR_PREFIX = "pulsar."
"""The broker's own cursors (``pulsar.dedup``)."""

COMPACTION_CURSOR = "__compaction"
"""Pulsar's name for the compaction subscription; its mark-delete is the horizon."""


def is_system_cursor(name: str) -> bool:
    return name.startswith(SYSTEM_CURSOR_PREFIX) or name == COMPACTION_CURSOR
