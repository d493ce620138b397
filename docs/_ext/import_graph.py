"""The tree's import graph, read from the source with :mod:`ast` (nothing is imported).

Every import counts, type-only ones and those inside functions included, so the rules
hold for what a reader sees, not only for what runs. ``docs/architecture.md`` draws the
layers from it (through the ``psdk:layers`` marker) and ``tests/core/test_layers.py``
holds the tree to its rules: no module imports one that imports it back, packages import
only the packages below them, and none reaches into another's private modules.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping, Set
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PACKAGES: dict[str, Path] = {
    "provider_sdk": ROOT / "provider_sdk",
    "provider_sdk_docker": ROOT / "providers" / "docker" / "provider_sdk_docker",
    "provider_sdk_e2b": ROOT / "providers" / "e2b" / "provider_sdk_e2b",
    "provider_sdk_daytona": ROOT / "providers" / "daytona" / "provider_sdk_daytona",
    "provider_sdk_emulators": ROOT / "emulators" / "provider_sdk_emulators",
    "provider_sdk_templates": ROOT / "templates" / "provider_sdk_templates",
    "provider_sdk_contract": ROOT / "contract_tests" / "provider_sdk_contract",
    "provider_sdk_deepagents": ROOT / "integrations" / "deepagents" / "provider_sdk_deepagents",
    "provider_sdk_inspect": ROOT / "integrations" / "inspect" / "provider_sdk_inspect",
}
"""Each package of the tree by import name, and its folder."""

ALLOWED: dict[str, frozenset[str]] = {
    "provider_sdk": frozenset(),
    "provider_sdk_docker": frozenset({"provider_sdk"}),
    "provider_sdk_daytona": frozenset({"provider_sdk"}),
    "provider_sdk_templates": frozenset({"provider_sdk", "provider_sdk_docker"}),
    "provider_sdk_e2b": frozenset({"provider_sdk", "provider_sdk_templates"}),
    "provider_sdk_emulators": frozenset({"provider_sdk", "provider_sdk_docker"}),
    "provider_sdk_contract": frozenset({"provider_sdk"}),
    "provider_sdk_deepagents": frozenset({"provider_sdk"}),
    "provider_sdk_inspect": frozenset({"provider_sdk"}),
}
"""What each package may import of the others. The core imports none of them: it finds
plugins (and emulators) through entry points. The templates distribution builds images
with the Docker plugin; the E2B plugin uses it for Cube's image builds. The emulators
stand on the core alone (the Docker plugin names the base image of the E2B flavor's
template builds); no provider imports them."""

Graph = Mapping[str, Set[str]]


def modules() -> dict[str, Path]:
    """Every module of the tree by dotted name (a package by its ``__init__``)."""
    found: dict[str, Path] = {}
    for name, folder in PACKAGES.items():
        for path in sorted(folder.rglob("*.py")):
            parts = [name, *path.relative_to(folder).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _imported(module: str, path: Path, known: Set[str]) -> Iterator[str]:
    """The tree's modules that ``module`` names in an import, at any depth of its code."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            # `from package import name` names a module when the name is one, and the
            # package otherwise.
            targets = [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for target in targets:
            # The longest module of the tree that the import names.
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != module:
                yield target


def graph() -> dict[str, frozenset[str]]:
    """Each module of the tree and the modules of the tree it imports."""
    found = modules()
    return {module: frozenset(_imported(module, path, found.keys()))
            for module, path in found.items()}


def cycles(imports: Graph) -> list[list[str]]:
    """The groups of modules that import each other in a loop (strongly connected
    components of more than one module), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(imports):
        if root in index:
            continue
        work = [(root, iter(sorted(imports[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(imports[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component: list[str] = []
                    while not component or component[-1] != node:
                        component.append(stack.pop())
                        on_stack.discard(component[-1])
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def crossings(imports: Graph) -> list[str]:
    """Imports from one package into another that :data:`ALLOWED` does not allow."""
    return sorted(f"{module} -> {target}"
                  for module, targets in imports.items()
                  for target in targets
                  if _package(target) != _package(module)
                  and _package(target) not in ALLOWED[_package(module)])


def private_reaches(imports: Graph) -> list[str]:
    """Imports of another package's private modules (a name part starting with ``_``)."""
    return sorted(f"{module} -> {target}"
                  for module, targets in imports.items()
                  for target in targets
                  if _package(target) != _package(module)
                  and any(part.startswith("_") for part in target.split(".")[1:]))


def floors(imports: Graph) -> list[list[str]]:
    """A graph's nodes by floor: the first holds those that import no other node, each
    next one those that import only nodes on the floors below. A node in an import loop,
    or above one, stands on no floor."""
    placed: set[str] = set()
    result: list[list[str]] = []
    while True:
        floor = sorted(node for node, targets in imports.items()
                       if node not in placed and (set(targets) & imports.keys()) - {node} <= placed)
        if not floor:
            return result
        result.append(floor)
        placed.update(floor)


def _package(module: str) -> str:
    return module.split(".")[0]


def folded(imports: Graph, package: str) -> dict[str, frozenset[str]]:
    """A package's own graph with each of its subpackages seen as one node (``local``,
    ``manager``, ...) and each module by its name in the package."""
    def node(module: str) -> str:
        parts = module.split(".")[1:]
        return parts[0] if parts else "__init__"

    result: dict[str, set[str]] = {}
    for module, targets in imports.items():
        if _package(module) == package:
            mine = result.setdefault(node(module), set())
            mine.update(node(t) for t in targets if _package(t) == package)
    return {name: frozenset(ts - {name}) for name, ts in result.items()}
