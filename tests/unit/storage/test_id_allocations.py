"""The allocation index answers each open from one pass over the ids topic."""

from __future__ import annotations

import asyncio

from dedup_broker.storage import formats
from dedup_broker.storage.kafka.reader import ValuesVisitor
from dedup_broker.storage.ledger.id_allocations import AllocationIndex

IDS = "c.ledger-ids"


class _IdsTopic:
    """The ids topic: record ``i`` is the allocation of ledger id ``i``."""

    def __init__(self) -> None:
        self.values: list[bytes] = []
        self.records_read = 0

    def allocate(self, purpose: str) -> int:
        self.values.append(formats.encode_ledger_id_allocation("broker-1", 0, purpose))
        return len(self.values) - 1

    async def high_watermark(self, topic: str, partition: int = 0) -> int:
        assert topic == IDS
        return len(self.values)

    async def scan(
        self, topic: str, start: int, end: int, visit: ValuesVisitor, partition: int = 0
    ) -> int:
        await asyncio.sleep(0)
        values = self.values[start:end]
        self.records_read += len(values)
        visit(start, values)
        return start + len(values)


def _index(topic: _IdsTopic, capacity: int = 100_000) -> AllocationIndex:
    return AllocationIndex(IDS, topic, topic, capacity)


def test_ids_of_the_name_after_its_last_listed_ledger() -> None:
    topic = _IdsTopic()
    a0, _b0, a1, a2 = (topic.allocate(n) for n in ("a", "b", "a", "a"))
    index = _index(topic)
    assert asyncio.run(index.allocated_to("a", a0)) == [a1, a2]
    assert asyncio.run(index.allocated_to("b", 3)) == []
    assert asyncio.run(index.allocated_to("unknown", -1)) == []


def test_later_allocations_are_found_and_each_record_is_read_once() -> None:
    topic = _IdsTopic()
    index = _index(topic)

    async def reload_every_topic(names: list[str]) -> None:
        for name in names:
            listed = topic.allocate(name)
            assert await index.allocated_to(name, listed) == []

    names = [f"t{i}" for i in range(300)]
    asyncio.run(reload_every_topic(names))
    asyncio.run(reload_every_topic(names))  # a second load of all: ids after the first
    assert topic.records_read == 600
    orphan = topic.allocate("t7")
    assert asyncio.run(index.allocated_to("t7", orphan - 1)) == [orphan]


def test_ids_at_or_below_the_last_listed_one_are_forgotten() -> None:
    topic = _IdsTopic()
    first, second = topic.allocate("a"), topic.allocate("a")
    index = _index(topic)
    assert asyncio.run(index.allocated_to("a", -1)) == [first, second]
    assert asyncio.run(index.allocated_to("a", second)) == []
    assert asyncio.run(index.allocated_to("a", -1)) == []  # forgotten, not read again


def test_questions_asked_together_share_one_read() -> None:
    topic = _IdsTopic()
    for i in range(1000):
        topic.allocate(f"t{i % 100}")
    index = _index(topic)

    async def together() -> list[list[int]]:
        return await asyncio.gather(*(index.allocated_to(f"t{i}", -1) for i in range(100)))

    answers = asyncio.run(together())
    assert answers == [list(range(i, 1000, 100)) for i in range(100)]
    assert topic.records_read == 1000


def test_a_full_window_forgets_the_oldest_and_reads_them_from_the_topic_when_asked() -> None:
    topic = _IdsTopic()
    index = _index(topic, capacity=50)
    old = [topic.allocate("old") for _ in range(3)]
    for i in range(200):
        topic.allocate(f"t{i}")
    assert asyncio.run(index.allocated_to("t199", 201)) == [202]
    assert topic.records_read == 50  # the first question reads the window only
    late = topic.allocate("old")
    # "old" asked about later: its ids before the window come from the topic itself.
    assert asyncio.run(index.allocated_to("old", old[0])) == [*old[1:], late]
    for i in range(100):
        topic.allocate(f"u{i}")
    assert asyncio.run(index.allocated_to("u0", -1)) == [204]
    assert asyncio.run(index.allocated_to("old", -1)) == [*old, late]
