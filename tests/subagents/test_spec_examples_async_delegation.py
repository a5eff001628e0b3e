"""The spec's "Asynchronous Delegation" section, in Python, and the topology of the modes.

The first test is the spec's example as written (``BackgroundSubagentSupervisor.new()``
runs its children on its own loop thread); the others pin what the section says:
the async-only tool set, no blocking backend visible, a supervisor required, the
combined mode, and a background round trip on the supervisor's own loop.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator

import pytest

from subagents import (
    AgentBuilder,
    AgentConfigError,
    AgentContext,
    BackgroundSubagentSupervisor,
    ConversationId,
    Dependencies,
    OwnerIdentity,
    RunId,
    SubagentConfig,
    SubagentDelegationMode,
    SupervisorLimits,
    TestModel,
    ToolContext,
    delegation_tools,
    is_main_agent_only_tool,
)

ASYNC_TOOLS = ["delegate", "steer_subagent", "cancel_subagent", "wait_subagent", "subagent_info"]


def _our_threads() -> list[str]:
    prefixes = ("subagents-", "AttemptActor", "SupervisorActor")
    return [t.name for t in threading.enumerate() if t.name.startswith(prefixes)]


@pytest.fixture
async def supervisor() -> AsyncIterator[BackgroundSubagentSupervisor]:
    """A supervisor with its own loop thread, shut down (checked) after the test."""
    made = BackgroundSubagentSupervisor(
        owner=OwnerIdentity(host_instance_id="host-spec"),
        limits=SupervisorLimits(shutdown_grace=5.0),
    )
    yield made
    await made.shutdown_checked(5.0)
    assert _our_threads() == []


async def test_the_async_example_runs_as_written() -> None:
    child = AgentBuilder(TestModel.with_text("child")).build()
    supervisor = BackgroundSubagentSupervisor.new()
    agent = (
        AgentBuilder(TestModel.with_text("parent"))
        .subagent(SubagentConfig("research", child))
        .subagent_delegation_mode(SubagentDelegationMode.ASYNC)
        .background_subagent_supervisor(supervisor)
        .build()
    )

    names = agent.tools().names()
    assert "delegate" in names
    assert "steer_subagent" in names
    assert "cancel_subagent" in names
    assert "wait_subagent" in names

    await supervisor.shutdown_checked(1.0)


async def test_async_mode_exposes_exactly_the_five_background_tools_and_no_blocking_backend(
    supervisor: BackgroundSubagentSupervisor,
) -> None:
    agent = (
        AgentBuilder(TestModel.with_text("parent"))
        .subagent(SubagentConfig("research", AgentBuilder(TestModel.with_text("c")).build()))
        .subagent_delegation_mode(SubagentDelegationMode.ASYNC)
        .background_subagent_supervisor(supervisor)
        .build()
    )

    assert agent.tools().names() == ASYNC_TOOLS
    assert all(is_main_agent_only_tool(tool) for tool in agent.tools())
    delegate = agent.tools().lookup("delegate")
    assert delegate is not None
    assert delegate.parameters_schema["additionalProperties"] is False
    assert set(delegate.parameters_schema["properties"]) == {
        "subagent_name",
        "prompt",
        "agent_id",
        "linked_task_id",
    }


async def test_blocking_and_async_keeps_the_blocking_delegate_and_adds_spawn_delegate(
    supervisor: BackgroundSubagentSupervisor,
) -> None:
    agent = (
        AgentBuilder(TestModel.with_text("parent"))
        .subagent(SubagentConfig("research", AgentBuilder(TestModel.with_text("c")).build()))
        .subagent_delegation_mode(SubagentDelegationMode.BLOCKING_AND_ASYNC)
        .background_subagent_supervisor(supervisor)
        .build()
    )

    assert agent.tools().names() == ["delegate", "spawn_delegate", *ASYNC_TOOLS[1:]]
    blocking = agent.tools().lookup("delegate")
    assert blocking is not None and "wait for its answer" in (blocking.description or "")


@pytest.mark.parametrize(
    "mode", [SubagentDelegationMode.ASYNC, SubagentDelegationMode.BLOCKING_AND_ASYNC]
)
def test_async_modes_need_a_background_supervisor(mode: SubagentDelegationMode) -> None:
    builder = (
        AgentBuilder(TestModel.with_text("p"))
        .subagent(SubagentConfig("research", AgentBuilder(TestModel.with_text("c")).build()))
        .subagent_delegation_mode(mode)
        .background_subagent_supervisor(object())
    )

    with pytest.raises(AgentConfigError, match="needs a BackgroundSubagentSupervisor"):
        builder.build()


def test_async_mode_without_subagents_installs_nothing_and_needs_no_supervisor() -> None:
    agent = (
        AgentBuilder(TestModel.with_text("p"))
        .subagent_delegation_mode(SubagentDelegationMode.ASYNC)
        .build()
    )

    assert agent.tools().names() == []


async def test_delegation_tools_decides_the_topology_for_a_registry(
    supervisor: BackgroundSubagentSupervisor,
) -> None:
    registry = (
        AgentBuilder(TestModel.with_text("p"))
        .subagent(SubagentConfig("research", AgentBuilder(TestModel.with_text("c")).build()))
        .build()
        .subagents()
    )
    tools = delegation_tools(registry, SubagentDelegationMode.ASYNC, supervisor)
    again = delegation_tools(registry, SubagentDelegationMode.ASYNC, supervisor)

    assert [tool.name for tool in tools] == ASYNC_TOOLS
    assert [t.definition() for t in tools] == [t.definition() for t in again]


async def test_a_background_round_trip_on_the_supervisors_own_loop(
    supervisor: BackgroundSubagentSupervisor,
) -> None:
    """Delegate returns at once with a stable agent_id and a fresh attempt_id; one
    bounded wait gets the result; the child ran on the supervisor's loop thread and
    its stream records still reached the parent context, attributed."""
    child = AgentBuilder(TestModel.with_text("child")).build()
    agent = (
        AgentBuilder(TestModel.with_text("parent"))
        .subagent(SubagentConfig("research", child))
        .subagent_delegation_mode(SubagentDelegationMode.ASYNC)
        .background_subagent_supervisor(supervisor)
        .build()
    )
    parent = AgentContext(run_id=RunId.from_string("run-1"))
    dependencies = Dependencies()
    dependencies.insert(parent)
    tool_context = ToolContext(
        RunId.from_string("run-1"), ConversationId.from_string("c"), 1, dependencies=dependencies
    )
    delegate, wait = agent.tools().lookup("delegate"), agent.tools().lookup("wait_subagent")
    assert delegate is not None and wait is not None

    accepted = (
        await delegate.call(tool_context, {"subagent_name": "research", "prompt": "facts"})
    ).content
    waited = (await wait.call(tool_context, {"attempt_id": accepted["attempt_id"]})).content

    assert accepted["status"] == "accepted"
    assert accepted["agent_id"].startswith("research-bg-")
    assert accepted["attempt_id"].startswith("subattempt_")
    assert waited["status"] == "completed"
    assert waited["result"] == "child"
    # Published from the supervisor's loop onto ours before the result was terminal.
    records = parent.events.of_kind("subagent_stream_record")
    assert [r.payload["kind"] for r in records] == ["run_started", "run_completed"]
    assert {r.payload["source"]["agent_id"] for r in records} == {accepted["agent_id"]}
    assert parent.usage.requests == 1
