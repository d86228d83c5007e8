"""What a topic answers when a subscription cannot be made, found or removed (permanent:
the same request fails again)."""

from __future__ import annotations

from dedup_broker.errors import PermanentError
from dedup_broker.storage.api import COMPACTION_CURSOR, SYSTEM_CURSOR_PREFIX, is_system_cursor


class ConsumerStillConnectedError(PermanentError):
    """Unsubscribe refused: other consumers are still attached."""


class SubscriptionNotFoundError(PermanentError):
    """No subscription of that name exists on the topic."""


class ReservedSubscriptionError(PermanentError):
    """The subscription name is reserved for the broker, or clashes with an existing one."""


class ReadCompactedNotAllowedError(PermanentError):
    """``read_compacted`` asked for on a Shared or Key_Shared subscription."""


class SubscriptionExistsError(PermanentError):
    """A subscription of that name exists already (creating it again is refused)."""


def check_not_reserved(subscription: str) -> None:
    """Clients may not name a subscription as the broker names its own cursors."""
    if is_system_cursor(subscription):
        raise ReservedSubscriptionError(
            f"subscription {subscription!r} is reserved: names starting with "
            f"{SYSTEM_CURSOR_PREFIX!r} and {COMPACTION_CURSOR!r} are the broker's own"
        )
