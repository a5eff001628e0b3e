"""OpenTelemetry spans of a parent with one blocking and one background delegation, on the
real SDK's in-memory exporter, and the persisted link after a restart."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from storage import LmdbSessionStore
from subagents import (
    Agent,
    AgentBuilder,
    BackgroundSubagentSupervisor,
    FunctionModel,
    ModelError,
    ModelMessage,
    ModelRequestParameters,
    ModelResponse,
    OwnerIdentity,
    SubagentCapabilityInheritancePolicy,
    SubagentConfig,
    SubagentDelegationMode,
    SupervisorLimits,
    TestModel,
    ToolReturnPart,
    UserPromptPart,
)
from subagents.adapters.opentelemetry import OpenTelemetryHook, trace_context_store

OWNER = OwnerIdentity(host_instance_id="host-otel", fencing_generation=1)
LIMITS = SupervisorLimits(shutdown_grace=5.0)


def _tracing() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def _returns(messages: Sequence[ModelMessage]) -> list[Any]:
    return [
        p.content
        for m in messages
        for p in getattr(m, "parts", ())
        if isinstance(p, ToolReturnPart)
    ]


def _parent(
    script: Any,
    hook: OpenTelemetryHook,
    supervisor: BackgroundSubagentSupervisor,
    gate: threading.Event | None = None,
) -> Agent:
    async def answer(messages: Sequence[ModelMessage], params: ModelRequestParameters) -> str:
        prompts = [p.content for m in messages for p in m.parts if isinstance(p, UserPromptPart)]
        if gate is not None and "background" in prompts:
            # Held until the parent's run is over, so the result is still undelivered.
            await asyncio.to_thread(gate.wait, 30)
        return "facts"

    child = AgentBuilder(FunctionModel(answer, name="child-model")).name("research").build()
    config = (
        SubagentConfig("research", child)
        .with_capability_inheritance(SubagentCapabilityInheritancePolicy(hooks=True))
        .with_execution_hook(hook)  # the background child's span links to the stored trace
    )
    return (
        AgentBuilder(FunctionModel(script, name="parent-model"))
        .name("lead")
        .hook(hook)
        .subagent(config)
        .subagent_delegation_mode(SubagentDelegationMode.BLOCKING_AND_ASYNC)
        .background_subagent_supervisor(supervisor)
        .build()
    )


def _blocking_then_background(
    messages: Sequence[ModelMessage], params: ModelRequestParameters
) -> Any:
    returns = _returns(messages)
    if not returns:
        args = {"name": "research", "prompt": "blocking"}
        return ModelResponse(parts=(TestModel.tool_call("delegate", args, "c1"),))
    if len(returns) == 1:
        args = {"subagent_name": "research", "prompt": "background"}
        return ModelResponse(parts=(TestModel.tool_call("spawn_delegate", args, "c2"),))
    return f"spawned {returns[1]['attempt_id']}"


async def _terminal(store: LmdbSessionStore, attempt_id: str) -> None:
    """Until the attempt's outcome is durable (polling the store, as an observer would)."""
    for _ in range(3000):
        if str(store.load_attempt(attempt_id).execution_status) == "completed":
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"attempt {attempt_id} did not complete")


def _edges(spans: Sequence[ReadableSpan]) -> list[tuple[str | None, str]]:
    """``(parent name, name)`` of every span."""
    by_id = {s.context.span_id: s.name for s in spans}
    return [(by_id.get(s.parent.span_id) if s.parent else None, s.name) for s in spans]


def _tree(spans: Sequence[ReadableSpan]) -> list[tuple[int, str]]:
    """``(depth, name)`` in start order, depth from the parent chain."""
    by_id = {s.context.span_id: s for s in spans}

    def depth(span: ReadableSpan) -> int:
        parent = span.parent
        return (
            0 if parent is None or parent.span_id not in by_id else 1 + depth(by_id[parent.span_id])
        )

    ordered = sorted(spans, key=lambda s: s.start_time or 0)
    return [(depth(s), s.name) for s in ordered]


async def test_the_span_tree_of_a_blocking_and_a_background_delegation_and_the_link_after_a_restart(
    tmp_path: Path,
) -> None:
    provider, exporter = _tracing()
    store = LmdbSessionStore(tmp_path / "store", sync=False)
    supervisor = BackgroundSubagentSupervisor(
        store=trace_context_store(store), owner=OWNER, session_id="s-otel", limits=LIMITS
    )
    hook = OpenTelemetryHook(provider, store=store)
    gate = threading.Event()
    try:
        result = await _parent(_blocking_then_background, hook, supervisor, gate).run("plan")
        attempt_id = result.output.split()[1]
        gate.set()
        await _terminal(store, attempt_id)
        await supervisor.shutdown_checked(5.0)  # the result stays pending in the store
    finally:
        store.close()
    spans = exporter.get_finished_spans()
    tree = _tree(spans)
    assert tree[:5] == [
        (0, "invoke_agent lead"),
        (1, "chat parent-model"),
        (1, "execute_tool delegate"),
        (2, "invoke_agent research"),
        (3, "chat child-model"),
    ]
    # The background child runs on the supervisor's thread: only its place is fixed.
    assert sorted(_edges(spans), key=str) == sorted(
        [
            (None, "invoke_agent lead"),
            ("invoke_agent lead", "chat parent-model"),
            ("invoke_agent lead", "chat parent-model"),
            ("invoke_agent lead", "chat parent-model"),
            ("invoke_agent lead", "execute_tool delegate"),
            ("execute_tool delegate", "invoke_agent research"),
            ("invoke_agent research", "chat child-model"),
            ("invoke_agent lead", "execute_tool spawn_delegate"),
            ("execute_tool spawn_delegate", "invoke_agent research"),
            ("invoke_agent research", "chat child-model"),
        ],
        key=str,
    )
    assert len({s.context.trace_id for s in spans}) == 1
    chats = [s for s in spans if s.name.startswith("chat")]
    assert all("gen_ai.usage.input_tokens" in (s.attributes or {}) for s in chats)
    assert all("gen_ai.usage.output_tokens" in (s.attributes or {}) for s in chats)
    spawn = next(s for s in spans if s.name == "execute_tool spawn_delegate")
    assert spawn.attributes["subagents.attempt_id"] == attempt_id  # type: ignore[index]
    assert spawn.attributes["subagents.delegation.background"] is True  # type: ignore[index]
    background = next(
        s
        for s in spans
        if s.name == "invoke_agent research" and s.parent.span_id == spawn.context.span_id  # type: ignore[union-attr]
    )
    [persisted] = background.links  # read back from the attempt record in the store
    assert persisted.context.span_id == spawn.context.span_id
    assert persisted.attributes == {"subagents.attempt_id": attempt_id}

    # The restart: a new store handle, supervisor and tracer; the same host identity.
    provider2, exporter2 = _tracing()
    store2 = LmdbSessionStore(tmp_path / "store", sync=False)
    supervisor2 = BackgroundSubagentSupervisor(
        store=trace_context_store(store2), owner=OWNER, session_id="s-otel", limits=LIMITS
    )

    def wait(messages: Sequence[ModelMessage], params: ModelRequestParameters) -> Any:
        if not _returns(messages):
            args = {"attempt_id": attempt_id, "timeout_seconds": 30}
            return ModelResponse(parts=(TestModel.tool_call("wait_subagent", args, "w1"),))
        return f"got {_returns(messages)[0]['result']}"

    try:
        hook2 = OpenTelemetryHook(provider2, store=store2)
        later = await _parent(wait, hook2, supervisor2).run("collect")
        await supervisor2.shutdown_checked(5.0)
    finally:
        store2.close()
    assert later.output == "got facts"
    waited = next(
        s for s in exporter2.get_finished_spans() if s.name == "execute_tool wait_subagent"
    )
    [link] = waited.links
    assert link.context.span_id == spawn.context.span_id
    assert link.context.trace_id == spawn.context.trace_id


async def test_a_failed_model_request_is_recorded_on_its_span_and_the_run_span() -> None:
    provider, exporter = _tracing()

    def broken(messages: Sequence[ModelMessage], params: ModelRequestParameters) -> Any:
        raise RuntimeError("provider down")

    agent = AgentBuilder(FunctionModel(broken, name="m")).hook(OpenTelemetryHook(provider)).build()
    with pytest.raises(ModelError):
        await agent.run("hi")
    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert spans["chat m"].status.status_code is StatusCode.ERROR
    assert spans["invoke_agent agent"].status.status_code is StatusCode.ERROR
    assert [e.name for e in spans["chat m"].events] == ["exception"]


async def test_a_pydantic_ai_child_inherits_the_hook_and_its_spans_nest() -> None:
    from pydantic_ai import Agent as PydanticAgent
    from pydantic_ai.models.test import TestModel as PydanticTestModel

    from subagents.adapters.pydantic_ai import PydanticAIChild

    provider, exporter = _tracing()
    pai = PydanticAgent(PydanticTestModel(custom_output_text="facts"), name="pai")

    @pai.tool_plain
    def lookup(q: str) -> str:
        return f"found {q}"

    config = SubagentConfig("research", PydanticAIChild(pai)).with_capability_inheritance(
        SubagentCapabilityInheritancePolicy(hooks=True)
    )
    parent = (
        AgentBuilder(
            TestModel.with_tool_calls([("delegate", {"name": "research", "prompt": "go"})], "ok")
        )
        .name("lead")
        .hook(OpenTelemetryHook(provider))
        .subagent(config)
        .build()
    )
    await parent.run("plan")

    spans = exporter.get_finished_spans()
    assert sorted(_edges(spans), key=str) == sorted(
        [
            (None, "invoke_agent lead"),
            ("invoke_agent lead", "chat test"),
            ("invoke_agent lead", "chat test"),
            ("invoke_agent lead", "execute_tool delegate"),
            ("execute_tool delegate", "invoke_agent pai"),
            ("invoke_agent pai", "chat test"),
            ("invoke_agent pai", "execute_tool lookup"),
            ("invoke_agent pai", "chat test"),
        ],
        key=str,
    )
    child_chats = [
        s
        for s in spans
        if s.name == "chat test" and (s.attributes or {}).get("gen_ai.agent.name") == "pai"
    ]
    assert [c.attributes["gen_ai.usage.input_tokens"] for c in child_chats] != [0, 0]  # type: ignore[index]
