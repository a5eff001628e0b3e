"""Drive ``subagents serve --mcp`` with the official MCP SDK client, offline.

    python examples/mcp/client.py

Starts the server over stdio on ``examples/mcp/host.toml`` (the ``mcp`` extra:
``pip install '.[mcp]'``), lists its tools, delegates to ``research`` in the
background, waits for the result once and reads it back as a resource.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from pathlib import Path

import mcp_types as types
from mcp import ClientSession, StdioServerParameters, stdio_client

CONFIG = Path(__file__).with_name("host.toml")


async def main() -> None:
    data_dir = tempfile.mkdtemp(prefix="subagents-mcp-")
    server = StdioServerParameters(
        command=sys.executable,
        args=[
            "-m",
            "subagents._cli",
            "serve",
            "--mcp",
            "--config",
            str(CONFIG),
            "--data-dir",
            data_dir,
            "--session",
            "example",
        ],
    )
    async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        tools = await session.list_tools()
        print("tools:", [tool.name for tool in tools.tools])
        accepted = await session.call_tool(
            "delegate", {"subagent_name": "research", "prompt": "Is the release on track?"}
        )
        attempt_id = accepted.structured_content["attempt_id"]
        print("accepted:", attempt_id)
        waited = await session.call_tool("wait_subagent", {"attempt_id": attempt_id})
        print("result:", waited.structured_content["result"])
        resource = await session.read_resource(f"subagents://attempt/{attempt_id}")
        content = resource.contents[0]
        assert isinstance(content, types.TextResourceContents)
        print("resource digest:", json.loads(content.text)["digest"])


if __name__ == "__main__":
    asyncio.run(main())
