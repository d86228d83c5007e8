"""Objects every loaded topic holds have no instance dictionary: an idle topic's memory
is the sum of many small objects (docs/benchmarks.md, "What the memory is")."""

from __future__ import annotations

import pytest

from dedup_broker.compaction.topic import TopicCompaction
from dedup_broker.domain.redeliveries import Redeliveries
from dedup_broker.domain.send_order import WriteEnds
from dedup_broker.domain.subscription import Subscription
from dedup_broker.domain.topic import Topic
from dedup_broker.domain.write_stats import WriteStats
from dedup_broker.key_dedup.topic import TopicKeyDedup
from dedup_broker.lazy import LazyDeque, LazyEvent, LazyLock
from dedup_broker.pip6.activity import ProducerActivity
from dedup_broker.pip6.marks import SequenceMarks
from dedup_broker.pip6.snapshot_task import SnapshotTask
from dedup_broker.pip6.state import MessageDeduplication
from dedup_broker.pip6.topic_dedup import TopicDeduplication
from dedup_broker.storage.cursor.cursor import ManagedCursorImpl
from dedup_broker.storage.cursor.range_set import PositionRangeSet
from dedup_broker.storage.cursor.registry import CursorRegistry
from dedup_broker.storage.cursor.writer import CursorWriter
from dedup_broker.storage.ledger.appends import AppendPipeline
from dedup_broker.storage.ledger.coalesced import CoalescedJob
from dedup_broker.storage.ledger.confirmed import ConfirmedLedgers
from dedup_broker.storage.ledger.kafka_ledger import KafkaLedgerWriter
from dedup_broker.storage.ledger.ledger_list import LedgerList
from dedup_broker.storage.ledger.managed_ledger import ManagedLedgerImpl
from dedup_broker.storage.ledger.offloads import LedgerOffloads
from dedup_broker.storage.ledger.recovery import WriteRecovery
from dedup_broker.storage.ledger.rolling import LedgerRollover
from dedup_broker.storage.ledger.trimmer import LedgerTrimmer

PER_TOPIC = [
    AppendPipeline,
    CoalescedJob,
    ConfirmedLedgers,
    CursorRegistry,
    CursorWriter,
    KafkaLedgerWriter,
    LedgerList,
    LedgerOffloads,
    LedgerRollover,
    LedgerTrimmer,
    LazyDeque,
    LazyEvent,
    LazyLock,
    ManagedCursorImpl,
    ManagedLedgerImpl,
    MessageDeduplication,
    PositionRangeSet,
    ProducerActivity,
    SequenceMarks,
    Redeliveries,
    SnapshotTask,
    Subscription,
    TopicCompaction,
    TopicDeduplication,
    TopicKeyDedup,
    Topic,
    WriteRecovery,
    WriteEnds,
    WriteStats,
]


@pytest.mark.parametrize("cls", PER_TOPIC, ids=lambda cls: cls.__name__)
def test_instances_have_no_dictionary(cls: type) -> None:
    assert cls.__dictoffset__ == 0, f"{cls.__name__} instances carry a __dict__"
