"""Rooms stay small: no module over 500 lines, no class over 30 methods.

Counted in the shipped packages (generated protobuf modules aside). A class's methods are
its own and those it inherits from the project's classes, by name (an override counts
once), properties included: a class assembled from base classes is as large as what it
inherits.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("dedup_broker", "system_topics", "connectors")
MAX_LINES = 500
MAX_METHODS = 30


@dataclass(frozen=True)
class ClassInfo:
    where: str
    methods: frozenset[str]
    bases: tuple[str, ...]


def modules() -> list[Path]:
    return sorted(
        path
        for package in PACKAGES
        for path in (ROOT / package).rglob("*.py")
        if not path.name.endswith("_pb2.py")
    )


def base_name(node: ast.expr) -> str:
    if isinstance(node, ast.Subscript):  # Generic[C], Protocol[T]
        node = node.value
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


def classes() -> dict[str, list[ClassInfo]]:
    """Every class of the packages, by name."""
    found: dict[str, list[ClassInfo]] = {}
    for path in modules():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                methods = frozenset(
                    item.name
                    for item in node.body
                    if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)
                )
                where = f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"
                bases = tuple(base_name(base) for base in node.bases)
                found.setdefault(node.name, []).append(ClassInfo(where, methods, bases))
    return found


def all_methods(
    info: ClassInfo, known: dict[str, list[ClassInfo]], seen: frozenset[str]
) -> set[str]:
    methods = set(info.methods)
    for base in info.bases:
        if base in seen or base in ("Protocol", "Generic", "object"):
            continue
        for inherited in known.get(base, []):
            methods |= all_methods(inherited, known, seen | {base})
    return methods


def test_no_module_is_over_500_lines() -> None:
    long = [
        f"{path.relative_to(ROOT)}: {lines} lines"
        for path in modules()
        if (lines := len(path.read_text().splitlines())) > MAX_LINES
    ]
    assert not long, "\n".join(long)


def test_no_class_has_over_30_methods() -> None:
    known = classes()
    large = [
        f"{info.where}: {count} methods"
        for name, infos in known.items()
        for info in infos
        if (count := len(all_methods(info, known, frozenset({name})))) > MAX_METHODS
    ]
    assert not large, "\n".join(large)


def test_inherited_methods_count() -> None:
    base = ClassInfo("base", frozenset({"a", "b"}), ())
    child = ClassInfo("child", frozenset({"b", "c"}), ("Base", "Protocol"))
    known = {"Base": [base], "Child": [child]}
    assert all_methods(child, known, frozenset({"Child"})) == {"a", "b", "c"}
