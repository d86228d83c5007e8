"""The publish benchmark's load generators: Kafka's ``ProducerPerformance`` and Pulsar's
``pulsar-perf produce``, each run as its own JVM, with figures parsed from the tool's own
report and the CPU every server process spent meanwhile.

Official Java generators, not Python clients: an earlier measurement found the Python
client to be the bottleneck, so it measured the client rather than the server.
"""

from __future__ import annotations

import os
import re
import resource
import subprocess
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from dedup_broker.devservers.distribution import find_java
from dedup_broker.devservers.kafka_tools import PRODUCER_PERFORMANCE, ensure_kafka_tools
from harness.pulsar_tools import run_pulsar_perf, write_client_conf

# Direct Kafka: the tuned idempotent producer the baseline runs with.
KAFKA_PRODUCER_PROPS: dict[str, str] = {
    "acks": "all",
    "enable.idempotence": "true",
    "linger.ms": "5",
    "batch.size": "1048576",
    "compression.type": "none",
}
# pulsar-perf: batching on, at most 1000 messages or a 5 ms window per batch (as linger.ms).
PULSAR_PERF_BATCHING = ("-bm", "1000", "-b", "5")
# pulsar-perf sets no bound on messages awaiting their receipt; against a server slower
# than the tool that queue grows until the tool runs out of heap. 64 MiB is the Java
# client's own default memory limit.
PULSAR_PERF_MEMORY_LIMIT = ("-ml", "64M")
# pulsar-perf treats no rate as 100 msg/s and refuses 0: "unlimited" is a rate never reached.
UNLIMITED_RATE = 100_000_000
GENERATOR_HEAP = "1g"
_TICKS = os.sysconf("SC_CLK_TCK")


class ToolError(RuntimeError):
    """A load generator failed or printed no report."""


@dataclass(frozen=True)
class Measurement:
    """One tool run: what the tool reported, and the CPU seconds spent meanwhile."""

    messages: int
    msgs_per_s: float
    p50_ms: float
    p99_ms: float
    server_cpu: dict[str, float] = field(default_factory=dict)
    generator_cpu: float = 0.0
    wall_s: float = 0.0
    others_cpu: float = 0.0
    """CPU seconds the rest of the machine spent meanwhile (other users of the cores)."""
    quantiles_ms: tuple[tuple[float, float], ...] = ()
    """Every percentile the tool printed, as (fraction, ms) pairs, its maximum as 1.0: the
    latency distribution, as far as the tool reports it (for the latency plot)."""

    @property
    def others_cores(self) -> float:
        """Cores' worth of CPU taken by processes outside this benchmark during the run."""
        return self.others_cpu / self.wall_s if self.wall_s > 0 else 0.0

    def cpu_us_per_msg(self, name: str | None = None) -> float:
        """Server CPU microseconds per message: one process's, or all of them together."""
        spent = self.server_cpu[name] if name else sum(self.server_cpu.values())
        return 1e6 * spent / max(self.messages, 1)


def _stat_cpu_seconds(stat: str) -> float:
    """utime + stime of a /proc ``stat`` line, in seconds."""
    fields = stat.rpartition(")")[2].split()
    # After the command name: state is field 3, so utime (14) and stime (15) are 11 and 12.
    return (int(fields[11]) + int(fields[12])) / _TICKS


def process_cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` (all its threads) from /proc, in seconds."""
    return _stat_cpu_seconds(Path(f"/proc/{pid}/stat").read_text())


def jit_compiler_cpu_seconds(pid: int) -> float:
    """CPU seconds a JVM's JIT compiler threads (``C1/C2 CompilerThread``) have spent,
    from /proc: Kafka's go on compiling for minutes after it starts, and whichever run
    they fall in pays for it."""
    spent = 0.0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except FileNotFoundError:  # the thread ended meanwhile
            continue
        if "CompilerThre" in stat.partition("(")[2].rpartition(")")[0]:
            spent += _stat_cpu_seconds(stat)
    return spent


def machine_busy_seconds() -> float:
    """CPU seconds all cores spent busy since boot (/proc/stat, idle and iowait excluded)."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = values[:8]
    return (user + nice + system + irq + softirq + steal) / _TICKS


def _children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@dataclass(frozen=True)
class Usage:
    """CPU seconds during one generator run: per server, the generator, everything else."""

    server: dict[str, float]
    generator: float
    others: float
    wall: float


def run_measured(
    run: Callable[[], subprocess.CompletedProcess[str]], server_pids: Mapping[str, int]
) -> tuple[subprocess.CompletedProcess[str], Usage]:
    """Runs the generator and returns its result with the CPU spent meanwhile: each
    server's, the generator's own (a child process, counted once reaped), and the rest of
    the machine's, which shows when other work shared the cores."""
    before = {name: process_cpu_seconds(pid) for name, pid in server_pids.items()}
    children_before = _children_cpu_seconds()
    own_before = time.process_time()
    busy_before = machine_busy_seconds()
    started = time.monotonic()
    result = run()
    wall = time.monotonic() - started
    busy = machine_busy_seconds() - busy_before
    spent = {name: process_cpu_seconds(pid) - before[name] for name, pid in server_pids.items()}
    generator = _children_cpu_seconds() - children_before
    ours = sum(spent.values()) + generator + time.process_time() - own_before
    return result, Usage(spent, generator, max(busy - ours, 0.0), wall)


def _run_java(argv: Sequence[str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(argv),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
    )


_KAFKA_FINAL = re.compile(
    r"(\d+) records sent, ([\d.]+) records/sec \([\d.]+ MB/sec\), [\d.]+ ms avg latency, "
    r"[\d.]+ ms max latency, ([\d.]+) ms 50th, [\d.]+ ms 95th, ([\d.]+) ms 99th"
)


class KafkaPerf:
    """Kafka's ``ProducerPerformance`` against one Kafka. Several topics are one topic with
    that many partitions: one generator JVM per run, as for pulsar-perf; a Kafka broker
    keeps one log per partition, the same as one per single-partition topic."""

    def __init__(self, bootstrap: str, kafka_pid: int) -> None:
        self.bootstrap = bootstrap
        self.server_pids = {"kafka": kafka_pid}
        self.home = ensure_kafka_tools()
        self._admin = AdminClient({"bootstrap.servers": bootstrap})

    def _topic(self, partitions: int) -> str:
        name = f"bench-publish-{uuid.uuid4().hex[:8]}"
        self._admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)
        # A new topic's leaders are elected asynchronously: wait, or the first sends of a
        # paced run queue behind the producer's metadata wait and inflate its latency.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            found = self._admin.list_topics(name, timeout=5).topics.get(name)
            leaders = [] if found is None else [p.leader for p in found.partitions.values()]
            if len(leaders) == partitions and min(leaders) >= 0:
                break
            time.sleep(0.1)
        return name

    def run(self, size: int, topics: int, messages: int, rate: float | None) -> Measurement:
        props = {"bootstrap.servers": self.bootstrap, **KAFKA_PRODUCER_PROPS}
        argv = [
            find_java(),
            f"-Xmx{GENERATOR_HEAP}",
            "-cp",
            f"{self.home / 'libs'}/*",
            PRODUCER_PERFORMANCE,
            "--topic",
            self._topic(topics),
            "--num-records",
            str(messages),
            "--record-size",
            str(size),
            "--throughput",
            str(int(rate)) if rate else "-1",
            "--producer-props",
            *(f"{key}={value}" for key, value in props.items()),
        ]
        timeout = _timeout(messages, rate)
        result, usage = run_measured(lambda: _run_java(argv, timeout), self.server_pids)
        found = _KAFKA_FINAL.findall(result.stdout)
        if result.returncode != 0 or not found:
            raise ToolError(
                f"ProducerPerformance failed (exit {result.returncode}):\n"
                f"{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
            )
        sent, per_s, p50, p99 = found[-1]
        return _measurement(sent, per_s, p50, p99, usage, kafka_perf_quantiles(result.stdout))


_PERF_THROUGHPUT = re.compile(
    r"Aggregated throughput stats --- (\d+) records sent --- ([\d.]+) msg/s"
)
_PERF_LATENCY = re.compile(
    r"Aggregated latency stats --- Latency: mean:\s*[\d.]+ ms - med:\s*([\d.]+) - "
    r"95pct:\s*[\d.]+ - 99pct:\s*([\d.]+)"
)


_KAFKA_PERCENTILE = re.compile(r"([\d.]+) ms ([\d.]+)th\b")
_KAFKA_MAX = re.compile(r"([\d.]+) ms max latency")
_PERF_PERCENTILE = re.compile(r"(med|[\d.]+pct|Max):\s*([\d.]+)")


def kafka_perf_quantiles(stdout: str) -> tuple[tuple[float, float], ...]:
    """ProducerPerformance's percentiles (50th, 95th, 99th, 99.9th) and maximum, in ms,
    from its final line; none when there is no such line."""
    finals = [line for line in stdout.splitlines() if _KAFKA_FINAL.search(line)]
    if not finals:
        return ()
    line = finals[-1]
    points = [
        (round(float(share) / 100, 8), float(ms)) for ms, share in _KAFKA_PERCENTILE.findall(line)
    ]
    longest = _KAFKA_MAX.search(line)
    if longest is not None:
        points.append((1.0, float(longest.group(1))))
    return tuple(sorted(points))


def pulsar_perf_quantiles(output: str) -> tuple[tuple[float, float], ...]:
    """pulsar-perf's aggregated percentiles (med, 95pct ... 99.999pct) and maximum, in ms,
    from its last "Aggregated latency stats" line; none when there is no such line."""
    lines = [line for line in output.splitlines() if "Aggregated latency stats" in line]
    if not lines:
        return ()
    points = []
    for name, ms in _PERF_PERCENTILE.findall(lines[-1]):
        share = 0.5 if name == "med" else 1.0 if name == "Max" else round(float(name[:-3]) / 100, 8)
        points.append((share, float(ms)))
    return tuple(sorted(points))


_PERF_PRODUCING = re.compile(r"^(\d+) .*Created \d+ producers", re.M)
_PERF_DONE = re.compile(r"^(\d+) .*DONE \(reached the maximum number", re.M)


def pulsar_perf_rate(output: str, messages: int) -> float:
    """Messages per second from the producers' creation until the tool counted
    ``messages`` receipts (its "DONE" line: it counts a message when its receipt comes).

    Not the tool's own "Aggregated throughput": that divides every receipt, those of the
    messages it kept sending until the count was reached included, by the time until its
    main loop's next 10-second report, so a run of 4 s and one of 9 s both read as 10 s
    (rates came out near 1,000,000 messages over 10, 20 or 30 s whatever the server)."""
    started = [int(ms) for ms in _PERF_PRODUCING.findall(output)]
    done = [int(ms) for ms in _PERF_DONE.findall(output)]
    if not started or not done or done[-1] <= max(started):
        raise ToolError(f"pulsar-perf's log lacks its producers' times:\n{output[-4000:]}")
    return messages / ((done[-1] - max(started)) / 1000)


class PulsarPerf:
    """``pulsar-perf produce`` (full JIT) against a Pulsar-protocol server: the broker or a
    Pulsar standalone. Fresh topics every run; ``producers`` per topic."""

    def __init__(
        self,
        service_url: str,
        http_url: str,
        server_pids: Mapping[str, int],
        work_dir: Path,
        producers: int = 1,
        namespace: str = "public/default",
        extra_args: Sequence[str] = (),
    ) -> None:
        work_dir.mkdir(parents=True, exist_ok=True)
        self.conf = write_client_conf(work_dir / "client.conf", service_url, http_url)
        self.server_pids = dict(server_pids)
        self.producers = producers
        self.namespace = namespace
        self.extra_args = tuple(extra_args)

    def run(self, size: int, topics: int, messages: int, rate: float | None) -> Measurement:
        run_id = uuid.uuid4().hex[:8]
        names = [f"persistent://{self.namespace}/bench-{run_id}-{i}" for i in range(topics)]
        args = [
            "produce",
            "-m",
            str(messages),
            "-s",
            str(size),
            "-r",
            str(int(rate) if rate else UNLIMITED_RATE),
            "-n",
            str(self.producers),
            *PULSAR_PERF_BATCHING,
            *PULSAR_PERF_MEMORY_LIMIT,
            *self.extra_args,
            "-t",
            str(topics),
            *names,
        ]
        timeout = _timeout(messages, rate)

        def perf() -> subprocess.CompletedProcess[str]:
            return run_pulsar_perf(self.conf, *args, timeout=timeout, full_jit=True)

        result, usage = run_measured(perf, self.server_pids)
        output = result.stdout + result.stderr
        throughput = _PERF_THROUGHPUT.findall(output)
        latency = _PERF_LATENCY.findall(output)
        if result.returncode != 0 or not throughput or not latency:
            raise ToolError(f"pulsar-perf failed (exit {result.returncode}):\n{output[-4000:]}")
        sent, _ = throughput[-1]
        p50, p99 = latency[-1]
        if int(sent) < messages * 0.99:
            raise ToolError(f"pulsar-perf sent {sent} of {messages}:\n{output[-4000:]}")
        per_s = str(pulsar_perf_rate(output, messages))
        return _measurement(sent, per_s, p50, p99, usage, pulsar_perf_quantiles(output))


def _measurement(
    sent: str,
    per_s: str,
    p50: str,
    p99: str,
    usage: Usage,
    quantiles_ms: tuple[tuple[float, float], ...] = (),
) -> Measurement:
    return Measurement(
        int(sent),
        float(per_s),
        float(p50),
        float(p99),
        usage.server,
        usage.generator,
        usage.wall,
        usage.others,
        quantiles_ms,
    )


def _timeout(messages: int, rate: float | None) -> float:
    """Generous: JVM start plus the run at a pessimistic 5000 msg/s (or the fixed rate)."""
    return 120.0 + messages / (rate if rate else 5000.0) * 2
