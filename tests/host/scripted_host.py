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

from host_helpers import planner

from subagents import (
    FunctionModel,
    ModelMessage,
    ModelRequestParameters,
    default_model_providers,
)
from subagents._cli import main

CHILD_OUTPUT = "three facts from the child"


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
