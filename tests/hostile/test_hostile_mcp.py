"""Hostile MCP frames against a real ``subagents serve --mcp``: over stdio (oversized,
not JSON-RPC, unusable ids, unknown methods, bad params, invented ids) and over
streamable HTTP (no token, a foreign ``Origin``, a rebinding ``Host``, a huge body).
Each gets its typed error, the session's attempts are unchanged, the server keeps
serving and exits cleanly at end of input."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from properties.reliability._hostile import (
    MCP_HTTP_CASES,
    MCP_LINE_CASES,
    McpHttpCase,
    McpHttpProcess,
    McpLineCase,
    McpStdioProcess,
    check_mcp_http,
    check_mcp_line,
)

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def stdio_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[McpStdioProcess]:
    server = McpStdioProcess(tmp_path_factory.mktemp("mcp-stdio"))
    try:
        yield server
    finally:
        assert server.close() == 0


@pytest.fixture(scope="module")
def http_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[McpHttpProcess]:
    server = McpHttpProcess(tmp_path_factory.mktemp("mcp-http"))
    try:
        yield server
    finally:
        server.close()


@pytest.mark.parametrize("case", MCP_LINE_CASES, ids=[c.name for c in MCP_LINE_CASES])
def test_a_hostile_mcp_line_gets_its_typed_error_and_the_server_keeps_serving(
    stdio_server: McpStdioProcess, case: McpLineCase
) -> None:
    assert check_mcp_line(stdio_server, case) == []


@pytest.mark.parametrize("case", MCP_HTTP_CASES, ids=[c.name for c in MCP_HTTP_CASES])
def test_a_hostile_mcp_http_request_is_refused_before_the_sdk(
    http_server: McpHttpProcess, case: McpHttpCase
) -> None:
    assert check_mcp_http(http_server, case) == []
