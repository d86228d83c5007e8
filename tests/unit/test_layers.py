"""The import graph follows the layers, folder by folder.

Every folder (package) of the project sits on one layer; a module's layer is its
folder's. A module never imports one of a higher layer (imports made only for type
checking count too), the only import cycles are between the two modules of one pair
inside one folder, and outside ``dedup_broker/storage`` storage is reached through its
door, ``dedup_broker.storage.api``, except by the composition roots. Run alone with
``make layers``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("dedup_broker", "system_topics", "connectors", "examples", "harness")

# Folder -> layer, lowest first. Inside storage the rooms have an order of their own.
FOLDER_LAYERS: dict[str, float] = {
    # base: errors, config, metrics registry, small helpers; the sans-IO codec
    "dedup_broker": 0,
    "dedup_broker.protocol": 0,
    "dedup_broker.devservers": 0.5,
    # storage: the door (api, values, record formats), then its rooms
    "dedup_broker.storage": 1.0,
    "dedup_broker.storage.kafka": 1.1,
    "dedup_broker.storage.tables": 1.2,
    "dedup_broker.storage.cursor": 1.3,
    "dedup_broker.storage.offload": 1.3,
    "dedup_broker.storage.ledger": 1.4,
    "dedup_broker.storage.service": 1.5,
    # the domain's base, below every feature
    "dedup_broker.domain_base": 2,
    # features
    "dedup_broker.pip6": 3,
    "dedup_broker.key_dedup": 3,
    "dedup_broker.retention": 3,
    "dedup_broker.tiered": 3,
    "dedup_broker.compaction": 3,
    "dedup_broker.schema": 3,
    "dedup_broker.security": 3,
    "dedup_broker.backlog": 3,
    "dedup_broker.cluster": 3,
    "dedup_broker.transactions": 3,
    "system_topics": 3,
    # the domain core: broker, topics, subscriptions
    "dedup_broker.domain": 4,
    "dedup_broker.domain.non_persistent": 4,
    # the wire: Pulsar sessions and HTTP routes
    "dedup_broker.session": 5,
    "dedup_broker.http": 5,
    # composition roots
    "dedup_broker.app": 6,
    # users of the broker, and the test and bench harness
    "connectors": 7,
    "connectors.wire": 7,
    "examples": 8,
    "examples.demo": 8,
    "harness": 8,
}

STORAGE = "dedup_broker.storage"
STORAGE_DOOR = "dedup_broker.storage.api"
COMPOSITION_ROOTS = ("dedup_broker.app", "harness")
"""They build storage's implementations (``storage/service``) and may reach behind the door."""


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


def folder_of(module: str, path: Path) -> str:
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def layer_of(module: str, modules: dict[str, Path]) -> float:
    folder = folder_of(module, modules[module])
    assert folder in FOLDER_LAYERS, f"folder {folder} (of {module}) has no layer"
    return FOLDER_LAYERS[folder]


def imports_of(module: str, path: Path, modules: dict[str, Path]) -> Iterator[str]:
    """Project modules that ``module`` imports (a name imported from a package resolves to
    its submodule when there is one)."""
    tree = ast.parse(path.read_text(), str(path))
    package = folder_of(module, path)
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


def within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_every_folder_has_a_layer() -> None:
    modules = project_modules()
    for module in modules:
        layer_of(module, modules)


def test_no_module_imports_a_higher_folder() -> None:
    modules = project_modules()
    upward = [
        f"{module} ({layer_of(module, modules)}) imports {target} ({layer_of(target, modules)})"
        for module, targets in sorted(graph().items())
        for target in sorted(targets)
        if layer_of(target, modules) > layer_of(module, modules)
    ]
    assert not upward, "\n".join(upward)


def test_cycles_stay_within_one_pair_of_one_folder() -> None:
    cycles = [c for c in strongly_connected(graph()) if len(c) > 1]
    wide = [c for c in cycles if len(c) > 2 or len({m.rpartition(".")[0] for m in c}) > 1]
    assert not wide, "\n".join(" <-> ".join(c) for c in wide)


def test_storage_is_reached_through_its_door() -> None:
    behind = [
        f"{module} imports {target}"
        for module, targets in sorted(graph().items())
        if not within(module, STORAGE) and not any(within(module, r) for r in COMPOSITION_ROOTS)
        for target in sorted(targets)
        if within(target, STORAGE) and target != STORAGE_DOOR
    ]
    assert not behind, "\n".join(behind)
