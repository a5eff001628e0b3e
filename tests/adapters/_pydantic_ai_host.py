"""Host 1 of the host-kill test: a pydantic-ai parent delegates in the background on
LMDB; prints ``terminal <attempt_id>`` once the child's result is durable, then
waits to be killed (it never delivers the result: the child answers only after the
parent's run ended, so no turn of it can take the result in-band)."""

from __future__ import annotations

import asyncio
import sys
import threading
import time

from pydantic_ai import Agent as PydanticAgent
from pydantic_ai import messages as pm
from pydantic_ai.models.function import AgentInfo
from pydantic_ai.models.function import FunctionModel as PydanticFunctionModel

from storage import LmdbSessionStore
from subagents import BackgroundSubagentSupervisor, OwnerIdentity, SubagentConfig
from subagents.adapters.pydantic_ai import PydanticAIChild, delegation_toolset


def main(path: str) -> None:
    store = LmdbSessionStore(path)
    supervisor = BackgroundSubagentSupervisor(
        store=store,
        owner=OwnerIdentity(host_instance_id="host-1", fencing_generation=1),
        session_id="session-pai",
    )
    parent_done = threading.Event()

    async def child_answer(messages: list[pm.ModelMessage], info: AgentInfo) -> pm.ModelResponse:
        await asyncio.to_thread(parent_done.wait, 30)
        return pm.ModelResponse(parts=[pm.TextPart("durable answer")])

    child = PydanticAgent(PydanticFunctionModel(child_answer), name="pai")
    toolset = delegation_toolset(
        [SubagentConfig("research", PydanticAIChild(child))], supervisor=supervisor
    )

    def answer(messages: list[pm.ModelMessage], info: AgentInfo) -> pm.ModelResponse:
        if len(messages) == 1:
            args = {"subagent_name": "research", "prompt": "go"}
            return pm.ModelResponse(parts=[pm.ToolCallPart("delegate", args)])
        return pm.ModelResponse(parts=[pm.TextPart("delegated")])

    parent = PydanticAgent(PydanticFunctionModel(answer), toolsets=[toolset])
    result = parent.run_sync("plan")
    parent_done.set()
    returned = [
        p.content
        for m in result.all_messages()
        for p in getattr(m, "parts", ())
        if isinstance(p, pm.ToolReturnPart)
    ]
    attempt_id = returned[0]["attempt_id"]
    deadline = time.monotonic() + 30
    # Polls the durable store, as an outside observer would: the terminal commit is
    # the fact the kill must come after.
    while str(store.load_attempt(attempt_id).execution_status) != "completed":
        if time.monotonic() > deadline:
            raise SystemExit("the child did not complete")
        time.sleep(0.01)
    print(f"terminal {attempt_id}", flush=True)
    threading.Event().wait()  # killed here, the result undelivered


if __name__ == "__main__":
    main(sys.argv[1])
