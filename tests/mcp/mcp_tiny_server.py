"""A tiny stdio MCP server written with the mcp SDK, for the MCP-toolset tests.

Tools: ``echo(text)`` answers ``echo: <text>``; ``slow(seconds)`` sleeps first;
``broken()`` reports a tool error. ``python mcp_tiny_server.py crash`` exits at once
(a server that fails to start).
"""

from __future__ import annotations

import asyncio
import sys

if sys.argv[1:] == ["crash"]:
    sys.exit(3)  # before the SDK import: a server that dies at once

from mcp.server.mcpserver import MCPServer

server = MCPServer("tiny")


@server.tool()
def echo(text: str) -> str:
    """Echo the text back."""
    return f"echo: {text}"


@server.tool()
async def slow(seconds: float) -> str:
    """Sleep, then answer."""
    await asyncio.sleep(seconds)
    return "slept"


@server.tool()
def broken() -> str:
    """Always fails."""
    raise ValueError("broken on purpose")


if __name__ == "__main__":
    server.run("stdio")
