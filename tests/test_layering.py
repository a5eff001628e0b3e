"""Imports only point down the layers (DESIGN §1).

``statemachines < storage < actors < subagents``: a package may import its own
layer and the ones below it. ``properties`` may import statemachines, storage
and actors, never subagents. Its ``reliability`` subpackage (the harness that
drives real hosts) sits above the SDK: it may import ``subagents`` too (never
``subagents._cli``), and the rest of ``properties`` never imports it (so
``import properties`` never imports ``subagents``). Nothing imports
``properties`` except tests, the bench's scripted planner and the CLI's
``verify`` command (``subagents/_cli/_verify.py``), which runs the suite and
the harness: the CLI is the very top, so no cycle can form.
Imports are read with :mod:`ast`, so a violation inside a function or under
``TYPE_CHECKING`` counts too.

Inside ``subagents`` the same rule orders its parts (issue 14):
``_errors < _agent < _providers < _specs < _delegation < _builder < adapters < _host <
_mcp < _cli``; a module imports only its own part and the ones below
(the package ``__init__`` re-exports them all). And no package holds an import
cycle between its modules: with one, no deferred import is needed to dodge it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ORDER = ("statemachines", "storage", "actors", "subagents")
LAYERED = (*ORDER, "properties")
ALLOWED: dict[str, set[str]] = {
    package: set(ORDER[: index + 1]) for index, package in enumerate(ORDER)
}
ALLOWED["properties"] = {"statemachines", "storage", "actors", "properties"}
# Project code outside the layers that must not import properties either.
OTHER_CODE = ("bench", "examples")
# The one place above the layers that may run the conformance suite and the harness.
PROPERTIES_USERS = {Path("subagents/_cli/_verify.py")}
# The harness above the SDK, inside properties/: it may import subagents, but not the CLI.
HARNESS = Path("properties/reliability")
ALLOWED_IN_HARNESS = {*ORDER, "properties"}
# Outside the layers, code that may import the harness's scripted offline planner only.
HARNESS_USERS = {
    Path("bench/hosts.py"): {"properties.reliability._scripted"},
    Path("bench/soak.py"): {"properties.reliability._soak"},
}


def _python_files(directory: str) -> list[Path]:
    return sorted((ROOT / directory).rglob("*.py"))


def _imported_packages(path: Path) -> Iterator[tuple[int, str]]:
    """``(line, top-level package)`` for every absolute import in ``path``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module.split(".")[0]


def _in_harness(path: Path) -> bool:
    return path.relative_to(ROOT).is_relative_to(HARNESS)


def _violations(package: str) -> list[str]:
    found = []
    for path in _python_files(package):
        allowed = ALLOWED_IN_HARNESS if _in_harness(path) else ALLOWED[package]
        for line, target in _imported_packages(path):
            if target == "properties" and path.relative_to(ROOT) in PROPERTIES_USERS:
                continue
            if target in LAYERED and target not in allowed:
                found.append(f"{path.relative_to(ROOT)}:{line} imports {target}")
    return found


@pytest.mark.parametrize("package", LAYERED)
def test_a_layer_imports_only_itself_and_the_layers_below(package: str) -> None:
    assert _python_files(package), f"{package}/ has no python files"
    assert _violations(package) == []


def test_nothing_but_tests_imports_properties() -> None:
    known = _known_modules()
    found = []
    for directory in (*ORDER, *OTHER_CODE):
        for path in _python_files(directory):
            relative = path.relative_to(ROOT)
            for line, module in _imported_modules(path, known):
                if module.split(".")[0] != "properties" or relative in PROPERTIES_USERS:
                    continue
                if module not in HARNESS_USERS.get(relative, set()):
                    found.append(f"{relative}:{line} imports {module}")
    assert found == []


def _imports_of(directory: Path, prefix: str, *, harness: bool) -> list[str]:
    """``file:line`` of every import of ``prefix`` (or below it) in the harness's files
    (``harness=True``) or in the rest of ``directory``."""
    known = _known_modules()
    return [
        f"{path.relative_to(ROOT)}:{line}"
        for path in _python_files(str(directory))
        if _in_harness(path) == harness
        for line, module in _imported_modules(path, known)
        if module == prefix or module.startswith(prefix + ".")
    ]


def test_the_harness_never_imports_the_cli() -> None:
    assert _imports_of(HARNESS, "subagents._cli", harness=True) == []


def test_the_rest_of_properties_never_imports_the_harness() -> None:
    assert _imports_of(Path("properties"), "properties.reliability", harness=False) == []


def test_the_checker_sees_an_upward_import(tmp_path: Path) -> None:
    """The import reader must catch every import form the rule is about."""
    source = tmp_path / "mod.py"
    source.write_text(
        "import os\n"
        "from . import sibling\n"
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from actors._x import Y\n"
        "def f():\n"
        "    import subagents.tools\n"
    )
    found = {target for _, target in _imported_packages(source)}
    assert found == {"os", "typing", "actors", "subagents"}


# -- the order of subagents' own parts ----------------------------------------------------------

SDK_ORDER = (
    "_guard",
    "_errors",
    "_agent",
    "_providers",
    "_specs",
    "_delegation",
    "_builder",
    "adapters",
    "_host",
    "_mcp",
    "_cli",
)
# Top-level modules that belong to a part named otherwise (none now: the demo and the
# chat live in _cli/, the verification harness in properties/reliability/).
SDK_PART_OF: dict[str, str] = {}
# Upward imports left in areas issue 14 gives to other helpers (owner in the comment);
# the lead empties this when merging. Each entry: (importing module, imported module).
KNOWN_UPWARD: set[tuple[str, str]] = set()


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def _known_modules() -> set[str]:
    return {_module_name(path) for package in LAYERED for path in _python_files(package)}


def _imported_modules(path: Path, known: set[str]) -> Iterator[tuple[int, str]]:
    """``(line, module)`` for every import in ``path`` of a module in ``known``.

    Relative imports are resolved; ``from package import name`` counts as an
    import of ``package.name`` when that is a module, else of ``package``.
    Imports in functions and under ``TYPE_CHECKING`` count too.
    """
    here = _module_name(path)
    package = here if _is_package(path) else here.rpartition(".")[0]
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in known:
                    yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                source = ".".join([*base, node.module] if node.module else base)
            else:
                source = node.module or ""
            for alias in node.names:
                candidate = f"{source}.{alias.name}"
                if candidate in known:
                    yield node.lineno, candidate
                elif source in known:
                    yield node.lineno, source


def _sdk_part(module: str) -> str | None:
    """The part of ``subagents`` a module belongs to (None for the package itself)."""
    parts = module.split(".")
    if parts[0] != "subagents" or len(parts) == 1:
        return None
    return SDK_PART_OF.get(parts[1], parts[1])


def _sdk_violations() -> list[str]:
    known = _known_modules()
    found = []
    for path in _python_files("subagents"):
        importer = _module_name(path)
        part = _sdk_part(importer)
        if part is None:
            continue  # the package __init__ re-exports every part
        assert part in SDK_ORDER, f"{importer} is in no part of SDK_ORDER"
        for line, target in _imported_modules(path, known):
            if not target.startswith("subagents") or (importer, target) in KNOWN_UPWARD:
                continue
            target_part = _sdk_part(target)
            if target_part is None or SDK_ORDER.index(target_part) > SDK_ORDER.index(part):
                found.append(f"{path.relative_to(ROOT)}:{line} ({part}) imports {target}")
    return found


def test_subagents_parts_import_only_their_own_and_lower_parts() -> None:
    assert _sdk_violations() == []


def test_every_known_upward_import_still_exists() -> None:
    """An entry that no longer matches must leave KNOWN_UPWARD."""
    known = _known_modules()
    present = {
        (_module_name(path), target)
        for path in _python_files("subagents")
        for _, target in _imported_modules(path, known)
    }
    assert KNOWN_UPWARD - present == set()


# -- no import cycles --------------------------------------------------------------------------

# Cycles left in areas issue 14 gives to other helpers (owner in the comment); the
# lead empties this when merging. Each entry is the set of modules of one cycle.
KNOWN_CYCLES: set[frozenset[str]] = set()


def _import_graph() -> dict[str, set[str]]:
    known = _known_modules()
    graph: dict[str, set[str]] = {}
    for package in LAYERED:
        for path in _python_files(package):
            module = _module_name(path)
            graph.setdefault(module, set()).update(
                target for _, target in _imported_modules(path, known) if target != module
            )
    return graph


def _cycles(graph: dict[str, set[str]]) -> set[frozenset[str]]:
    """The strongly connected components of ``graph`` with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: set[frozenset[str]] = set()

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                found.add(frozenset(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _show(cycles: Iterable[frozenset[str]]) -> list[list[str]]:
    return sorted(sorted(cycle) for cycle in cycles)


def test_no_package_has_an_import_cycle() -> None:
    assert _show(_cycles(_import_graph()) - KNOWN_CYCLES) == []


def test_every_known_cycle_is_still_a_cycle() -> None:
    """A cycle that was broken must leave KNOWN_CYCLES."""
    assert _show(KNOWN_CYCLES - _cycles(_import_graph())) == []


def test_the_cycle_finder_sees_a_deferred_import_cycle(tmp_path: Path) -> None:
    graph = {"p.a": {"p.b"}, "p.b": {"p.c"}, "p.c": {"p.a"}, "p.d": {"p.a"}}
    assert _cycles(graph) == {frozenset({"p.a", "p.b", "p.c"})}


def test_the_import_reader_resolves_relative_and_deferred_imports() -> None:
    """``from ._x import Y`` inside a function of a subpackage resolves to ``pkg.sub._x``."""
    path = ROOT / "subagents" / "_delegation" / "_registry.py"
    found = {target for _, target in _imported_modules(path, _known_modules())}
    assert "subagents._delegation._child_run" in found
    assert "subagents._agent._run" in found
    assert "subagents._errors" in found


def test_the_import_reader_resolves_a_relative_import_of_the_harness() -> None:
    """What the harness rule reads: ``from .reliability import x`` in ``properties``."""
    path = ROOT / "properties" / "reliability" / "_report.py"
    found = {target for _, target in _imported_modules(path, _known_modules())}
    assert {"properties", "properties._skew", "properties.reliability._crash"} <= found
