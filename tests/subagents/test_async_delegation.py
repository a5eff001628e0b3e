"""Asynchronous delegation through an agent: the five background tools, the child
runner adapter (steering, cancellation, context delta), delivery at the parent's
next turn and stream attribution.

Every supervisor runs its children on the test's own event loop (``loop=``), so
children can be gated with ``asyncio.Event``; no test sleeps. Every supervisor
is shut down (checked) by the ``make_supervisor`` fixture.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import pytest

from storage import SeededIds
from subagents import (
    Agent,
    AgentBuilder,
    AgentContext,
    AgentContextHandle,
    AgentHook,
    BackgroundSubagentError,
    BackgroundSubagentSupervisor,
    ConversationId,
    Dependencies,
    FunctionModel,
    FunctionTool,
    ModelMessage,
    ModelRequest,
    ModelRequestParameters,
    ModelResponse,
    OwnerIdentity,
    RetryPromptPart,
    RunId,
    SubagentConfig,
    SubagentContextDelta,
    SubagentDelegationMode,
    SubagentExecutionHook,
    SubagentExecutionMetadata,
    SubagentExecutionOutcome,
    SubagentParentTools,
    SubagentToolInheritancePolicy,
    SupervisorLimits,
    TestModel,
    ToolArgumentError,
    ToolCallPart,
    ToolContext,
    ToolError,
    ToolResult,
    UserPromptPart,
)
from subagents._delegation._background import STEERING_PREFIX
from subagents._delegation._delivery import BACKGROUND_RESULT_PREFIX

CONTROL_TOOLS = {
    "delegate",
    "spawn_delegate",
    "steer_subagent",
    "cancel_subagent",
    "wait_subagent",
    "subagent_info",
}
LIMITS = SupervisorLimits(cancellation_grace=2.0, shutdown_grace=5.0)
Factory = Callable[..., BackgroundSubagentSupervisor]


def _our_threads() -> list[str]:
    prefixes = ("subagents-", "AttemptActor", "SupervisorActor")
    return [t.name for t in threading.enumerate() if t.name.startswith(prefixes)]


@pytest.fixture
async def make_supervisor() -> AsyncIterator[Factory]:
    made: list[BackgroundSubagentSupervisor] = []
    loop = asyncio.get_running_loop()

    def make(**kwargs: Any) -> BackgroundSubagentSupervisor:
        kwargs.setdefault("loop", loop)
        kwargs.setdefault("limits", LIMITS)
        supervisor = BackgroundSubagentSupervisor(**kwargs)
        made.append(supervisor)
        return supervisor

    yield make
    for supervisor in made:
        await supervisor.shutdown_checked(5.0)
    assert _our_threads() == []


class Gate:
    """An asyncio.Event the child's model waits on (children run on the test loop)."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.opened = asyncio.Event()

    async def wait(self) -> None:
        self.entered.set()
        await self.opened.wait()

    def open(self) -> None:
        self.opened.set()


def gated_child(gate: Gate, text: str = "child result") -> Agent:
    async def answer(messages: Sequence[ModelMessage], params: ModelRequestParameters) -> str:
        await gate.wait()
        return text

    return AgentBuilder(FunctionModel(answer, name="child")).name("research").build()


def async_agent(
    model: Any,
    supervisor: BackgroundSubagentSupervisor,
    child: Agent,
    *,
    mode: SubagentDelegationMode = SubagentDelegationMode.ASYNC,
    hooks: Sequence[AgentHook] = (),
    config: Callable[[SubagentConfig], SubagentConfig] = lambda c: c,
) -> Agent:
    return (
        AgentBuilder(model)
        .subagent(config(SubagentConfig("research", child, "Collects facts")))
        .subagent_delegation_mode(mode)
        .background_subagent_supervisor(supervisor)
        .hooks(hooks)
        .build()
    )


def tool_context(agent: Agent, parent: AgentContext, run_id: str = "run-parent") -> ToolContext:
    parent.run_id = RunId.from_string(run_id)
    dependencies = Dependencies()
    dependencies.insert(parent)
    dependencies.insert(AgentContextHandle(parent))
    dependencies.insert(SubagentParentTools(agent.tools()))
    return ToolContext(
        RunId.from_string(run_id), ConversationId.from_string("conv"), 1, dependencies=dependencies
    )


async def call(agent: Agent, ctx: ToolContext, tool: str, args: dict[str, Any]) -> Any:
    found = agent.tools().lookup(tool)
    assert found is not None
    result: ToolResult = await found.call(ctx, args)
    return result.content


def predicted_ids(seed: int) -> tuple[str, str]:
    """The first (agent_id suffix, attempt_id) a supervisor seeded with ``seed`` draws."""
    twin = SeededIds(seed)
    return f"research-bg-{twin.token_hex(4)}", f"subattempt_{twin.uuid4()}"


class ReleaseOnWait(AgentHook):
    """Opens the child's gate when the parent calls wait_subagent."""

    def __init__(self, gate: Gate) -> None:
        self.gate = gate

    async def before_tool_call(self, context: ToolContext, call: ToolCallPart) -> None:
        if call.tool_name == "wait_subagent":
            self.gate.open()


# ----------------------------------------------------------------------- the whole loop


async def test_a_scripted_parent_delegates_in_the_background_waits_once_and_gets_the_result(
    make_supervisor: Factory,
) -> None:
    seed = 11
    supervisor = make_supervisor(
        ids=SeededIds(seed), owner=OwnerIdentity(host_instance_id="host-test")
    )
    agent_id, attempt_id = predicted_ids(seed)
    gate = Gate()
    parent_model = TestModel(
        [
            TestModel.tool_call("delegate", {"subagent_name": "research", "prompt": "collect"}),
            TestModel.tool_call("wait_subagent", {"attempt_id": attempt_id}),
            "parent done",
        ]
    )
    agent = async_agent(parent_model, supervisor, gated_child(gate), hooks=[ReleaseOnWait(gate)])
    context = AgentContext()

    result = await agent.run("plan", context)

    assert result.output == "parent done"
    returns = [
        part.content
        for message in result.messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if getattr(part, "tool_name", None) in ("delegate", "wait_subagent")
    ]
    accepted, waited = returns
    assert accepted["status"] == "accepted"
    assert accepted["attempt_id"] == attempt_id
    assert accepted["agent_id"] == agent_id
    assert "Do not poll" in accepted["message"]
    assert waited["status"] == "completed"
    assert waited["result"] == "child result"
    assert waited["delivery_status"] == "delivered"
    # Delivered by the wait, so nothing was injected at a later turn ...
    assert not any(
        isinstance(part, UserPromptPart) and part.content.startswith(BACKGROUND_RESULT_PREFIX)
        for message in result.messages
        if isinstance(message, ModelRequest)
        for part in message.parts
    )
    # ... and the child's usage reached the parent once, through the wait.
    assert context.usage.requests == 3 + 1
    assert len(context.events.of_kind("subagent_completed")) == 1


async def test_a_continuation_reuses_the_agent_id_with_a_fresh_attempt_and_the_child_history(
    make_supervisor: Factory,
) -> None:
    supervisor = make_supervisor()
    seen: list[list[str]] = []

    def answer(messages: Sequence[ModelMessage], params: ModelRequestParameters) -> str:
        prompts = [
            p.content
            for m in messages
            if isinstance(m, ModelRequest)
            for p in m.parts
            if isinstance(p, UserPromptPart)
        ]
        seen.append(prompts)
        return f"answer {len(seen)}"

    child = AgentBuilder(FunctionModel(answer)).build()
    agent = async_agent(TestModel.with_text("p"), supervisor, child)
    parent = AgentContext()
    ctx = tool_context(agent, parent)

    first = await call(agent, ctx, "delegate", {"subagent_name": "research", "prompt": "one"})
    assert (await call(agent, ctx, "wait_subagent", {"attempt_id": first["attempt_id"]}))[
        "result"
    ] == "answer 1"
    again = await call(
        agent,
        ctx,
        "delegate",
        {"name": "research", "prompt": "two", "agent_id": first["agent_id"]},
    )
    waited = await call(agent, ctx, "wait_subagent", {"attempt_id": again["attempt_id"]})

    assert again["status"] == "continued"
    assert again["agent_id"] == first["agent_id"]
    assert again["attempt_id"] != first["attempt_id"]
    assert waited["result"] == "answer 2"
    assert seen[-1] == ["one", "two"]


# ----------------------------------------------------------------------- steering and cancel


async def test_steering_reaches_the_child_at_its_next_turn_boundary(
    make_supervisor: Factory,
) -> None:
    supervisor = make_supervisor()
    paused, resume = asyncio.Event(), asyncio.Event()
    requests: list[Sequence[ModelMessage]] = []

    async def pause(ctx: ToolContext, args: Any) -> str:
        paused.set()
        await resume.wait()
        return "paused"

    def answer(messages: Sequence[ModelMessage], params: ModelRequestParameters) -> Any:
        requests.append(list(messages))
        if len(requests) == 1:
            return ModelResponse(
                parts=(ToolCallPart(tool_name="pause", args={}, tool_call_id="p"),)
            )
        return "steered"

    child = (
        AgentBuilder(FunctionModel(answer))
        .tool(FunctionTool("pause", None, {"type": "object"}, pause))
        .build()
    )
    agent = async_agent(TestModel.with_text("p"), supervisor, child)
    ctx = tool_context(agent, AgentContext())

    accepted = await call(agent, ctx, "delegate", {"subagent_name": "research", "prompt": "go"})
    await paused.wait()
    args = {"attempt_id": accepted["attempt_id"], "message": "focus on X", "steering_id": "s1"}
    receipt = await call(agent, ctx, "steer_subagent", args)
    again = await call(agent, ctx, "steer_subagent", args)  # idempotent: queued once
    resume.set()
    waited = await call(agent, ctx, "wait_subagent", {"attempt_id": accepted["attempt_id"]})

    assert receipt == again
    assert receipt["status"] == "queued"
    assert receipt["steering_id"] == "s1"
    assert waited["result"] == "steered"
    steering = [
        p.content
        for p in requests[1][-1].parts  # the request that opened the child's second turn
        if isinstance(p, UserPromptPart)
    ]
    assert steering == [STEERING_PREFIX + "focus on X"]
    assert not any(
        isinstance(p, UserPromptPart) and p.content.startswith(STEERING_PREFIX)
        for m in requests[0]
        for p in getattr(m, "parts", ())
    )


async def test_cancel_stops_the_child_and_its_cancelled_result_is_delivered(
    make_supervisor: Factory,
) -> None:
    supervisor = make_supervisor()
    gate = Gate()  # never opened
    agent = async_agent(TestModel.with_text("p"), supervisor, gated_child(gate))
    ctx = tool_context(agent, AgentContext())

    accepted = await call(agent, ctx, "delegate", {"subagent_name": "research", "prompt": "go"})
    await gate.entered.wait()
    cancelled = await call(
        agent,
        ctx,
        "cancel_subagent",
        {"attempt_id": accepted["attempt_id"], "reason": "not needed", "cancellation_id": "c1"},
    )
    waited = await call(agent, ctx, "wait_subagent", {"attempt_id": accepted["attempt_id"]})
    repeated = await call(
        agent,
        ctx,
        "cancel_subagent",
        {"attempt_id": accepted["attempt_id"], "reason": "not needed", "cancellation_id": "c1"},
    )

    assert cancelled["status"] == "cancellation_requested"
    assert waited["status"] == "cancelled"
    assert waited["cancellation_reason"] == "not needed"
    assert repeated["status"] == "cancelled"
    with pytest.raises(ToolError) as conflict:
        await call(
            agent,
            ctx,
            "cancel_subagent",
            {"attempt_id": accepted["attempt_id"], "reason": "other", "cancellation_id": "c1"},
        )
    assert conflict.value.fields["error_kind"] == "IdempotencyConflict"
    with pytest.raises(ToolError) as terminal:
        await call(
            agent, ctx, "steer_subagent", {"attempt_id": accepted["attempt_id"], "message": "x"}
        )
    assert terminal.value.fields["error_kind"] == "Terminal"


async def test_a_wait_is_bounded_and_clamped(make_supervisor: Factory) -> None:
    supervisor = make_supervisor()
    gate = Gate()
    agent = async_agent(TestModel.with_text("p"), supervisor, gated_child(gate))
    ctx = tool_context(agent, AgentContext())
    accepted = await call(agent, ctx, "delegate", {"subagent_name": "research", "prompt": "go"})

    running = await call(
        agent, ctx, "wait_subagent", {"attempt_id": accepted["attempt_id"], "timeout_seconds": -5}
    )
    missing = await call(agent, ctx, "wait_subagent", {"attempt_id": "subattempt_nope"})
    gate.open()
    done = await call(
        agent,
        ctx,
        "wait_subagent",
        {"attempt_id": accepted["attempt_id"], "timeout_seconds": float("inf")},
    )

    assert running["timed_out"] is True
    assert running["status"] in ("accepted", "starting", "running")
    assert missing["status"] == "not_found"
    assert missing["known_attempt_ids"] == [accepted["attempt_id"]]
    assert done["status"] == "completed"


# ----------------------------------------------------------------------- late delivery


async def test_a_late_result_reaches_a_restored_parent_at_its_next_turn_with_its_delta_applied_once(
    make_supervisor: Factory,
) -> None:
    supervisor = make_supervisor()
    gate = Gate()
    child = gated_child(gate, "late facts")
    first = async_agent(
        TestModel(
            [TestModel.tool_call("delegate", {"subagent_name": "research", "prompt": "dig"})],
            text="accepted, moving on",
        ),
        supervisor,
        child,
    )
    first_context = AgentContext()
    await first.run("plan", first_context)
    gate.open()
    summary = await supervisor.wait(None, 30)  # returns once an attempt is terminal; claims nothing
    assert summary.attempts is not None
    [attempt] = summary.attempts
    assert (attempt.execution_status, attempt.delivery_status) == ("completed", "undelivered")

    # The parent is restored: a new agent object and a new context, same supervisor.
    seen: list[list[str]] = []

    def answer(messages: Sequence[ModelMessage], params: ModelRequestParameters) -> str:
        seen.append(
            [
                p.content
                for m in messages
                if isinstance(m, ModelRequest)
                for p in m.parts
                if isinstance(p, UserPromptPart)
            ]
        )
        return "thanks"

    restored = async_agent(FunctionModel(answer), supervisor, child)
    context = AgentContext()
    await restored.run("continue", context)
    usage_after_first = context.usage.copy()
    await restored.run("and again", context)

    [injected] = [text for text in seen[0] if text.startswith(BACKGROUND_RESULT_PREFIX)]
    assert attempt.attempt_id in injected
    assert "late facts" in injected
    assert not any(text.startswith(BACKGROUND_RESULT_PREFIX) for text in seen[1])
    # The child's one request was applied to the restored parent once, not to the first.
    assert usage_after_first.requests == 1 + 1
    assert context.usage.requests == usage_after_first.requests + 1
    assert first_context.usage.requests == 2
    assert len(context.events.of_kind("subagent_completed")) == 1
    assert first_context.events.of_kind("subagent_completed") == []
    info = await supervisor.info()
    assert info.retained == []


# ----------------------------------------------------------------------- what a model cannot do


@pytest.mark.parametrize(
    "extra",
    [
        {"owner": "host-b"},
        {"fencing_generation": 9},
        {"metadata": {"trusted": True}},
        {"parent_run_id": "run-x"},
    ],
)
async def test_the_model_cannot_pass_host_metadata(
    make_supervisor: Factory, extra: dict[str, Any]
) -> None:
    supervisor = make_supervisor()
    agent = async_agent(TestModel.with_text("p"), supervisor, gated_child(Gate()))
    ctx = tool_context(agent, AgentContext())

    with pytest.raises(ToolArgumentError) as caught:
        await call(agent, ctx, "delegate", {"subagent_name": "research", "prompt": "x", **extra})

    assert caught.value.fields["path"] == f"$.{next(iter(extra))}"
    assert (await supervisor.info()).active == []


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("steer_subagent", {"attempt_id": "a", "message": "m", "owner": "x"}),
        ("cancel_subagent", {"attempt_id": "a", "fencing_generation": 2}),
        ("wait_subagent", {"attempt_id": "a", "poll": True}),
        ("subagent_info", {"verbose": True}),
    ],
)
async def test_every_control_tool_rejects_unknown_fields(
    make_supervisor: Factory, tool: str, args: dict[str, Any]
) -> None:
    agent = async_agent(TestModel.with_text("p"), make_supervisor(), gated_child(Gate()))

    with pytest.raises(ToolArgumentError):
        await call(agent, tool_context(agent, AgentContext()), tool, args)


async def test_an_invented_agent_id_is_refused_and_the_model_sees_why(
    make_supervisor: Factory,
) -> None:
    supervisor = make_supervisor()
    parent_model = TestModel(
        [
            TestModel.tool_call(
                "delegate",
                {"subagent_name": "research", "prompt": "x", "agent_id": "research-bg-deadbeef"},
            ),
            "gave up",
        ]
    )
    agent = async_agent(parent_model, supervisor, gated_child(Gate()))

    result = await agent.run("plan")

    [retry] = [
        p
        for m in result.messages
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, RetryPromptPart)
    ]
    assert "unknown agent_id" in retry.content
    assert "research-bg-deadbeef" in retry.content
    assert (await supervisor.info()).active == []


async def test_an_unknown_subagent_and_unknown_attempts_are_tool_errors(
    make_supervisor: Factory,
) -> None:
    agent = async_agent(TestModel.with_text("p"), make_supervisor(), gated_child(Gate()))
    ctx = tool_context(agent, AgentContext())

    with pytest.raises(ToolError, match="no subagent named 'ghost'"):
        await call(agent, ctx, "delegate", {"subagent_name": "ghost", "prompt": "x"})
    with pytest.raises(ToolError) as steer:
        await call(agent, ctx, "steer_subagent", {"attempt_id": "subattempt_x", "message": "m"})
    with pytest.raises(ToolError) as cancel:
        await call(agent, ctx, "cancel_subagent", {"attempt_id": "subattempt_x"})

    assert steer.value.fields["error_kind"] == "NotFound"
    assert cancel.value.fields["error_kind"] == "NotFound"


async def test_a_closed_supervisor_refuses_delegation_with_a_clear_tool_error(
    make_supervisor: Factory,
) -> None:
    supervisor = make_supervisor()
    agent = async_agent(TestModel.with_text("p"), supervisor, gated_child(Gate()))
    await supervisor.shutdown_checked(5.0)

    with pytest.raises(ToolError) as caught:
        await call(
            agent,
            tool_context(agent, AgentContext()),
            "delegate",
            {"subagent_name": "research", "prompt": "x"},
        )

    assert caught.value.fields["error_kind"] == "Closing"
    assert isinstance(caught.value.__cause__, BackgroundSubagentError.Closing)


# ----------------------------------------------------------------------- topology


async def test_tool_definitions_are_identical_across_turns(make_supervisor: Factory) -> None:
    supervisor = make_supervisor()
    gate = Gate()
    seen: list[tuple[Any, ...]] = []
    script = iter(
        [
            ModelResponse(
                parts=(
                    ToolCallPart(
                        tool_name="delegate",
                        args={"subagent_name": "research", "prompt": "x"},
                        tool_call_id="d",
                    ),
                )
            ),
            ModelResponse(
                parts=(ToolCallPart(tool_name="subagent_info", args={}, tool_call_id="i"),)
            ),
            "done",
        ]
    )

    def answer(messages: Sequence[ModelMessage], params: ModelRequestParameters) -> Any:
        seen.append(params.tools)
        return next(script)

    agent = async_agent(FunctionModel(answer), supervisor, gated_child(gate))
    await agent.run("plan")
    gate.open()
    again = async_agent(TestModel.with_text("p"), supervisor, gated_child(gate))

    assert len(seen) == 3
    assert seen[0] == seen[1] == seen[2] == agent.tools().definitions()
    assert again.tools().definitions() == agent.tools().definitions()


async def test_subagent_info_adds_the_background_attempts(make_supervisor: Factory) -> None:
    supervisor = make_supervisor()
    gate = Gate()
    agent = async_agent(TestModel.with_text("p"), supervisor, gated_child(gate))
    ctx = tool_context(agent, AgentContext())
    accepted = await call(agent, ctx, "delegate", {"subagent_name": "research", "prompt": "x"})

    info = await call(agent, ctx, "subagent_info", {})
    gate.open()

    assert [s["name"] for s in info["subagents"]] == ["research"]
    assert [a["attempt_id"] for a in info["background"]["active"]] == [accepted["attempt_id"]]
    assert info["background"]["retained"] == []


async def test_children_never_get_the_control_tools(make_supervisor: Factory) -> None:
    supervisor = make_supervisor()
    child_tools: list[set[str]] = []

    def answer(messages: Sequence[ModelMessage], params: ModelRequestParameters) -> str:
        child_tools.append({t.name for t in params.tools})
        return "ok"

    child = AgentBuilder(FunctionModel(answer)).build()
    greedy = SubagentToolInheritancePolicy(
        optional=sorted(CONTROL_TOOLS), inherit_all_when_empty=True
    )
    agent = async_agent(
        TestModel.with_text("p"),
        supervisor,
        child,
        mode=SubagentDelegationMode.BLOCKING_AND_ASYNC,
        config=lambda c: c.with_tool_inheritance(greedy),
    )
    ctx = tool_context(agent, AgentContext())

    accepted = await call(
        agent, ctx, "spawn_delegate", {"subagent_name": "research", "prompt": "x"}
    )
    await call(agent, ctx, "wait_subagent", {"attempt_id": accepted["attempt_id"]})
    await call(agent, ctx, "delegate", {"name": "research", "prompt": "blocking"})

    assert len(child_tools) == 2
    assert all(not (names & CONTROL_TOOLS) for names in child_tools)


# ----------------------------------------------------------------------- streams


async def test_child_records_keep_their_source_attribution_in_async_mode(
    make_supervisor: Factory,
) -> None:
    supervisor = make_supervisor()
    child = (
        AgentBuilder(
            TestModel([TestModel.tool_call("lookup", {"q": "x"})], text="found", name="child")
        )
        .tool(FunctionTool("lookup", None, {"type": "object"}, lambda ctx, args: "hit"))
        .build()
    )
    agent = async_agent(TestModel.with_text("p"), supervisor, child)
    parent = AgentContext()
    ctx = tool_context(agent, parent, run_id="run-parent-1")

    accepted = await call(agent, ctx, "delegate", {"subagent_name": "research", "prompt": "x"})
    waited = await call(agent, ctx, "wait_subagent", {"attempt_id": accepted["attempt_id"]})
    records = parent.events.of_kind("subagent_stream_record")

    assert waited["status"] == "completed"
    kinds = [r.payload["kind"] for r in records]
    assert kinds == ["run_started", "tool_call", "tool_return", "run_completed"]
    child_run_id = records[0].payload["payload"]["run_id"]
    for index, record in enumerate(records):
        assert record.payload["source"] == {
            "kind": "subagent",
            "agent_id": accepted["agent_id"],
            "agent_name": "research",
            "task_id": accepted["attempt_id"],
            "run_id": child_run_id,
            "parent_run_id": "run-parent-1",
            "source_sequence": index,
        }
        assert record.metadata["attempt_id"] == accepted["attempt_id"]
    started = parent.events.of_kind("subagent_started")
    assert len(started) == 1
    assert started[0].payload["metadata"]["attempt_id"] == accepted["attempt_id"]


async def test_the_context_delta_carries_usage_events_and_the_history_suffix(
    make_supervisor: Factory,
) -> None:
    delivered: list[Any] = []
    arrived = asyncio.Event()

    async def on_complete(result: Any) -> None:  # runs on the supervisor's (our) loop
        delivered.append(result)
        arrived.set()

    supervisor = make_supervisor(on_complete=on_complete)
    child = AgentBuilder(TestModel.with_text("child")).build()
    agent = async_agent(TestModel.with_text("p"), supervisor, child)
    ctx = tool_context(agent, AgentContext())

    accepted = await call(agent, ctx, "delegate", {"subagent_name": "research", "prompt": "x"})
    await arrived.wait()

    [result] = delivered
    delta = result.context_delta
    assert isinstance(delta, SubagentContextDelta)
    assert delta.attempt_id == accepted["attempt_id"]
    assert delta.usage.requests == 1
    assert [e.kind for e in delta.events] == ["subagent_completed"]
    assert [type(m).__name__ for m in delta.messages] == ["ModelRequest", "ModelResponse"]
    target = AgentContext()
    delta.apply(target)
    assert target.usage.requests == 1


class Recorder(SubagentExecutionHook):
    def __init__(self, fail_before: bool = False) -> None:
        self.fail_before = fail_before
        self.calls: list[tuple[str, str, str]] = []

    async def before_subagent_run(
        self, metadata: SubagentExecutionMetadata, child_context: AgentContext
    ) -> None:
        self.calls.append(("before", metadata.task_id.as_str(), metadata.child_agent_id))
        if self.fail_before:
            raise RuntimeError("policy says no")

    async def after_subagent_run(
        self,
        metadata: SubagentExecutionMetadata,
        child_context: AgentContext,
        outcome: SubagentExecutionOutcome,
    ) -> None:
        self.calls.append(("after", type(outcome).__name__, metadata.child_run_id.as_str()))


async def test_execution_hooks_run_around_a_background_child(make_supervisor: Factory) -> None:
    hook = Recorder()
    agent = async_agent(
        TestModel.with_text("p"),
        make_supervisor(),
        AgentBuilder(TestModel.with_text("child")).build(),
        config=lambda c: c.with_execution_hook(hook),
    )
    ctx = tool_context(agent, AgentContext())

    accepted = await call(agent, ctx, "delegate", {"subagent_name": "research", "prompt": "x"})
    waited = await call(agent, ctx, "wait_subagent", {"attempt_id": accepted["attempt_id"]})

    assert waited["status"] == "completed"
    assert hook.calls[0] == ("before", accepted["attempt_id"], accepted["agent_id"])
    assert hook.calls[1][:2] == ("after", "Completed")


async def test_a_failing_before_hook_ends_the_attempt_failed_without_running_the_child(
    make_supervisor: Factory,
) -> None:
    gate = Gate()
    agent = async_agent(
        TestModel.with_text("p"),
        make_supervisor(),
        gated_child(gate),
        config=lambda c: c.with_execution_hook(Recorder(fail_before=True)),
    )
    parent = AgentContext()
    ctx = tool_context(agent, parent)

    accepted = await call(agent, ctx, "delegate", {"subagent_name": "research", "prompt": "x"})
    waited = await call(agent, ctx, "wait_subagent", {"attempt_id": accepted["attempt_id"]})

    assert waited["status"] == "failed"
    assert "policy says no" in waited["error"]
    assert not gate.entered.is_set()
    [failed] = parent.events.of_kind("subagent_failed")
    assert failed.payload["metadata"]["hook"] == "before_subagent_run"


async def test_a_shut_down_supervisor_never_fails_the_parents_turn_and_loses_no_result(
    make_supervisor: Factory,
) -> None:
    supervisor = make_supervisor()
    gate = Gate()
    agent = async_agent(TestModel.with_text("p"), supervisor, gated_child(gate, "kept"))
    accepted = await call(
        agent,
        tool_context(agent, AgentContext()),
        "delegate",
        {"subagent_name": "research", "prompt": "x"},
    )
    gate.open()
    await supervisor.wait(None, 30)  # terminal, not delivered
    await supervisor.shutdown_checked(5.0)

    result = await agent.run("next turn")
    [pending] = await supervisor.take_pending()

    assert result.output == "p"
    assert pending.attempt_id == accepted["attempt_id"]
    assert pending.output == "kept"
    assert isinstance(pending.context_delta, SubagentContextDelta)


async def test_supervisor_limits_reach_the_model_as_typed_tool_errors(
    make_supervisor: Factory,
) -> None:
    supervisor = make_supervisor(
        limits=SupervisorLimits(max_active_attempts=2, max_steering_bytes=8, max_prompt_bytes=64)
    )
    gate = Gate()
    agent = (
        AgentBuilder(TestModel.with_text("p"))
        .subagent(SubagentConfig("research", gated_child(gate)))
        .subagent(SubagentConfig("review", gated_child(gate)))
        .subagent_delegation_mode(SubagentDelegationMode.ASYNC)
        .background_subagent_supervisor(supervisor)
        .build()
    )
    ctx = tool_context(agent, AgentContext())
    first = await call(agent, ctx, "delegate", {"subagent_name": "research", "prompt": "x"})

    async def refused(tool: str, args: dict[str, Any]) -> ToolError:
        with pytest.raises(ToolError) as caught:
            await call(agent, ctx, tool, args)
        return caught.value

    busy = await refused(
        "delegate", {"subagent_name": "research", "prompt": "y", "agent_id": first["agent_id"]}
    )
    other = await refused(
        "delegate", {"subagent_name": "review", "prompt": "y", "agent_id": first["agent_id"]}
    )
    big_prompt = await refused("delegate", {"subagent_name": "review", "prompt": "z" * 65})
    big_steer = await refused(
        "steer_subagent", {"attempt_id": first["attempt_id"], "message": "far too long"}
    )
    await call(agent, ctx, "delegate", {"subagent_name": "review", "prompt": "y"})
    quota = await refused("delegate", {"subagent_name": "review", "prompt": "z"})
    gate.open()

    assert busy.fields["error_kind"] == "ActiveConversation"
    assert "already has an active attempt" in busy.message
    assert other.fields["error_kind"] == "NotFound"
    assert "unknown agent_id" in other.message
    assert big_prompt.fields["error_kind"] == "PromptTooLarge"
    assert big_prompt.fields["limit"] == 64
    assert big_steer.fields["error_kind"] == "SteeringTooLarge"
    assert quota.fields["error_kind"] == "QuotaExceeded"
    assert "wait_subagent" in quota.message


def test_the_sdk_keeps_child_histories_for_the_most_recently_used_agents_only() -> None:
    from subagents._delegation._background import ChildHistories

    histories = ChildHistories(limit=3)
    for n in range(10):
        histories.put("s", f"agent-{n}", (f"m{n}",))  # type: ignore[arg-type]
        if n >= 1:
            histories.get("s", "agent-0")  # used: kept while others are forgotten

    assert len(histories) == 3
    assert histories.get("s", "agent-0") == ("m0",)
    assert histories.get("s", "agent-9") == ("m9",)
    assert histories.get("s", "agent-5") == ()  # forgotten: a continuation starts afresh
    assert histories.get("other-session", "agent-0") == ()  # keyed by session too


def test_supervisors_sharing_pools_share_one_history_budget() -> None:
    # A host's sessions share the bound: it holds at most that many conversations,
    # however many sessions delegated (issue 16), the least recently used evicted.
    from actors import SupervisorPools
    from subagents._delegation._background import (
        BackgroundSubagentRunner,
        ChildHistories,
        child_histories,
    )
    from subagents._delegation._registry import SubagentRegistry

    pools = SupervisorPools()
    pools.extension = ChildHistories(limit=2)
    sessions = [BackgroundSubagentSupervisor(session_id=f"s{n}", pools=pools) for n in range(3)]
    states = [BackgroundSubagentRunner(SubagentRegistry(), s)._state for s in sessions]
    for n, state in enumerate(states):
        state.remember("child", (f"m{n}",))  # type: ignore[arg-type]

    assert child_histories(sessions[0]) is pools.extension
    assert [state.history("child") for state in states] == [(), ("m1",), ("m2",)]
    own = BackgroundSubagentSupervisor(limits=SupervisorLimits(max_known_agents=5))
    assert child_histories(own).limit == 5  # private pools: its own budget
    pools.stop(5.0)


# ----------------------------------------------------------------------- who may call the tools


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("delegate", {"subagent_name": "research", "prompt": "x"}),
        ("wait_subagent", {"timeout_seconds": 0}),
        ("cancel_subagent", {"attempt_id": "subattempt_unknown"}),
    ],
)
async def test_delegate_wait_and_cancel_are_refused_inside_a_subagent(
    make_supervisor: Factory, tool: str, args: dict[str, Any]
) -> None:
    agent = async_agent(
        TestModel.with_text("p"), make_supervisor(), AgentBuilder(TestModel.with_text("c")).build()
    )
    # A subagent's context: the subagent stack names the child that calls the tool.
    inside_child = AgentContext().subagent_context("research", "research-1")

    with pytest.raises(ToolError) as caught:
        await call(agent, tool_context(agent, inside_child), tool, args)

    assert caught.value.fields["error_kind"] == "RecursiveSubagentDelegation"
    assert "main agent only" in caught.value.message
    assert not isinstance(caught.value, ToolArgumentError)


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("delegate", {"subagent_name": "research", "prompt": "x"}),
        ("steer_subagent", {"attempt_id": "subattempt_unknown", "message": "m"}),
        ("cancel_subagent", {"attempt_id": "subattempt_unknown"}),
        ("wait_subagent", {"timeout_seconds": 0}),
        ("subagent_info", {}),
    ],
)
async def test_a_background_tool_without_the_parent_agent_context_is_a_tool_error(
    make_supervisor: Factory, tool: str, args: dict[str, Any]
) -> None:
    supervisor = make_supervisor()
    agent = async_agent(
        TestModel.with_text("p"), supervisor, AgentBuilder(TestModel.with_text("c")).build()
    )
    bare = ToolContext(RunId.from_string("run-x"), ConversationId.from_string("conv"), 1)

    with pytest.raises(ToolError) as caught:
        await call(agent, bare, tool, args)

    assert "needs the parent agent context" in caught.value.message
    assert not isinstance(caught.value, ToolArgumentError)
    assert list((await supervisor.info()).active) == []
