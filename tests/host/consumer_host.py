"""The real ``subagents`` CLI with scripted consumers, for the consumer-death tests.

``python consumer_host.py serve --stdio ...`` is ``subagents serve --stdio ...``
plus two offline model providers (the test directory is ``$SUBAGENTS_TEST_DIR``):

- ``consumer:x``, the parent. ``plan`` delegates ``collect facts`` to
  ``research`` in the background and answers ``delegated``; ``wait <attempt_id>``
  calls ``wait_subagent`` on it and, once that returned the child's output, answers
  ``waited: <output>`` (it writes ``in-wait`` in the test directory as it calls
  ``wait_subagent``); a prompt carrying a background subagent result (a
  continuation run, or an explicit run given the session's waiting results)
  answers ``continued: <the result's last line>``; anything else answers ``idle``.
  Before each of those two answers that carry the result it holds: while the file
  ``hold-wait`` (resp. ``hold-result``) exists in the test directory, it writes
  ``in-hold-wait`` (``in-hold-result``) there and waits, so the test can SIGKILL
  the host while the consumer run is alive with the result in hand. ``fail-wait``
  in the directory makes the ``wait`` run fail instead of answering.
- ``consumer-gated:x``, the child: answers ``three facts from the child`` once the file
  ``release`` exists in the test directory.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from subagents import (
    FunctionModel,
    ModelMessage,
    ModelRequest,
    ModelRequestParameters,
    ModelResponse,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
    default_model_providers,
)
from subagents._cli import main

CHILD_OUTPUT = "three facts from the child"
RESULT_MARK = "Background subagent result"
_POLL = 0.02  # the models' file probe interval
_PROBES = 3000  # at most 60 s


def _dir() -> Path:
    return Path(os.environ["SUBAGENTS_TEST_DIR"])


async def _hold(name: str) -> None:
    """While ``hold-<name>`` exists: mark ``in-hold-<name>`` and wait."""
    hold, marker = _dir() / f"hold-{name}", _dir() / f"in-hold-{name}"
    for _ in range(_PROBES):
        if not hold.exists():
            return
        marker.touch()
        await asyncio.sleep(_POLL)
    raise TimeoutError(f"the test never lifted hold-{name}")


def _prompt(messages: Sequence[ModelMessage]) -> str:
    for message in messages:
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, UserPromptPart):
                    return part.content
    return ""


def _returned(messages: Sequence[ModelMessage]) -> str | None:
    last = messages[-1]
    if isinstance(last, ModelRequest):
        for part in last.parts:
            if isinstance(part, ToolReturnPart):
                return str(part.content)
    return None


def _call(name: str, **args: object) -> ModelResponse:
    return ModelResponse(parts=(ToolCallPart(tool_name=name, args=args, tool_call_id="call-1"),))


async def consumer(
    messages: Sequence[ModelMessage], params: ModelRequestParameters
) -> ModelResponse | str:
    prompt = _prompt(messages)
    returned = _returned(messages)
    if RESULT_MARK in prompt:
        await _hold("result")
        return "continued: " + prompt.splitlines()[-1]
    if prompt.startswith("plan"):
        if returned is None:
            return _call("delegate", subagent_name="research", prompt="collect facts")
        return "delegated"
    if prompt.startswith("wait "):
        if returned is None:
            (_dir() / "in-wait").touch()  # the test releases the child only now
            return _call("wait_subagent", attempt_id=prompt.split()[1], timeout_seconds=60)
        if CHILD_OUTPUT not in returned:
            return "waited for nothing"
        await _hold("wait")
        if (_dir() / "fail-wait").exists():
            raise RuntimeError("the wait run fails after taking the result")
        return "waited: " + CHILD_OUTPUT
    return "idle"


async def gated(messages: Sequence[ModelMessage], params: ModelRequestParameters) -> str:
    for _ in range(_PROBES):
        if (_dir() / "release").exists():
            return CHILD_OUTPUT
        await asyncio.sleep(_POLL)
    raise TimeoutError("the test never released the child")


default_model_providers().register("consumer", lambda name, settings: FunctionModel(consumer))
default_model_providers().register("consumer-gated", lambda name, settings: FunctionModel(gated))

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
