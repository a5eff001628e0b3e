"""Subagent execution hooks, agent hooks and capability bundles."""

from __future__ import annotations

from typing import Any

import pytest

from subagents import (
    AgentBuilder,
    AgentContext,
    AgentHook,
    FunctionModel,
    FunctionTool,
    ModelRequestParameters,
    PayloadError,
    RunId,
    StaticCapabilityBundle,
    SubagentConfig,
    SubagentExecutionHook,
    SubagentExecutionMetadata,
    SubagentExecutionOutcome,
    SubagentHookError,
    SubagentLifecycleEvent,
    SubagentRegistry,
    SubagentRunFailed,
    SubagentTask,
    TaskId,
    TestModel,
    ToolCallPart,
    ToolContext,
    ToolResult,
    Usage,
)


class Recorder(SubagentExecutionHook):
    def __init__(self) -> None:
        self.calls: list[tuple[str, SubagentExecutionMetadata, Any]] = []

    async def before_subagent_run(
        self, metadata: SubagentExecutionMetadata, child_context: AgentContext
    ) -> None:
        self.calls.append(("before", metadata, child_context.subagent_stack))

    async def after_subagent_run(
        self,
        metadata: SubagentExecutionMetadata,
        child_context: AgentContext,
        outcome: SubagentExecutionOutcome,
    ) -> None:
        self.calls.append(("after", metadata, outcome))


class Raising(SubagentExecutionHook):
    def __init__(self, where: str) -> None:
        self.where = where

    async def before_subagent_run(
        self, metadata: SubagentExecutionMetadata, child_context: AgentContext
    ) -> None:
        if self.where == "before":
            raise RuntimeError("policy refused")

    async def after_subagent_run(
        self,
        metadata: SubagentExecutionMetadata,
        child_context: AgentContext,
        outcome: SubagentExecutionOutcome,
    ) -> None:
        if self.where == "after":
            raise RuntimeError("audit store down")


def _counting_child() -> tuple[Any, list[int]]:
    calls: list[int] = []

    def answer(messages: Any, params: ModelRequestParameters) -> str:
        calls.append(1)
        return "child"

    return AgentBuilder(FunctionModel(answer)).build(), calls


def _failures(context: AgentContext) -> list[SubagentLifecycleEvent]:
    return [
        SubagentLifecycleEvent.from_value(e.payload)
        for e in context.events.of_kind("subagent_failed")
    ]


async def test_hooks_see_typed_metadata_and_the_completed_outcome() -> None:
    recorder = Recorder()
    child, _ = _counting_child()
    registry = SubagentRegistry().with_subagent(
        SubagentConfig("research", child).with_execution_hook(recorder)
    )
    parent = AgentContext(run_id=RunId.from_string("parent-run"), agent_id="main-agent")
    task = SubagentTask("collect").with_id(TaskId.from_string("t-1")).with_metadata({"k": 1})

    delegated = await registry.delegate_task("research", task, parent)

    (before, metadata, stack), (after, after_metadata, outcome) = recorder.calls
    assert (before, after) == ("before", "after")
    assert metadata == after_metadata
    assert metadata.name == "research"
    assert metadata.task_id == TaskId.from_string("t-1")
    assert metadata.prompt == "collect"
    assert metadata.task_metadata == {"k": 1}
    assert metadata.child_agent_id == "research-t-1"
    assert metadata.child_run_id == delegated.run_id
    assert metadata.parent_run_id == RunId.from_string("parent-run")
    assert metadata.parent_agent_id == "main-agent"
    assert stack == ["research"]
    assert isinstance(outcome, SubagentExecutionOutcome.Completed)
    assert outcome.output == "child"
    assert outcome.run_id == delegated.run_id
    assert outcome.usage == delegated.usage


async def test_a_before_hook_that_raises_fails_the_delegation_before_the_child_runs() -> None:
    child, calls = _counting_child()
    registry = SubagentRegistry().with_subagent(
        SubagentConfig("research", child).with_execution_hook(Raising("before"))
    )
    context = AgentContext()

    with pytest.raises(SubagentHookError) as caught:
        await registry.delegate("research", "x", context)

    assert calls == []
    assert caught.value.hook == "before_subagent_run"
    assert isinstance(caught.value.__cause__, RuntimeError)
    [failed] = _failures(context)
    assert failed.metadata["hook"] == "before_subagent_run"
    assert failed.metadata["error"] == "policy refused"
    assert failed.metadata["request_count"] == 0


async def test_an_after_hook_that_raises_fails_a_completed_delegation() -> None:
    child, calls = _counting_child()
    registry = SubagentRegistry().with_subagent(
        SubagentConfig("research", child).with_execution_hook(Raising("after"))
    )
    context = AgentContext()

    with pytest.raises(SubagentHookError) as caught:
        await registry.delegate("research", "x", context)

    assert calls == [1]
    assert caught.value.hook == "after_subagent_run"
    [failed] = _failures(context)
    assert failed.metadata["hook"] == "after_subagent_run"
    assert failed.metadata["request_count"] == 1
    assert context.events.of_kind("subagent_completed") == []
    # The child did run, so its usage still counts.
    assert context.usage.requests == 1


async def test_after_hooks_observe_a_failed_child_and_the_child_error_wins() -> None:
    def broken(messages: Any, params: ModelRequestParameters) -> str:
        raise ValueError("bad gateway")

    recorder = Recorder()
    child = AgentBuilder(FunctionModel(broken)).build()
    registry = SubagentRegistry().with_subagent(
        SubagentConfig("research", child)
        .with_execution_hook(recorder)
        .with_execution_hook(Raising("after"))
    )
    context = AgentContext()

    with pytest.raises(SubagentRunFailed):
        await registry.delegate("research", "x", context)

    outcome = recorder.calls[-1][2]
    assert isinstance(outcome, SubagentExecutionOutcome.Failed)
    assert "bad gateway" in outcome.error
    [failed] = _failures(context)
    assert failed.metadata["hook_error"] == "Raising: audit store down"


def test_execution_outcomes_round_trip_through_values() -> None:
    completed = SubagentExecutionOutcome.Completed(
        output="child", usage=Usage(requests=1), run_id=RunId.from_string("r")
    )
    failed = SubagentExecutionOutcome.Failed(error="boom")

    assert completed.to_value()["outcome"] == "completed"
    assert SubagentExecutionOutcome.from_value(completed.to_value()) == completed
    assert SubagentExecutionOutcome.from_value(failed.to_value()) == failed
    assert repr(failed).startswith("Failed(")
    with pytest.raises(PayloadError):
        SubagentExecutionOutcome.from_value({"outcome": "vanished"})


async def test_agent_hooks_wrap_runs_and_tool_calls_in_order() -> None:
    log: list[str] = []

    class Logger(AgentHook):
        async def before_run(self, context: AgentContext, prompt: str) -> None:
            log.append(f"before_run:{prompt}")

        async def before_tool_call(self, context: ToolContext, call: ToolCallPart) -> None:
            log.append(f"before_tool:{call.tool_name}")

        async def after_tool_call(
            self, context: ToolContext, call: ToolCallPart, result: ToolResult
        ) -> None:
            log.append(f"after_tool:{result.content}")

        async def after_run(self, context: AgentContext, output: str) -> None:
            log.append(f"after_run:{output}")

    echo = FunctionTool("echo", None, {"type": "object"}, lambda ctx, args: "echoed")
    agent = (
        AgentBuilder(TestModel.with_tool_calls([("echo", {})], "done"))
        .tool(echo)
        .hook(Logger())
        .build()
    )

    await agent.run("go")

    assert log == ["before_run:go", "before_tool:echo", "after_tool:echoed", "after_run:done"]


async def test_a_capability_bundle_contributes_its_hooks_and_tools() -> None:
    started: list[str] = []

    class Starter(AgentHook):
        async def before_run(self, context: AgentContext, prompt: str) -> None:
            started.append(prompt)

    ping = FunctionTool("ping", None, {"type": "object"}, lambda ctx, args: "pong")
    bundle = StaticCapabilityBundle("parent-bundle", hooks=[Starter()], tools=[ping])
    agent = AgentBuilder(TestModel.with_text("ok")).capability_bundle(bundle).build()

    await agent.run("hi")

    assert agent.tools().names() == ["ping"]
    assert started == ["hi"]
    assert agent.capability_bundles == (bundle,)
    assert bundle.capability_id == "parent-bundle"


async def test_an_agent_hook_that_raises_fails_the_run_with_its_error() -> None:
    class Refuse(AgentHook):
        async def before_run(self, context: AgentContext, prompt: str) -> None:
            raise PermissionError("not today")

    agent = AgentBuilder(TestModel.with_text("ok")).hook(Refuse()).build()

    with pytest.raises(PermissionError):
        await agent.run("hi")
