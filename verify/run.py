"""One run of the checker: servers, load, faults, live paths; then the drain, the final
paths, the reader case, and the verdict from the history files."""

from __future__ import annotations

import json
import logging
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from verify import final
from verify.check import Mode, PathResult, PathSpec, failover_gaps, percentile
from verify.effectively_once import EffectivelyOncePath
from verify.environment import Admin, Servers, pulsar_client
from verify.faults import Faults
from verify.forensics import describe_losses
from verify.history import (
    History,
    load_acked,
    load_deliveries,
    load_faults,
    load_samples,
    recheck,
    send_errors_seen,
)
from verify.live import LivePath, TableViewPath, live_paths
from verify.load import PARTITIONS, Kind, Load, Topic, last_per_key
from verify.profiles import Profile
from verify.reader_case import run_reader_case

log = logging.getLogger(__name__)

DRAIN_SECONDS = 300.0
QUIET_SECONDS = 10.0
"""After the faults: how long a live path must receive nothing more before it stops."""
KEY_WINDOW = "30m"
EFFECTIVELY_ONCE_KILL_EVERY = 20.0


@dataclass
class Outcome:
    results: list[PathResult]
    problems: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems and all(r.ok for r in self.results)


def topics_of(profile: Profile, run_id: str) -> list[Topic]:
    return [
        Topic(
            f"{kind.value}-{copy}",
            f"persistent://public/default/v{run_id}-{kind.value}-{copy}",
            kind,
        )
        for kind in Kind
        for copy in range(profile.copies)
    ]


def run(
    profile: Profile, run_dir: Path, *, cluster: bool = True, reader_case: bool = True
) -> Outcome:
    """The cluster run and the reader case (either may be left out), then the verdict."""
    history = History(run_dir)
    servers = Servers(run_dir, profile, brokers=3 if cluster else 0)
    problems: list[str] = []
    facts: dict[str, object] = {"profile": profile.name, "minutes": profile.minutes}
    try:
        servers.start()
        if cluster:
            _cluster_run(profile, servers, history, problems, facts)
        if reader_case:
            log.info(
                "reader case: %d rounds of %d",
                profile.reader_case_rounds,
                profile.reader_case_per_round,
            )
            run_reader_case(history, servers.kafka.bootstrap_servers, profile, run_dir)
    except Exception as exc:
        log.exception("the run failed")
        problems.append(f"run failed: {exc!r}")
    finally:
        servers.stop()
        history.close(problems=problems, **facts)
    outcome = verdict(run_dir)
    if outcome.ok:
        servers.discard_data()  # a failed run keeps Kafka's data to be looked at
    return outcome


def _cluster_run(
    profile: Profile,
    servers: Servers,
    history: History,
    problems: list[str],
    facts: dict[str, object],
) -> None:
    admin = Admin(servers)
    topics = topics_of(profile, uuid.uuid4().hex[:6])
    for topic in topics:
        history.topic(topic.tag, topic.name, kind=topic.kind.value)
        if topic.kind is Kind.PARTITIONED:
            admin.create_partitioned(topic.name, PARTITIONS)
        if topic.kind is Kind.KEY_WINDOW:
            admin.key_window(topic.name, "property:event-id", KEY_WINDOW)
    client = pulsar_client(servers.service_url, history.run_dir / "client.log")
    paths: list[LivePath] = []
    try:
        for topic in topics:
            paths.extend(live_paths(client, history, topic))
            if topic.kind is Kind.SINGLE:
                paths.append(
                    EffectivelyOncePath(
                        servers.service_url, history, topic, EFFECTIVELY_ONCE_KILL_EVERY
                    )
                )
        loads = {t.tag: Load(client, history, t, t.kind.rate(profile.rate)).start() for t in topics}
        unloadable = [
            t.name if t.kind is not Kind.PARTITIONED else f"{t.name}-partition-0" for t in topics
        ]
        faults = Faults(servers, admin, history, profile, unloadable).start()
        _wait_logging(profile.minutes * 60, loads, history, servers)
        faults.stop()
        problems.extend(faults.errors)
        _all_servers_up(servers)
        for load in loads.values():
            load.stop()
        for tag, load in loads.items():
            if not load.drain(DRAIN_SECONDS):
                problems.append(f"{tag}: {load.sent - load.acked} sends never acknowledged")
            problems.extend(f"{tag}: {e}" for e in load.errors[:5])
        _catch_up(paths, loads)
        for path in paths:
            path.stop()
            problems.extend(f"{path.spec.path}@{path.spec.topic}: {e}" for e in path.errors[:5])
        for path in paths:
            path.settle(client, QUIET_SECONDS / 2)
            if isinstance(path, (TableViewPath, EffectivelyOncePath)):
                path.finish()
        for topic in topics:
            final.read_from_earliest(client, history, topic)
            if topic.kind is Kind.KEYED:
                facts[f"compaction {topic.tag}"] = final.read_compacted(
                    client, history, admin, topic
                )
        final.read_with_spark(
            history,
            servers.service_url,
            servers.admin_url(),
            [t for t in topics if t.kind in (Kind.BATCHED, Kind.PARTITIONED)],
        )
        facts["extras"] = {f"{p.spec.path}@{p.spec.topic}": p.extras for p in paths}
        _forensics_if_lost(history, servers, admin, topics)
        for load in loads.values():
            load.close()
    finally:
        for path in paths:
            if isinstance(path, EffectivelyOncePath):
                path.terminate()
        client.close()


def _forensics_if_lost(
    history: History, servers: Servers, admin: Admin, topics: list[Topic]
) -> None:
    """A topic whose reader lost acknowledged ids is described while Kafka still runs."""
    history.flush()
    assert servers.cluster is not None
    for topic in topics:
        acked, _ = load_acked(history.run_dir, topic.tag)
        spec = PathSpec("reader", topic.tag, Mode.EXACTLY_ONCE, True)
        read = {d.id for d in load_deliveries(history.run_dir, spec)}
        lost = {a.id for a in acked} - read
        if not lost:
            continue
        for name in final.partitions_of(topic):
            try:
                describe_losses(
                    admin,
                    servers.kafka.bootstrap_servers,
                    servers.cluster.cluster_name,
                    name,
                    lost,
                    history.run_dir / f"forensics-{name.rsplit('/', 1)[-1]}.txt",
                )
            except Exception:
                log.exception("forensics of %s failed", name)


def _wait_logging(
    seconds: float, loads: dict[str, Load], history: History, servers: Servers
) -> None:
    """Sleep through the load phase, logging progress and the brokers' memory (RSS)."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        time.sleep(min(left, 30.0))
        acked = sum(load.acked for load in loads.values())
        rss = [_rss_mb(b.process.pid if b.process else None) for b in servers.brokers]
        history.sample(rss_mb=rss, acked=acked)
        history.flush()
        log.info(
            "%.0fs: %d acknowledged, %d faults, broker RSS %s MB",
            history.now(),
            acked,
            len(history.faults),
            rss,
        )


def _rss_mb(pid: int | None) -> int:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) // 1024
    except (OSError, ValueError):
        pass
    return 0


def _all_servers_up(servers: Servers) -> None:
    """Whatever a fault left stopped (a failed restart) is started again."""
    servers.kafka.start()  # the nodes not running
    servers.redis_up()
    for broker in servers.brokers:
        if broker.process is None or broker.process.poll() is not None:
            broker.start(timeout=120)


def _catch_up(paths: list[LivePath], loads: dict[str, Load]) -> None:
    """Until every live path has seen every id sent to its topic (TableViews: every key's
    last value), then ``QUIET_SECONDS`` more for redeliveries; at most ``DRAIN_SECONDS``."""
    deadline = time.monotonic() + DRAIN_SECONDS
    logged = time.monotonic()
    while time.monotonic() < deadline:
        behind = [p for p in paths if not _caught_up(p, loads[p.spec.topic])]
        if not behind:
            break
        if time.monotonic() - logged > 30:
            logged = time.monotonic()
            log.info(
                "catching up: %s",
                ", ".join(
                    f"{p.spec.path}@{p.spec.topic} {len(p.seen)}/{loads[p.spec.topic].sent}"
                    for p in behind
                ),
            )
        time.sleep(1.0)
    else:
        log.warning("paths still behind after %.0fs", DRAIN_SECONDS)
    time.sleep(QUIET_SECONDS)


def _caught_up(path: LivePath, load: Load) -> bool:
    if isinstance(path, TableViewPath):
        return path.values() == last_per_key(load.topic.kind, load.sent)
    return path.caught_up(load.sent)


def verdict(run_dir: Path) -> Outcome:
    """The report of a run, from its history files alone."""
    results, ack_times = recheck(run_dir)
    spec = json.loads((run_dir / "spec.json").read_text())
    outcome = Outcome(results, list(spec.get("problems", [])))
    extras = spec.get("extras", {})
    for result in results:
        extra = extras.get(f"{result.path}@{result.topic}", {})
        if extra.get("early"):
            result.notes.append(f"{extra['early']} delivered before their delay")
            result.out_of_order += int(extra["early"])
        for name in ("kills", "readers"):
            if extra.get(name):
                result.notes.append(f"{extra[name]} {name}")
    faults = load_faults(run_dir)
    producers = {t: times for t, times in ack_times.items() if t != "reader-case" and times}
    lines = [r.line() for r in results]
    by_kind: dict[str, list[float]] = {}
    for fault in faults:
        by_kind.setdefault(fault.kind, []).extend(failover_gaps([fault], producers))
    for kind, gaps in sorted(by_kind.items()):
        count = sum(1 for f in faults if f.kind == kind)
        if gaps:
            lines.append(
                f"     {kind:<14} {count:>3} faults; every producer acknowledging again after "
                f"p50 {percentile(gaps, 0.5):.1f}s, p99 {percentile(gaps, 0.99):.1f}s, "
                f"max {max(gaps):.1f}s"
            )
        else:
            lines.append(f"     {kind:<14} {count:>3} faults")
    samples = load_samples(run_dir)
    if samples:
        peak = max(max(s["rss_mb"]) for s in samples)
        lines.append(
            f"     broker memory: RSS {samples[0]['rss_mb']} MB at first, "
            f"{samples[-1]['rss_mb']} MB at the end, peak {peak} MB"
        )
    send_errors = send_errors_seen(run_dir / "client.log")
    if send_errors:
        common = "; ".join(f"{n} x {text[:90]}" for text, n in send_errors.most_common(3))
        lines.append(
            f"     client connections dropped on a send error: {send_errors.total()} ({common})"
        )
    lines.extend(f"PROBLEM {p}" for p in outcome.problems)
    total = sum(len(t) for t in ack_times.values())
    lines.append(
        f"{'PASSED' if outcome.ok else 'FAILED'}: {len(results)} paths, {total:,} messages "
        f"acknowledged, {len(faults)} faults ({run_dir})"
    )
    outcome.lines = lines
    (run_dir / "report.txt").write_text("\n".join(lines) + "\n")
    return outcome
