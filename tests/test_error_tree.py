"""The error tree drawn in ``statemachines._errors`` is the tree the classes form.

Every module of every package is imported, then ``__subclasses__()`` is walked
from both roots. The walk and the drawing must hold the same classes with the
same parents, and every exception class the project defines must be in the
tree, except the few listed in :data:`OUTSIDE_THE_TREE` with the reason.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from functools import cache

import pytest

import statemachines._errors as errors_module
from statemachines import SubagentsError, SubagentsSignal

PACKAGES = ("statemachines", "storage", "actors", "subagents", "properties")

# Exception classes the project defines that derive from neither root, keyed by
# ``__qualname__`` (so moving a module keeps the key), with the reason.
OUTSIDE_THE_TREE = {
    # Private control flow inside one store transaction loop; never leaves the store.
    "_Retry": "lmdb: the map grew, run the transaction again",
    "_Abort": "postgres: mapped to a StoreError before it leaves the store",
    # Private to background delegation: a child's cancellation, turned into the
    # attempt's cancelled outcome by the runner that raised it.
    "_Cancelled": "background: the supervisor cancelled the child; a cancelled outcome",
    "_RunCancelled": "background: the child's task was cancelled; a cancelled outcome",
    # The verification harness's own control flow, caught inside the harness.
    "LifeFailed": "harness: a host life did not start; becomes a reported violation",
    "_RoundFailed": "harness: one sigstop round failed; becomes a reported violation",
    "_Violation": "harness: one clock case failed; becomes a reported violation",
    # Raised when a foreign module shadows one of our packages, possibly the very
    # package that defines the root; an ImportError so that ``import`` callers see one.
    "ShadowedPackageError": "packaging: another module shadows one of our packages",
    # Failed checks, not runtime errors: AssertionError, so that Hypothesis and
    # pytest report them as failures and no ``except SubagentsError`` in the code
    # under test can swallow one.
    "ContractViolation": "properties: a store broke the contract",
    "SupervisorViolation": "properties: the supervisor broke a guarantee",
}

_LINE = re.compile(
    r"^(?P<lead>(?:[│ ]   )*)(?P<edge>[├└]── )?(?P<name>\.?[A-Za-z_]\w*)\s+(?P<where>\S+)"
)


def _all_modules() -> list[str]:
    names = []
    for package in PACKAGES:
        module = importlib.import_module(package)
        names.append(package)
        for info in pkgutil.walk_packages(module.__path__, f"{package}."):
            if info.name.rsplit(".", 1)[-1] != "__main__":  # running it would start a program
                names.append(info.name)
    return names


@cache
def _import_everything() -> None:
    for name in _all_modules():
        importlib.import_module(name)


def _ours(cls: type) -> bool:
    return cls.__module__.split(".")[0] in PACKAGES


def _walked() -> dict[str, str | None]:
    """``qualname -> parent qualname`` (``None`` for a root) of the classes below the roots."""
    _import_everything()
    parents: dict[str, str | None] = {}

    def visit(cls: type, parent: str | None) -> None:
        if not _ours(cls):
            return  # a test's own subclass
        assert parents.get(cls.__qualname__, parent) == parent, f"{cls} sits in two places"
        parents[cls.__qualname__] = parent
        for child in cls.__subclasses__():
            visit(child, cls.__qualname__)

    visit(SubagentsError, None)
    visit(SubagentsSignal, None)
    return parents


def _drawn() -> dict[str, tuple[str | None, str]]:
    """``qualname -> (parent qualname, where to import it)`` parsed from the drawing."""
    doc = errors_module.__doc__ or ""
    block = doc.split("::\n", 1)[1]
    drawn: dict[str, tuple[str | None, str]] = {}
    path: list[str] = []
    for raw in block.splitlines():
        line = raw[4:]
        if not line.strip():
            continue
        match = _LINE.match(line)
        assert match is not None, f"cannot read drawing line {raw!r}"
        depth = len(match["lead"]) // 4 + (1 if match["edge"] else 0)
        assert depth <= len(path), f"{raw!r} skips a level"
        del path[depth:]
        name = match["name"]
        qualname = f"{path[-1]}{name}" if name.startswith(".") else name
        assert qualname not in drawn, f"{qualname} is drawn twice"
        drawn[qualname] = (path[-1] if path else None, match["where"])
        path.append(qualname)
    return drawn


def _classes() -> dict[str, type]:
    _import_everything()
    found: dict[str, type] = {}
    pending: list[type] = [BaseException]
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if _ours(cls):
            found[cls.__qualname__] = cls
    return found


def test_the_drawing_is_read_from_the_roots_module() -> None:
    drawn = _drawn()
    assert drawn["SubagentsError"] == (None, "statemachines")
    assert drawn["SubagentsSignal"] == (None, "statemachines")
    assert drawn["BackgroundSubagentError.Closing"][0] == "BackgroundSubagentError"
    assert len(drawn) > 60


def test_every_class_below_the_roots_is_drawn_under_its_parent() -> None:
    drawn = {name: parent for name, (parent, _) in _drawn().items()}
    walked = _walked()
    assert {n: p for n, p in walked.items() if drawn.get(n, "?") != p} == {}


def test_every_drawn_class_exists_under_the_drawn_parent() -> None:
    drawn = {name: parent for name, (parent, _) in _drawn().items()}
    walked = _walked()
    assert {n: p for n, p in drawn.items() if walked.get(n, "?") != p} == {}


def test_every_exception_the_project_defines_derives_from_a_root() -> None:
    outside = [
        name
        for name, cls in _classes().items()
        if not issubclass(cls, SubagentsError | SubagentsSignal) and name not in OUTSIDE_THE_TREE
    ]
    assert outside == []


def test_the_listed_exceptions_outside_the_tree_still_exist() -> None:
    assert sorted(set(OUTSIDE_THE_TREE) - set(_classes())) == []


@pytest.mark.parametrize("qualname", sorted(_drawn()))
def test_each_class_is_importable_from_where_the_drawing_says(qualname: str) -> None:
    where = _drawn()[qualname][1]
    cls = _classes()[qualname]
    if where == "-":
        exported = [
            package
            for package in PACKAGES
            if cls in (getattr(importlib.import_module(package), n, None) for n in dir_all(package))
        ]
        assert exported == [], f"{qualname} is exported; draw where from"
        return
    found: object = importlib.import_module(where)
    for part in qualname.split("."):
        found = getattr(found, part)
    assert found is cls
    assert qualname.split(".", maxsplit=1)[0] in dir_all(where)


def dir_all(module: str) -> list[str]:
    return list(getattr(importlib.import_module(module), "__all__", []))


def test_the_reader_reads_nesting_from_the_indentation() -> None:
    doc = "x::\n\n    Root  statemachines  r\n    ├── A  storage  a\n    │   └── B  storage  b\n"
    original = errors_module.__doc__
    try:
        errors_module.__doc__ = doc
        assert _drawn() == {
            "Root": (None, "statemachines"),
            "A": ("Root", "storage"),
            "B": ("A", "storage"),
        }
    finally:
        errors_module.__doc__ = original


def test_no_other_module_draws_a_tree() -> None:
    _import_everything()
    drawing = [
        name
        for name in _all_modules()
        if name != errors_module.__name__
        and "├── " in (importlib.import_module(name).__doc__ or "")
    ]
    assert drawing == []
