"""``subagents.__all__`` is sorted, private-free and resolves to the private definitions.

Which names are public is pinned in ``tests/test_public_api.py`` (an explicit
list): a helper defined in a private module stays private unless that list and
``__all__`` both say otherwise.
"""

from __future__ import annotations

import importlib
import inspect

import subagents

# Subpackages that re-export their public names for ``subagents``.
SDK_PACKAGES = ("subagents._agent", "subagents._specs", "subagents._delegation")


def test_all_is_sorted_without_duplicates() -> None:
    assert subagents.__all__ == sorted(subagents.__all__)
    assert len(subagents.__all__) == len(set(subagents.__all__))


def test_every_name_in_all_resolves() -> None:
    assert [name for name in subagents.__all__ if not hasattr(subagents, name)] == []


def test_no_private_name_leaks() -> None:
    assert [name for name in subagents.__all__ if name.startswith("_")] == []


def test_every_exported_object_is_defined_in_a_private_module_or_a_lower_layer() -> None:
    outside = []
    for name in subagents.__all__:
        obj = getattr(subagents, name)
        if not (inspect.isclass(obj) or inspect.isfunction(obj)):
            continue  # a type alias such as ``ModelMessage`` (a union) has no home module
        module = obj.__module__
        top, _, rest = module.partition(".")
        if top not in ("statemachines", "storage", "actors", "subagents") or (
            top == "subagents" and not rest.startswith("_")
        ):
            outside.append(f"{name} ({module})")
    assert outside == []


def test_exported_objects_are_the_private_definitions() -> None:
    from subagents._delegation._registry import SubagentRegistry

    assert subagents.SubagentRegistry is SubagentRegistry


def test_each_sdk_subpackage_exports_a_sorted_all_of_what_subagents_exports() -> None:
    """``_agent``, ``_specs`` and ``_delegation`` re-export their public names, and
    ``subagents`` exports the very same objects."""
    problems = []
    for package in SDK_PACKAGES:
        module = importlib.import_module(package)
        names = list(module.__all__)
        if names != sorted(set(names)):
            problems.append(f"{package}.__all__ is not sorted and unique")
        for name in names:
            if getattr(subagents, name, None) is not getattr(module, name):
                problems.append(f"{package}.{name} is not subagents.{name}")
    assert problems == []
