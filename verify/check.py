"""What a reading path delivered, against what the producers had acknowledged.

Pure functions over plain values, so that a run's kept history files can be checked again
(``python -m verify check RUN_DIR``) with exactly the rules the run used.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum


class Mode(Enum):
    """What a path promises."""

    EXACTLY_ONCE = "exactly-once"
    """Each acknowledged message once (readers, results stored with their positions)."""
    AT_LEAST_ONCE = "at-least-once"
    """A live subscription: repeats during the run are redeliveries (counted, allowed);
    whatever is delivered again once its acknowledgements settled is a duplicate."""
    LATEST_PER_KEY = "latest-per-key"
    """A compacted view or a TableView: the last acknowledged value of every key."""


@dataclass(frozen=True, slots=True)
class Acked:
    """One acknowledged message: its id (unique in its topic) and its key ('' if none)."""

    id: int
    key: str = ""


@dataclass(frozen=True, slots=True)
class Delivery:
    """One message as a path delivered it: which of the path's consumers got it, and the
    group its order is promised within ('' for the whole topic)."""

    id: int
    consumer: int = 0
    group: str = ""


@dataclass(frozen=True, slots=True)
class PathSpec:
    path: str
    topic: str
    mode: Mode
    ordered: bool
    """Order promised within each (consumer, group)."""

    def to_json(self) -> dict[str, object]:
        return {
            "path": self.path,
            "topic": self.topic,
            "mode": self.mode.value,
            "ordered": self.ordered,
        }

    @classmethod
    def of_json(cls, data: Mapping[str, object]) -> PathSpec:
        return cls(str(data["path"]), str(data["topic"]), Mode(data["mode"]), bool(data["ordered"]))


@dataclass(slots=True)
class PathResult:
    path: str
    topic: str
    acknowledged: int
    """Messages (or keys, for a latest-per-key path) the path had to deliver."""
    lost: int = 0
    duplicated: int = 0
    out_of_order: int = 0
    unexpected: int = 0
    """Ids no producer ever sent."""
    redelivered: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.out_of_order or self.unexpected)

    def line(self) -> str:
        status = "ok  " if self.ok else "FAIL"
        extra = f"  redelivered {self.redelivered:,}" if self.redelivered else ""
        notes = f"  ({'; '.join(self.notes)})" if self.notes else ""
        return (
            f"{status} {self.path:<22} {self.topic:<18} acknowledged {self.acknowledged:>10,}"
            f"  lost {self.lost:>6,}  duplicated {self.duplicated:>6,}"
            f"  out of order {self.out_of_order:>6,}"
            + (f"  unexpected {self.unexpected:,}" if self.unexpected else "")
            + extra
            + notes
        )


def check_path(
    spec: PathSpec,
    acked: Sequence[Acked],
    sent_ids: range,
    deliveries: Sequence[Delivery],
    after_settle: Sequence[Delivery] = (),
    dropped_by_client: Collection[int] = frozenset(),
) -> PathResult:
    """The verdict on one path. ``sent_ids``: every id a producer tried (acknowledged or
    not); ``after_settle``: what a consumer of the same subscription received once every
    acknowledgement had settled (at-least-once paths only); ``dropped_by_client``: chunked
    messages the client itself dropped on a redelivery (its log says so), which come late
    through no fault of the broker."""
    if spec.mode is Mode.LATEST_PER_KEY:
        return _check_latest(spec, acked, sent_ids, deliveries)
    result = PathResult(spec.path, spec.topic, len(acked))
    counts = Counter(d.id for d in deliveries)
    # A chunked message the client dropped that no redelivery brought back during the
    # run stays unacknowledged on the broker: it reaches the next consumer, once.
    settled = Counter(d.id for d in after_settle)
    kept_back = {i for i in dropped_by_client if i not in counts and settled[i] == 1}
    result.lost = sum(1 for a in acked if a.id not in counts and a.id not in kept_back)
    result.unexpected = sum(1 for i in counts if i not in sent_ids)
    repeats = sum(c - 1 for c in counts.values() if c > 1)
    if spec.mode is Mode.EXACTLY_ONCE:
        result.duplicated = repeats
    else:
        result.redelivered = repeats
        result.duplicated = len(after_settle) - len(kept_back)
        if kept_back:
            result.notes.append(
                f"{len(kept_back)} dropped by the client, received after the run once"
            )
    if spec.ordered:
        result.out_of_order = out_of_order(deliveries, dropped_by_client)
        excused = out_of_order(deliveries) - result.out_of_order
        if excused:
            result.notes.append(
                f"{excused} late after the client dropped their partly received chunks"
            )
    received = sum(1 for i in counts if i in sent_ids) + len(kept_back)
    unacked = received - (len(acked) - result.lost)
    if unacked > 0:
        result.notes.append(f"{unacked:,} stored without an acknowledgement")
    return result


def out_of_order(deliveries: Iterable[Delivery], excused: Collection[int] = frozenset()) -> int:
    """Messages that reached a consumer after a later one of their group had: within each
    (consumer, group), ids a consumer had not seen before must rise (redeliveries of ids it
    has seen are not counted, nor are ``excused`` ids)."""
    seen: dict[tuple[int, str], set[int]] = {}
    highest: dict[tuple[int, str], int] = {}
    late = 0
    for d in deliveries:
        where = (d.consumer, d.group)
        ids = seen.setdefault(where, set())
        if d.id in ids:
            continue
        ids.add(d.id)
        if d.id < highest.get(where, -1):
            late += d.id not in excused
        else:
            highest[where] = d.id
    return late


def _check_latest(
    spec: PathSpec, acked: Sequence[Acked], sent_ids: range, deliveries: Sequence[Delivery]
) -> PathResult:
    """Every key's last delivered value is its last acknowledged one, values of a key
    arrive rising, and none twice."""
    last: dict[str, int] = {}
    for a in acked:
        last[a.key] = max(a.id, last.get(a.key, -1))
    result = PathResult(spec.path, spec.topic, len(last))
    delivered_last: dict[str, int] = {}
    counts = Counter(d.id for d in deliveries)
    for d in deliveries:
        delivered_last[d.group] = d.id
    result.lost = sum(1 for key, i in last.items() if delivered_last.get(key) != i)
    result.duplicated = sum(c - 1 for c in counts.values() if c > 1)
    result.unexpected = sum(1 for i in counts if i not in sent_ids)
    if spec.ordered:
        result.out_of_order = out_of_order(deliveries)
    return result


@dataclass(frozen=True, slots=True)
class Fault:
    kind: str
    target: str
    at: float
    """Seconds since the run started."""
    ended: float


def failover_gaps(faults: Sequence[Fault], ack_times: Mapping[str, Sequence[float]]) -> list[float]:
    """Per fault: seconds from its start until every producer acknowledged again (the
    slowest producer's first acknowledgement after it). ``ack_times`` per producer, in
    order. Faults after which some producer never acknowledged again are left out."""
    gaps = []
    for fault in faults:
        firsts = []
        for times in ack_times.values():
            index = bisect.bisect_right(times, fault.at)
            if index == len(times):
                break
            firsts.append(times[index])
        else:
            if firsts:
                gaps.append(max(firsts) - fault.at)
    return gaps


def percentile(values: Sequence[float], fraction: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]
