"""``make images`` and ``make test-containers``: a Docker engine, the local images, the tier.

``python -m dedup_broker.devservers.container_tier images`` installs Debian's ``docker.io``
and ``debootstrap`` when missing (as root), starts ``dockerd`` when no engine answers,
builds the images that are missing or stale (``images``) and stops the engine again if it
started it. ``test`` does the same and runs ``tests/containers`` against that engine in
between, with Docker required (no skips) and testcontainers' Ryuk off (it would have to be
pulled; the tests remove their containers themselves). ``engine-up`` / ``engine-down``
keep an engine running between commands, for working on the tier by hand.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys
import time
from types import FrameType

from dedup_broker.devservers import images
from dedup_broker.devservers.docker_engine import (
    DockerEngine,
    docker_sdk,
    ensure_tools,
    stop_recorded_engine,
)
from dedup_broker.errors import DevServerError

TESTS = "tests/containers"
REQUIRE_ENV = "DEDUP_BROKER_REQUIRE_DOCKER"
"""Set by ``test``: the tier fails instead of skipping when Docker or an image is missing."""
PYTEST_STOP_SECONDS = 90.0


def _say(line: str) -> None:
    print(f"[containers] {line}", flush=True)


def _interrupt_on_sigterm() -> None:
    """SIGTERM ends the command like Ctrl-C, so the engine it started is stopped."""

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupt)


def build(refresh: bool) -> tuple[DockerEngine, str]:
    """The engine (started if need be) with every image built; stop it when done."""
    engine = DockerEngine()
    host = engine.start()
    _say(f"Docker engine: {host}" + (" (started here)" if engine.started_here else ""))
    try:
        client = docker_sdk().DockerClient(base_url=host, timeout=images.BUILD_TIMEOUT_SECONDS)
        try:
            images.build_images(client, refresh=refresh, progress=_say)
        finally:
            client.close()
    except BaseException:
        engine.stop()
        raise
    return engine, host


def run_tests(host: str, pytest_args: list[str]) -> int:
    """pytest on the tier against ``host``; on an interrupt the run is asked to stop (its
    fixtures remove their containers) before the interrupt goes on."""
    env = dict(
        os.environ,
        DOCKER_HOST=host,
        TESTCONTAINERS_RYUK_DISABLED="true",
        **{REQUIRE_ENV: "1"},
    )
    # Test paths given on the command line replace the whole tier.
    paths = [arg for arg in pytest_args if arg.startswith(TESTS)]
    argv = [sys.executable, "-m", "pytest", "-q", "--durations=10"]
    argv += [*pytest_args] if paths else [TESTS, *pytest_args]
    started = time.monotonic()
    process = subprocess.Popen(argv, cwd=images.ROOT, env=env, stdin=subprocess.DEVNULL)
    try:
        code = process.wait()
    except BaseException:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(PYTEST_STOP_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        raise
    _say(f"{TESTS}: exit {code} in {time.monotonic() - started:.0f} s")
    return code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dedup_broker.devservers.container_tier")
    commands = parser.add_subparsers(dest="command", required=True)
    for name, text in (
        ("images", "build the missing or stale images"),
        ("test", "build the images, then run tests/containers (extra arguments go to pytest)"),
    ):
        command = commands.add_parser(name, help=text)
        command.add_argument(
            "--refresh",
            action="store_true",
            help="debootstrap again and build without the layer cache",
        )
    commands.add_parser("engine-up", help="start a Docker engine and leave it running")
    commands.add_parser("engine-down", help="stop the engine engine-up (or a killed run) left")
    args, rest = parser.parse_known_args(argv)
    if rest and args.command != "test":
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    logging.basicConfig(level=logging.INFO, format="[containers] %(message)s")
    _interrupt_on_sigterm()
    try:
        if args.command == "engine-down":
            _say("stopped the engine" if stop_recorded_engine() else "no engine of ours runs")
            return 0
        if args.command == "engine-up":
            host = DockerEngine().start()
            _say(f"engine up; for docker and pytest: export DOCKER_HOST={host}")
            return 0
        started = time.monotonic()
        if args.command == "test":
            ensure_tools("docker-compose")
        engine, host = build(args.refresh)
        try:
            code = run_tests(host, rest) if args.command == "test" else 0
        finally:
            if engine.started_here:
                _say("stopping the Docker engine started here")
            engine.stop()
        _say(f"done in {time.monotonic() - started:.0f} s")
        return code
    except DevServerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
