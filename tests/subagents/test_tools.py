"""FunctionTool, ToolRegistry, ToolContext and ToolResult."""

from __future__ import annotations

from typing import Any

import pytest

from subagents import (
    AgentConfigError,
    ConversationId,
    Dependencies,
    FunctionTool,
    RunId,
    ToolArgumentError,
    ToolContext,
    ToolRegistry,
    ToolResult,
    ToolSchemaError,
)

OBJECT = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


def _context() -> ToolContext:
    return ToolContext(RunId("r"), ConversationId("c"), 3)


async def test_a_function_tool_runs_sync_and_async_functions() -> None:
    async def double(ctx: ToolContext, args: dict[str, int]) -> ToolResult:
        return ToolResult(args["n"] * 2, {"unit": "x"})

    sync = FunctionTool("inc", "Increment", OBJECT, lambda ctx, args: args["n"] + 1)
    asynchronous = FunctionTool("double", None, OBJECT, double)

    assert (await sync.call(_context(), {"n": 1})) == ToolResult(2)
    assert (await asynchronous.call(_context(), '{"n": 4}')) == ToolResult(8, {"unit": "x"})


async def test_a_function_tool_validates_before_running() -> None:
    calls: list[Any] = []
    tool = FunctionTool("inc", None, OBJECT, lambda ctx, args: calls.append(args))

    with pytest.raises(ToolArgumentError) as caught:
        await tool.call(_context(), {"n": "one"})
    with pytest.raises(ToolArgumentError, match="not valid JSON"):
        await tool.call(_context(), "{broken")

    assert caught.value.path == "$.n"
    assert calls == []


def test_a_function_tool_refuses_an_unsupported_schema_at_construction() -> None:
    with pytest.raises(ToolSchemaError):
        FunctionTool("t", None, {"$ref": "#/x"}, lambda ctx, args: None)
    with pytest.raises(AgentConfigError):
        FunctionTool("", None, {}, lambda ctx, args: None)


def test_with_metadata_returns_an_extended_copy() -> None:
    tool = FunctionTool("task_list", "List tasks", {"type": "object"}, lambda c, a: a)

    inherited = tool.with_metadata({"auto_inherit": True})

    assert inherited.metadata == {"auto_inherit": True}
    assert tool.metadata == {}
    assert inherited.definition() == tool.definition()


def test_registries_keep_order_reject_duplicates_and_stay_immutable() -> None:
    a = FunctionTool("a", None, {}, lambda c, x: x)
    b = FunctionTool("b", None, {}, lambda c, x: x)
    empty = ToolRegistry()

    both = empty.with_tool(a).with_tool(b)

    assert both.names() == ["a", "b"]
    assert empty.names() == []
    assert both.lookup("a") is a and both.lookup("z") is None
    assert "b" in both and len(both) == 2
    assert [d.name for d in both.definitions()] == ["a", "b"]
    with pytest.raises(AgentConfigError, match="duplicate tool name 'a'"):
        both.with_tool(a)


def test_a_tool_context_carries_ids_step_and_dependencies() -> None:
    dependencies = Dependencies()
    dependencies.insert(42)

    context = _context().with_dependencies(dependencies)

    assert (context.run_id, context.conversation_id, context.step) == (
        RunId("r"),
        ConversationId("c"),
        3,
    )
    assert context.dependency(int) == 42
    assert _context().dependency(int) is None


def test_call_sync_runs_a_tool_from_a_script() -> None:
    tool = FunctionTool("inc", None, OBJECT, lambda ctx, args: args["n"] + 1)

    assert tool.call_sync(_context(), {"n": 1}) == ToolResult(2)


async def test_every_tool_refuses_too_deep_or_too_large_json_text() -> None:
    tool = FunctionTool("t", None, {}, lambda ctx, args: "ran")

    with pytest.raises(ToolArgumentError, match="nested too deeply"):
        await tool.call(_context(), "[" * 100 + "]" * 100)
    with pytest.raises(ToolArgumentError, match="too large"):
        await tool.call(_context(), '{"a": "' + "x" * (1024 * 1024) + '"}')
    assert await tool.call(_context(), "[[[]]]") == ToolResult("ran")
