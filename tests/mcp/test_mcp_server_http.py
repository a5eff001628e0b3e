"""``subagents serve --mcp --http``: the SDK's streamable HTTP client, the bearer token and
the ``Origin`` / ``Host`` checks, against a real server process."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client, ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp_helpers import DEADLINE, REPO, Updates, call, env, read_attempt, serve_args, subscribe

from subagents._agent._ids import ConversationId, RunId
from subagents._agent._mcp_tools import McpServerConfig, list_mcp_tools
from subagents._agent._tools import ToolContext
from subagents._errors import McpToolError

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "probe", "version": "0"},
    },
}
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


class HttpServer:
    def __init__(self, workdir: Path) -> None:
        self.errlog = (workdir / "stderr.log").open("w")
        self.proc = subprocess.Popen(
            [sys.executable, *serve_args(workdir, "--http", "--port", "0")],
            stdout=subprocess.PIPE,
            stderr=self.errlog,
            env=env(workdir),
            cwd=REPO,
        )
        assert self.proc.stdout is not None
        line = json.loads(self.proc.stdout.readline())
        assert "console" not in line  # the MCP server serves no web console
        self.url: str = line["listening"]
        self.token = Path(line["token_file"]).read_text().strip()

    def auth(self, **more: str) -> dict[str, str]:
        return {**HEADERS, "Authorization": f"Bearer {self.token}", **more}

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=DEADLINE)
        assert self.proc.stdout is not None
        self.proc.stdout.close()
        self.errlog.close()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("mcp-http")


@pytest.fixture(scope="module")
def server(workdir: Path) -> Iterator[HttpServer]:
    found = HttpServer(workdir)
    try:
        yield found
    finally:
        found.stop()


@contextlib.asynccontextmanager
async def http_session(
    server: HttpServer, updates: Updates | None = None, durable: str | None = None
) -> AsyncIterator[ClientSession]:
    headers = {"Authorization": f"Bearer {server.token}"}
    if durable is not None:
        headers["Subagents-Session"] = durable
    client = httpx2.AsyncClient(headers=headers, timeout=DEADLINE)
    async with (
        client,
        streamable_http_client(server.url, http_client=client) as (read, write),
        ClientSession(
            read, write, read_timeout_seconds=DEADLINE, message_handler=updates
        ) as session,
    ):
        await session.initialize()
        yield session


async def test_the_sdk_http_client_delegates_waits_and_hears_the_update(
    server: HttpServer, workdir: Path
) -> None:
    updates = Updates()
    async with http_session(server, updates) as session:
        assert len((await session.list_tools()).tools) == 6
        accepted = await call(session, "delegate", {"subagent_name": "slow", "prompt": "wait"})
        await subscribe(session, accepted["resource"])
        (workdir / "release").touch()
        await updates.wait_for(accepted["resource"])
        assert (await read_attempt(session, accepted["attempt_id"]))["result"] == "released"
        waited = await call(session, "wait_subagent", {"attempt_id": accepted["attempt_id"]})
        assert (waited["status"], waited["result"]) == ("completed", "released")


def _post(server: HttpServer, headers: dict[str, str], body: Any = INIT) -> httpx2.Response:
    return httpx2.post(server.url, headers=headers, content=json.dumps(body), timeout=DEADLINE)


def _reason(response: httpx2.Response) -> str:
    error = response.json()["error"]
    assert isinstance(error["code"], int)
    reason: str = error["data"]["reason"]
    return reason


def test_the_bearer_token_is_required(server: HttpServer) -> None:
    missing = _post(server, HEADERS)
    assert (missing.status_code, _reason(missing)) == (401, "auth")
    wrong = _post(server, {**HEADERS, "Authorization": "Bearer nope"})
    assert (wrong.status_code, _reason(wrong)) == (401, "auth")
    assert _post(server, server.auth()).status_code == 200


def test_origin_and_host_are_checked(server: HttpServer) -> None:
    evil = _post(server, server.auth(Origin="https://evil.example"))
    assert (evil.status_code, _reason(evil)) == (403, "bad_origin")
    rebound = _post(server, server.auth(Host="evil.example:80"))
    assert (rebound.status_code, _reason(rebound)) == (421, "bad_host")
    port = server.url.rsplit(":", 1)[1].split("/")[0]
    local = _post(server, server.auth(Origin=f"http://localhost:{port}"))
    assert local.status_code == 200


async def test_sigkill_and_restart_mid_attempt_over_http(tmp_path: Path) -> None:
    first = HttpServer(tmp_path)
    try:
        async with http_session(first, durable="ide") as session:
            accepted = await call(session, "delegate", {"subagent_name": "slow", "prompt": "x"})
            first.proc.send_signal(signal.SIGKILL)
            first.proc.wait(timeout=DEADLINE)
    finally:
        first.stop()
    second = HttpServer(tmp_path)
    try:
        async with http_session(second, durable="ide") as session:
            attempt = {"attempt_id": accepted["attempt_id"]}
            waited = await call(session, "wait_subagent", attempt)
            assert (waited["status"], waited["delivery_status"]) == ("failed", "delivered")
            again = await call(session, "wait_subagent", attempt)
            assert again["owned_elsewhere"] is True and again["error"] is None
        async with http_session(second, durable="other") as session:
            foreign = await call(session, "wait_subagent", attempt)
            assert foreign["status"] == "not_found"  # another session's attempt
    finally:
        second.stop()


async def test_an_agent_toolset_over_streamable_http(server: HttpServer) -> None:
    """A profile's MCP server may be a URL: here this very server, with its token."""
    config = McpServerConfig(
        url=server.url, headers={"Authorization": f"Bearer {server.token}"}, timeout_seconds=20
    )
    tools = await list_mcp_tools("subagents", config)
    assert [t.name for t in tools] == [
        "list_subagents",
        "delegate",
        "steer_subagent",
        "cancel_subagent",
        "wait_subagent",
        "subagent_info",
    ]
    listed = await tools[0].call(ToolContext(RunId(), ConversationId(), 0), {})
    assert [s["name"] for s in listed.content["subagents"]] == ["big", "research", "slow"]
    refused = McpServerConfig(url=server.url, timeout_seconds=20)  # no token
    with pytest.raises(McpToolError) as raised:
        await list_mcp_tools("subagents", refused)
    assert raised.value.server == "subagents"


async def test_a_2026_client_names_its_durable_session_by_header(server: HttpServer) -> None:
    """The SDK's ``Client`` at 2026-07-28 (no MCP session): ``Subagents-Session`` keys it."""
    headers = {"Authorization": f"Bearer {server.token}", "Subagents-Session": "modern"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=DEADLINE) as http,
        Client(streamable_http_client(server.url, http_client=http)) as client,
    ):
        assert client.protocol_version == "2026-07-28"
        accepted = await client.call_tool("delegate", {"subagent_name": "research", "prompt": "go"})
        assert accepted.structured_content is not None
        attempt = {"attempt_id": accepted.structured_content["attempt_id"]}
        waited = await client.call_tool("wait_subagent", attempt)
        assert waited.structured_content is not None
        assert waited.structured_content["result"] == "three facts"
        info = await client.call_tool("subagent_info", {})
        assert info.structured_content is not None
        assert info.structured_content["session_id"] == "modern"
