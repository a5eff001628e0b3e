"""The SDK's errors: every one is a SubagentsError, keeps its fields, and the roots are exported.

Where each sits in the tree is checked against the one drawing by
``tests/test_error_tree.py``.
"""

from __future__ import annotations

import inspect
import pickle

import pytest

import statemachines
import subagents
import subagents._errors as errors_module
from statemachines import SubagentsError
from subagents import RpcError
from subagents._host import ErrorCode

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


def test_the_roots_are_importable_from_subagents() -> None:
    assert subagents.SubagentsError is statemachines.SubagentsError
    assert subagents.SubagentsSignal is statemachines.SubagentsSignal
    assert issubclass(subagents.SubagentsSignal, BaseException)
    assert not issubclass(subagents.SubagentsSignal, Exception)


def test_an_rpc_error_is_a_subagents_error_with_its_code_and_data_as_fields() -> None:
    error = RpcError(ErrorCode.NOT_FOUND, "not found", {"reason": "no_session"})

    assert isinstance(error, SubagentsError)
    assert (error.code, error.message, error.data) == (
        ErrorCode.NOT_FOUND,
        "not found",
        {"reason": "no_session"},
    )
    assert error.fields == {"code": ErrorCode.NOT_FOUND, "data": {"reason": "no_session"}}
    assert str(error) == "not found"
    assert error.to_wire() == {"code": -32010, "message": "not found", "data": error.data}


def test_an_rpc_error_survives_pickling() -> None:
    error = RpcError(ErrorCode.CONFLICT, "already delivered")

    copy = pickle.loads(pickle.dumps(error))

    assert type(copy) is RpcError
    assert (copy.code, copy.message, copy.data) == (ErrorCode.CONFLICT, "already delivered", None)


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
