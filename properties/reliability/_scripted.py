"""The scripted offline parent the reliability runs, the host tests and the host bench share.

:func:`scripted_planner` builds a :class:`~subagents.FunctionModel` function for a
parent that delegates to the subagent ``research`` in the background and then
carries on; a continuation run (its prompt is a background subagent result)
answers ``continued: <last line of the result>``. :func:`planner_config` is the
host configuration that wires it: profile ``default`` runs ``planner:x`` with the
one subagent ``research``, whose profile runs the given child model. The caller
registers the ``planner`` provider (and the child's) itself.

Both are pure: no clock, no randomness, no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

from subagents import (
    ModelMessage,
    ModelRequest,
    ModelRequestParameters,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

PlannerFunction = Callable[[Sequence[ModelMessage], ModelRequestParameters], ModelResponse]

_PLANNER_CONFIG = """
[profiles.default]
model_id = "planner:x"
subagents = ["research"]

[profiles.research]
model_id = "{child}"

[subagents.research]
profile = "research"
description = "Collect facts"
"""


def planner_config(child_model: str, **host: str | float) -> str:
    """A host config whose ``default`` profile runs ``planner:x`` and may delegate to
    ``research``, which runs ``child_model``. ``host`` keys (``lease_ttl=5.0``,
    ``namespace="ns"``) become the ``[host]`` table; none, no table."""
    table = "".join(f"{key} = {json.dumps(value)}\n" for key, value in host.items())
    head = f"\n[host]\n{table}" if host else ""
    return head + _PLANNER_CONFIG.format(child=child_model)


def latest_prompt(messages: Sequence[ModelMessage]) -> str:
    """The newest user prompt in ``messages`` (``""`` if none)."""
    for message in reversed(messages):
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, UserPromptPart):
                    return part.content
    return ""


def collect_facts(prompt: str) -> tuple[ToolCallPart, ...]:
    """One background delegation of ``collect facts`` to ``research``, whatever the prompt."""
    call = ToolCallPart(
        tool_name="delegate",
        args={"subagent_name": "research", "prompt": "collect facts"},
        tool_call_id="call-1",
    )
    return (call,)


def first_delegated(returns: Sequence[ToolReturnPart]) -> str | None:
    """The attempt id of the first ``delegate`` that was accepted among ``returns``."""
    for part in returns:
        content = part.content
        if part.tool_name == "delegate" and isinstance(content, dict):
            attempt_id = content.get("attempt_id")
            if isinstance(attempt_id, str):
                return attempt_id
    return None


def scripted_planner(
    calls: Callable[[str], Sequence[ToolCallPart]] = collect_facts,
    *,
    delegated: str = "delegated; carrying on",
    wait: Callable[[str], float | None] | None = None,
) -> PlannerFunction:
    """A scripted parent: a fresh prompt makes ``calls(prompt)`` in one turn (none:
    it answers ``nothing to delegate``); once the tools returned it answers
    ``delegated``; a continuation answers with the result's last line. With
    ``wait``, a prompt for which ``wait(prompt)`` is a number of seconds first makes
    one bounded ``wait_subagent`` on the first accepted attempt (the run may take
    the result in-band), then answers ``delegated``."""

    def planner(messages: Sequence[ModelMessage], params: ModelRequestParameters) -> ModelResponse:
        prompt = latest_prompt(messages)
        if prompt.startswith("Background subagent result"):
            return ModelResponse(parts=(TextPart(content="continued: " + prompt.splitlines()[-1]),))
        last = messages[-1]
        returns = (
            [p for p in last.parts if isinstance(p, ToolReturnPart)]
            if isinstance(last, ModelRequest)
            else []
        )
        if returns:
            seconds = wait(prompt) if wait is not None else None
            attempt_id = first_delegated(returns)
            if seconds is not None and attempt_id is not None:
                call = ToolCallPart(
                    tool_name="wait_subagent",
                    args={"attempt_id": attempt_id, "timeout_seconds": seconds},
                    tool_call_id="call-wait",
                )
                return ModelResponse(parts=(call,))
            return ModelResponse(parts=(TextPart(content=delegated),))
        parts = tuple(calls(prompt))
        if not parts:
            return ModelResponse(parts=(TextPart(content="nothing to delegate"),))
        return ModelResponse(parts=parts)

    return planner
