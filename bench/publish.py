"""``python -m bench.publish``: publish throughput, latency and server CPU of the broker
next to direct Kafka and a real Apache Pulsar standalone, all measured in one run on this
machine and printed as one table.

Every system is driven by its own official Java load generator, so no Python client
limits what is measured:

* direct Kafka: Kafka's ``ProducerPerformance`` (kafka-tools 4.1.1) with ``acks=all``,
  ``enable.idempotence=true``, ``linger.ms=5``, ``batch.size=1048576``, no compression.
  "4 topics" is one topic with 4 partitions (one generator JVM, 4 logs on the broker).
* the broker (dedup off, dedup on: ``broker_deduplication_enabled``; and key-window
  deduplication on, by partition key, with a Redis: pulsar-perf keys every message at
  random, so nearly every key is new and claimed) on that same Kafka,
  and a Pulsar 4.0.7 standalone (``brokerDeduplicationEnabled`` off, on; its bookie keeps
  BookKeeper's defaults, journal fsync included): ``pulsar-perf produce`` 4.0.6 with
  full JIT, batching on (``-bm 1000 -b 5``), at most 64 MiB of messages awaiting
  their receipts (``-ml 64M``, the Java client's default), one producer per topic,
  4 topics as 4 topics.
* transactional publish, the broker's and Pulsar's (``transactionCoordinatorEnabled``,
  deduplication off): the same pulsar-perf with ``-txn -nmt 100``, every message in a
  transaction of 100 committed once its messages are acknowledged.

Per row: the saturation rate (the tool's own msgs/s with no rate limit, ``--messages``
messages; the median of ``--saturation-runs`` runs, 3 by default) and its ratio to
direct Kafka at the same size and topic count ("broker, off, keyed" and "broker,
key-window" run side by side, their runs taking turns, so that key-window's ratio and
latency compare with its anchor's runs made in the same minutes); the server's CPU
microseconds per message during that run (/proc utime+stime: the Kafka JVM, the broker
process plus the Kafka under it, the Pulsar JVM) and the generator's; then p50/p99 latency
as the tool reports it, at a fixed rate of half that row's own maximum: the
medians of three such runs (``--paced-runs``), since one 10-s run's p99 is decided by
its worst tenth of a second.
Generator and servers share the machine's cores, as a single host benchmark must: the
CPU columns show where the cycles go. Each server first gets a discarded warm-up run of every case.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from bench import results
from bench.load_tools import (
    KAFKA_PRODUCER_PROPS,
    PULSAR_PERF_BATCHING,
    PULSAR_PERF_MEMORY_LIMIT,
    KafkaPerf,
    Measurement,
    PulsarPerf,
    jit_compiler_cpu_seconds,
)
from dedup_broker.devservers import provide_kafka, provide_redis
from harness.admin_http import http_request
from harness.broker_process import BrokerProcess
from harness.pulsar_standalone import PULSAR_VERSION, PulsarStandalone

SIZES = (100, 1024)
TOPIC_COUNTS = (1, 4)
DIRECT = "direct Kafka"
KEY_WINDOW = "broker, key-window"
KEYED_OFF = "broker, off, keyed"
"""Deduplication off under the key-window rows' load (every message keyed at random):
the anchor of the key-window ratio with the generator doing the same work."""
KEY_WINDOW_POLICY = {"enabled": True, "keySource": "partitionKey", "window": "1h"}
RANDOM_KEYS = ("--message-key-generation-mode", "random")
BROKER_TXN = "broker, transactions"
PULSAR_TXN = "Pulsar, transactions"
MESSAGES_PER_TRANSACTION = 100
TRANSACTIONS = ("-txn", "-nmt", str(MESSAGES_PER_TRANSACTION))
"""pulsar-perf's transactional publish: every message in a transaction of 100, each
committed once its messages are acknowledged (deduplication off)."""


class Generator(Protocol):
    def run(self, size: int, topics: int, messages: int, rate: float | None) -> Measurement: ...


@dataclass(frozen=True)
class Row:
    system: str
    size: int
    topics: int
    saturated: Measurement
    paced: tuple[Measurement, ...]
    """The fixed-rate runs at ``paced_rate`` (none when pacing is off)."""
    paced_rate: float

    @property
    def p50_ms(self) -> float | None:
        """The median of the fixed-rate runs' p50."""
        return statistics.median(m.p50_ms for m in self.paced) if self.paced else None

    @property
    def p99_ms(self) -> float | None:
        """The median of the fixed-rate runs' p99: one run's p99 is its worst 0.1 s in
        10 s, so a single pause of any process on the machine decides it (the same row
        read 13 ms and 96 ms in two runs of the same build)."""
        return statistics.median(m.p99_ms for m in self.paced) if self.paced else None


@dataclass(frozen=True)
class Plan:
    """What each system is asked: the (size, topics) cases, and how long to pace."""

    cases: tuple[tuple[int, int], ...]
    messages: int
    paced_seconds: float
    warmup_messages: int
    paced_runs: int = 3
    saturation_runs: int = 1
    """Saturation runs per case: the row's figures are the median run's (by msgs/s); one
    run's rate moves by up to a fifth from one run to the next on a shared machine."""
    jit_seconds: Callable[[], float] | None = None
    """CPU seconds Kafka's JIT compilers have spent so far (None: no settling rounds)."""


SETTLED_JIT_US_PER_MSG = 0.1
"""A case is measured once Kafka's JIT compilers spend less than this per message in a
warm-up round..."""
MAX_SETTLING_ROUNDS = 4
"""...or after this many rounds. Kafka's compilers went on for minutes after the first
warm-up: 1.7-2.3 us a message in the first measured runs at 100 B x 4 topics, 0.2 in the
fourth, the rates of both systems rising by half meanwhile (a fifth of the machine's
CPU, landing in whichever run it fell in)."""


def settle(systems: Sequence[tuple[str, Generator]], plan: Plan, size: int, topics: int) -> int:
    """Warm-up rounds of one case (every system in turn) until Kafka's JIT compilers are
    quiet: answers how many rounds it took."""
    jit_seconds = plan.jit_seconds
    if jit_seconds is None:
        return 0
    messages = max(plan.warmup_messages // len(plan.cases), 1)
    for done in range(1, MAX_SETTLING_ROUNDS + 1):
        before = jit_seconds()
        for _, generator in systems:
            generator.run(size, topics, messages, None)
        spent = jit_seconds() - before
        if 1e6 * spent / (messages * len(systems)) < SETTLED_JIT_US_PER_MSG:
            return done
    return MAX_SETTLING_ROUNDS


def measure(systems: Sequence[tuple[str, Generator]], plan: Plan, rows: list[Row]) -> None:
    """A warm-up run of every case (discarded), then each case at saturation and at half
    of it. Systems measured together take turns run by run, at saturation and at half
    load, so each compares with runs the others made in the same minutes. Before each
    case, warm-up rounds of it until Kafka's JIT compilers are quiet (``settle``).

    Every case is warmed, not only the first: the server's JIT (Kafka's behind the broker
    too) compiles the paths each size and topic count takes, and an unwarmed case charged
    that compilation to whichever system ran it first (Kafka's share of the broker's CPU
    per message was 2-3 times higher in the first broker row than in the second, in
    either order)."""
    for size, topics in plan.cases:
        for _, generator in systems:
            generator.run(size, topics, plan.warmup_messages // len(plan.cases), None)
    for size, topics in plan.cases:
        rounds = settle(systems, plan, size, topics)
        if rounds:
            print(f"  {size} B x {topics}: {rounds} settling round(s)", flush=True)
        runs: list[list[Measurement]] = [[] for _ in systems]
        for _ in range(plan.saturation_runs):
            for (_, generator), done in zip(systems, runs, strict=True):
                done.append(generator.run(size, topics, plan.messages, None))
        saturated = [sorted(done, key=lambda m: m.msgs_per_s)[len(done) // 2] for done in runs]
        rates = [m.msgs_per_s / 2 for m in saturated]
        paced: list[list[Measurement]] = [[] for _ in systems]
        for _ in range(plan.paced_runs if plan.paced_seconds > 0 else 0):
            for (_, generator), rate, done in zip(systems, rates, paced, strict=True):
                count = max(int(rate * plan.paced_seconds), 1000)
                done.append(generator.run(size, topics, count, rate))
        for (system, _), best, rate, done in zip(systems, saturated, rates, paced, strict=True):
            row = Row(system, size, topics, best, tuple(done), rate)
            rows.append(row)
            print(_progress(row), flush=True)


def _progress(row: Row) -> str:
    m = row.saturated
    text = (
        f"  {row.system}: {row.size} B x {row.topics} topic(s): {m.msgs_per_s:,.0f} msgs/s, "
        f"server {m.cpu_us_per_msg():.2f} us/msg, generator "
        f"{1e6 * m.generator_cpu / max(m.messages, 1):.2f} us/msg ({m.wall_s:.0f} s, "
        f"other processes {m.others_cores:.2f} cores)"
    )
    if row.paced:
        text += f"; at {row.paced_rate:,.0f}/s p50 " + " / ".join(f"{m.p50_ms}" for m in row.paced)
        text += " p99 " + " / ".join(f"{m.p99_ms}" for m in row.paced) + " ms"
    return text


@contextmanager
def broker_generator(
    bootstrap: str,
    kafka_pid: int | None,
    dedup: bool,
    work: Path,
    transactions: bool = False,
    keyed: bool = False,
) -> Iterator[Generator]:
    kind = "transactions" if transactions else f"dedup-{'on' if dedup else 'off'}"
    kind += "-keyed" if keyed else ""
    log_dir = work / f"broker-{kind}"
    log_dir.mkdir(parents=True, exist_ok=True)
    broker = BrokerProcess(
        bootstrap,
        cluster_name=f"bench-publish-{uuid.uuid4().hex[:6]}",
        settings={
            "broker_deduplication_enabled": dedup,
            "transaction_coordinator_enabled": transactions,
        },
        log_dir=log_dir,
    )
    with broker:
        assert broker.process is not None
        pids = {"broker": broker.process.pid}
        if kafka_pid is not None:
            pids["kafka"] = kafka_pid
        extra = TRANSACTIONS if transactions else RANDOM_KEYS if keyed else ()
        yield PulsarPerf(broker.service_url, broker.http_url, pids, log_dir, extra_args=extra)


@contextmanager
def key_window_generator(bootstrap: str, kafka_pid: int | None, work: Path) -> Iterator[Generator]:
    """The broker with key-window deduplication on for the namespace (PIP-6 off), every
    message keyed by pulsar-perf (random keys: nearly every key is new, so each one is
    claimed in Redis)."""
    log_dir = work / "broker-key-window"
    log_dir.mkdir(parents=True, exist_ok=True)
    redis = provide_redis()
    try:
        broker = BrokerProcess(
            bootstrap,
            cluster_name=f"bench-publish-{uuid.uuid4().hex[:6]}",
            settings={"broker_deduplication_enabled": False, "redis_url": redis.url},
            log_dir=log_dir,
        )
        with broker:
            assert broker.process is not None
            status, body = http_request(
                "POST",
                f"{broker.http_url}/admin/v2/namespaces/public/default/keyDeduplication",
                json.dumps(KEY_WINDOW_POLICY).encode(),
            )
            if status >= 300:
                raise RuntimeError(f"setting the key-window policy failed: {status} {body!r}")
            pids = {"broker": broker.process.pid}
            if kafka_pid is not None:
                pids["kafka"] = kafka_pid
            if redis.pid is not None:
                pids["redis"] = redis.pid
            yield PulsarPerf(
                broker.service_url, broker.http_url, pids, log_dir, extra_args=RANDOM_KEYS
            )
    finally:
        redis.close()


@contextmanager
def pulsar_generator(
    dedup: bool, work: Path, extra: dict[str, str], transactions: bool = False
) -> Iterator[Generator]:
    settings = {
        "brokerDeduplicationEnabled": str(dedup).lower(),
        "transactionCoordinatorEnabled": str(transactions).lower(),
        **extra,
    }
    with PulsarStandalone(settings=settings) as pulsar:
        pid = pulsar.pid
        assert pid is not None
        kind = "transactions" if transactions else f"dedup-{'on' if dedup else 'off'}"
        yield PulsarPerf(
            pulsar.service_url,
            pulsar.http_url,
            {"pulsar": pid},
            work / f"pulsar-{kind}",
            extra_args=TRANSACTIONS if transactions else (),
        )


Opener = Callable[[], AbstractContextManager[Generator]]

TOGETHER = (KEYED_OFF, KEY_WINDOW)
"""Measured together, their runs (at saturation and at half load) taking turns:
key-window's ratio and latency to its anchor's then compare runs made minutes apart at
most. Run one after the other, the
anchor alone moved by a third between runs of the same build (machine and Kafka drift),
and the ratio with it."""


def _together(systems: Sequence[tuple[str, Opener]]) -> list[list[tuple[str, Opener]]]:
    """The systems in order, one group each, except those of ``TOGETHER``: one group, where
    the first of them stands."""
    groups: list[list[tuple[str, Opener]]] = []
    paired: list[tuple[str, Opener]] = []
    for name, open_ in systems:
        if name in TOGETHER:
            if not paired:
                groups.append(paired)
            paired.append((name, open_))
        else:
            groups.append([(name, open_)])
    return groups


def run_all(args: argparse.Namespace, plan: Plan) -> tuple[list[Row], list[str]]:
    """Every system in turn on one Kafka; a system that fails is reported, not fatal."""
    rows: list[Row] = []
    failures: list[str] = []
    work = Path(tempfile.mkdtemp(prefix="bench-publish-"))
    kafka = provide_kafka()
    kafka_pid = kafka.pid
    if kafka_pid is not None:
        plan = replace(plan, jit_seconds=partial(jit_compiler_cpu_seconds, kafka_pid))
    try:
        bootstrap = kafka.bootstrap_servers
        systems: list[tuple[str, Opener]] = [
            (DIRECT, lambda: _direct(bootstrap, kafka_pid)),
            ("broker, dedup off", lambda: broker_generator(bootstrap, kafka_pid, False, work)),
            ("broker, dedup on", lambda: broker_generator(bootstrap, kafka_pid, True, work)),
            (KEYED_OFF, lambda: broker_generator(bootstrap, kafka_pid, False, work, keyed=True)),
            (KEY_WINDOW, lambda: key_window_generator(bootstrap, kafka_pid, work)),
            (BROKER_TXN, lambda: broker_generator(bootstrap, kafka_pid, False, work, True)),
        ]
        if not args.no_pulsar:
            extra = dict(item.split("=", 1) for item in args.pulsar_setting)
            systems += [
                ("Pulsar, dedup off", lambda: pulsar_generator(False, work, extra)),
                ("Pulsar, dedup on", lambda: pulsar_generator(True, work, extra)),
                (PULSAR_TXN, lambda: pulsar_generator(False, work, extra, True)),
            ]
        if args.system:
            known = dict(systems)
            unknown = [name for name in args.system if name not in known]
            if unknown:
                raise SystemExit(f"unknown system(s) {unknown}; known: {list(known)}")
            systems = [(name, known[name]) for name in args.system]
        for group in _together(systems):
            names = ", ".join(f"'{name}'" for name, _ in group)
            print(f"{names} ...", flush=True)
            started = time.monotonic()
            try:
                with ExitStack() as stack:
                    opened = [(name, stack.enter_context(open_())) for name, open_ in group]
                    measure(opened, plan, rows)
            except Exception as exc:  # keep the other systems' figures
                failures.append(f"{names}: {type(exc).__name__}: {str(exc)[-1500:]}")
                print(f"  FAILED: {failures[-1]}", file=sys.stderr, flush=True)
            print(f"  ({time.monotonic() - started:.0f} s)", flush=True)
    finally:
        kafka.close()
        shutil.rmtree(work, ignore_errors=True)
    return rows, failures


@contextmanager
def _direct(bootstrap: str, kafka_pid: int | None) -> Iterator[Generator]:
    if kafka_pid is None:
        raise RuntimeError("the server CPU columns need a native Kafka (no pid)")
    yield KafkaPerf(bootstrap, kafka_pid)


def table(rows: Sequence[Row], plan: Plan) -> str:
    """One table: saturation figures, CPU per message, latency at half the maximum."""
    lines = [
        f"publish, {plan.messages:,} messages per saturation run (the median of "
        f"{plan.saturation_runs} per case), "
        f"{plan.paced_runs} fixed-rate runs of {plan.paced_seconds:.0f} s at 50% of the row's "
        "own maximum (p50, p99: their medians); "
        f"{os.cpu_count()} cores shared by generator and server",
        "direct Kafka: ProducerPerformance "
        + " ".join(f"{k}={v}" for k, v in KAFKA_PRODUCER_PROPS.items())
        + " (4 topics = 1 topic x 4 partitions)",
        f"broker / Pulsar {PULSAR_VERSION} standalone: pulsar-perf produce "
        + " ".join((*PULSAR_PERF_BATCHING, *PULSAR_PERF_MEMORY_LIMIT))
        + ", 1 producer per topic, full JIT",
        "CPU: server-side microseconds per message (utime+stime during the saturation run); "
        "gen = the load generator's; others = cores used meanwhile by processes outside "
        "this benchmark",
        "",
        f"{'size':>5} {'topics':>6}  {'system':<18} {'msgs/s':>10} {'MB/s':>7} {'x Kafka':>7}"
        f" {'CPU us/msg':>10}  {'(split)':<26} {'gen':>5} {'others':>6}"
        f"  {'rate':>8} {'p50 ms':>7} {'p99 ms':>7}",
    ]
    base = {(r.size, r.topics): r.saturated.msgs_per_s for r in rows if r.system == DIRECT}
    previous: tuple[int, int] | None = None
    for r in sorted(rows, key=lambda r: (r.size, r.topics)):
        if previous is not None and previous != (r.size, r.topics):
            lines.append("")
        previous = (r.size, r.topics)
        m = r.saturated
        ratio = (
            f"{m.msgs_per_s / base[(r.size, r.topics)]:.2f}" if (r.size, r.topics) in base else "-"
        )
        split = (
            " + ".join(f"{name} {m.cpu_us_per_msg(name):.2f}" for name in m.server_cpu)
            if len(m.server_cpu) > 1
            else ""
        )
        gen = 1e6 * m.generator_cpu / max(m.messages, 1)
        paced = (
            f"{r.paced_rate:8.0f} {r.p50_ms:7.2f} {r.p99_ms:7.2f}"
            if r.p50_ms is not None and r.p99_ms is not None
            else f"{'-':>8} {'-':>7} {'-':>7}"
        )
        lines.append(
            f"{_size(r.size):>5} {r.topics:>6}  {r.system:<18} {m.msgs_per_s:10.0f} "
            f"{m.msgs_per_s * r.size / 1e6:7.2f} {ratio:>7} {m.cpu_us_per_msg():10.2f}  "
            f"{split:<26} {gen:5.1f} {m.others_cores:6.2f}  {paced}"
        )
    return "\n".join(lines)


def targets(rows: Sequence[Row]) -> str:
    """Each figure of the publish targets next to its anchor from the same run: server CPU
    per message against Pulsar's with the same deduplication setting, key-window
    throughput against deduplication off, p50 against direct Kafka's + 2 ms, p99 against
    Pulsar's."""
    by = {(r.system, r.size, r.topics): r for r in rows}
    lines = ["targets (this run; 'met' / 'not met'):"]

    def verdict(ok: bool) -> str:
        return "met" if ok else "not met"

    for size, topics in sorted({(r.size, r.topics) for r in rows}):
        case = f"{_size(size):>5} x {topics}"
        for setting in ("off", "on"):
            broker = by.get((f"broker, dedup {setting}", size, topics))
            pulsar = by.get((f"Pulsar, dedup {setting}", size, topics))
            if broker is None:
                continue
            if pulsar is not None:
                mine, theirs = broker.saturated.cpu_us_per_msg(), pulsar.saturated.cpu_us_per_msg()
                lines.append(
                    f"  {case} dedup {setting:3}: CPU {mine:.2f} us/msg vs Pulsar {theirs:.2f}:"
                    f" {verdict(mine <= theirs)}"
                )
                if broker.p99_ms is not None and pulsar.p99_ms is not None:
                    mine, theirs = broker.p99_ms, pulsar.p99_ms
                    lines.append(
                        f"  {case} dedup {setting:3}: p99 {mine:.2f} ms vs Pulsar {theirs:.2f}:"
                        f" {verdict(mine <= theirs)}"
                    )
            kafka = by.get((DIRECT, size, topics))
            if kafka is not None and broker.p50_ms is not None and kafka.p50_ms is not None:
                mine, anchor = broker.p50_ms, kafka.p50_ms + 2
                lines.append(
                    f"  {case} dedup {setting:3}: p50 {mine:.2f} ms vs Kafka's + 2 = {anchor:.2f}:"
                    f" {verdict(mine <= anchor)}"
                )
        keyed = by.get((KEY_WINDOW, size, topics))
        for base_name in ("broker, dedup off", KEYED_OFF):
            base_row = by.get((base_name, size, topics))
            if keyed is not None and base_row is not None:
                ratio = keyed.saturated.msgs_per_s / base_row.saturated.msgs_per_s
                lines.append(
                    f"  {case} key-window: {ratio:.2f} x {base_name} (target 0.80):"
                    f" {verdict(ratio >= 0.8)}"
                )
                if (
                    base_name == KEYED_OFF
                    and keyed.p50_ms is not None
                    and base_row.p50_ms is not None
                ):
                    mine, anchor = keyed.p50_ms, base_row.p50_ms + 2
                    lines.append(
                        f"  {case} key-window: p50 {mine:.2f} ms vs {base_name}'s + 2 ="
                        f" {anchor:.2f}: {verdict(mine <= anchor)}"
                    )
        lines.extend(_transactional(by, size, topics, case))
    return "\n".join(lines)


def _transactional(
    by: dict[tuple[str, int, int], Row], size: int, topics: int, case: str
) -> list[str]:
    """Transactional publish next to plain publish, the broker's and Pulsar's (no target:
    what a transaction costs, for the record)."""
    lines = []
    for txn, plain in ((BROKER_TXN, "broker, dedup off"), (PULSAR_TXN, "Pulsar, dedup off")):
        with_txn, without = by.get((txn, size, topics)), by.get((plain, size, topics))
        if with_txn is None or without is None:
            continue
        ratio = with_txn.saturated.msgs_per_s / without.saturated.msgs_per_s
        lines.append(
            f"  {case} {txn}: {with_txn.saturated.msgs_per_s:,.0f} msgs/s, {ratio:.2f} x "
            f"{plain}; CPU {with_txn.saturated.cpu_us_per_msg():.2f} us/msg vs "
            f"{without.saturated.cpu_us_per_msg():.2f}"
        )
    return lines


def recorded(rows: Sequence[Row], plan: Plan) -> dict[str, Any]:
    """What ``bench.plots`` draws: per case and system, the saturation rate and the latency
    percentiles at half of it (each percentile the median over the fixed-rate runs, as
    p50 and p99 in the table)."""
    return {
        "messages": plan.messages,
        "paced_seconds": plan.paced_seconds,
        "paced_runs": plan.paced_runs if plan.paced_seconds > 0 else 0,
        "rows": [
            {
                "system": r.system,
                "size": r.size,
                "topics": r.topics,
                "msgs_per_s": r.saturated.msgs_per_s,
                "cpu_us_per_msg": r.saturated.cpu_us_per_msg(),
                "paced_rate": r.paced_rate if r.paced else None,
                "p50_ms": r.p50_ms,
                "p99_ms": r.p99_ms,
                "latency_quantiles_ms": paced_quantiles(r.paced),
            }
            for r in rows
        ],
    }


def paced_quantiles(runs: Sequence[Measurement]) -> list[list[float]]:
    """Per percentile every fixed-rate run reported, the median of the runs' values:
    [[fraction, ms], ...] in increasing order."""
    if not runs:
        return []
    shares = set(dict(runs[0].quantiles_ms))
    for run in runs[1:]:
        shares &= set(dict(run.quantiles_ms))
    return [
        [share, statistics.median(dict(m.quantiles_ms)[share] for m in runs)]
        for share in sorted(shares)
    ]


def _loads(loads: tuple[float, float, float]) -> str:
    return " ".join(f"{load:.1f}" for load in loads)


def _size(size: int) -> str:
    return f"{size // 1024}KB" if size % 1024 == 0 else f"{size}B"


def parse_case(text: str) -> tuple[int, int]:
    """``"1024x4"`` -> (1024, 4): bytes per message and topics of one case."""
    size, _, topics = text.lower().partition("x")
    try:
        case = int(size), int(topics)
    except ValueError:
        message = f"a case is SIZExTOPICS, e.g. 100x1, not {text!r}"
        raise argparse.ArgumentTypeError(message) from None
    if min(case) < 1:
        raise argparse.ArgumentTypeError(f"size and topics must be positive: {text!r}")
    return case


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.publish", description=__doc__)
    parser.add_argument(
        "--messages",
        type=int,
        default=None,
        help="per saturation run (default 1,000,000; 200,000 with --quick)",
    )
    parser.add_argument("--paced-seconds", type=float, default=10.0, help="per fixed-rate run")
    parser.add_argument(
        "--paced-runs", type=int, default=3, help="fixed-rate runs per case (medians reported)"
    )
    parser.add_argument(
        "--saturation-runs",
        type=int,
        default=3,
        help="saturation runs per case (the median run is reported)",
    )
    parser.add_argument("--quick", action="store_true", help="100 B, 1 topic, no fixed rate")
    parser.add_argument(
        "--case",
        action="append",
        default=[],
        type=parse_case,
        metavar="SIZExTOPICS",
        help="run only this case (repeatable), e.g. 1024x1: bytes per message x topics",
    )
    parser.add_argument("--no-pulsar", action="store_true", help="skip the Pulsar standalone")
    parser.add_argument(
        "--system",
        action="append",
        default=[],
        metavar="NAME",
        help="run only this system (repeatable, run in the order given), e.g. "
        "'broker, dedup on': to see whether a figure depends on what ran before it",
    )
    parser.add_argument(
        "--pulsar-setting",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra standalone.conf setting, e.g. journalSyncData=false",
    )
    args = parser.parse_args()
    if args.quick:
        messages = args.messages or 200_000
        cases = tuple(args.case) or ((SIZES[0], 1),)
        plan = Plan(cases, messages, 0.0, max(messages // 4, 50_000))
    else:
        messages = args.messages or 1_000_000
        cases = tuple(args.case) or tuple(
            (size, topics) for size in SIZES for topics in TOPIC_COUNTS
        )
        plan = Plan(
            cases,
            messages,
            args.paced_seconds,
            max(messages, 200_000),
            max(args.paced_runs, 1),
            max(args.saturation_runs, 1),
        )
    load_before = os.getloadavg()
    rows, failures = run_all(args, plan)
    print("\n" + table(rows, plan))
    print("\n" + targets(rows))
    print(
        f"\nload average (1, 5, 15 min) before: {_loads(load_before)}, "
        f"after: {_loads(os.getloadavg())}"
    )
    for failure in failures:
        print(f"\nFAILED {failure}")
    if rows:
        results.record("bench.publish", recorded(rows, plan))
    if failures:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
