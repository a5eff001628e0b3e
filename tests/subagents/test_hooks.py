"""Subagent execution hooks, agent hooks and capability bundles."""

from __future__ import annotations

import asyncio
from contextvars import ContextVar
from typing import Any

import pytest

from subagents import (
    AgentBuilder,
    AgentContext,
    AgentHook,
    FunctionModel,
    FunctionTool,
    ModelError,
    ModelRequestInfo,
    ModelRequestParameters,
    ModelResponse,
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
    ToolRetriesExceeded,
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


# -- model-request and error hooks --------------------------------------------------------------


class Tracer(AgentHook):
    """Records every model-request and error hook call."""

    def __init__(self, name: str = "tracer") -> None:
        self.name = name
        self.log: list[tuple[Any, ...]] = []

    async def before_model_request(self, context: AgentContext, request: ModelRequestInfo) -> None:
        self.log.append(("before_model", request))

    async def after_model_request(
        self,
        context: AgentContext,
        request: ModelRequestInfo,
        response: ModelResponse | None,
        error: Exception | None,
    ) -> None:
        self.log.append(("after_model", request.request_number, response, error))

    async def on_run_error(self, context: AgentContext, error: Exception) -> None:
        self.log.append(("run_error", error))

    def on_run_interrupted(self, context: AgentContext, signal: BaseException) -> None:
        self.log.append(("interrupted", type(signal).__name__))


async def test_model_request_hooks_see_each_request_and_its_response() -> None:
    tracer = Tracer()
    echo = FunctionTool("echo", None, {"type": "object"}, lambda ctx, args: "echoed")
    model = TestModel.with_tool_calls([("echo", {})], "done")
    agent = AgentBuilder(model).name("main").tool(echo).hook(tracer).build()
    context = AgentContext()

    result = await agent.run("go", context)

    kinds = [entry[0] for entry in tracer.log]
    assert kinds == ["before_model", "after_model", "before_model", "after_model"]
    first, second = tracer.log[0][1], tracer.log[2][1]
    assert isinstance(first, ModelRequestInfo)
    assert (first.request_number, second.request_number) == (1, 2)
    assert (first.run_id, first.conversation_id) == (result.run_id, context.conversation_id)
    assert (first.agent_name, first.model_name, first.streamed) == ("main", "test", False)
    assert [d.name for d in first.parameters.tools] == ["echo"]
    assert len(first.messages) == 1 and len(second.messages) == 3  # + response + tool return
    _, number, response, error = tracer.log[3]
    assert (number, error) == (2, None)
    assert isinstance(response, ModelResponse) and response.text() == "done"
    assert response.usage.output_tokens > 0


async def test_a_failed_request_reaches_after_model_request_and_on_run_error() -> None:
    def broken(messages: Any, params: ModelRequestParameters) -> str:
        raise ConnectionError("gateway down")

    tracer = Tracer()
    agent = AgentBuilder(FunctionModel(broken)).hook(tracer).build()

    with pytest.raises(ModelError) as caught:
        await agent.run("go")

    (_, _), (_, number, response, error), (kind, run_error) = tracer.log
    assert (number, response) == (1, None)
    assert error is caught.value and run_error is caught.value and kind == "run_error"
    assert isinstance(caught.value.__cause__, ConnectionError)


async def test_a_raising_error_hook_is_a_note_on_the_runs_error_and_every_hook_still_runs() -> None:
    class Broken(AgentHook):
        async def after_model_request(
            self,
            context: AgentContext,
            request: ModelRequestInfo,
            response: ModelResponse | None,
            error: Exception | None,
        ) -> None:
            raise RuntimeError("exporter down")

        async def on_run_error(self, context: AgentContext, error: Exception) -> None:
            raise RuntimeError("exporter still down")

    def broken(messages: Any, params: ModelRequestParameters) -> str:
        raise ConnectionError("gateway down")

    tracer = Tracer()
    agent = AgentBuilder(FunctionModel(broken)).hook(Broken()).hook(tracer).build()

    with pytest.raises(ModelError) as caught:
        await agent.run("go")

    assert [entry[0] for entry in tracer.log] == ["before_model", "after_model", "run_error"]
    notes = caught.value.__notes__
    assert any("after_model_request hook Broken" in n and "exporter down" in n for n in notes)
    assert any("on_run_error hook Broken" in n for n in notes)


async def test_a_raising_after_model_request_fails_a_successful_run_and_all_hooks_see_it() -> None:
    class Refuse(AgentHook):
        async def after_model_request(
            self,
            context: AgentContext,
            request: ModelRequestInfo,
            response: ModelResponse | None,
            error: Exception | None,
        ) -> None:
            raise PermissionError("policy")

    tracer = Tracer()
    agent = AgentBuilder(TestModel.with_text("ok")).hook(Refuse()).hook(tracer).build()

    with pytest.raises(PermissionError) as caught:
        await agent.run("go")

    assert [entry[0] for entry in tracer.log] == ["before_model", "after_model", "run_error"]
    assert tracer.log[-1][1] is caught.value


async def test_a_raising_before_model_request_stops_the_request() -> None:
    calls: list[int] = []

    def answer(messages: Any, params: ModelRequestParameters) -> str:
        calls.append(1)
        return "never"

    class Refuse(AgentHook):
        async def before_model_request(
            self, context: AgentContext, request: ModelRequestInfo
        ) -> None:
            raise PermissionError("budget")

    tracer = Tracer()
    agent = AgentBuilder(FunctionModel(answer)).hook(Refuse()).hook(tracer).build()

    with pytest.raises(PermissionError):
        await agent.run("go")

    assert calls == []
    assert [entry[0] for entry in tracer.log] == ["run_error"]


async def test_on_run_error_sees_limits_and_failing_run_hooks() -> None:
    tracer = Tracer()
    looping = TestModel.with_tool_calls([("missing", {}), ("missing", {})], "never")
    agent = AgentBuilder(looping).hook(tracer).build()

    with pytest.raises(ToolRetriesExceeded) as caught:
        await agent.run("go")

    assert tracer.log[-1] == ("run_error", caught.value)

    class Refuse(AgentHook):
        async def before_run(self, context: AgentContext, prompt: str) -> None:
            raise PermissionError("not today")

    late = Tracer()
    refused = AgentBuilder(TestModel.with_text("ok")).hook(Refuse()).hook(late).build()
    with pytest.raises(PermissionError) as refusal:
        await refused.run("go")
    # Also a hook whose before_run was never reached hears about the failure.
    assert late.log == [("run_error", refusal.value)]


async def test_a_cancelled_run_calls_on_run_interrupted_and_awaits_no_hook() -> None:
    entered = asyncio.Event()

    async def hangs(messages: Any, params: ModelRequestParameters) -> str:
        entered.set()
        await asyncio.Event().wait()
        return "never"

    tracer = Tracer()
    agent = AgentBuilder(FunctionModel(hangs)).hook(tracer).build()
    task = asyncio.ensure_future(agent.run("go"))
    await entered.wait()

    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    assert [entry[0] for entry in tracer.log] == ["before_model", "interrupted"]
    assert tracer.log[-1] == ("interrupted", "CancelledError")


async def test_a_streamed_request_is_flagged_and_hooks_share_the_runs_contextvars() -> None:
    span: ContextVar[str | None] = ContextVar("span", default=None)
    seen: list[tuple[str, str | None]] = []

    class Spans(AgentHook):
        async def before_run(self, context: AgentContext, prompt: str) -> None:
            span.set("invoke_agent")

        async def before_model_request(
            self, context: AgentContext, request: ModelRequestInfo
        ) -> None:
            seen.append((f"model:{request.streamed}", span.get()))

    def echo(ctx: ToolContext, args: Any) -> str:
        seen.append(("tool", span.get()))
        return "echoed"

    tool = FunctionTool("echo", None, {"type": "object"}, echo)
    model = TestModel.with_tool_calls([("echo", {}), ("echo", {})], "done")
    agent = AgentBuilder(model).tool(tool).hook(Spans()).build()

    async with agent.run_stream("go") as stream:
        async for _ in stream:
            pass

    assert seen == [
        ("model:True", "invoke_agent"),
        ("tool", "invoke_agent"),
        ("tool", "invoke_agent"),
        ("model:True", "invoke_agent"),
    ]
