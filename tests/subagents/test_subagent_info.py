"""The ``subagent_info`` tool: each child's availability against the parent's tools."""

from __future__ import annotations

from typing import Any

import pytest

from subagents import (
    AgentBuilder,
    ConversationId,
    Dependencies,
    FunctionTool,
    RunId,
    SubagentConfig,
    SubagentInfoTool,
    SubagentParentTools,
    SubagentRegistry,
    SubagentToolInheritancePolicy,
    TestModel,
    ToolArgumentError,
    ToolContext,
    ToolRegistry,
    is_main_agent_only_tool,
)


def _tool(name: str, **metadata: Any) -> FunctionTool:
    return FunctionTool(name, None, {"type": "object"}, lambda ctx, args: None).with_metadata(
        metadata
    )


def _registry() -> SubagentRegistry:
    child = AgentBuilder(TestModel.with_text("x")).build()
    return (
        SubagentRegistry()
        .with_subagent(SubagentConfig("plain", child))
        .with_subagent(
            SubagentConfig("reader", child, "Reads files").with_tool_inheritance(
                SubagentToolInheritancePolicy(["view"], ["grep"])
            )
        )
    )


def _context(parent_tools: ToolRegistry | None) -> ToolContext:
    dependencies = Dependencies()
    if parent_tools is not None:
        dependencies.insert(SubagentParentTools(parent_tools))
    return ToolContext(RunId(), ConversationId(), 0, dependencies=dependencies)


def test_the_tool_reports_every_subagent_in_registration_order() -> None:
    parent = ToolRegistry([_tool("view"), _tool("grep"), _tool("todo", auto_inherit=True)])

    result = _registry().subagent_info_tool().call_sync(_context(parent), {})

    assert result.content == {
        "subagents": [
            {
                "name": "plain",
                "description": None,
                "available": True,
                "inherited_tools": ["todo"],
                "diagnostics": [],
            },
            {
                "name": "reader",
                "description": "Reads files",
                "available": True,
                "inherited_tools": ["todo", "grep", "view"],
                "diagnostics": [],
            },
        ]
    }


def test_without_parent_tools_in_the_dependencies_the_parent_counts_as_having_none() -> None:
    result = _registry().subagent_info_tool().call_sync(_context(None), "")

    plain, reader = result.content["subagents"]
    assert plain["available"] is True
    assert reader["available"] is False
    assert reader["inherited_tools"] == []
    assert reader["diagnostics"] == [
        {
            "error": "missing_required_tool",
            "error_kind": "missing_required_tool",
            "tool_name": "view",
            "message": reader["diagnostics"][0]["message"],
        }
    ]
    assert "'view'" in reader["diagnostics"][0]["message"]


def test_the_tool_takes_no_arguments() -> None:
    tool = _registry().subagent_info_tool()

    with pytest.raises(ToolArgumentError) as raised:
        tool.call_sync(_context(None), {"name": "reader"})

    assert raised.value.path == "$.name"
    assert tool.definition().parameters_schema["additionalProperties"] is False


def test_the_tool_is_main_agent_only() -> None:
    tool = _registry().subagent_info_tool()

    assert isinstance(tool, SubagentInfoTool)
    assert tool.name == "subagent_info"
    assert is_main_agent_only_tool(tool)


def test_info_and_the_tool_agree() -> None:
    registry = _registry()
    parent = ToolRegistry([_tool("grep")])

    result = registry.subagent_info_tool().call_sync(_context(parent), {})

    assert result.content["subagents"] == registry.info(parent)


async def test_an_empty_registry_reports_no_subagents() -> None:
    result = await SubagentRegistry().subagent_info_tool().call(_context(None), {})

    assert result.content == {"subagents": []}
