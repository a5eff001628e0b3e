"""The real ``subagents`` CLI with two extra offline model providers, for e2e tests.

``python scripted_host.py serve --stdio ...`` is ``subagents serve --stdio ...``
plus:

- ``planner:x``: delegates ``collect facts`` to ``research`` in the background
  on a fresh prompt, then says ``delegated; carrying on``; given a background
  result (a continuation run), answers ``continued: <last line of it>``;
- ``gated:x``: answers ``three facts from the child`` once the file named by
  ``$SUBAGENTS_TEST_RELEASE`` exists (so a test decides when the child ends).
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
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
    default_model_providers,
)
from subagents._cli import main

CHILD_OUTPUT = "three facts from the child"


def _latest_prompt(messages: Sequence[ModelMessage]) -> str:
    for message in reversed(messages):
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, UserPromptPart):
                    return part.content
    return ""


def planner(messages: Sequence[ModelMessage], params: ModelRequestParameters) -> ModelResponse:
    prompt = _latest_prompt(messages)
    if prompt.startswith("Background subagent result"):
        return ModelResponse(parts=(TextPart(content="continued: " + prompt.splitlines()[-1]),))
    last = messages[-1]
    if isinstance(last, ModelRequest) and any(isinstance(p, ToolReturnPart) for p in last.parts):
        return ModelResponse(parts=(TextPart(content="delegated; carrying on"),))
    call = ToolCallPart(
        tool_name="delegate",
        args={"subagent_name": "research", "prompt": "collect facts"},
        tool_call_id="call-1",
    )
    return ModelResponse(parts=(call,))


async def gated(messages: Sequence[ModelMessage], params: ModelRequestParameters) -> str:
    release = Path(os.environ["SUBAGENTS_TEST_RELEASE"])
    for _ in range(3000):  # at most 60 s
        if release.exists():
            return CHILD_OUTPUT
        await asyncio.sleep(0.02)
    raise TimeoutError("the test never released the child")


default_model_providers().register("planner", lambda name, settings: FunctionModel(planner))
default_model_providers().register("gated", lambda name, settings: FunctionModel(gated))

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
