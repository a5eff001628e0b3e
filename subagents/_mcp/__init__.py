"""``subagents serve --mcp``: the durable host as an MCP server (the official ``mcp`` SDK).

``subagents serve --mcp`` serves an opened :class:`~subagents._host.HostService`
over stdio (:mod:`._stdio`) or streamable HTTP (:mod:`._http`), the tools and
resources of :mod:`._server` calling one :class:`McpBridge` per MCP session.
Only those three modules import the SDK, and nothing imports them at ``import
subagents``: without the ``mcp`` extra, :func:`require_mcp` raises
:class:`~subagents._errors.McpNotInstalled` naming it.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from .._errors import McpNotInstalled
from ._bridge import McpBridge, McpTool, attempt_uri

__all__ = ["McpBridge", "McpNotInstalled", "McpTool", "attempt_uri", "require_mcp"]


def require_mcp(module: str = "mcp") -> ModuleType:
    """Import ``module`` of the ``mcp`` SDK, or raise :class:`McpNotInstalled`."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise McpNotInstalled(
            "the MCP server and MCP toolsets need the mcp SDK: install the mcp extra "
            "(pip install '.[mcp]' from the clone)",
            module=module,
        ) from exc
