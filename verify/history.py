"""A run's history on disk: what was acknowledged, what each path delivered, the faults.

Plain text, one line per event, so that a failed run can be read with ``grep`` and
checked again later (``python -m verify check RUN_DIR``)::

    acked/<topic>.txt                 id seconds key        (key "-" when none)
    observed/<path>@<topic>.txt       id consumer group seconds
    observed/<path>@<topic>.settle.txt  the same, once acknowledgements had settled
    faults.jsonl                      {"kind", "target", "at", "ended"}
    samples.jsonl                     {"at", "rss_mb": [per broker], "acked"}
    spec.json                         topics (full name, ids sent), paths, profile
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import IO, Any

from verify.check import Acked, Delivery, Fault, PathResult, PathSpec, check_path

_NONE = "-"


class _Lines:
    """One append-only text file shared by threads."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[str] = path.open("a", buffering=1 << 16)
        self._lock = threading.Lock()

    def write(self, line: str) -> None:
        with self._lock:
            self._file.write(line)

    def flush(self) -> None:
        with self._lock:
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            self._file.close()


class History:
    """Writes a run's history; every method may be called from any thread."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        run_dir.mkdir(parents=True, exist_ok=True)
        self.started = time.monotonic()
        self._files: dict[str, _Lines] = {}
        self._lock = threading.Lock()
        self.topics: dict[str, dict[str, Any]] = {}
        self.paths: list[PathSpec] = []
        self.faults: list[Fault] = []

    def now(self) -> float:
        return time.monotonic() - self.started

    def _lines(self, relative: str) -> _Lines:
        with self._lock:
            lines = self._files.get(relative)
            if lines is None:
                lines = self._files[relative] = _Lines(self.run_dir / relative)
            return lines

    # --- what producers and paths report ------------------------------------------------
    def topic(self, tag: str, name: str, **facts: Any) -> None:
        self.topics[tag] = {"name": name, "sent": 0, **facts}

    def sent(self, tag: str, upto: int) -> None:
        """Ids ``0 .. upto-1`` of ``tag`` have been handed to a producer."""
        self.topics[tag]["sent"] = max(self.topics[tag]["sent"], upto)

    def acked(self, tag: str, message_id: int, key: str = "") -> None:
        self._lines(f"acked/{tag}.txt").write(f"{message_id} {self.now():.3f} {key or _NONE}\n")

    def path(self, spec: PathSpec) -> None:
        self.paths.append(spec)

    def delivered(
        self,
        spec: PathSpec,
        message_id: int,
        consumer: int = 0,
        group: str = "",
        *,
        settle: bool = False,
    ) -> None:
        suffix = ".settle.txt" if settle else ".txt"
        self._lines(f"observed/{spec.path}@{spec.topic}{suffix}").write(
            f"{message_id} {consumer} {group or _NONE} {self.now():.3f}\n"
        )

    def sample(self, **values: Any) -> None:
        """Resource figures at this moment (the brokers' memory, say)."""
        line = json.dumps({"at": round(self.now(), 3), **values})
        self._lines("samples.jsonl").write(line + "\n")

    def fault(self, fault: Fault) -> None:
        self.faults.append(fault)
        self._lines("faults.jsonl").write(json.dumps(asdict(fault)) + "\n")

    def flush(self) -> None:
        """Write what is buffered (so that a run in progress can be read)."""
        with self._lock:
            files = list(self._files.values())
        for lines in files:
            lines.flush()

    # --- closing --------------------------------------------------------------------
    def close(self, **facts: Any) -> None:
        with self._lock:
            for lines in self._files.values():
                lines.close()
            self._files.clear()
        spec = {
            "topics": self.topics,
            "paths": [p.to_json() for p in self.paths],
            **facts,
        }
        (self.run_dir / "spec.json").write_text(json.dumps(spec, indent=2) + "\n")


# --- reading a kept history back ------------------------------------------------------
def _rows(path: Path) -> Iterator[list[str]]:
    if not path.exists():
        return
    with path.open() as file:
        for line in file:
            fields = line.split()
            if fields:
                yield fields


def load_acked(run_dir: Path, tag: str) -> tuple[list[Acked], list[float]]:
    """Acknowledged messages of a topic, and the times of the acknowledgements."""
    acked, times = [], []
    for fields in _rows(run_dir / "acked" / f"{tag}.txt"):
        key = "" if fields[2] == _NONE else fields[2]
        acked.append(Acked(int(fields[0]), key))
        times.append(float(fields[1]))
    return acked, times


def load_deliveries(run_dir: Path, spec: PathSpec, *, settle: bool = False) -> list[Delivery]:
    suffix = ".settle.txt" if settle else ".txt"
    return [
        Delivery(int(f[0]), int(f[1]), "" if f[2] == _NONE else f[2])
        for f in _rows(run_dir / "observed" / f"{spec.path}@{spec.topic}{suffix}")
    ]


def load_faults(run_dir: Path) -> list[Fault]:
    path = run_dir / "faults.jsonl"
    if not path.exists():
        return []
    return [Fault(**json.loads(line)) for line in path.read_text().splitlines() if line]


def load_samples(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "samples.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def recheck(run_dir: Path) -> tuple[list[PathResult], dict[str, list[float]]]:
    """Every path of a kept run checked again from its files; also each producer's
    acknowledgement times (for the failover gaps)."""
    spec = json.loads((run_dir / "spec.json").read_text())
    acked: dict[str, list[Acked]] = {}
    ack_times: dict[str, list[float]] = {}
    for tag in spec["topics"]:
        acked[tag], ack_times[tag] = load_acked(run_dir, tag)
    dropped = chunks_dropped_by_client(run_dir / "client.log")
    results = []
    for data in spec["paths"]:
        path = PathSpec.of_json(data)
        sent = range(int(spec["topics"][path.topic]["sent"]))
        results.append(
            check_path(
                path,
                acked[path.topic],
                sent,
                load_deliveries(run_dir, path),
                load_deliveries(run_dir, path, settle=True),
                dropped.get(path.topic, set()),
            )
        )
    return results, ack_times


_DROPPED_CHUNKS = re.compile(r"chunk whose chunk id is invalid \(uuid: verify-(.+)-(\d+) chunkId")


def chunks_dropped_by_client(client_log: Path) -> dict[str, set[int]]:
    """Per topic, the chunked messages the client dropped: a redelivery sent the first
    chunk of a message again while the client held some of its chunks from before the
    reconnection, and the C++-based client then discards the message (as with Pulsar) and
    gets it at a later redelivery. The chunk's uuid is the producer's name and the id."""
    dropped: dict[str, set[int]] = {}
    if not client_log.exists():
        return dropped
    with client_log.open(errors="replace") as lines:
        for line in lines:
            if (match := _DROPPED_CHUNKS.search(line)) is not None:
                dropped.setdefault(match[1], set()).add(int(match[2]))
    return dropped


_SEND_ERROR = re.compile(r"Received send error from server: (.*)$")


def send_errors_seen(client_log: Path) -> Counter[str]:
    """The send errors the client received, by message. The official clients drop their
    connection on each (every producer and consumer sharing it reconnects), so a run's
    count says how often the broker made them do so."""
    seen: Counter[str] = Counter()
    if not client_log.exists():
        return seen
    with client_log.open(errors="replace") as lines:
        for line in lines:
            if (match := _SEND_ERROR.search(line)) is not None:
                seen[_NUMBER.sub("N", match[1].strip())] += 1
    return seen


_NUMBER = re.compile(r"\d+")
