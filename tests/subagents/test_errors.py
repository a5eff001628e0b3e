"""The SDK's exception tree: every error is a SubagentsError and the tree is drawn."""

from __future__ import annotations

import inspect
import pickle

import pytest

import subagents._errors as errors_module
from statemachines import SubagentsError

STORAGE_ERRORS = (
    "StoreError",
    "NotFound",
    "AlreadyExists",
    "Conflict",
    "StaleFence",
    "IdempotencyConflict",
    "QuotaExceeded",
    "RunConflict",
    "RetryableStorage",
    "StorageFull",
    "Failed",
    "CorruptRecord",
)

SDK_ERRORS = [
    obj
    for _, obj in inspect.getmembers(errors_module, inspect.isclass)
    if obj.__module__ == errors_module.__name__
]


def test_there_are_sdk_errors_to_check() -> None:
    assert len(SDK_ERRORS) >= 10


@pytest.mark.parametrize("error", SDK_ERRORS, ids=lambda e: e.__name__)
def test_every_sdk_error_is_a_recoverable_subagents_error(error: type) -> None:
    assert issubclass(error, SubagentsError)


@pytest.mark.parametrize("error", SDK_ERRORS, ids=lambda e: e.__name__)
def test_every_sdk_error_appears_in_the_drawn_tree(error: type) -> None:
    assert f"── {error.__name__} " in (errors_module.__doc__ or "")


@pytest.mark.parametrize("name", STORAGE_ERRORS)
def test_the_tree_reserves_a_branch_for_each_storage_error(name: str) -> None:
    assert f"── {name}" in (errors_module.__doc__ or "")


def test_errors_keep_their_fields_through_pickling() -> None:
    error = errors_module.ToolArgumentError("bad", tool="delegate", path="$.name")

    copy = pickle.loads(pickle.dumps(error))

    assert (copy.tool, copy.path) == ("delegate", "$.name")
    assert type(copy) is errors_module.ToolArgumentError


def test_a_tool_error_always_has_a_tool_attribute() -> None:
    bare = errors_module.ToolError("try later")
    named = errors_module.ToolError("try later", tool="search")

    assert bare.tool is None and str(bare) == "try later"
    assert named.tool == "search" and named.fields == {"tool": "search"}
