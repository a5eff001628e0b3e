"""Imports only point down the layers (DESIGN §1).

``statemachines < storage < actors < subagents``: a package may import its own
layer and the ones below it. ``properties`` may import statemachines, storage
and actors, never subagents. Nothing imports ``properties`` except tests and
the CLI (``subagents/_cli.py``), whose ``verify`` command runs the suite: the
CLI is the very top, and ``properties`` never imports ``subagents``, so no
cycle can form.
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
# The one place above the layers that may run the conformance suite.
PROPERTIES_USERS = {Path("subagents/_cli.py")}


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


def _violations(package: str) -> list[str]:
    found = []
    for path in _python_files(package):
        for line, target in _imported_packages(path):
            if target == "properties" and path.relative_to(ROOT) in PROPERTIES_USERS:
                continue
            if target in LAYERED and target not in ALLOWED[package]:
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
            for line, target in _imported_packages(path):
                if target == "properties" and path.relative_to(ROOT) not in PROPERTIES_USERS:
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
