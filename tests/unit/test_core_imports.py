"""The core package stands alone: nothing in ``dedup_broker`` imports the Spark connectors,
the example programs or the test harness, which are built on top of it."""

from __future__ import annotations

import ast
from pathlib import Path

import dedup_broker

FORBIDDEN = ("connectors", "examples", "harness")
"""Top-level packages that use the broker (the test and bench harness among them) and so
must never be used by it."""


def _imported_modules(tree: ast.AST) -> list[str]:
    """Every absolute module name an ``import`` or ``from ... import`` statement names."""
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return names


def _forbidden_imports() -> list[str]:
    root = Path(dedup_broker.__file__).resolve().parent
    found: list[str] = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for module in _imported_modules(tree):
            if module.split(".")[0] in FORBIDDEN:
                found.append(f"{path.relative_to(root.parent)} imports {module}")
    return found


def test_core_package_imports_neither_connectors_nor_examples() -> None:
    assert _forbidden_imports() == []


def test_the_import_walk_sees_imports_inside_functions() -> None:
    source = "def f():\n    from connectors.sink import PulsarSink\n    import examples.demo\n"
    assert _imported_modules(ast.parse(source)) == ["connectors.sink", "examples.demo"]
