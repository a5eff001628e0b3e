"""pydantic-ai agents as our children, and our durable delegation tools in a pydantic-ai
parent: the real pydantic-ai, on its own test models (no network)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from _adapter_parents import Factory, background_parent, blocking_parent, child_records
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai import messages as pm
from pydantic_ai.models.function import AgentInfo
from pydantic_ai.models.function import FunctionModel as PydanticFunctionModel
from pydantic_ai.models.test import TestModel as PydanticTestModel

from subagents import (
    AgentContext,
    AgentStreamSourceKind,
    OwnerIdentity,
    SubagentConfig,
    UnsupportedAgent,
)
from subagents._delegation._background import STEERING_PREFIX
from subagents.adapters.pydantic_ai import PydanticAIChild, delegation_toolset

ROOT = Path(__file__).resolve().parents[2]


def _child(
    text: str = "child says hi", gate: asyncio.Event | None = None
) -> PydanticAgent[None, str]:
    """A pydantic-ai child with one tool; with ``gate``, the tool returns once it is set."""
    agent = PydanticAgent(PydanticTestModel(custom_output_text=text), name="pai")

    @agent.tool_plain
    async def lookup(q: str) -> str:
        if gate is not None:
            await gate.wait()
        return f"found {q}"

    return agent


async def test_a_pydantic_ai_child_completes_a_blocking_delegation() -> None:
    parent = blocking_parent(PydanticAIChild(_child()))
    stream = parent.run_stream("plan")
    records = [record async for record in stream]
    result = stream.result

    assert result.output == "parent done"
    child = [r for r in records if r.source is not None]
    assert all(r.source.kind is AgentStreamSourceKind.SUBAGENT for r in child)
    assert all(r.source.agent_name == "research" for r in child)
    kinds = [r.kind for r in child]
    assert kinds == ["run_started", "tool_call", "tool_return", "text_delta", "run_completed"]
    assert child[1].payload["tool_name"] == "lookup"
    assert child[2].payload["content"] == "found a"
    assert child[3].payload == {"content": "child says hi"}
    # The parent's two requests plus the child's two, and the child's tool call.
    assert result.usage.requests == 4
    assert result.usage.tool_calls == 2
    assert result.usage.input_tokens > 20


async def test_a_pydantic_ai_child_completes_a_background_delegation(
    make_supervisor: Factory,
) -> None:
    parent = background_parent(PydanticAIChild(_child("background answer")), make_supervisor())
    context = AgentContext()
    result = await parent.run("plan", context)

    assert result.output == "parent got: background answer"
    records = child_records(context)
    assert [r["kind"] for r in records] == [
        "run_started",
        "tool_call",
        "tool_return",
        "text_delta",
        "run_completed",
    ]
    assert {r["source"]["agent_name"] for r in records} == {"research"}
    assert context.usage.requests == 3 + 2  # the parent's three, the child's two


async def test_steering_reaches_a_background_pydantic_ai_child_at_its_next_request(
    make_supervisor: Factory,
) -> None:
    paused, resume = asyncio.Event(), asyncio.Event()
    seen: list[list[str]] = []

    def answer(messages: list[pm.ModelMessage], info: AgentInfo) -> pm.ModelResponse:
        seen.append([p.content for p in messages[-1].parts if isinstance(p, pm.UserPromptPart)])
        if len(seen) == 1:
            return pm.ModelResponse(parts=[pm.ToolCallPart("pause", {})])
        return pm.ModelResponse(parts=[pm.TextPart("steered")])

    child = PydanticAgent(PydanticFunctionModel(answer), name="pai")

    @child.tool_plain
    async def pause() -> str:
        paused.set()
        await resume.wait()
        return "paused"

    supervisor = make_supervisor()
    toolset = delegation_toolset(
        [SubagentConfig("research", PydanticAIChild(child))], supervisor=supervisor
    )
    bridge_call = _caller(toolset)
    accepted = await bridge_call("delegate", {"subagent_name": "research", "prompt": "go"})
    await paused.wait()
    steer = {"attempt_id": accepted["attempt_id"], "message": "focus on X"}
    receipt = await bridge_call("steer_subagent", steer)
    resume.set()
    waited = await bridge_call("wait_subagent", {"attempt_id": accepted["attempt_id"]})

    assert receipt["status"] == "queued"
    assert waited["result"] == "steered"
    assert seen == [["go"], [STEERING_PREFIX + "focus on X"]]


def _caller(toolset: Any) -> Any:
    """Call a toolset's tools as its pydantic-ai parent would, outside a model turn."""
    from subagents.adapters._foreign import ToolBridge

    bridge: ToolBridge = toolset.subagents_bridge

    async def call(name: str, args: dict[str, Any]) -> Any:
        return await bridge.call(name, args, run_key="run-test", call_id=f"call-{name}")

    return call


async def test_a_pydantic_ai_parent_delegates_in_the_background_and_waits(
    make_supervisor: Factory,
) -> None:
    # The child ends only once the parent's model asked to wait. Ended before the
    # parent's next step, its result is delivered at that step instead, and the wait
    # finds it delivered (test_..._at_its_next_step_without_waiting, below).
    loop = asyncio.get_running_loop()
    release = asyncio.Event()
    toolset = delegation_toolset(
        [SubagentConfig("research", PydanticAIChild(_child("from the child", release)))],
        supervisor=make_supervisor(),
    )
    model = _delegate_then_wait(on_wait=lambda: loop.call_soon_threadsafe(release.set))
    parent = PydanticAgent(PydanticFunctionModel(model), toolsets=[toolset])
    result = await parent.run("plan")

    assert result.output == "parent got: from the child"
    assert toolset.subagents_context.usage.requests == 2  # the child's requests


def _delegate_then_wait(
    attempt_id: str | None = None, on_wait: Callable[[], object] | None = None
) -> Any:
    """A pydantic-ai parent model: delegate (unless given an attempt), wait twice, answer;
    ``on_wait()`` is called as it asks for the first wait (on whichever thread
    pydantic-ai runs the model function)."""

    def answer(messages: list[pm.ModelMessage], info: AgentInfo) -> pm.ModelResponse:
        returns = [
            p for m in messages for p in getattr(m, "parts", ()) if isinstance(p, pm.ToolReturnPart)
        ]
        known = attempt_id
        if known is None:
            if not returns:
                args = {"subagent_name": "research", "prompt": "go"}
                return pm.ModelResponse(parts=[pm.ToolCallPart("delegate", args)])
            known = returns[0].content["attempt_id"]
            returns = returns[1:]
        if len(returns) < 2:
            if not returns and on_wait is not None:
                on_wait()
            wait = {"attempt_id": known, "timeout_seconds": 30}
            return pm.ModelResponse(parts=[pm.ToolCallPart("wait_subagent", wait)])
        results = [r.content.get("result") for r in returns]
        text = "parent got: " + " | ".join(str(r) for r in results if r is not None)
        return pm.ModelResponse(parts=[pm.TextPart(text)])

    return answer


def test_a_pydantic_ai_parent_gets_a_background_result_once_after_a_host_kill(
    tmp_path: Path,
) -> None:
    """Host 1 delegates through the toolset on LMDB, the child completes, host 1 is killed
    before delivering; host 2 (a new supervisor on the same store) waits twice and gets
    the result exactly once."""
    store_path = tmp_path / "store"
    host = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("_pydantic_ai_host.py")), str(store_path)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert host.stdout is not None
        line = host.stdout.readline().strip()
        assert line.startswith("terminal "), line
        attempt_id = line.split()[1]
    finally:
        host.send_signal(signal.SIGKILL)
        host.wait(30)
        if host.stdout is not None:
            host.stdout.close()
    assert host.returncode == -signal.SIGKILL

    from storage import LmdbSessionStore
    from subagents import BackgroundSubagentSupervisor

    store = LmdbSessionStore(store_path)
    supervisor = BackgroundSubagentSupervisor(
        store=store,
        owner=OwnerIdentity(host_instance_id="host-2", fencing_generation=2),
        session_id="session-pai",
    )
    try:
        toolset = delegation_toolset(
            [SubagentConfig("research", PydanticAIChild(_child()))], supervisor=supervisor
        )
        parent = PydanticAgent(
            PydanticFunctionModel(_delegate_then_wait(attempt_id)), toolsets=[toolset]
        )
        # asyncio.run, not run_sync: pydantic-ai's run_sync leaves its event loop open.
        result = asyncio.run(parent.run("collect the result"))
    finally:
        supervisor.shutdown(5.0)
        store.close()
    assert result.output == "parent got: durable answer"
    assert toolset.subagents_context.usage.requests == 0  # the delta died with host 1


def test_config_refuses_a_bare_pydantic_ai_agent_naming_the_adapter() -> None:
    with pytest.raises(UnsupportedAgent) as refused:
        SubagentConfig("research", _child())  # type: ignore[arg-type]
    assert refused.value.fields["adapter"] == "subagents.adapters.pydantic_ai.PydanticAIChild"
    assert "PydanticAIChild" in str(refused.value)


async def test_a_continued_background_pydantic_ai_child_sees_its_earlier_exchange(
    make_supervisor: Factory,
) -> None:
    seen: list[list[str]] = []

    def answer(messages: list[pm.ModelMessage], info: AgentInfo) -> pm.ModelResponse:
        seen.append(
            [
                str(getattr(p, "content", ""))
                for m in messages
                for p in m.parts
                if isinstance(p, pm.UserPromptPart | pm.TextPart)
            ]
        )
        return pm.ModelResponse(parts=[pm.TextPart(f"answer {len(seen)}")])

    child = PydanticAgent(PydanticFunctionModel(answer), name="pai")
    toolset = delegation_toolset(
        [SubagentConfig("research", PydanticAIChild(child))], supervisor=make_supervisor()
    )
    call = _caller(toolset)
    first = await call("delegate", {"subagent_name": "research", "prompt": "first"})
    await call("wait_subagent", {"attempt_id": first["attempt_id"]})
    again = {"subagent_name": "research", "prompt": "second", "agent_id": first["agent_id"]}
    second = await call("delegate", again)
    waited = await call("wait_subagent", {"attempt_id": second["attempt_id"]})

    assert second["status"] == "continued"
    assert waited["result"] == "answer 2"
    assert seen == [["first"], ["first", "answer 1", "second"]]


async def test_a_pydantic_ai_child_gets_the_parent_tools_its_policy_inherits() -> None:
    from subagents import AgentBuilder, FunctionTool, SubagentToolInheritancePolicy, TestModel

    calls: list[Any] = []

    def parent_tool(ctx: Any, args: Any) -> str:
        calls.append(args)
        return "from the parent"

    shared = FunctionTool(
        "shared",
        "A parent tool",
        {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]},
        parent_tool,
    )
    child = PydanticAgent(PydanticTestModel(call_tools=["shared"]), name="pai")
    config = SubagentConfig("research", PydanticAIChild(child)).with_tool_inheritance(
        SubagentToolInheritancePolicy(["shared"])
    )
    parent = (
        AgentBuilder(
            TestModel.with_tool_calls(
                [("delegate", {"name": "research", "prompt": "use it"})], then="done"
            )
        )
        .tool(shared)
        .subagent(config)
        .build()
    )
    result = await parent.run("plan")

    assert result.output == "done"
    assert len(calls) == 1 and isinstance(calls[0], dict) and isinstance(calls[0]["x"], int)


async def test_a_pydantic_ai_parent_gets_a_finished_result_at_its_next_step_without_waiting(
    make_supervisor: Factory,
) -> None:
    from subagents._delegation._delivery import BACKGROUND_RESULT_PREFIX

    store_reads: list[str] = []
    supervisor = make_supervisor()
    toolset = delegation_toolset(
        [SubagentConfig("research", PydanticAIChild(_child("delivered by itself")))],
        supervisor=supervisor,
    )

    async def settle() -> str:
        """Until the delegated attempt is durable (polling the store, as an observer would)."""
        attempt = store_reads[0]
        for _ in range(3000):
            if str(supervisor.store.load_attempt(attempt).execution_status) == "completed":
                return "settled"
            await asyncio.sleep(0.01)
        raise AssertionError("the child did not complete")

    def answer(messages: list[pm.ModelMessage], info: AgentInfo) -> pm.ModelResponse:
        returns = [p.content for m in messages for p in m.parts if isinstance(p, pm.ToolReturnPart)]
        prompts = [
            str(p.content) for m in messages for p in m.parts if isinstance(p, pm.UserPromptPart)
        ]
        delivered = [p for p in prompts if p.startswith(BACKGROUND_RESULT_PREFIX)]
        if not returns:
            args = {"subagent_name": "research", "prompt": "go"}
            return pm.ModelResponse(parts=[pm.ToolCallPart("delegate", args)])
        if len(returns) == 1:
            store_reads.append(returns[0]["attempt_id"])
            return pm.ModelResponse(parts=[pm.ToolCallPart("settle", {})])
        return pm.ModelResponse(parts=[pm.TextPart(f"{len(delivered)} delivered")])

    parent = PydanticAgent(PydanticFunctionModel(answer), toolsets=[toolset])
    parent.tool_plain(settle)
    result = await parent.run("plan")

    assert result.output == "1 delivered"
    delivered = [
        str(p.content)
        for m in result.all_messages()
        for p in m.parts
        if isinstance(p, pm.UserPromptPart) and str(p.content).startswith(BACKGROUND_RESULT_PREFIX)
    ]
    assert len(delivered) == 1 and "delivered by itself" in delivered[0]
    assert toolset.subagents_context.usage.requests == 2  # the delta came with it
