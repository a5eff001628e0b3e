"""Our parent agents for the adapter tests: blocking and background delegation scripts."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from subagents import (
    Agent,
    AgentBuilder,
    AgentContext,
    BackgroundSubagentSupervisor,
    FunctionModel,
    ModelMessage,
    ModelRequestParameters,
    ModelResponse,
    SubagentConfig,
    SubagentDelegationMode,
    TestModel,
    ToolReturnPart,
    UserPromptPart,
)
from subagents._delegation._delivery import BACKGROUND_RESULT_PREFIX

Factory = Callable[..., BackgroundSubagentSupervisor]


def blocking_parent(child: Agent, name: str = "research") -> Agent:
    model = TestModel.with_tool_calls(
        [("delegate", {"name": name, "prompt": "collect facts"})], then="parent done"
    )
    return AgentBuilder(model).subagent(SubagentConfig(name, child)).build()


def background_parent(
    child: Agent, supervisor: BackgroundSubagentSupervisor, name: str = "research"
) -> Agent:
    """Delegates in the background, then waits for the result (its own next call)."""

    def answer(messages: Sequence[ModelMessage], params: ModelRequestParameters) -> Any:
        returns = [
            p for m in messages for p in getattr(m, "parts", ()) if isinstance(p, ToolReturnPart)
        ]
        if not returns:
            return ModelResponse(
                parts=(
                    TestModel.tool_call(
                        "delegate", {"subagent_name": name, "prompt": "collect facts"}, "d1"
                    ),
                )
            )
        if len(returns) == 1:
            attempt = returns[0].content["attempt_id"]
            args = {"attempt_id": attempt, "timeout_seconds": 30}
            return ModelResponse(parts=(TestModel.tool_call("wait_subagent", args, "w1"),))
        got = returns[1].content.get("result")
        if got is None:  # the child ended first: its result came in-band, at the turn
            got = _in_band(messages)
        return f"parent got: {got}"

    return (
        AgentBuilder(FunctionModel(answer, name="parent"))
        .subagent(SubagentConfig(name, child))
        .subagent_delegation_mode(SubagentDelegationMode.ASYNC)
        .background_subagent_supervisor(supervisor)
        .build()
    )


def _in_band(messages: Sequence[ModelMessage]) -> Any:
    """The output of the background result delivered into the conversation at a turn."""
    for message in messages:
        for part in getattr(message, "parts", ()):
            text = part.content if isinstance(part, UserPromptPart) else None
            if isinstance(text, str) and text.startswith(BACKGROUND_RESULT_PREFIX):
                return json.loads(text[len(BACKGROUND_RESULT_PREFIX) :])["result"]
    return None


def child_records(context: AgentContext) -> list[dict[str, Any]]:
    """The attributed child stream records a background delegation published on ``context``."""
    return [e.payload for e in context.events.events() if e.kind == "subagent_stream_record"]
