"""The real ``subagents`` CLI with offline test providers, for the MCP server tests.

``python mcp_host.py serve --mcp ...`` is ``subagents serve --mcp ...`` plus:

- ``mcp-gated:x``: answers ``released`` once the file named by
  ``$SUBAGENTS_TEST_RELEASE`` exists (the test decides when the child ends);
- ``big:x``: answers 100 000 characters (over the 64 KiB inline limit: an artifact).

With ``$SUBAGENTS_TEST_PIDFILE`` the process writes its pid there first (the test
SIGKILLs it: ``stdio_client`` does not expose the process).
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from subagents import FunctionModel, ModelMessage, ModelRequestParameters, default_model_providers
from subagents._cli import main

BIG_OUTPUT = "".join(f"line {i:06d}\n" for i in range(9091))[:100_000]


async def gated(messages: Sequence[ModelMessage], params: ModelRequestParameters) -> str:
    release = Path(os.environ["SUBAGENTS_TEST_RELEASE"])
    for _ in range(3000):  # at most 60 s
        if release.exists():
            return "released"
        await asyncio.sleep(0.02)
    raise TimeoutError("the test never released the child")


async def big(messages: Sequence[ModelMessage], params: ModelRequestParameters) -> str:
    return BIG_OUTPUT


default_model_providers().register("mcp-gated", lambda name, settings: FunctionModel(gated))
default_model_providers().register("big", lambda name, settings: FunctionModel(big))

if __name__ == "__main__":
    pidfile = os.environ.get("SUBAGENTS_TEST_PIDFILE")
    if pidfile:
        Path(pidfile).write_text(str(os.getpid()))
    sys.exit(main(sys.argv[1:]))
