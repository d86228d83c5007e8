"""Running brokers announce their admin URL in the policies table, so processes that are
not brokers (deletion workers) can find them and ask whether a ledger is still in use."""

from __future__ import annotations

import json
from collections.abc import Iterable

BROKERS_KEY = "brokers/"
"""Key prefix of the announcements in the policies table."""


def broker_key(advertised_address: str, broker_service_port: int) -> str:
    return f"{BROKERS_KEY}{advertised_address}:{broker_service_port}"


def broker_record(
    web_service_url: str, broker_id: str, listeners: dict[str, dict[str, str]] | None = None
) -> bytes:
    """The announcement: admin URL, storage broker id and the advertised listeners."""
    record = {"webServiceUrl": web_service_url, "brokerId": broker_id}
    return json.dumps({**record, "listeners": listeners or {}}).encode()


def broker_urls(entries: Iterable[tuple[str, bytes]]) -> list[str]:
    """Admin URLs of the registered brokers, from the policies table's entries."""
    urls = []
    for key, value in entries:
        if key.startswith(BROKERS_KEY):
            try:
                urls.append(str(json.loads(value)["webServiceUrl"]))
            except (ValueError, KeyError, TypeError):
                continue
    return sorted(set(urls))
