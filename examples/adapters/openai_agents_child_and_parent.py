"""An OpenAI Agents SDK agent as our subagent, and our delegation tools in an OpenAI
Agents parent. No network: a scripted ``agents.Model``.

Run: ``python examples/adapters/openai_agents_child_and_parent.py``
(needs ``pip install '.[openai-agents]'``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from agents import Agent, Model, ModelResponse, RunConfig, Runner, Usage
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from subagents import AgentBuilder, SubagentConfig, TestModel
from subagents.adapters.openai_agents import OpenAIAgentsChild, delegation_tools


class Scripted(Model):
    """Answers each request with the next step, given the request's input items."""

    def __init__(self, *steps: Callable[[list[Any]], list[Any]]) -> None:
        self.steps = list(steps)

    async def get_response(self, system_instructions: Any, input: Any, *a: Any, **k: Any) -> Any:
        items = [{"role": "user", "content": input}] if isinstance(input, str) else list(input)
        usage = Usage(requests=1, input_tokens=12, output_tokens=4, total_tokens=16)
        return ModelResponse(output=self.steps.pop(0)(items), usage=usage, response_id=None)

    def stream_response(self, *a: Any, **k: Any) -> AsyncIterator[Any]:
        raise NotImplementedError


def text(value: str) -> list[Any]:
    part = ResponseOutputText(type="output_text", text=value, annotations=[])
    return [
        ResponseOutputMessage(
            id="m", type="message", role="assistant", status="completed", content=[part]
        )
    ]


def call(name: str, args: dict[str, Any]) -> list[Any]:
    return [
        ResponseFunctionToolCall(
            type="function_call", call_id=name, name=name, arguments=json.dumps(args)
        )
    ]


def child() -> OpenAIAgentsChild:
    return OpenAIAgentsChild(Agent(name="sdk", model=Scripted(lambda _: text("three facts"))))


async def main() -> None:
    parent = (
        AgentBuilder(
            TestModel.with_tool_calls(
                [("delegate", {"name": "research", "prompt": "go"})], then="done"
            )
        )
        .subagent(SubagentConfig("research", child()))
        .build()
    )
    result = await parent.run("plan")
    print("our parent:", result.output, "| requests:", result.usage.requests)

    tools = delegation_tools([SubagentConfig("research", child())])  # blocking delegate
    lead = Agent(
        name="lead",
        model=Scripted(
            lambda _: call("delegate", {"name": "research", "prompt": "go"}),
            lambda items: text("the child said: " + json.loads(items[-1]["output"])["output"]),
        ),
        tools=tools,
    )
    done = await Runner.run(lead, "plan", run_config=RunConfig(tracing_disabled=True))
    print("openai-agents parent:", done.final_output)


if __name__ == "__main__":
    asyncio.run(main())
