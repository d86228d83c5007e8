"""Held positions, released in the order they fall due."""

from __future__ import annotations

import asyncio

from dedup_broker.domain.delayed_delivery import DelayedDelivery
from dedup_broker.protocol import pulsar_api_pb2 as pb
from dedup_broker.protocol.framing import encode_message
from dedup_broker.storage.values import Entry, Position


def entry(entry_id: int, deliver_at_ms: int | None) -> Entry:
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=entry_id, publish_time=1)
    if deliver_at_ms is not None:
        metadata.deliver_at_time = deliver_at_ms
    return Entry(Position(0, entry_id), encode_message(metadata, b"x"), 1)


async def test_entries_wait_until_due_and_come_back_in_time_order() -> None:
    now = [1000.0]
    released: list[list[Position]] = []
    delayed = DelayedDelivery(released.append, clock=lambda: now[0])
    assert not delayed.hold(entry(0, None))
    assert not delayed.hold(entry(1, 999_000))  # already due
    assert delayed.hold(entry(2, 1_000_050))
    assert delayed.hold(entry(3, 1_000_020))
    assert delayed.hold(entry(3, 1_000_020))  # read again while held: still held, once
    assert len(delayed) == 2
    now[0] = 1000.03
    await asyncio.sleep(0.06)
    assert released == [[Position(0, 3)]]
    now[0] = 1000.06
    await asyncio.sleep(0.06)
    assert released == [[Position(0, 3)], [Position(0, 2)]]
    assert len(delayed) == 0


async def test_a_seek_forgets_what_was_held() -> None:
    released: list[list[Position]] = []
    delayed = DelayedDelivery(released.append, clock=lambda: 1000.0)
    assert delayed.hold(entry(5, 1_000_010))
    delayed.clear()
    await asyncio.sleep(0.05)
    assert released == []
    assert len(delayed) == 0
