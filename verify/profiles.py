"""How big and how long a run is: a short profile for CI, a long one for ``make soak``."""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Profile:
    name: str
    minutes: float
    """Load under faults; the producers then drain and every path is read to the end."""
    copies: int
    """Topics of each kind (batched, single, partitioned, keyed, key-window, chunked,
    delayed, checkpoint)."""
    rate: float
    """Messages per second of each batched producer; the other kinds derive from it."""
    fault_every: tuple[float, float]
    """Seconds between one fault's end and the next one's start (drawn uniformly)."""
    pause_seconds: float
    """How long a SIGSTOPped broker stays frozen."""
    kafka_pause_seconds: float
    entries_per_ledger: int
    reader_case_rounds: int
    reader_case_per_round: int
    reader_case_reads: int
    spark: bool = True
    seed: int = 20261126
    faults: tuple[str, ...] = ()
    """Fault kinds to inject (their ``FaultKind`` values); empty: every kind."""
    first_faults: tuple[str, ...] = ()
    """Kinds injected first, in this order, before the others' shuffled round (a short
    run may end before every kind had its turn)."""

    def with_minutes(self, minutes: float) -> Profile:
        return replace(self, minutes=minutes)


WITHOUT_DISKS = (
    "kill-9",
    "sigstop",
    "restart",
    "unload",
    "kafka-node-kill-9",
    "kafka-sigstop",
    "kafka-rolling-restart",
    "redis-restart",
    "redis-failover",
)
"""Every fault kind but a Kafka node's full disk: its tmpfs disks would hold a long run's
data in memory; make soak fills disks in a shorter run of its own."""

SHORT = Profile(
    name="short",
    minutes=1.5,
    copies=1,
    rate=150.0,
    fault_every=(4.0, 8.0),
    pause_seconds=8.0,
    kafka_pause_seconds=3.0,
    entries_per_ledger=150,
    reader_case_rounds=4,
    reader_case_per_round=20_000,
    reader_case_reads=4,
    # Every kind but the rolling restart of the three Kafka nodes (make soak has it).
    faults=tuple(k for k in WITHOUT_DISKS if k != "kafka-rolling-restart"),
    first_faults=("redis-failover",),
)

LONG = Profile(
    name="long",
    minutes=120.0,
    copies=2,
    rate=250.0,
    fault_every=(20.0, 60.0),
    pause_seconds=25.0,
    kafka_pause_seconds=5.0,
    entries_per_ledger=4_000,
    reader_case_rounds=15,
    reader_case_per_round=80_000,
    reader_case_reads=20,
    faults=WITHOUT_DISKS,
)

PROFILES = {p.name: p for p in (SHORT, LONG)}
