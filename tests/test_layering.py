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
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
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
HARNESS_USERS = {Path("bench/hosts.py"): {"properties.reliability._scripted"}}


def _python_files(directory: str) -> list[Path]:
    return sorted((ROOT / directory).rglob("*.py"))


def _imported_modules(path: Path) -> Iterator[tuple[int, str]]:
    """``(line, dotted module)`` for every absolute import in ``path``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module


def _imported_packages(path: Path) -> Iterator[tuple[int, str]]:
    """``(line, top-level package)`` for every absolute import in ``path``."""
    for line, module in _imported_modules(path):
        yield line, module.split(".")[0]


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
    found = []
    for directory in (*ORDER, *OTHER_CODE):
        for path in _python_files(directory):
            relative = path.relative_to(ROOT)
            for line, module in _imported_modules(path):
                if module.split(".")[0] != "properties" or relative in PROPERTIES_USERS:
                    continue
                if module not in HARNESS_USERS.get(relative, set()):
                    found.append(f"{relative}:{line} imports {module}")
    assert found == []


def test_the_harness_never_imports_the_cli() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line}"
        for path in _python_files(str(HARNESS))
        for line, module in _imported_modules(path)
        if module == "subagents._cli" or module.startswith("subagents._cli.")
    ]
    assert found == []


def _relative_imports(path: Path) -> Iterator[tuple[int, str]]:
    """``(line, module)`` of every ``from .module import ...`` one level up in ``path``."""
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            yield node.lineno, node.module or ",".join(alias.name for alias in node.names)


def test_the_rest_of_properties_never_imports_the_harness() -> None:
    found = []
    for path in _python_files("properties"):
        if _in_harness(path):
            continue
        imported = [*_imported_modules(path)]
        imported += [(line, f"properties.{module}") for line, module in _relative_imports(path)]
        for line, module in imported:
            if module == "properties.reliability" or module.startswith("properties.reliability."):
                found.append(f"{path.relative_to(ROOT)}:{line}")
    assert found == []


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


def test_the_checker_sees_a_relative_import_of_the_harness(tmp_path: Path) -> None:
    source = tmp_path / "mod.py"
    source.write_text("from .reliability import report\nfrom . import reliability\n")
    assert [module for _, module in _relative_imports(source)] == ["reliability", "reliability"]
