"""Offline scripted models of ``subagents demo`` and ``subagents chat`` (provider ``demo``).

- ``demo:planner``: the parent. On a background result (a continuation run)
  it answers ``continued after <subagent>: <last line of the result>``. On a
  prompt that mentions ``release`` it delegates to ``researcher`` and
  ``reviewer``, steers the researcher and cancels the reviewer; on one that
  mentions ``crash`` it delegates to ``debugger``; on anything else it hands the
  prompt to ``researcher``. ``demo:assistant`` (the chat's parent) always
  hands the prompt to ``researcher``. Each step is one tool call; the final answer names
  the attempts.
- ``demo:worker=NAME``: a child that works 0.3 s, then reports on its prompt.
- ``demo:gated=NAME``: a child. With ``$SUBAGENTS_DEMO_GATES`` set, it writes
  ``NAME.started`` there and answers once ``NAME.release`` exists (so the
  demo decides when it ends); without it, it answers at once. Before it
  answers it takes a second turn (a call of a tool it does not have, answered
  with a retry prompt), so steering queued while it ran reaches it; its answer
  names the steering it got.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..._agent._models import (
    FunctionModel,
    ModelMessage,
    ModelRequest,
    ModelRequestParameters,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from ..._specs._agent_spec import ModelProviderRegistry, default_model_providers

ASSETS = Path(__file__).with_name("assets")
DEMO_CONFIG = ASSETS / "demo.toml"
"""The demo host's configuration: the ``demo:`` models, subagents researcher, reviewer, debugger."""
CHAT_CONFIG = ASSETS / "chat.toml"
"""The offline chat's configuration: ``demo:assistant`` hands each prompt to ``researcher``."""

PROVIDER = "demo"
GATES_ENV = "SUBAGENTS_DEMO_GATES"
RESULT_PREFIX = "Background subagent result"
GATE_SECONDS = 60.0
CHECK_TOOL = "check_for_steering"
STEERING_PREFIX = "[steering from the parent agent] "
IN_RUN_PREFIX = "[background subagent result] "
_TOOLS = {"delegate", "steer_subagent", "cancel_subagent"}


def _latest_prompt(messages: Sequence[ModelMessage]) -> tuple[int, str]:
    """The latest prompt of the user (not steering, not an in-run background result)."""
    for index in range(len(messages) - 1, -1, -1):
        for part in _parts(messages[index]):
            if (
                isinstance(part, UserPromptPart)
                and isinstance(part.content, str)
                and not part.content.startswith((STEERING_PREFIX, IN_RUN_PREFIX))
            ):
                return index, part.content
    return 0, ""


def _parts(message: ModelMessage) -> Sequence[Any]:
    return message.parts if isinstance(message, ModelRequest) else ()


def _field(content: Any, key: str) -> str:
    if isinstance(content, str):
        try:
            content = json.loads(content)
        except ValueError:
            return ""
    if isinstance(content, dict):
        return str(content.get(key, ""))
    return str(getattr(content, key, "") or "")


def _steps(prompt: str, scripted: bool) -> list[tuple[str, dict[str, Any]]]:
    """The tool calls the planner makes for ``prompt`` (``{attempt:N}``: the Nth delegate's)."""
    lowered = prompt.lower()
    if scripted and "release" in lowered:
        return [
            (
                "delegate",
                {"subagent_name": "researcher", "prompt": "Collect evidence on the release"},
            ),
            ("delegate", {"subagent_name": "reviewer", "prompt": "Review the release branch"}),
            (
                "steer_subagent",
                {"attempt_id": "{attempt:0}", "message": "Focus on the lease code path"},
            ),
            ("cancel_subagent", {"attempt_id": "{attempt:1}", "reason": "review not needed"}),
        ]
    if scripted and "crash" in lowered:
        return [("delegate", {"subagent_name": "debugger", "prompt": "Find the crash"})]
    return [("delegate", {"subagent_name": "researcher", "prompt": prompt.strip()})]


def planner(messages: Sequence[ModelMessage], params: ModelRequestParameters) -> ModelResponse:
    """The scripted parent of the demo (see the module docstring)."""
    return _plan(messages, scripted=True)


def assistant(messages: Sequence[ModelMessage], params: ModelRequestParameters) -> ModelResponse:
    """The chat's parent: every prompt goes to ``researcher`` in the background."""
    return _plan(messages, scripted=False)


def _plan(messages: Sequence[ModelMessage], *, scripted: bool) -> ModelResponse:
    start, prompt = _latest_prompt(messages)
    if prompt.startswith(RESULT_PREFIX):
        header = prompt.splitlines()[0]
        name = header.split("subagent: ", 1)[-1].split(",", 1)[0]
        lines = [line for line in prompt.splitlines() if line.strip()]
        return ModelResponse(
            parts=(TextPart(content=f"continued after {name}: {lines[-1].strip()}"),)
        )
    done: list[ToolReturnPart | RetryPromptPart] = []
    for message in messages[start:]:
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, ToolReturnPart | RetryPromptPart) and part.tool_name in _TOOLS:
                    done.append(part)
    steps = _steps(prompt, scripted)
    attempts = [
        _field(p.content, "attempt_id")
        for p in done
        if isinstance(p, ToolReturnPart) and p.tool_name == "delegate"
    ]
    failed = [p for p in done if isinstance(p, RetryPromptPart)]
    if failed or len(done) >= len(steps):
        if failed:
            return ModelResponse(parts=(TextPart(content=f"a tool failed: {failed[0].content}"),))
        summary = ", ".join(
            f"{name} {_field(p.content, 'status') or 'ok'}"
            for name, p in zip((s[0] for s in steps), done, strict=False)
        )
        meanwhile = [
            [line for line in p.content.splitlines() if line.strip()][-1]
            for m in messages[start:]
            for p in _parts(m)
            if isinstance(p, UserPromptPart)
            and isinstance(p.content, str)
            and p.content.startswith(IN_RUN_PREFIX)
        ]
        extra = "".join(f" Meanwhile a result arrived: {line.strip()}" for line in meanwhile)
        return ModelResponse(parts=(TextPart(content=f"Done: {summary}.{extra}"),))
    tool, args = steps[len(done)]
    resolved = {
        key: (
            attempts[int(value[len("{attempt:") : -1])]
            if isinstance(value, str) and value.startswith("{attempt:")
            else value
        )
        for key, value in args.items()
    }
    call = ToolCallPart(tool_name=tool, args=resolved, tool_call_id=f"call-{len(done) + 1}")
    return ModelResponse(parts=(call,))


def gated(name: str) -> FunctionModel:
    """A child that answers once the demo releases it (see the module docstring)."""

    async def run(
        messages: Sequence[ModelMessage], params: ModelRequestParameters
    ) -> ModelResponse | str:
        gates = os.environ.get(GATES_ENV)
        answer = f"{name}: findings ready (3 sources, 1 open question)"
        if not gates:
            return answer
        directory = Path(gates)
        (directory / f"{name}.started").write_text(str(os.getpid()))
        release = directory / f"{name}.release"
        loop = asyncio.get_running_loop()
        deadline = loop.time() + GATE_SECONDS
        while not release.exists():
            if loop.time() > deadline:
                raise TimeoutError(f"{name} was never released")
            await asyncio.sleep(0.02)  # a file gate: nothing to wait on but the file system
        if not any(isinstance(p, RetryPromptPart) for m in messages for p in _parts(m)):
            # A second turn, so steering queued meanwhile reaches the child: the
            # supervisor's runner adds it to the conversation before each model request.
            call = ToolCallPart(tool_name=CHECK_TOOL, args={}, tool_call_id="check-1")
            return ModelResponse(parts=(call,))
        steering = [
            p.content[len(STEERING_PREFIX) :]
            for m in messages
            for p in _parts(m)
            if isinstance(p, UserPromptPart)
            and isinstance(p.content, str)
            and p.content.startswith(STEERING_PREFIX)
        ]
        if steering:
            answer += f"; steered: {' / '.join(steering)}"
        return ModelResponse(parts=(TextPart(content=answer),))

    return FunctionModel(run)


def worker(name: str, seconds: float = 0.3) -> FunctionModel:
    """A child that works ``seconds`` (background work takes time), then reports on its prompt."""

    async def run(messages: Sequence[ModelMessage], params: ModelRequestParameters) -> str:
        await asyncio.sleep(seconds)  # simulated work, not a synchronization
        _, prompt = _latest_prompt(messages)
        return f"{name} looked into {prompt!r}: 2 sources agree"

    return FunctionModel(run)


def _make(name: str, settings: Any) -> FunctionModel:
    if name == "planner":
        return FunctionModel(planner)
    if name == "assistant":
        return FunctionModel(assistant)
    if name.startswith("worker="):
        return worker(name[len("worker=") :])
    if name.startswith("gated="):
        return gated(name[len("gated=") :])
    raise ValueError(f"unknown demo model {name!r}; use demo:planner or demo:gated=NAME")


def register_demo_models(registry: ModelProviderRegistry | None = None) -> ModelProviderRegistry:
    """Register the ``demo`` provider (idempotent) and return the registry."""
    registry = registry or default_model_providers()
    registry.register(PROVIDER, _make, replace=True)
    return registry
