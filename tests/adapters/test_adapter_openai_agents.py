"""OpenAI Agents SDK agents as our children, and our delegation tools in an OpenAI Agents
parent: the real SDK, on a scripted ``agents.Model`` (no network)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from _adapter_parents import Factory, background_parent, blocking_parent, child_records
from agents import Agent as SdkAgent
from agents import Model, ModelResponse, RunConfig, Runner, Usage, function_tool
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from subagents import AgentStreamSourceKind, SubagentConfig, UnsupportedAgent
from subagents.adapters.openai_agents import OpenAIAgentsChild, delegation_tools

Step = Callable[[list[Any]], list[Any]]


def text(value: str) -> list[Any]:
    content = ResponseOutputText(type="output_text", text=value, annotations=[])
    return [
        ResponseOutputMessage(
            id="msg", type="message", role="assistant", status="completed", content=[content]
        )
    ]


def call(name: str, args: dict[str, Any], call_id: str) -> list[Any]:
    return [
        ResponseFunctionToolCall(
            type="function_call", call_id=call_id, name=name, arguments=json.dumps(args)
        )
    ]


class Scripted(Model):
    """A model answering each request with the next step of a script (given the input)."""

    def __init__(self, steps: list[Step]) -> None:
        self.steps = steps
        self.inputs: list[list[Any]] = []

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kw: Any
    ) -> Any:
        items = [{"role": "user", "content": input}] if isinstance(input, str) else list(input)
        self.inputs.append(items)
        output = self.steps.pop(0)(items)
        usage = Usage(requests=1, input_tokens=7, output_tokens=3, total_tokens=10)
        return ModelResponse(output=output, usage=usage, response_id=None)

    def stream_response(self, *args: Any, **kw: Any) -> AsyncIterator[Any]:
        raise NotImplementedError


def _child(answer: str = "sdk child says hi") -> SdkAgent[Any]:
    @function_tool
    def lookup(q: str) -> str:
        """Look something up."""
        return f"found {q}"

    model = Scripted([lambda _: call("lookup", {"q": "a"}, "c-look"), lambda _: text(answer)])
    return SdkAgent(name="sdk", instructions="help", model=model, tools=[lookup])


async def test_an_openai_agents_child_completes_a_blocking_delegation() -> None:
    parent = blocking_parent(OpenAIAgentsChild(_child()))
    stream = parent.run_stream("plan")
    records = [record async for record in stream]
    result = stream.result

    assert result.output == "parent done"
    child = [r for r in records if r.source is not None]
    assert {r.source.kind for r in child} == {AgentStreamSourceKind.SUBAGENT}
    assert [r.kind for r in child] == [
        "run_started",
        "tool_call",
        "tool_return",
        "text_delta",
        "run_completed",
    ]
    assert child[1].payload["args"] == {"q": "a"}
    assert child[2].payload["content"] == "found a"
    assert child[3].payload == {"content": "sdk child says hi"}
    assert result.usage.requests == 4
    assert result.usage.input_tokens == 10 + 10 + 7 + 7


async def test_an_openai_agents_child_completes_a_background_delegation(
    make_supervisor: Factory,
) -> None:
    from subagents import AgentContext

    parent = background_parent(OpenAIAgentsChild(_child("in the background")), make_supervisor())
    context = AgentContext()
    result = await parent.run("plan", context)

    assert result.output == "parent got: in the background"
    assert [r["kind"] for r in child_records(context)] == [
        "run_started",
        "tool_call",
        "tool_return",
        "text_delta",
        "run_completed",
    ]
    assert context.usage.requests == 3 + 2


async def test_an_openai_agents_parent_delegates_in_the_background_and_waits(
    make_supervisor: Factory,
) -> None:
    from subagents import AgentContext

    context = AgentContext()
    tools = delegation_tools(
        [SubagentConfig("research", OpenAIAgentsChild(_child("from the child")))],
        supervisor=make_supervisor(),
        context=context,
    )

    def wait(items: list[Any]) -> list[Any]:
        accepted = json.loads(items[-1]["output"])
        return call("wait_subagent", {"attempt_id": accepted["attempt_id"]}, "c-wait")

    def answer(items: list[Any]) -> list[Any]:
        return text("parent got: " + json.loads(items[-1]["output"])["result"])

    model = Scripted(
        [
            lambda _: call("delegate", {"subagent_name": "research", "prompt": "go"}, "c-d"),
            wait,
            answer,
        ]
    )
    parent = SdkAgent(name="lead", model=model, tools=tools)
    result = await Runner.run(parent, "plan", run_config=RunConfig(tracing_disabled=True))

    assert result.final_output == "parent got: from the child"
    delegate = next(t for t in tools if t.name == "delegate")
    assert "Call wait_subagent" in delegate.description  # no turn delivery in this parent
    assert "automatically" not in delegate.description
    assert context.usage.requests == 2  # the child's, delivered with the result


def test_config_refuses_a_bare_openai_agents_agent_naming_the_adapter() -> None:
    with pytest.raises(UnsupportedAgent) as refused:
        SubagentConfig("research", _child())  # type: ignore[arg-type]
    assert refused.value.fields["adapter"] == "subagents.adapters.openai_agents.OpenAIAgentsChild"


async def test_steering_reaches_a_background_openai_agents_child_at_its_next_request(
    make_supervisor: Factory,
) -> None:
    import asyncio

    from subagents._delegation._background import STEERING_PREFIX

    paused, resume = asyncio.Event(), asyncio.Event()

    @function_tool
    async def pause() -> str:
        """Wait for the test."""
        paused.set()
        await resume.wait()
        return "paused"

    model = Scripted([lambda _: call("pause", {}, "c-pause"), lambda _: text("steered")])
    child = SdkAgent(name="sdk", model=model, tools=[pause])
    tools = delegation_tools(
        [SubagentConfig("research", OpenAIAgentsChild(child))], supervisor=make_supervisor()
    )
    by_name = {t.name: t for t in tools}

    async def use(name: str, args: dict[str, Any]) -> Any:
        from agents.tool_context import ToolContext

        context = ToolContext(
            context=None, tool_name=name, tool_call_id=f"c-{name}", tool_arguments=json.dumps(args)
        )
        return json.loads(await by_name[name].on_invoke_tool(context, json.dumps(args)))

    accepted = await use("delegate", {"subagent_name": "research", "prompt": "go"})
    await paused.wait()
    await use("steer_subagent", {"attempt_id": accepted["attempt_id"], "message": "focus on X"})
    resume.set()
    waited = await use("wait_subagent", {"attempt_id": accepted["attempt_id"]})

    assert waited["result"] == "steered"
    second = model.inputs[1]
    assert second[-1] == {"role": "user", "content": STEERING_PREFIX + "focus on X"}
    assert not any(
        isinstance(i, dict) and str(i.get("content", "")).startswith(STEERING_PREFIX)
        for i in model.inputs[0]
    )
