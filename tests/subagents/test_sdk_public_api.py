"""``subagents.__all__`` is sorted, complete and private-free.

Complete means: every public class or function defined in a private module
of the package is exported, except the few listed below as deliberately
internal; and everything exported resolves.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import subagents

# Modules behind the command line only (``subagents demo``, ``subagents chat``):
# nothing in them is library surface.
CLI_ONLY = {"subagents._chat", "subagents._demo", "subagents._demo_models"}

# Defined in private modules on purpose and not part of the public surface.
INTERNAL = {
    "subagents._cli": {"main"},  # the console script's entry point
    "subagents._ids": {"dec_hook", "enc_hook"},
    "subagents._schema": {"compile_schema"},
    "subagents._sync": {"run_blocking"},
}


def _private_modules() -> list[str]:
    return [
        f"subagents.{info.name}"
        for info in pkgutil.iter_modules(subagents.__path__)
        if info.name.startswith("_")
    ]


def test_all_is_sorted_without_duplicates() -> None:
    assert subagents.__all__ == sorted(subagents.__all__)
    assert len(subagents.__all__) == len(set(subagents.__all__))


def test_every_name_in_all_resolves() -> None:
    assert [name for name in subagents.__all__ if not hasattr(subagents, name)] == []


def test_no_private_name_leaks() -> None:
    assert [name for name in subagents.__all__ if name.startswith("_")] == []


def test_every_public_definition_in_private_modules_is_exported() -> None:
    missing = []
    for module_name in _private_modules():
        if module_name in CLI_ONLY:
            continue
        module = importlib.import_module(module_name)
        for name, obj in vars(module).items():
            if name.startswith("_") or name in INTERNAL.get(module_name, set()):
                continue
            defined_here = (inspect.isclass(obj) or inspect.isfunction(obj)) and (
                obj.__module__ == module_name
            )
            if defined_here and name not in subagents.__all__:
                missing.append(f"{module_name}.{name}")
    assert missing == []


def test_exported_objects_are_the_private_definitions() -> None:
    from subagents._registry import SubagentRegistry

    assert subagents.SubagentRegistry is SubagentRegistry
