"""``subagents.__all__`` is sorted, complete and private-free.

Complete means: every public class or function defined in a private module
of the package, or in a private module of one of its SDK subpackages
(``_agent``, ``_specs``, ``_delegation``), is exported, except the few listed
below as deliberately internal; and everything exported resolves.
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
    "subagents._agent._ids": {"dec_hook", "enc_hook"},
    "subagents._agent._schema": {"check_argument_limits", "compile_schema"},
    "subagents._agent._sync": {"run_blocking"},
    # The child-run protocol's parts: the two delegation modes' shared machinery.
    "subagents._delegation._child_run": {
        "ChildRun",
        "ChildRunMode",
        "Completed",
        "HookFailed",
        "RunFailed",
        "Unavailable",
        "error_text",
        "run_child",
    },
    "subagents._delegation._config": {"materialize_child"},
    "subagents._delegation._events": {"child_source", "lifecycle_event", "stream_record_event"},
    # What AgentBuilder.build() returns: an Agent (exported) that carries its subagents.
    "subagents._delegation._topology": {"DelegatingAgent"},
}
# Subpackages whose private modules are walked too.
SDK_PACKAGES = ("subagents._agent", "subagents._specs", "subagents._delegation")


def _private_modules() -> list[str]:
    found = [
        f"subagents.{info.name}"
        for info in pkgutil.iter_modules(subagents.__path__)
        if info.name.startswith("_")
    ]
    for package in SDK_PACKAGES:
        path = importlib.import_module(package).__path__
        found += [f"{package}.{info.name}" for info in pkgutil.iter_modules(path)]
    return found


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
