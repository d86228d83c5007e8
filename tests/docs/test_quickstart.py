"""``docs/quickstart.md`` run as a reader runs it: every block, in order, as written.

How the page is read (keep a new block to these rules, or the test fails):

- Fenced blocks are ```` ```bash ````, ```` ```python ```` or ```` ```text ````, with the
  fence at the start of its line. Any other kind, or an indented fence, fails the test,
  so no block can be added that the test does not run.
- A ``python`` block is a file: its first line is ``# <name>.py``. The test writes the
  block (its addresses changed, see below) to that name in the working directory; a
  later ``bash`` block must run it (the page says "save this as ...").
- A ``bash`` block runs with ``bash -e -o pipefail -c``, in page order, in a scratch
  directory in which ``.venv`` links to the project's virtual environment (the page's
  commands run from the clone's directory). It must exit 0.
- A ``text`` block after a ``bash`` block, with prose at most between them, is what that
  block prints on stdout, line for line (trailing spaces and blank lines at the end
  aside); a line ``...`` stands for any number of lines. A ``bash`` block without one
  must print nothing on stdout. stderr is not compared (Spark's log, curl's meter).
- ``<!-- quickstart: background -->`` as the last non-blank line before a ``bash`` block
  marks a command that stays in the foreground (the broker): the test starts it in a process
  group of its own, waits until its output matches its ``text`` block, runs the rest of
  the page, then stops it as Ctrl-C does (SIGINT to that group) and expects exit status
  0 and ``standalone: stopped`` as its last line (the page's last step says so).

Only addresses differ from the page: the broker, Kafka, Redis and the deletion worker
listen on free ports of 127.0.0.1. In the blocks and in their expected output,
``localhost:6650``, ``localhost:8080``, ``127.0.0.1:9092`` and ``127.0.0.1:6379`` become
those ports, and ``dedup-broker standalone`` gets the matching port options
(``--kafka-port``, ``--set brokerServicePort=...``, ...). Any other ``localhost`` or
default port in a block fails the test rather than reach a server outside it.

standalone starts its own Kafka and Redis here (``KAFKA_BOOTSTRAP_SERVERS`` and
``REDIS_URL`` are removed from the blocks' environment). Everything started is stopped
by process id: the background group, then whatever standalone reported starting.

The page takes about 50 s on an idle 2-core machine: standalone's start (~10 s), two
Spark local-mode scripts (12-14 s each), two consumers waiting out their 1 s receive
timeout, and the stop.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import dedup_broker
from dedup_broker.config import ENV_PREFIX
from dedup_broker.devservers.process import free_ports, pid_alive, wait_until

pytestmark = pytest.mark.timeout(900)

SOURCE_ROOT = Path(dedup_broker.__file__).resolve().parents[1]
PAGE = SOURCE_ROOT / "docs" / "quickstart.md"
BACKGROUND_MARKER = "<!-- quickstart: background -->"
KINDS = ("bash", "python", "text")
ELLIPSIS = "..."
STANDALONE_COMMAND = "dedup-broker standalone"
STOPPED_LINE = "standalone: stopped"
DEFAULT_ADDRESSES = re.compile(r"localhost|\b(?:6650|8080|8081|9092|9093|6379)\b")
"""What a block must not name once the known addresses are replaced."""

READY_TIMEOUT = 240.0
"""A background block's output must match within this (a first Kafka may fetch jars)."""
BLOCK_TIMEOUT = 300.0
"""A foreground block must end within this: a Spark script takes ~12 s on an idle
2-core machine, several times that on a busy one."""
STOP_TIMEOUT = 90.0
"""standalone bounds each of its stops (broker 30 s, worker 15 s, Redis and Kafka)."""

FENCE = re.compile(r"```(.*)")
PYTHON_FILE = re.compile(r"# ([A-Za-z0-9_-]+\.py)")
PROCESS_LINE = re.compile(r"\s+(?:kafka|redis|broker|deletion-worker)\s+pid (\d+)\s+log .+")


# --- reading the page -------------------------------------------------------------------
@dataclass
class Block:
    kind: str
    text: str
    line: int
    """Line of the opening fence, 1-based."""
    background: bool = False
    expected: str | None = None
    """For a bash block: the text block after it."""

    @property
    def where(self) -> str:
        return f"docs/quickstart.md:{self.line} ({self.kind})"


def read_page(text: str) -> list[Block]:
    """The page's bash and python blocks in order, each bash block with its output."""
    lines = text.splitlines()
    blocks: list[Block] = []
    previous: Block | None = None
    """The last bash or python block."""
    between: list[str] = []
    index = 0
    while index < len(lines):
        line = lines[index]
        if line.lstrip().startswith("```") and not line.startswith("```"):
            raise AssertionError(f"docs/quickstart.md:{index + 1}: an indented fence")
        fence = FENCE.fullmatch(line)
        if fence is None:
            between.append(line)
            index += 1
            continue
        kind = fence.group(1).strip()
        if kind not in KINDS:
            raise AssertionError(
                f"docs/quickstart.md:{index + 1}: a {kind or 'plain'!r} block; the test "
                f"runs only {', '.join(KINDS)} blocks (see its docstring)"
            )
        end = next((i for i in range(index + 1, len(lines)) if lines[i] == "```"), None)
        if end is None:
            raise AssertionError(f"docs/quickstart.md:{index + 1}: a block never closed")
        block = Block(kind, "\n".join(lines[index + 1 : end]) + "\n", index + 1)
        prose = [text_line for text_line in between if text_line.strip()]
        block.background = prose[-1:] == [BACKGROUND_MARKER]
        if block.background and kind != "bash":
            raise AssertionError(f"{block.where}: only a bash block runs in the background")
        if kind == "text":
            if previous is None or previous.kind != "bash":
                raise AssertionError(f"{block.where}: output that follows no bash block")
            if previous.expected is not None:
                raise AssertionError(f"{block.where}: a second output for one block")
            previous.expected = block.text
        else:
            blocks.append(block)
            previous = block
        between = []
        index = end + 1
    return blocks


def python_file_name(block: Block) -> str:
    first = block.text.splitlines()[0] if block.text.strip() else ""
    match = PYTHON_FILE.fullmatch(first)
    if match is None:
        raise AssertionError(f"{block.where}: the first line must be '# <name>.py'")
    return match.group(1)


def check_page(blocks: list[Block]) -> None:
    """The rules of the docstring that reading alone does not enforce."""
    names = [python_file_name(block) for block in blocks if block.kind == "python"]
    assert len(names) == len(set(names)), f"one file name saved twice: {names}"
    for position, block in enumerate(blocks):
        if block.kind != "python":
            continue
        name = python_file_name(block)
        later = [b.text for b in blocks[position + 1 :] if b.kind == "bash"]
        assert any(re.search(rf"python {re.escape(name)}\b", text) for text in later), (
            f"{block.where}: no later bash block runs {name}"
        )
    assert sum(STANDALONE_COMMAND in block.text for block in blocks) == 1, (
        f"the page should start {STANDALONE_COMMAND!r} once"
    )
    for block in blocks:
        if block.background:
            assert block.expected, f"{block.where}: a background block needs its output"


# --- addresses ------------------------------------------------------------------------
@dataclass(frozen=True)
class Ports:
    broker: int
    web: int
    worker: int
    kafka: int
    kafka_controller: int
    redis: int

    def replacements(self) -> dict[str, str]:
        return {
            "localhost:6650": f"127.0.0.1:{self.broker}",
            "localhost:8080": f"127.0.0.1:{self.web}",
            "127.0.0.1:9092": f"127.0.0.1:{self.kafka}",
            "127.0.0.1:6379": f"127.0.0.1:{self.redis}",
        }

    def standalone_options(self) -> str:
        settings = {
            "bindAddress": "127.0.0.1",
            "advertisedAddress": "127.0.0.1",
            "brokerServicePort": self.broker,
            "webServicePort": self.web,
            "deletionWorkerWebServicePort": self.worker,
        }
        return " ".join(
            [
                f"--kafka-port {self.kafka}",
                f"--kafka-controller-port {self.kafka_controller}",
                f"--redis-port {self.redis}",
                *(f"--set {key}={value}" for key, value in settings.items()),
            ]
        )


def localize(text: str, ports: Ports) -> str:
    """``text`` with the page's addresses replaced by the test's (output text too)."""
    for old, new in ports.replacements().items():
        text = text.replace(old, new)
    return text


def localize_command(block: Block, ports: Ports) -> str:
    """A block's text to run: the addresses replaced, standalone given its ports."""
    rest = block.text
    for old in ports.replacements():
        rest = rest.replace(old, "")
    stray = DEFAULT_ADDRESSES.search(rest.replace(STANDALONE_COMMAND, ""))
    assert stray is None, f"{block.where}: {stray.group(0)!r} is an address the test keeps"
    text = localize(block.text, ports)
    return text.replace(STANDALONE_COMMAND, f"{STANDALONE_COMMAND} {ports.standalone_options()}")


# --- output ---------------------------------------------------------------------------
def output_lines(text: str) -> list[str]:
    lines = [line.rstrip() for line in text.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def output_matches(expected: list[str], actual: list[str]) -> bool:
    """Line for line, ``...`` standing for any number of lines."""
    pattern = "".join(
        r"(?:.*\n)*?" if line == ELLIPSIS else re.escape(line) + r"\n" for line in expected
    )
    return re.fullmatch(pattern, "".join(line + "\n" for line in actual)) is not None


def assert_output(block: Block, expected: list[str], actual: list[str], stderr: str) -> None:
    if ELLIPSIS not in expected:
        assert actual == expected, f"{block.where} printed otherwise; stderr:\n{stderr}"
    assert output_matches(expected, actual), (
        f"{block.where} printed\n" + "\n".join(actual) + "\nexpected\n" + "\n".join(expected)
    )


# --- running --------------------------------------------------------------------------
def bash(text: str) -> list[str]:
    return ["bash", "-e", "-o", "pipefail", "-c", text]


def tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


class Background:
    """A block started in its own process group, its stdout collected as it comes."""

    def __init__(self, block: Block, command: str, cwd: Path, env: dict[str, str]) -> None:
        self.block = block
        self.lines: list[str] = []
        self.stderr_path = cwd / f"background-{block.line}.err"
        self._changed = threading.Condition()
        self._ended = False
        with self.stderr_path.open("w") as errors:
            self.process = subprocess.Popen(
                bash(command),
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=errors,
                text=True,
                start_new_session=True,
            )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with self._changed:
                self.lines.append(line.rstrip())
                self._changed.notify_all()
        with self._changed:
            self._ended = True
            self._changed.notify_all()

    def wait_for(self, expected: list[str], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with self._changed:
            while not output_matches(expected, self.lines):
                remaining = deadline - time.monotonic()
                assert not self._ended, (
                    f"{self.block.where} ended before printing what the page shows:\n"
                    + "\n".join(self.lines)
                    + f"\nstderr:\n{tail(self.stderr_path)}"
                )
                assert remaining > 0, (
                    f"{self.block.where} did not print what the page shows within "
                    f"{timeout:.0f} s:\n" + "\n".join(self.lines)
                )
                self._changed.wait(min(remaining, 1.0))

    def children(self) -> list[int]:
        """The process ids standalone reported starting."""
        return [int(m.group(1)) for line in self.lines if (m := PROCESS_LINE.fullmatch(line))]

    def interrupt(self) -> int:
        """Ctrl-C: SIGINT to the group; the exit status."""
        os.killpg(self.process.pid, signal.SIGINT)
        code = self.process.wait(timeout=STOP_TIMEOUT)
        self._reader.join(timeout=10)
        return code

    def kill_leftovers(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)
        for pid in self.children():
            if pid_alive(pid):
                os.kill(pid, signal.SIGKILL)
                wait_until(lambda pid=pid: not pid_alive(pid), 15)  # type: ignore[misc]


@dataclass
class Run:
    cwd: Path
    env: dict[str, str]
    ports: Ports
    background: list[Background] = field(default_factory=list)
    timings: list[str] = field(default_factory=list)

    def block(self, block: Block) -> None:
        started = time.monotonic()
        if block.kind == "python":
            (self.cwd / python_file_name(block)).write_text(localize_command(block, self.ports))
        elif block.background:
            self._background(block)
        else:
            self._foreground(block)
        self.timings.append(f"{block.where}: {time.monotonic() - started:.1f} s")

    def _expected(self, block: Block) -> list[str]:
        return output_lines(localize(block.expected or "", self.ports))

    def _background(self, block: Block) -> None:
        command = localize_command(block, self.ports)
        started = Background(block, command, self.cwd, self.env)
        self.background.append(started)
        started.wait_for(self._expected(block), READY_TIMEOUT)

    def _foreground(self, block: Block) -> None:
        done = subprocess.run(
            bash(localize_command(block, self.ports)),
            cwd=self.cwd,
            env=self.env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=BLOCK_TIMEOUT,
        )
        stderr = "\n".join(done.stderr.splitlines()[-40:])
        assert done.returncode == 0, (
            f"{block.where} exited with {done.returncode}; stdout:\n{done.stdout}\n"
            f"stderr:\n{stderr}"
        )
        assert_output(block, self._expected(block), output_lines(done.stdout), stderr)

    def stop(self) -> None:
        """Each background block as Ctrl-C stops it, the last started first."""
        for started in reversed(self.background):
            children = started.children()
            code = started.interrupt()
            output = "\n".join(started.lines)
            assert code == 0, f"{started.block.where} exited with {code} on Ctrl-C:\n{output}"
            assert started.lines[-1:] == [STOPPED_LINE], output
            assert [pid for pid in children if pid_alive(pid)] == [], output


def page_blocks() -> list[Block]:
    blocks = read_page(PAGE.read_text())
    check_page(blocks)
    return blocks


def block_environment() -> dict[str, str]:
    """The test's environment without its servers' addresses or broker settings."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(ENV_PREFIX)}
    env.pop("KAFKA_BOOTSTRAP_SERVERS", None)
    env.pop("REDIS_URL", None)
    env.pop("PYSPARK_PYTHON", None)
    # The blocks run in a scratch directory; they must import the code under test.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SOURCE_ROOT), env.get("PYTHONPATH")]))
    return env


@pytest.fixture
def run(tmp_path: Path) -> Iterator[Run]:
    venv = Path(sys.prefix)
    assert (venv / "bin" / "dedup-broker").exists(), (
        f"the tests must run in the project's virtual environment ({venv} has no dedup-broker)"
    )
    (tmp_path / ".venv").symlink_to(venv, target_is_directory=True)
    ports = Ports(*free_ports(6))
    state = Run(tmp_path, block_environment(), ports)
    try:
        yield state
    finally:
        for started in state.background:
            started.kill_leftovers()


# --- the tests ------------------------------------------------------------------------
def test_the_page_follows_the_rules() -> None:
    """Without servers, in a second: what the long test below would trip on first."""
    blocks = page_blocks()
    assert [STANDALONE_COMMAND in b.text for b in blocks if b.background] == [True]
    ports = Ports(*range(40001, 40007))
    for block in blocks:
        localize_command(block, ports)


def test_every_block_runs_as_written(run: Run) -> None:
    if shutil.which("curl") is None:
        pytest.skip("curl is missing: the page's admin calls use it (apt-get install -y curl)")
    blocks = page_blocks()
    try:
        for block in blocks:
            run.block(block)
        assert len(run.timings) == len(blocks)
        started = time.monotonic()
        run.stop()
        run.timings.append(f"Ctrl-C to the background blocks: {time.monotonic() - started:.1f} s")
    finally:
        print("\n".join(run.timings))


@pytest.mark.parametrize(
    ("expected", "actual", "matches"),
    [
        (["a", "b"], ["a", "b"], True),
        (["a", "b"], ["a", "b", "c"], False),
        (["...", "b", "..."], ["a", "b", "c"], True),
        (["...", "b", "...", "d"], ["a", "b", "c", "c", "d"], True),
        (["...", "b", "...", "d"], ["a", "b", "c", "d", "e"], False),
        (["...", "x"], ["a", "b"], False),
    ],
)
def test_output_patterns(expected: list[str], actual: list[str], matches: bool) -> None:
    assert output_matches(expected, actual) is matches


def test_a_block_the_test_would_not_run_fails_the_page() -> None:
    with pytest.raises(AssertionError, match="'sh' block"):
        read_page("```sh\necho hi\n```\n")
    with pytest.raises(AssertionError, match="indented fence"):
        read_page("- a step\n\n  ```bash\n  echo hi\n  ```\n")
    with pytest.raises(AssertionError, match="follows no bash block"):
        read_page("```python\n# a.py\n```\n\n```text\nhi\n```\n")
    with pytest.raises(AssertionError, match="a second output"):
        read_page("```bash\necho hi\n```\n\n```text\nhi\n```\n\n```text\nhi\n```\n")
    with pytest.raises(AssertionError, match=r"no later bash block runs a\.py"):
        check_page(read_page("```python\n# a.py\nprint(1)\n```\n"))
