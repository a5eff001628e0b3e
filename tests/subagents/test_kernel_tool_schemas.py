"""The kernel's own tools advertise exactly the schema of the msgspec Struct they validate with.

One source per tool: a field added to a Struct is advertised, a field the
schema shows is accepted, and unknown fields stay refused.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest

from subagents import (
    AgentBuilder,
    BackgroundSubagentSupervisor,
    ConversationId,
    OwnerIdentity,
    RunId,
    SubagentConfig,
    SubagentDelegationMode,
    SubagentRegistry,
    SupervisorLimits,
    TestModel,
    Tool,
    ToolArgumentError,
    ToolContext,
    delegation_tools,
    struct_schema,
)
from subagents._delegation._args import (
    _AsyncDelegateArgs,
    _CancelArgs,
    _DelegateArgs,
    _NoArgs,
    _SteerArgs,
    _WaitArgs,
)

ROSTER = ["research", "writer"]
# (mode, tool name) -> the Struct the tool converts its arguments into.
EXPECTED: dict[tuple[SubagentDelegationMode, str], type[msgspec.Struct]] = {
    (SubagentDelegationMode.BLOCKING, "delegate"): _DelegateArgs,
    (SubagentDelegationMode.BLOCKING, "subagent_info"): _NoArgs,
    (SubagentDelegationMode.ASYNC, "delegate"): _AsyncDelegateArgs,
    (SubagentDelegationMode.ASYNC, "steer_subagent"): _SteerArgs,
    (SubagentDelegationMode.ASYNC, "cancel_subagent"): _CancelArgs,
    (SubagentDelegationMode.ASYNC, "wait_subagent"): _WaitArgs,
    (SubagentDelegationMode.ASYNC, "subagent_info"): _NoArgs,
    (SubagentDelegationMode.BLOCKING_AND_ASYNC, "delegate"): _DelegateArgs,
    (SubagentDelegationMode.BLOCKING_AND_ASYNC, "spawn_delegate"): _AsyncDelegateArgs,
    (SubagentDelegationMode.BLOCKING_AND_ASYNC, "steer_subagent"): _SteerArgs,
    (SubagentDelegationMode.BLOCKING_AND_ASYNC, "cancel_subagent"): _CancelArgs,
    (SubagentDelegationMode.BLOCKING_AND_ASYNC, "wait_subagent"): _WaitArgs,
    (SubagentDelegationMode.BLOCKING_AND_ASYNC, "subagent_info"): _NoArgs,
}


@pytest.fixture
async def supervisor() -> AsyncIterator[BackgroundSubagentSupervisor]:
    made = BackgroundSubagentSupervisor(
        owner=OwnerIdentity(host_instance_id="host-schemas"),
        limits=SupervisorLimits(shutdown_grace=5.0),
    )
    yield made
    await made.shutdown_checked(5.0)


def _kernel_tools(supervisor: BackgroundSubagentSupervisor) -> dict[tuple[Any, str], Tool]:
    child = AgentBuilder(TestModel.with_text("child")).build()
    registry = SubagentRegistry()
    for name in ROSTER:
        registry = registry.with_subagent(SubagentConfig(name, child))
    # The registry's own subagent_info (not installed by any mode) counts as blocking.
    found: dict[tuple[Any, str], Tool] = {
        (SubagentDelegationMode.BLOCKING, "subagent_info"): registry.subagent_info_tool()
    }
    for mode in SubagentDelegationMode:
        for made in delegation_tools(registry, mode, supervisor):
            found[(mode, made.name)] = made
    return found


def _without_roster(schema: dict[str, Any]) -> dict[str, Any]:
    copied = msgspec.json.decode(msgspec.json.encode(schema))
    name = copied.get("properties", {}).get("subagent_name")
    if name is not None:
        assert name.pop("enum") == ROSTER
    return dict(copied)


async def test_every_kernel_tools_schema_is_its_structs_schema(
    supervisor: BackgroundSubagentSupervisor,
) -> None:
    tools = _kernel_tools(supervisor)

    assert set(tools) == set(EXPECTED)
    for key, kind in EXPECTED.items():
        schema = tools[key].definition().parameters_schema
        assert _without_roster(schema) == struct_schema(kind), key
        assert schema["additionalProperties"] is False, key


async def test_the_advertised_names_and_the_name_alias_are_kept(
    supervisor: BackgroundSubagentSupervisor,
) -> None:
    tools = _kernel_tools(supervisor)
    delegate = tools[(SubagentDelegationMode.ASYNC, "delegate")]
    schema = delegate.definition().parameters_schema

    assert list(schema["properties"]) == ["subagent_name", "prompt", "agent_id", "linked_task_id"]
    assert schema["required"] == ["subagent_name", "prompt"]
    assert schema["properties"]["subagent_name"]["enum"] == ROSTER
    assert delegate.validate({"name": "writer", "prompt": "p"}) == _AsyncDelegateArgs(
        subagent_name="writer", prompt="p"
    )
    with pytest.raises(ToolArgumentError) as caught:
        delegate.validate({"name": 7, "prompt": "p"})
    assert caught.value.path == "$.name"
    steer = tools[(SubagentDelegationMode.ASYNC, "steer_subagent")].definition()
    assert list(steer.parameters_schema["properties"]) == ["attempt_id", "message", "steering_id"]
    assert steer.parameters_schema["required"] == ["attempt_id", "message"]


async def test_every_kernel_tool_refuses_unknown_fields_naming_them(
    supervisor: BackgroundSubagentSupervisor,
) -> None:
    context = ToolContext(RunId("r"), ConversationId("c"), 1)
    for key, made in _kernel_tools(supervisor).items():
        valid: dict[str, Any] = {
            field: "x"
            for field in made.definition().parameters_schema["required"]
            if field != "subagent_name"
        }
        if "subagent_name" in made.definition().parameters_schema["properties"]:
            valid["subagent_name"] = "research"
        with pytest.raises(ToolArgumentError) as caught:
            await made.call(context, {**valid, "invented": 1})
        assert (caught.value.tool, caught.value.path) == (made.name, "$.invented"), key


class _OnceArgs(msgspec.Struct, kw_only=True):
    query: str
    limit: int = 3


def test_a_structs_schema_is_generated_once_and_every_caller_gets_its_own_copy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The host builds every run's tools anew: generating a schema per run cost more
    # CPU than the run's store transactions.
    calls: list[type] = []
    generate = msgspec.json.schema

    def counted(kind: Any, **kwargs: Any) -> Any:
        calls.append(kind)
        return generate(kind, **kwargs)

    monkeypatch.setattr(msgspec.json, "schema", counted)
    first = struct_schema(_OnceArgs)
    first["properties"]["query"]["enum"] = ["changed"]
    second = struct_schema(_OnceArgs)
    assert calls == [_OnceArgs]
    assert "enum" not in second["properties"]["query"]
    assert second == {
        "type": "object",
        "properties": {"query": {"type": "string"}, "limit": {"type": "integer", "default": 3}},
        "required": ["query"],
    }
