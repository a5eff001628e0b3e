"""A pydantic-ai agent as our subagent, and our durable background tools in a pydantic-ai
parent. No network: pydantic-ai's own test models.

Run: ``python examples/adapters/pydantic_ai_child_and_parent.py``
(needs ``pip install '.[pydantic-ai]'``).
"""

from __future__ import annotations

import asyncio
import tempfile
import threading
from pathlib import Path

from pydantic_ai import Agent
from pydantic_ai import messages as pm
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel as PydanticTestModel

from storage import LmdbSessionStore
from subagents import (
    AgentBuilder,
    BackgroundSubagentSupervisor,
    OwnerIdentity,
    SubagentConfig,
    TestModel,
)
from subagents.adapters.pydantic_ai import PydanticAIChild, delegation_toolset


def child(gate: threading.Event | None = None) -> PydanticAIChild:
    """A pydantic-ai agent that looks something up, then answers ``three facts``;
    with ``gate``, its lookup returns only once the gate is set."""
    agent = Agent(PydanticTestModel(custom_output_text="three facts"), name="pai")

    @agent.tool_plain
    async def lookup(topic: str) -> str:
        if gate is not None:
            await asyncio.to_thread(gate.wait, 30)
        return f"notes on {topic}"

    return PydanticAIChild(agent)


def our_parent() -> None:
    """Our agent delegates (blocking) to the pydantic-ai child."""
    parent = (
        AgentBuilder(
            TestModel.with_tool_calls(
                [("delegate", {"name": "research", "prompt": "collect facts"})], then="done"
            )
        )
        .subagent(SubagentConfig("research", child()))
        .build()
    )
    result = parent.run_sync("plan")
    print("our parent:", result.output, "| requests:", result.usage.requests)


def pydantic_ai_parent(store_dir: Path) -> None:
    """A pydantic-ai agent delegates in the background, durably (LMDB), then waits.

    The child finishes only once the parent asks to wait: a result that is ready
    before the parent's next step is handed to it at that step instead (in-band,
    no wait needed), and ``wait_subagent`` would then find it already delivered.
    """
    asked_to_wait = threading.Event()

    def model(messages: list[pm.ModelMessage], info: AgentInfo) -> pm.ModelResponse:
        returns = [p.content for m in messages for p in m.parts if isinstance(p, pm.ToolReturnPart)]
        if not returns:
            args = {"subagent_name": "research", "prompt": "collect facts"}
            return pm.ModelResponse(parts=[pm.ToolCallPart("delegate", args)])
        if len(returns) == 1:
            asked_to_wait.set()
            wait = {"attempt_id": returns[0]["attempt_id"], "timeout_seconds": 30}
            return pm.ModelResponse(parts=[pm.ToolCallPart("wait_subagent", wait)])
        return pm.ModelResponse(parts=[pm.TextPart(f"the child said: {returns[1]['result']}")])

    store = LmdbSessionStore(store_dir)
    supervisor = BackgroundSubagentSupervisor(
        store=store, owner=OwnerIdentity(host_instance_id="example-host")
    )
    try:
        research = SubagentConfig("research", child(gate=asked_to_wait))
        toolset = delegation_toolset([research], supervisor=supervisor)
        parent = Agent(FunctionModel(model), toolsets=[toolset])
        print("pydantic-ai parent:", parent.run_sync("plan").output)
    finally:
        supervisor.shutdown(5.0)
        store.close()


if __name__ == "__main__":
    our_parent()
    with tempfile.TemporaryDirectory() as directory:
        pydantic_ai_parent(Path(directory) / "store")
