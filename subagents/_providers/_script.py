"""The ``script`` provider: scripted offline models that delegate, for any host config.

No network, no keys, deterministic: they show blocking and background
delegation from ``subagents run``, ``chat``, ``serve`` and ``worker`` offline.
Model ids:

- ``script:parent`` (or ``script:parent=NAME,NAME2``): a parent. It hands the
  latest prompt to each named subagent in turn (unnamed: the first one its
  ``delegate`` tool offers) and answers ``Done: ...`` with what each call
  returned (a blocking delegation's output; a background attempt's id and
  status). Cue words in the prompt (whole words, any case) add steps, each
  taken only when the model has that tool (background delegation):
  ``steer`` steers the first attempt, ``cancel`` cancels the last one,
  ``wait`` waits for each attempt and answers with its result. A run started by
  a delivered background result (a continuation) answers ``continued after
  NAME: <last line of the result>``. With no ``delegate`` tool (``worker``, a
  child) it answers ``no subagents to delegate to: <prompt>``.
- ``script:worker=NAME``: a child that works ``model_settings.seconds``
  (default 0.3) and reports on its prompt.
- ``script:gated=NAME``: a child gated by files. With ``$SUBAGENTS_SCRIPT_GATES``
  set to a directory it writes ``NAME.started`` there and answers once
  ``NAME.release`` exists (so a test or a person decides when it ends);
  without it, it answers at once. Before answering it takes a second turn, so
  steering queued while it ran reaches it; its answer names that steering.

``subagents demo`` builds its own story (provider ``demo``) from the same parts.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .._agent._models import (
    FunctionModel,
    Model,
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
from .._errors import ModelResolutionError

PROVIDER = "script"
GATES_ENV = "SUBAGENTS_SCRIPT_GATES"
RESULT_PREFIX = "Background subagent result"
GATE_SECONDS = 60.0
CHECK_TOOL = "check_for_steering"
STEERING_PREFIX = "[steering from the parent agent] "
IN_RUN_PREFIX = "[background subagent result] "
DELEGATION_TOOLS = frozenset({"delegate", "steer_subagent", "cancel_subagent", "wait_subagent"})

Step = tuple[str, dict[str, Any]]
"""One tool call of a script: the tool and its arguments (``{attempt:N}``: the Nth
``delegate`` call's attempt id, ``{attempt:-1}`` the last one's)."""
Steps = Callable[[str, ModelRequestParameters], list[Step]]


def latest_prompt(messages: Sequence[ModelMessage]) -> tuple[int, str]:
    """The index and text of the user's latest prompt (not steering, not an
    in-run background result)."""
    for index in range(len(messages) - 1, -1, -1):
        for part in parts(messages[index]):
            if (
                isinstance(part, UserPromptPart)
                and isinstance(part.content, str)
                and not part.content.startswith((STEERING_PREFIX, IN_RUN_PREFIX))
            ):
                return index, part.content
    return 0, ""


def parts(message: ModelMessage) -> Sequence[Any]:
    return message.parts if isinstance(message, ModelRequest) else ()


def field(content: Any, key: str) -> str:
    """``content[key]`` of a tool's return (a dict, a JSON text or an object), else ``""``."""
    if isinstance(content, str):
        try:
            content = json.loads(content)
        except ValueError:
            return ""
    if isinstance(content, dict):
        return str(content.get(key, "") or "")
    return str(getattr(content, key, "") or "")


def tool_names(params: ModelRequestParameters) -> set[str]:
    return {tool.name for tool in params.tools}


def roster(params: ModelRequestParameters) -> list[str]:
    """The subagent names the ``delegate`` tool offers (its ``subagent_name`` enum)."""
    for tool in params.tools:
        if tool.name == "delegate":
            prop = tool.parameters_schema.get("properties", {}).get("subagent_name", {})
            return [str(name) for name in prop.get("enum", [])]
    return []


def _resolve(args: dict[str, Any], attempts: list[str]) -> dict[str, Any]:
    out = {}
    for key, value in args.items():
        if isinstance(value, str) and value.startswith("{attempt:"):
            index = int(value[len("{attempt:") : -1])
            out[key] = attempts[index] if -len(attempts) <= index < len(attempts) else ""
        else:
            out[key] = value
    return out


def _continuation(prompt: str) -> ModelResponse:
    header = prompt.splitlines()[0]
    name = header.split("subagent: ", 1)[-1].split(",", 1)[0]
    lines = [line for line in prompt.splitlines() if line.strip()]
    return ModelResponse(parts=(TextPart(content=f"continued after {name}: {lines[-1].strip()}"),))


def _in_run_result(text: str) -> str:
    """What a background result handed over inside a run says: its ``result``
    (or ``error``) when it is the JSON report, else its last line."""
    found = field(text, "result") or field(text, "error")
    if found:
        return found
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _describe(tool: str, part: ToolReturnPart) -> str:
    if tool == "delegate":
        output = field(part.content, "output")
        if output:  # blocking: the child's answer
            return f"{field(part.content, 'name') or 'subagent'} answered {output!r}"
        return f"delegate {field(part.content, 'status') or 'ok'}"
    if tool == "wait_subagent":
        result = field(part.content, "result") or field(part.content, "output")
        status = field(part.content, "status") or "ok"
        return f"waited: {status}" + (f" {result!r}" if result else "")
    return f"{tool} {field(part.content, 'status') or 'ok'}"


def plan(
    messages: Sequence[ModelMessage], params: ModelRequestParameters, steps: Steps
) -> ModelResponse:
    """The next response of a scripted parent: the next step's tool call, or the
    final answer once every step is done (or one failed)."""
    start, prompt = latest_prompt(messages)
    if prompt.startswith(RESULT_PREFIX):
        return _continuation(prompt)
    done: list[ToolReturnPart | RetryPromptPart] = [
        part
        for message in messages[start:]
        for part in parts(message)
        if isinstance(part, ToolReturnPart | RetryPromptPart) and part.tool_name in DELEGATION_TOOLS
    ]
    script = steps(prompt, params)
    failed = [p for p in done if isinstance(p, RetryPromptPart)]
    if failed:
        return ModelResponse(parts=(TextPart(content=f"a tool failed: {failed[0].content}"),))
    if len(done) >= len(script):
        if not script:
            return ModelResponse(
                parts=(TextPart(content=f"no subagents to delegate to: {prompt.strip()}"),)
            )
        summary = ", ".join(
            _describe(tool, p)
            for (tool, _), p in zip(script, done, strict=False)
            if isinstance(p, ToolReturnPart)
        )
        meanwhile = [
            _in_run_result(p.content[len(IN_RUN_PREFIX) :])
            for m in messages[start:]
            for p in parts(m)
            if isinstance(p, UserPromptPart)
            and isinstance(p.content, str)
            and p.content.startswith(IN_RUN_PREFIX)
        ]
        extra = "".join(f" Meanwhile a result arrived: {line.strip()}" for line in meanwhile)
        return ModelResponse(parts=(TextPart(content=f"Done: {summary}.{extra}"),))
    attempts = [
        field(p.content, "attempt_id")
        for p in done
        if isinstance(p, ToolReturnPart) and p.tool_name == "delegate"
    ]
    tool, args = script[len(done)]
    call = ToolCallPart(
        tool_name=tool, args=_resolve(args, attempts), tool_call_id=f"call-{len(done) + 1}"
    )
    return ModelResponse(parts=(call,))


def _cues(prompt: str) -> set[str]:
    return {word.lower() for word in re.findall(r"[A-Za-z]+", prompt)}


def parent_steps(names: Sequence[str]) -> Steps:
    """The script of ``script:parent=NAMES`` (see the module docstring)."""

    def steps(prompt: str, params: ModelRequestParameters) -> list[Step]:
        tools = tool_names(params)
        if "delegate" not in tools:
            return []
        targets = list(names) or roster(params)[:1]
        script: list[Step] = [
            ("delegate", {"subagent_name": name, "prompt": prompt.strip()}) for name in targets
        ]
        cues = _cues(prompt)
        if "steer" in cues and "steer_subagent" in tools:
            steering = {"attempt_id": "{attempt:0}", "message": "Focus on the first open question"}
            script.append(("steer_subagent", steering))
        if "cancel" in cues and "cancel_subagent" in tools:
            script.append(
                ("cancel_subagent", {"attempt_id": "{attempt:-1}", "reason": "not needed"})
            )
        if "wait" in cues and "wait_subagent" in tools:
            script.extend(
                ("wait_subagent", {"attempt_id": f"{{attempt:{index}}}", "timeout_seconds": 60})
                for index in range(len(targets))
            )
        return script

    return steps


def gated(name: str, gates_env: str = GATES_ENV) -> FunctionModel:
    """A child that answers once released (see the module docstring)."""

    async def run(
        messages: Sequence[ModelMessage], params: ModelRequestParameters
    ) -> ModelResponse | str:
        gates = os.environ.get(gates_env)
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
        if not any(isinstance(p, RetryPromptPart) for m in messages for p in parts(m)):
            # A second turn, so steering queued meanwhile reaches the child: the
            # supervisor's runner adds it to the conversation before each model request.
            call = ToolCallPart(tool_name=CHECK_TOOL, args={}, tool_call_id="check-1")
            return ModelResponse(parts=(call,))
        steering = [
            p.content[len(STEERING_PREFIX) :]
            for m in messages
            for p in parts(m)
            if isinstance(p, UserPromptPart)
            and isinstance(p.content, str)
            and p.content.startswith(STEERING_PREFIX)
        ]
        if steering:
            answer += f"; steered: {' / '.join(steering)}"
        return ModelResponse(parts=(TextPart(content=answer),))

    return FunctionModel(run, name=f"script:gated={name}")


def worker(name: str, seconds: float = 0.3) -> FunctionModel:
    """A child that works ``seconds`` (background work takes time), then reports on its prompt."""

    async def run(messages: Sequence[ModelMessage], params: ModelRequestParameters) -> str:
        await asyncio.sleep(seconds)  # simulated work, not a synchronization
        _, prompt = latest_prompt(messages)
        return f"{name} looked into {prompt!r}: 2 sources agree"

    return FunctionModel(run, name=f"script:worker={name}")


KNOWN = ["script:parent", "script:parent=NAME,...", "script:worker=NAME", "script:gated=NAME"]


def make_script_model(model_name: str, settings: Mapping[str, Any]) -> Model:
    """The ``script`` provider's factory (grammar in the module docstring)."""
    kind, _, argument = model_name.partition("=")
    names = [name.strip() for name in argument.split(",") if name.strip()]
    if kind == "parent":
        steps = parent_steps(names)
        return FunctionModel(
            lambda messages, params: plan(messages, params, steps), name=f"script:{model_name}"
        )
    if kind == "worker" and len(names) == 1:
        seconds = settings.get("seconds", 0.3)
        if not isinstance(seconds, int | float) or not 0 <= seconds <= 600:
            raise ModelResolutionError(
                f"script:worker seconds must be a number from 0 to 600, got {seconds!r}",
                model_id=f"script:{model_name}",
                provider=PROVIDER,
                known=KNOWN,
            )
        return worker(names[0], float(seconds))
    if kind == "gated" and len(names) == 1:
        return gated(names[0])
    raise ModelResolutionError(
        f"unknown script model {model_name!r}; use one of {', '.join(KNOWN)}",
        model_id=f"script:{model_name}",
        provider=PROVIDER,
        known=KNOWN,
    )
