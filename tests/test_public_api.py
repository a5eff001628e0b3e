"""Each layer's package ``__init__`` re-exports exactly its public names.

``__all__`` is sorted (plain code-point order) and complete: every name the
``__init__`` re-exports with ``from ._x import Name as Name`` is listed, every
listed name resolves, and no ``_private`` name leaks.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("statemachines", "storage", "actors", "properties")


def _init(package: str) -> Path:
    path = ROOT / package / "__init__.py"
    if not path.exists():
        pytest.skip(f"{package}/__init__.py does not exist yet")
    return path


def _reexports(tree: ast.Module) -> list[str]:
    """Names bound by ``from ._x import Name as Name`` at module level."""
    names = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level >= 1:
            for alias in node.names:
                if alias.asname is not None and alias.asname == alias.name:
                    names.append(alias.name)
    return names


def _declared_all(tree: ast.Module) -> list[str]:
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            names = ast.literal_eval(value)
            assert isinstance(names, list | tuple)
            return [str(name) for name in names]
    raise AssertionError("__init__ declares no __all__")


@pytest.mark.parametrize("package", PACKAGES)
def test_all_is_sorted_without_duplicates(package: str) -> None:
    names = _declared_all(ast.parse(_init(package).read_text()))
    assert names == sorted(names)
    assert len(names) == len(set(names))


@pytest.mark.parametrize("package", PACKAGES)
def test_every_reexported_name_is_in_all(package: str) -> None:
    tree = ast.parse(_init(package).read_text())
    missing = sorted(set(_reexports(tree)) - set(_declared_all(tree)))
    assert missing == []


@pytest.mark.parametrize("package", PACKAGES)
def test_every_name_in_all_resolves(package: str) -> None:
    names = _declared_all(ast.parse(_init(package).read_text()))
    module = importlib.import_module(package)
    # A test directory with an ``__init__.py`` named like a layer shadows it.
    assert Path(str(module.__file__)) == _init(package), f"{package} resolves to {module.__file__}"
    unresolved = [name for name in names if not hasattr(module, name)]
    assert unresolved == []
    assert list(module.__all__) == names


@pytest.mark.parametrize("package", PACKAGES)
def test_no_private_name_leaks_into_all(package: str) -> None:
    names = _declared_all(ast.parse(_init(package).read_text()))
    assert [name for name in names if name.startswith("_")] == []


@pytest.mark.parametrize("package", PACKAGES)
def test_public_names_come_from_private_modules(package: str) -> None:
    """Implementation lives in ``_private`` modules; ``__init__`` only re-exports."""
    tree = ast.parse(_init(package).read_text())
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level >= 1:
            assert (node.module or "").startswith("_"), ast.unparse(node)
