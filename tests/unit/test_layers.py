"""The import graph follows the layers: protocol < storage < domain < session/HTTP < app.

Every import is counted (those made only for type checking too): a lower layer never
imports a higher one, and the only import cycles are between the two modules of one pair
inside one package. Run alone with ``make layers``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("dedup_broker", "system_topics", "connectors", "examples", "harness")

# (layer, module prefixes); the most specific prefix decides. Feature rooms sit between
# the domain's base (names, policies, outcomes, producers) and its core (topics,
# subscriptions, the broker), which composes them; each room's routes are HTTP.
LAYERS: dict[int, tuple[str, ...]] = {
    0: (
        "dedup_broker",
        "dedup_broker.errors",
        "dedup_broker.config",
        "dedup_broker.metrics_registry",
        "dedup_broker.protocol",
    ),
    1: ("dedup_broker.storage", "dedup_broker.devservers"),
    2: (
        "dedup_broker.domain.names",
        "dedup_broker.domain.policies",
        "dedup_broker.domain.outcomes",
        "dedup_broker.domain.producer",
    ),
    3: (
        "dedup_broker.pip6",
        "dedup_broker.key_dedup",
        "dedup_broker.retention",
        "dedup_broker.schema",
        "dedup_broker.tiered",
        "dedup_broker.compaction",
        "dedup_broker.cluster",
        "dedup_broker.security",
        "system_topics",
    ),
    4: ("dedup_broker.domain",),
    5: ("dedup_broker.session", "dedup_broker.http", "routes"),
    6: (
        "dedup_broker.app",
        "dedup_broker.cli",
        "dedup_broker.standalone",
        "system_topics.cli",
    ),
    7: ("connectors",),
    8: ("examples", "harness"),
}
NAMES = {"protocol": 0, "storage": 1, "domain base": 2, "features": 3, "domain": 4}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules() -> dict[str, Path]:
    """Every module of the project (generated protobuf modules too: they import nothing)."""
    return {
        module_name(path): path for package in PACKAGES for path in (ROOT / package).rglob("*.py")
    }


def layer_of(module: str) -> int:
    """The layer of the longest matching prefix (a ``routes`` module is HTTP)."""
    if module.rsplit(".", 1)[-1] == "routes":
        return 5
    best, best_length = -1, -1
    for layer, prefixes in LAYERS.items():
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best_length:
                best, best_length = layer, len(prefix)
    assert best >= 0, f"{module} has no layer"
    return best


def imports_of(module: str, path: Path, modules: dict[str, Path]) -> Iterator[str]:
    """Project modules that ``module`` imports (a name imported from a package resolves to
    its submodule when there is one)."""
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in modules:
                    yield alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                if full in modules:
                    yield full
                elif base in modules:
                    yield base


def graph() -> dict[str, set[str]]:
    modules = project_modules()
    return {
        name: {m for m in imports_of(name, path, modules) if m != name}
        for name, path in modules.items()
    }


def strongly_connected(edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    found.append(sorted(component))
    return found


def test_no_module_imports_a_higher_layer() -> None:
    edges = graph()
    upward = [
        f"{module} (layer {layer_of(module)}) imports {target} (layer {layer_of(target)})"
        for module, targets in sorted(edges.items())
        for target in sorted(targets)
        if layer_of(target) > layer_of(module)
    ]
    assert not upward, "\n".join(upward)


def test_cycles_stay_within_one_pair_of_one_package() -> None:
    cycles = [c for c in strongly_connected(graph()) if len(c) > 1]
    wide = [c for c in cycles if len(c) > 2 or len({m.rpartition(".")[0] for m in c}) > 1]
    assert not wide, "\n".join(" <-> ".join(c) for c in wide)


def test_every_module_has_a_layer() -> None:
    for module in project_modules():
        layer_of(module)
