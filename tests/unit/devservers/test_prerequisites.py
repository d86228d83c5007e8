"""The README's Prerequisites, ``.ci/run`` and the preflight name the same external pieces.

A system dependency added in one place only fails here. To add one: a ``Piece`` in
``dedup_broker/devservers/pieces.py`` (its Debian package, optional or not, whether CI
installs it), a row in the README's table, and, for CI, a ``packages+=(...)`` line in
``.ci/run``.
"""

from __future__ import annotations

import re
from pathlib import Path

from dedup_broker.devservers import pieces

ROOT = Path(__file__).resolve().parents[3]

Entry = tuple[str | None, bool, bool]
"""Debian package (None: none), optional, installed by ``.ci/run``."""


def readme_table() -> dict[str, Entry]:
    """The Prerequisites table: piece label -> its entry."""
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## Prerequisites\n", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, Entry] = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if (
            not line.startswith("|")
            or len(cells) < 4
            or cells[0] in ("piece", "")
            or set(cells[0]) <= {"-"}
        ):
            continue
        package = re.fullmatch(r"`([^`]+)`", cells[1])
        rows[cells[0]] = (
            package.group(1) if package else None,
            cells[2].startswith("optional"),
            cells[3] == "yes",
        )
    return rows


def ci_packages() -> set[str]:
    """Every package ``.ci/run`` may install (its ``packages+=(...)`` lines)."""
    text = (ROOT / ".ci" / "run").read_text()
    return {name for group in re.findall(r"packages\+=\(([^)]*)\)", text) for name in group.split()}


def preflight_table() -> dict[str, Entry]:
    return {
        piece.label: (piece.debian, piece.optional, piece.in_ci and piece.debian is not None)
        for piece in pieces.PIECES
    }


def test_the_readme_lists_what_the_preflight_checks() -> None:
    readme = readme_table()
    preflight = preflight_table()
    assert readme == preflight, (
        "README.md's Prerequisites table and dedup_broker/devservers/pieces.py differ:\n"
        f"  only in the README: {sorted(set(readme.items()) - set(preflight.items()))}\n"
        f"  only in the preflight: {sorted(set(preflight.items()) - set(readme.items()))}"
    )


def test_ci_installs_what_the_preflight_marks_for_ci() -> None:
    installed = ci_packages()
    expected = {piece.debian for piece in pieces.PIECES if piece.in_ci and piece.debian}
    assert installed == expected, (
        ".ci/run's packages+=(...) lines and the pieces with in_ci=True differ:\n"
        f"  only in .ci/run: {sorted(installed - expected)}\n"
        f"  only in pieces.py: {sorted(expected - installed)}"
    )


def test_every_piece_is_named_once_and_says_how_to_get_it() -> None:
    keys = [piece.key for piece in pieces.PIECES]
    assert len(keys) == len(set(keys))
    for piece in pieces.PIECES:
        assert piece.debian or piece.resolved_by, piece.key
        assert piece.optional or piece.needed_for, f"{piece.key}: required for nothing"
        assert not (piece.optional and piece.needed_for), f"{piece.key}: optional yet needed"
