"""The hostile-input corpus: every case, its expected typed refusal, and the runner.

Seven families, each a tuple of frozen case records defined once, one module per input kind
(:mod:`._markdown`, :mod:`._toml`, :mod:`._jsonrpc` and :mod:`._stdio`, :mod:`._tools`,
:mod:`._sizes`, :mod:`._lmdb`, :mod:`._mcp`; the in-process host they share is :mod:`._host`):
``tests/hostile/`` parametrizes over the same tuples (one test per case) and
:func:`run_hostile_corpus` runs them all outside pytest for ``subagents verify
--report``.

- ``markdown``: subagent files (:func:`~subagents.parse_subagent_markdown`,
  :func:`~subagents.load_subagent_dir`, and a host loading a directory of them).
- ``toml``: host configurations (``parse_host_config`` / ``load_host_config``).
- ``jsonrpc``: frames against a running host: the in-process dispatcher, the
  HTTP app and a real ``subagents serve --stdio`` process.
- ``tool-arguments``: what a model may send the delegation tools.
- ``sizes``: prompts and steering at 0, limit-1, limit, limit+1 and 16 MiB.
- ``lmdb-full``: a full LMDB map and a full reader table under a running host.
- ``mcp``: MCP frames against a real ``subagents serve --mcp`` over stdio (oversized,
  not JSON-RPC, unusable ids, unknown methods, bad params, invented ids) and over
  streamable HTTP (no token, a foreign ``Origin``, a rebinding ``Host``, a huge body).

What every case checks: the input gets a typed error (a ``SubagentsError``
subclass, a JSON-RPC error object, or a retry prompt for the model), nothing
committed is lost or partially written (the store's records are snapshotted
before and compared after), and the host keeps serving (a normal request
succeeds after each hostile one). A check returns its violations as strings;
an empty list is a pass. A check never raises: an unexpected exception is
itself a violation naming its type.
"""

from __future__ import annotations

from ._common import HUGE, KIB, MIB, RESULT
from ._host import HOST_CONFIG, SEED_SESSION, HostileHost, hostile_host
from ._jsonrpc import (
    FRAME_CASES,
    FrameCase,
    HttpApp,
    check_frame,
    check_http_frame,
    check_http_unauthorized,
    judge_reply,
)
from ._lmdb import LMDB_CASES, check_lmdb
from ._markdown import (
    MARKDOWN_CASES,
    MarkdownCase,
    check_markdown,
    check_markdown_directory,
    write_markdown_corpus,
)
from ._mcp import (
    MCP_HTTP_CASES,
    MCP_LINE_CASES,
    McpHttpCase,
    McpHttpProcess,
    McpLineCase,
    McpStdioProcess,
    check_mcp_http,
    check_mcp_line,
    run_mcp_http,
    run_mcp_lines,
)
from ._runner import FAMILIES, MINIMUM_CASES, HostileReport, run_hostile_corpus
from ._sizes import SIZE_CASES, SizeCase, check_size, sized_text
from ._stdio import LINE_CASES, LineCase, StdioHostProcess, check_line, run_stdio_lines
from ._toml import TOML_CASES, TomlCase, check_toml
from ._tools import TOOL_ARGUMENT_CASES, ToolArgsCase, check_tool_arguments, tool_bench

__all__ = [
    "FAMILIES",
    "FRAME_CASES",
    "HOST_CONFIG",
    "HUGE",
    "KIB",
    "LINE_CASES",
    "LMDB_CASES",
    "MARKDOWN_CASES",
    "MCP_HTTP_CASES",
    "MCP_LINE_CASES",
    "MIB",
    "MINIMUM_CASES",
    "RESULT",
    "SEED_SESSION",
    "SIZE_CASES",
    "TOML_CASES",
    "TOOL_ARGUMENT_CASES",
    "FrameCase",
    "HostileHost",
    "HostileReport",
    "HttpApp",
    "LineCase",
    "MarkdownCase",
    "McpHttpCase",
    "McpHttpProcess",
    "McpLineCase",
    "McpStdioProcess",
    "SizeCase",
    "StdioHostProcess",
    "TomlCase",
    "ToolArgsCase",
    "check_frame",
    "check_http_frame",
    "check_http_unauthorized",
    "check_line",
    "check_lmdb",
    "check_markdown",
    "check_markdown_directory",
    "check_mcp_http",
    "check_mcp_line",
    "check_size",
    "check_toml",
    "check_tool_arguments",
    "hostile_host",
    "judge_reply",
    "run_hostile_corpus",
    "run_mcp_http",
    "run_mcp_lines",
    "run_stdio_lines",
    "sized_text",
    "tool_bench",
    "write_markdown_corpus",
]
