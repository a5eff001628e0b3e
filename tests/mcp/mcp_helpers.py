"""Shared helpers of the MCP server tests: the offline config and the SDK's clients."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import warnings
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPDeprecationWarning

REPO = Path(__file__).resolve().parents[2]
HOST = Path(__file__).with_name("mcp_host.py")
DEADLINE = 30.0

CONFIG = """
[host]
lease_ttl = 1.0

[profiles.default]
model_id = "test:echo"
subagents = ["research", "slow", "big"]

[profiles.research]
model_id = "test:text=three facts"

[profiles.slow]
model_id = "mcp-gated:x"

[profiles.big]
model_id = "big:x"

[subagents.research]
profile = "research"
description = "Collect facts"

[subagents.slow]
profile = "slow"
description = "Waits until the test releases it"

[subagents.big]
profile = "big"
description = "Answers 100 000 characters"
"""


def env(workdir: Path) -> dict[str, str]:
    found = {k: v for k, v in os.environ.items() if k != "SUBAGENTS_CONFIG"}
    found["PYTHONPATH"] = str(REPO) + os.pathsep + found.get("PYTHONPATH", "")
    found["SUBAGENTS_TEST_RELEASE"] = str(workdir / "release")
    found["SUBAGENTS_TEST_PIDFILE"] = str(workdir / "pid")
    return found


def serve_args(workdir: Path, *extra: str) -> list[str]:
    config = workdir / "host.toml"
    if not config.exists():
        config.write_text(CONFIG)
    return [
        str(HOST),
        "serve",
        "--mcp",
        "--config",
        str(config),
        "--data-dir",
        str(workdir / "data"),
        "--tick",
        "0.1",
        *extra,
    ]


class Updates:
    """The ``notifications/resources/updated`` a client received."""

    def __init__(self) -> None:
        self.uris: list[str] = []
        self.changed = anyio.Event()

    async def __call__(self, message: Any) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            self.uris.append(str(message.params.uri))
            self.changed.set()
            self.changed = anyio.Event()

    async def wait_for(self, uri: str) -> None:
        with anyio.fail_after(DEADLINE):
            while uri not in self.uris:
                await self.changed.wait()


@contextlib.asynccontextmanager
async def stdio_session(
    workdir: Path, *extra: str, updates: Updates | None = None
) -> AsyncIterator[ClientSession]:
    """The SDK's stdio client on a real ``serve --mcp`` process, initialized."""
    params = StdioServerParameters(
        command=sys.executable, args=serve_args(workdir, *extra), env=env(workdir), cwd=REPO
    )
    with (workdir / "stderr.log").open("a") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(
                read, write, read_timeout_seconds=DEADLINE, message_handler=updates
            ) as session,
        ):
            await session.initialize()
            yield session


async def call(session: ClientSession, tool: str, arguments: dict[str, Any]) -> Any:
    """A tool's structured result (asserting it is not an error)."""
    result = await session.call_tool(tool, arguments)
    assert not result.is_error, result.content
    return result.structured_content


async def read_attempt(session: ClientSession, attempt_id: str) -> Any:
    result = await session.read_resource(f"subagents://attempt/{attempt_id}")
    content = result.contents[0]
    assert isinstance(content, types.TextResourceContents)
    return json.loads(content.text)


async def subscribe(session: ClientSession, uri: str) -> None:
    """``resources/subscribe`` (the 2025-era call the SDK marks deprecated)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        await session.subscribe_resource(uri)
