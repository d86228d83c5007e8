"""``make preflight``: one table of every external piece, answered in seconds.

Each piece of ``pieces.PIECES`` gets one row: found on this machine (where), provisioned
earlier (in the cache), external (an environment variable names a server), will be
provisioned (from where), or missing, with the exact line that installs it on Debian.
The exit code is 1 when a piece the asked-for command needs (``--for demo``, ``--for
test``; both by default) is missing and cannot be provisioned, so ``make test`` and
``make demo`` stop within seconds, naming all of them at once, instead of failing one
fixture at a time half an hour in.

Standard library only: the Makefile runs it with the system's Python, before the virtual
environment is created.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

from dedup_broker.devservers import fetch, pieces
from dedup_broker.devservers.pieces import Piece, Target
from dedup_broker.errors import DevServerError

TARGETS: tuple[Target, ...] = ("demo", "test")
REACH_TIMEOUT_SECONDS = 4.0

FOUND = "found"
CACHED = "cached"
EXTERNAL = "external"
WILL_PROVISION = "will provision"
MISSING = "MISSING"
ABSENT = "absent"
"""An optional piece that is not there: the tiers using it skip or are not run."""


@dataclass(frozen=True)
class Row:
    piece: Piece
    status: str
    where: str
    needed_for: tuple[Target, ...]

    @property
    def blocking(self) -> bool:
        """Missing, needed, and nothing can provide it."""
        return self.status == MISSING and bool(self.needed_for)


def survey(targets: Sequence[Target] = TARGETS, check_registries: bool = True) -> list[Row]:
    """One row per piece; registries are asked (in parallel, briefly) only when some needed
    piece would come from them."""
    mode = pieces.provision_mode()
    apt = mode == "auto" and pieces.apt_available()
    found = {piece.key: piece.find() for piece in pieces.PIECES}
    wanted = {
        piece.key: tuple(target for target in targets if piece.needed(target))
        for piece in pieces.PIECES
    }
    registries = set()
    for piece in pieces.PIECES:
        if found[piece.key] is None and wanted[piece.key] and mode != "none":
            if piece.user_space is not None:
                registries.add(piece.user_space.registry)
            if piece.resolved_by is not None:
                registries.add("Maven Central")
    unreachable = _unreachable(sorted(registries)) if check_registries else {}
    rows: list[Row] = []
    for piece in pieces.PIECES:
        location = found[piece.key]
        external = piece.env and _environ(piece.env)
        if external and location is None:
            rows.append(Row(piece, EXTERNAL, f"{piece.env}={external}", ()))
            continue
        if location is not None:
            status = CACHED if location.origin == "cache" else FOUND
            detail = f" ({location.detail})" if location.detail else ""
            rows.append(Row(piece, status, location.path + detail, wanted[piece.key]))
            continue
        if piece.optional:
            rows.append(Row(piece, ABSENT, piece.purpose.removeprefix("optional: "), ()))
            continue
        rows.append(_to_provide(piece, wanted[piece.key], mode, apt, unreachable, rows))
    return rows


def _to_provide(
    piece: Piece,
    needed_for: tuple[Target, ...],
    mode: str,
    apt: bool,
    unreachable: dict[str, str],
    earlier: list[Row],
) -> Row:
    """The row of a required piece that is not here: how it will come, or why it cannot."""
    sources: list[str] = []
    reasons: list[str] = []
    if apt and piece.debian:
        sources.append(f"apt-get install {piece.debian}")
    if piece.user_space is not None and mode != "none":
        reason = unreachable.get(piece.user_space.registry)
        if reason is None:
            sources.append(piece.user_space.describe())
        else:
            reasons.append(reason)
    if piece.resolved_by is not None:
        by = next((row for row in earlier if row.piece.key == piece.resolved_by), None)
        reason = unreachable.get("Maven Central")
        if by is not None and by.status != MISSING and reason is None and mode != "none":
            sources.append("Maven Central, resolved by Maven")
        elif reason is not None:
            reasons.append(reason)
        else:
            reasons.append(f"needs {pieces.BY_KEY[piece.resolved_by].label}")
    if mode == "none":
        reasons.append(f"{pieces.PROVISION_ENV}=none")
    if not needed_for:
        where = "not needed here" if not sources else "when needed: " + ", else ".join(sources)
        return Row(piece, "not needed", where, ())
    if sources:
        return Row(piece, WILL_PROVISION, ", else ".join(sources), needed_for)
    return Row(piece, MISSING, "; ".join(reasons) or "nothing provisions it", needed_for)


def _environ(name: str) -> str:
    return os.environ.get(name, "").strip()


def _unreachable(registries: list[str]) -> dict[str, str]:
    if not registries:
        return {}
    with concurrent.futures.ThreadPoolExecutor(len(registries)) as pool:
        answers = pool.map(lambda name: fetch.reachable(name, REACH_TIMEOUT_SECONDS), registries)
        return {
            name: reason
            for name, reason in zip(registries, answers, strict=True)
            if reason is not None
        }


def render(rows: Sequence[Row]) -> str:
    """The table as text, widest cells cut so that a row stays on one line."""
    header = ("piece", "needed for", "status", "where / from", "install (Debian, root)")
    body = [
        (
            row.piece.label,
            ", ".join(row.needed_for) or ("optional" if row.piece.optional else "-"),
            row.status,
            row.where,
            row.piece.install_line or "- (resolved by Maven)",
        )
        for row in rows
    ]
    widths = [min(60, max(len(line[i]) for line in [header, *body])) for i in range(5)]
    lines = []
    for line in [header, *body]:
        cells = [_fit(cell, width) for cell, width in zip(line, widths, strict=True)]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def _fit(cell: str, width: int) -> str:
    return cell.ljust(width) if len(cell) <= width else cell[: width - 3] + "..."


def summary(rows: Sequence[Row], targets: Sequence[Target]) -> tuple[str, int]:
    """The closing lines and the exit code."""
    blocking = [row for row in rows if row.blocking]
    what = " and ".join(f"make {target}" for target in targets)
    if not blocking:
        coming = [row.piece.label for row in rows if row.status == WILL_PROVISION]
        text = f"ready for {what}"
        if coming:
            text += f"; first use provisions: {', '.join(coming)} (into {fetch.cache_root()})"
        return text, 0
    lines = [f"cannot run {what}: missing, and nothing here can provide it:"]
    for row in blocking:
        install = f"; install: {row.piece.install_line}" if row.piece.debian else ""
        alternative = f", or set {row.piece.env}" if row.piece.env else ""
        lines.append(f"  - {row.piece.label} ({row.where}){install}{alternative}")
    return "\n".join(lines), 1


def provision(rows: Sequence[Row]) -> None:
    """Provide, now, every needed piece the table says will be provisioned."""
    from dedup_broker.devservers import distribution

    for row in rows:
        if row.status != WILL_PROVISION:
            continue
        started = time.monotonic()
        if row.piece.key == "kafka":
            where = str(distribution.ensure_kafka())
        else:
            where = pieces.provide(row.piece.key).path
        print(f"provisioned {row.piece.label}: {where} ({time.monotonic() - started:.0f} s)")


def run(targets: Sequence[Target], do_provision: bool = False) -> int:
    """Print the table and the verdict; with ``do_provision``, provide what is missing."""
    started = time.monotonic()
    try:
        rows = survey(targets)
    except DevServerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(render(rows))
    text, code = summary(rows, targets)
    print(f"\n{text} ({time.monotonic() - started:.1f} s)")
    if code == 0 and do_provision:
        try:
            provision(rows)
        except DevServerError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
    return code


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--for",
        dest="targets",
        choices=("demo", "test", "all"),
        default="all",
        help="the command to check for (default: both make demo and make test)",
    )
    parser.add_argument(
        "--provision",
        action="store_true",
        help="also fetch or install, now, what would be provisioned on first use",
    )


def handle(args: argparse.Namespace) -> int:
    chosen = TARGETS if args.targets == "all" else (args.targets,)
    return run(chosen, args.provision)


def add_preflight_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``dedup-broker dev preflight``."""
    parser = commands.add_parser(
        "preflight", help="check every external piece make demo and make test need"
    )
    add_arguments(parser)
    parser.set_defaults(func=handle)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m dedup_broker.devservers.preflight",
        description="One table of every external piece: found, provisioned, or missing.",
    )
    add_arguments(parser)
    return handle(parser.parse_args(argv))


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
