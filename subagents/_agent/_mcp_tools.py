"""MCP servers' tools as agent tools: a toolset per server named in a profile.

:class:`McpServerConfig` names one server: a stdio ``command`` (with ``args``,
``env``, ``cwd``) or a streamable HTTP ``url`` (with ``headers``), a
``timeout_seconds`` bounding every exchange, and optionally the ``tools`` to
take from it. :func:`load_mcp_toolset` asks the server for its tools once
(bounded by the timeout) and returns one :class:`McpServerTool` per tool; their
schemas are the server's ``inputSchema``, checked and compiled by the same
validator as every tool schema (:func:`~subagents._agent._schema.compile_schema`).

A call opens its own connection (one exchange: initialize, ``tools/call``,
close), so a tool works from any event loop and thread, a parent's or a
background child's, and a server that died between calls is simply started
again. Everything is bounded: a server that is slow, exits, answers garbage
or reports ``isError`` raises :class:`~subagents._errors.McpToolError`
(``reason``: ``timeout``, ``unreachable``, ``protocol``, ``tool_error``), which a
run turns into a tool error the model sees; a run never hangs on a server.

The tools carry ``metadata = {"kind": "mcp", "mcp_server": NAME}``, and are
inherited by subagents under the usual required / optional / denied policy.
The ``mcp`` SDK is imported when a server is first contacted (the ``mcp``
extra); without it, :class:`~subagents._errors.McpNotInstalled`.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import os
import threading
from collections.abc import AsyncIterator
from typing import Any

import msgspec

from .._errors import McpNotInstalled, McpToolError
from ._schema import compile_schema
from ._tools import Tool, ToolContext, ToolResult

DEFAULT_TIMEOUT = 30.0
CONNECTION_CLOSED = -32000
"""The SDK's code for a connection that closed under a request (the server died)."""


class McpServerConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``[mcp_servers.NAME]``: one MCP server, over stdio (``command``) or HTTP (``url``)."""

    command: str | None = None
    args: list[str] = msgspec.field(default_factory=list)
    env: dict[str, str] = msgspec.field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = msgspec.field(default_factory=dict)
    timeout_seconds: float = DEFAULT_TIMEOUT
    tools: list[str] | None = None


def _sdk(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise McpNotInstalled(
            "MCP toolsets need the mcp SDK: install the mcp extra "
            "(pip install '.[mcp]' from the clone)",
            module=module,
        ) from exc


@contextlib.asynccontextmanager
async def _session(config: McpServerConfig) -> AsyncIterator[Any]:
    """An initialized SDK ``ClientSession`` on the server (stdio or streamable HTTP)."""
    mcp = _sdk("mcp")
    async with contextlib.AsyncExitStack() as stack:
        if config.url is not None:
            http = _sdk("mcp.client.streamable_http")
            httpx2 = _sdk("httpx2")
            client = await stack.enter_async_context(
                httpx2.AsyncClient(headers=dict(config.headers), timeout=config.timeout_seconds)
            )
            read, write = await stack.enter_async_context(
                http.streamable_http_client(config.url, http_client=client)
            )
        else:
            params = mcp.StdioServerParameters(
                command=config.command or "",
                args=list(config.args),
                env={**os.environ, **config.env} if config.env else None,
                cwd=config.cwd,
            )
            errlog = stack.enter_context(open(os.devnull, "w"))  # noqa: SIM115 (the stack closes it)
            read, write = await stack.enter_async_context(mcp.stdio_client(params, errlog=errlog))
        session = await stack.enter_async_context(
            mcp.ClientSession(read, write, read_timeout_seconds=config.timeout_seconds)
        )
        await session.initialize()
        yield session


def _failure(server: str, tool: str | None, exc: BaseException) -> McpToolError:
    where = f"MCP server {server!r}" + (f" (tool {tool!r})" if tool else "")
    closed = type(exc).__name__ == "MCPError" and getattr(exc, "code", None) == CONNECTION_CLOSED
    if isinstance(exc, TimeoutError):
        reason, text = "timeout", "did not answer in time"
    elif closed:
        reason, text = "unreachable", "closed the connection (did it start?)"
    elif type(exc).__name__ == "MCPError":
        reason, text = "protocol", f"refused the request: {getattr(exc, 'message', exc)}"
    else:
        reason, text = "unreachable", f"failed ({type(exc).__name__})"
    return McpToolError(f"{where} {text}", tool=tool, server=server, reason=reason)


def _result_value(result: Any) -> Any:
    """A ``CallToolResult`` as a tool's content: its structured content, else its text."""
    if result.structured_content is not None:
        return result.structured_content
    texts = [getattr(block, "text", None) for block in result.content]
    return "\n".join(t for t in texts if t is not None)


class McpServerTool(Tool):
    """One tool of an MCP server; :meth:`invoke` is one bounded exchange with it."""

    def __init__(self, server: str, config: McpServerConfig, listed: Any) -> None:
        self.server = server
        self.config = config
        self.name = str(listed.name)
        self.description = listed.description
        self.parameters_schema = dict(listed.input_schema)
        self.metadata = {"kind": "mcp", "mcp_server": server}
        self._check = compile_schema(self.parameters_schema, self.name)

    def validate(self, arguments: Any) -> Any:
        self._check(arguments)
        return arguments

    async def invoke(self, context: ToolContext, arguments: Any) -> ToolResult:
        try:
            async with asyncio.timeout(self.config.timeout_seconds):
                async with _session(self.config) as session:
                    result = await session.call_tool(self.name, arguments)
        except McpNotInstalled:
            raise
        except Exception as exc:
            raise _failure(self.server, self.name, _root(exc)) from exc
        if result.is_error:
            raise McpToolError(
                f"MCP tool {self.name!r} of server {self.server!r} failed: "
                f"{str(_result_value(result))[:500]}",
                tool=self.name,
                server=self.server,
                reason="tool_error",
            )
        return ToolResult(_result_value(result), {"mcp_server": self.server})

    def __repr__(self) -> str:
        return f"McpServerTool({self.server!r}, {self.name!r})"


def _root(exc: BaseException) -> BaseException:
    """The first leaf of an exception group (anyio task groups wrap what failed)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


async def list_mcp_tools(name: str, config: McpServerConfig) -> list[McpServerTool]:
    """The server's tools (those ``config.tools`` names, when given), bounded by its timeout.

    Raises :class:`McpToolError` when the server cannot be reached in time, and
    :class:`~subagents.ToolSchemaError` when a tool's schema is unusable.
    """
    try:
        async with asyncio.timeout(config.timeout_seconds), _session(config) as session:
            listed = await session.list_tools()
    except McpNotInstalled:
        raise
    except Exception as exc:
        raise _failure(name, None, _root(exc)) from exc
    wanted = None if config.tools is None else set(config.tools)
    tools = []
    for tool in listed.tools:
        if wanted is None or tool.name in wanted:
            tools.append(McpServerTool(name, config, tool))
    return tools


def load_mcp_toolset(name: str, config: McpServerConfig) -> list[McpServerTool]:
    """:func:`list_mcp_tools` from synchronous code (on a private thread and event loop,
    so it works inside a running loop too)."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(asyncio.run(list_mcp_tools(name, config)))
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run, name=f"subagents-mcp-{name}", daemon=True)
    thread.start()
    thread.join(config.timeout_seconds + 5.0)
    if not outcome:
        raise McpToolError(
            f"MCP server {name!r} did not answer in time", server=name, reason="timeout"
        )
    found = outcome[0]
    if isinstance(found, BaseException):
        raise found
    tools: list[McpServerTool] = found
    return tools
