"""docker/compose.yaml run from the images built here, with host networking.

``docker/compose.local.yaml`` swaps in the local images and puts every service on the
host's network on 127.0.0.1. Host networking refuses published ports, and an override
cannot take compose.yaml's ``ports:`` away: Compose v1 (Debian 12's ``docker-compose``)
only merges lists, and v2's ``!reset`` tag breaks v1's parser. So the local stack is
compose.yaml with its ``ports:`` removed (and, for v1, the top-level ``name:``, which it
predates), written to a work directory, plus compose.local.yaml::

    python -m dedup_broker.devservers.compose_local up -d --no-build
    python -m dedup_broker.devservers.compose_local down --volumes

Arguments go to ``docker compose`` (or ``docker-compose``) with the project name
``dedup-broker-local``; the ports are compose.local.yaml's variables.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

from dedup_broker.devservers import distribution
from dedup_broker.errors import DevServerError

DOCKER_DIR = Path(__file__).resolve().parents[2] / "docker"
COMPOSE_FILE = DOCKER_DIR / "compose.yaml"
LOCAL_FILE = DOCKER_DIR / "compose.local.yaml"
PROJECT = "dedup-broker-local"


def compose_command() -> list[str]:
    """``docker compose`` (v2) when the CLI has it, else ``docker-compose`` (v1)."""
    docker = shutil.which("docker")
    if docker is not None:
        probe = subprocess.run(
            [docker, "compose", "version"],
            capture_output=True,
            stdin=subprocess.DEVNULL,
            check=False,
            timeout=30,
        )
        if probe.returncode == 0:
            return [docker, "compose"]
    legacy = shutil.which("docker-compose")
    if legacy is None:
        raise DevServerError(
            "neither `docker compose` nor docker-compose is installed "
            "(Debian: apt-get install -y docker-compose)"
        )
    return [legacy]


def without_published_ports(text: str, drop_name: bool) -> str:
    """compose.yaml's text without its ``ports:`` blocks (and the top-level ``name:``)."""
    lines = text.splitlines(keepends=True)
    kept: list[str] = []
    skipping_under: int | None = None
    for line in lines:
        indent = len(line) - len(line.lstrip(" "))
        if skipping_under is not None:
            item = line.lstrip(" ").startswith("- ") and indent >= skipping_under
            if line.strip() and (indent > skipping_under or item):
                continue
            skipping_under = None
        if re.match(r"\s+ports:\s*$", line):
            skipping_under = indent
            continue
        if drop_name and re.match(r"name:", line):
            continue
        kept.append(line)
    return "".join(kept)


def compose_arguments(command: list[str], work_dir: Path, project: str) -> list[str]:
    """The compose command line for the local stack (its derived file in ``work_dir``)."""
    legacy = command[-1].endswith("docker-compose")
    work_dir.mkdir(parents=True, exist_ok=True)
    derived = work_dir / "compose.yaml"
    derived.write_text(without_published_ports(COMPOSE_FILE.read_text(), drop_name=legacy))
    return [
        *command,
        "--project-name",
        project,
        "--project-directory",
        str(DOCKER_DIR),
        "-f",
        str(derived),
        "-f",
        str(LOCAL_FILE),
    ]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    try:
        command = compose_command()
    except DevServerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    work_dir = distribution.cache_root() / "compose-local"
    return subprocess.run([*compose_arguments(command, work_dir, PROJECT), *args]).returncode


if __name__ == "__main__":
    sys.exit(main())
