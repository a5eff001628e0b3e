"""MCP servers' tools inside agents: a real stdio MCP server (written with the mcp SDK)
that a host profile names, whose tool the parent calls and a delegated child inherits
(``required_tools``); a slow, a crashing and a failing server each give a typed tool
error, never a hung run."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from storage import MemorySessionStore
from subagents import (
    AgentBuilder,
    FunctionModel,
    HostConfigError,
    ModelMessage,
    ModelProviderRegistry,
    ModelRequest,
    ModelRequestParameters,
    ModelResponse,
    RetryPromptPart,
    TestModel,
    ToolReturnPart,
)
from subagents._agent._ids import ConversationId, RunId
from subagents._agent._mcp_tools import McpServerConfig, McpServerTool, load_mcp_toolset
from subagents._agent._tools import ToolContext
from subagents._delegation._config import SubagentDelegationMode
from subagents._errors import McpToolError
from subagents._host import HostService, parse_host_config
from subagents._host._agents import AgentFactory
from subagents._host._eventlog import MemoryEventLog
from subagents._mcp import McpBridge

SERVER = str(Path(__file__).with_name("mcp_tiny_server.py"))
TINY = McpServerConfig(command=sys.executable, args=[SERVER], timeout_seconds=20.0)


def _returns(messages: Sequence[ModelMessage]) -> list[ToolReturnPart | RetryPromptPart]:
    return [
        part
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart | RetryPromptPart)
    ]


@pytest.fixture(scope="module")
def tiny_tools() -> list[McpServerTool]:
    return load_mcp_toolset("tiny", TINY)


def test_the_toolset_is_the_servers_tools_with_their_schemas(
    tiny_tools: list[McpServerTool],
) -> None:
    assert [t.name for t in tiny_tools] == ["echo", "slow", "broken"]
    echo = tiny_tools[0]
    assert echo.parameters_schema["required"] == ["text"]
    assert echo.metadata == {"kind": "mcp", "mcp_server": "tiny"}


async def _child_model(
    messages: Sequence[ModelMessage], params: ModelRequestParameters
) -> ModelResponse | str:
    returned = _returns(messages)
    if not returned:
        offered = [tool.name for tool in params.tools]
        assert offered == ["echo"], offered  # inherited: required by the policy
        return ModelResponse(parts=(TestModel.tool_call("echo", {"text": "child"}, "c"),))
    content = returned[0].content
    return f"child saw {content['result'] if isinstance(content, dict) else content}"


def _context() -> ToolContext:
    return ToolContext(RunId(), ConversationId(), 0)


async def test_a_slow_server_is_a_typed_timeout_not_a_hung_run(
    tiny_tools: list[McpServerTool],
) -> None:
    listed = tiny_tools[1]
    hurried = McpServerConfig(command=sys.executable, args=[SERVER], timeout_seconds=1.0)
    slow = McpServerTool("tiny", hurried, _Listed(listed))
    started = time.monotonic()
    agent = (
        AgentBuilder(TestModel.with_tool_calls([("slow", {"seconds": 60})], then="gave up"))
        .tool(slow)
        .build()
    )
    result = await agent.run("go")
    assert result.output == "gave up"
    (retry,) = _returns(result.messages)
    assert isinstance(retry, RetryPromptPart) and "did not answer in time" in str(retry.content)
    assert time.monotonic() - started < 15


async def test_a_crashing_server_and_a_failing_tool_are_typed_tool_errors(
    tiny_tools: list[McpServerTool],
) -> None:
    crashing = McpServerConfig(command=sys.executable, args=[SERVER, "crash"], timeout_seconds=10)
    with pytest.raises(McpToolError) as refused:
        load_mcp_toolset("gone", crashing)
    assert refused.value.reason == "unreachable" and refused.value.server == "gone"
    echo = McpServerTool("gone", crashing, _Listed(tiny_tools[0]))
    with pytest.raises(McpToolError) as unreachable:
        await echo.call(_context(), {"text": "x"})
    assert unreachable.value.reason == "unreachable" and unreachable.value.tool == "echo"
    with pytest.raises(McpToolError) as failed:
        await tiny_tools[2].call(_context(), {})
    assert failed.value.reason == "tool_error" and "broken" in failed.value.message


class _Listed:
    """A listed tool's name, description and schema (to rebind a tool to another config)."""

    def __init__(self, tool: McpServerTool) -> None:
        self.name = tool.name
        self.description = tool.description
        self.input_schema = tool.parameters_schema


HOST_TOML = f"""
[profiles.default]
model_id = "parent:x"
subagents = ["helper"]
mcp_servers = ["tiny", "gone"]

[profiles.helper]
model_id = "child:x"

[subagents.helper]
profile = "helper"
description = "Uses echo"
required_tools = ["echo"]

[mcp_servers.tiny]
command = {json.dumps(sys.executable)}
args = [{json.dumps(SERVER)}]
tools = ["echo"]
timeout_seconds = 20.0

[mcp_servers.gone]
command = {json.dumps(sys.executable)}
args = [{json.dumps(SERVER)}, "crash"]
"""


def _providers() -> ModelProviderRegistry:
    calls = [("echo", {"text": "hi"}), ("delegate", {"name": "helper", "prompt": "echo"})]
    return ModelProviderRegistry(
        {
            "parent": lambda name, settings: TestModel.with_tool_calls(calls, then="done"),
            "child": lambda name, settings: FunctionModel(_child_model),
        }
    )


async def test_a_host_profile_names_mcp_servers_and_its_subagent_inherits_their_tools() -> None:
    providers = _providers()
    factory = AgentFactory(parse_host_config(HOST_TOML, providers=providers), providers)
    (warning,) = factory.warnings  # the crashing server gives no tools, the host starts
    assert "'gone'" in warning
    agent, _mode = factory.build("default", SubagentDelegationMode.BLOCKING)
    assert "echo" in agent.tools().names() and "slow" not in agent.tools().names()

    result = await agent.run("go")

    echoed, delegated = _returns(result.messages)
    assert isinstance(echoed, ToolReturnPart) and echoed.content == {"result": "echo: hi"}
    assert isinstance(delegated, ToolReturnPart)
    assert delegated.content["output"] == "child saw echo: child"


def test_a_profile_naming_an_unknown_mcp_server_is_a_config_error() -> None:
    text = '[profiles.default]\nmodel_id = "test:echo"\nmcp_servers = ["nope"]\n'
    with pytest.raises(HostConfigError) as raised:
        parse_host_config(text)
    assert raised.value.key == "profiles.default.mcp_servers[0]"
    both = '[profiles.default]\nmodel_id = "test:echo"\n[mcp_servers.x]\ncommand = "a"\nurl = "b"\n'
    with pytest.raises(HostConfigError) as twice:
        parse_host_config(both)
    assert twice.value.key == "mcp_servers.x"


async def test_a_background_child_an_mcp_client_delegates_inherits_the_profiles_mcp_tool() -> None:
    providers = _providers()
    store = MemorySessionStore()
    service = HostService(
        parse_host_config(HOST_TOML, providers=providers),
        store=store,
        events=MemoryEventLog(),
        providers=providers,
        tick_seconds=0.05,
        closers=[store.close],
    )
    await service.start()
    try:
        bridge = McpBridge(service, session_id="ide")
        accepted = await bridge.call("delegate", {"subagent_name": "helper", "prompt": "echo"})
        waited = await bridge.call("wait_subagent", {"attempt_id": accepted["attempt_id"]})
    finally:
        await service.close()
    assert (waited["status"], waited["result"]) == ("completed", "child saw echo: child")
