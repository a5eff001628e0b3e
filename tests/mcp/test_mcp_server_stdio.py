"""``subagents serve --mcp`` over stdio, driven by the official SDK's own client.

A real server process on an LMDB data directory and offline models: initialize,
list the tools (schemas from the model tools' Structs), delegate in the
background and wait; read the attempt resource and hear its update; an
oversized result read from its artifact; a SIGKILL and restart mid-attempt,
after which ``wait_subagent`` on the same ``attempt_id`` returns the
reconciled outcome exactly once.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import anyio
from mcp import Client, ClientSession, StdioServerParameters
from mcp.shared.subscriptions import ResourceUpdated
from mcp_helpers import (
    DEADLINE,
    REPO,
    Updates,
    call,
    env,
    read_attempt,
    serve_args,
    stdio_session,
    subscribe,
)
from mcp_host import BIG_OUTPUT

from subagents._agent._tools import struct_schema
from subagents._delegation._args import _CancelArgs, _NoArgs, _SteerArgs, _WaitArgs

TOOLS = [
    "list_subagents",
    "delegate",
    "steer_subagent",
    "cancel_subagent",
    "wait_subagent",
    "subagent_info",
]


async def test_initialize_list_delegate_and_wait_once(tmp_path: Path) -> None:
    async with stdio_session(tmp_path) as session:
        assert session.server_info is not None and session.server_info.name == "subagents"
        listed = {tool.name: tool for tool in (await session.list_tools()).tools}
        assert list(listed) == TOOLS
        assert listed["steer_subagent"].input_schema == struct_schema(_SteerArgs)
        assert listed["cancel_subagent"].input_schema == struct_schema(_CancelArgs)
        assert listed["wait_subagent"].input_schema == struct_schema(_WaitArgs)
        assert listed["list_subagents"].input_schema == struct_schema(_NoArgs)
        delegate = listed["delegate"].input_schema
        assert delegate["properties"]["subagent_name"]["enum"] == ["research", "slow", "big"]
        assert delegate["additionalProperties"] is False

        roster = await call(session, "list_subagents", {})
        assert [s["name"] for s in roster["subagents"]] == ["big", "research", "slow"]
        accepted = await call(session, "delegate", {"subagent_name": "research", "prompt": "go"})
        assert accepted["status"] == "accepted"
        assert accepted["agent_id"] and accepted["attempt_id"]
        attempt_id = accepted["attempt_id"]
        waited = await call(session, "wait_subagent", {"attempt_id": attempt_id})
        assert (waited["status"], waited["result"]) == ("completed", "three facts")
        assert waited["delivery_status"] == "delivered"
        again = await call(session, "wait_subagent", {"attempt_id": attempt_id})
        assert again["owned_elsewhere"] is True and again["result"] is None
        info = await call(session, "subagent_info", {})
        assert info["background"] == {"active": [], "retained": []}
        await _refusals(session)
        slow = await call(session, "delegate", {"subagent_name": "slow", "prompt": "wait"})
        attempt = {"attempt_id": slow["attempt_id"]}
        cancelled = await call(session, "cancel_subagent", {**attempt, "reason": "not needed"})
        assert cancelled["status"] == "cancellation_requested"
        waited = await call(session, "wait_subagent", attempt)
        assert (waited["status"], waited["cancellation_reason"]) == ("cancelled", "not needed")


async def _refusals(session: ClientSession) -> None:
    """Unknown fields and invented ids get typed tool errors; the server keeps serving."""
    extra = await session.call_tool(
        "delegate", {"subagent_name": "research", "prompt": "go", "bogus": 1}
    )
    assert extra.is_error
    assert extra.structured_content["error"]["type"] == "ToolArgumentError"
    assert extra.structured_content["error"]["path"] == "$.bogus"
    nobody = await session.call_tool("delegate", {"subagent_name": "ghost", "prompt": "go"})
    assert nobody.structured_content["error"]["error_kind"] == "NotFound"
    steer = await session.call_tool("steer_subagent", {"attempt_id": "made-up", "message": "x"})
    assert steer.is_error and steer.structured_content["error"]["error_kind"] == "NotFound"
    agent = await session.call_tool(
        "delegate", {"subagent_name": "research", "prompt": "go", "agent_id": "made-up"}
    )
    assert agent.structured_content["error"]["error_kind"] == "NotFound"
    waited = await call(session, "wait_subagent", {"attempt_id": "made-up"})
    assert waited["status"] == "not_found"
    # The server kept serving.
    assert len((await session.list_tools()).tools) == len(TOOLS)


async def test_resource_update_notification_and_read(tmp_path: Path) -> None:
    updates = Updates()
    async with stdio_session(tmp_path, updates=updates) as session:
        accepted = await call(session, "delegate", {"subagent_name": "slow", "prompt": "wait"})
        uri = accepted["resource"]
        assert uri == f"subagents://attempt/{accepted['attempt_id']}"
        await subscribe(session, uri)
        running = await read_attempt(session, accepted["attempt_id"])
        assert running["terminal"] is False
        listed = (await session.list_resources()).resources
        assert [str(r.uri) for r in listed] == [uri]
        steered = await call(
            session, "steer_subagent", {"attempt_id": accepted["attempt_id"], "message": "hurry"}
        )
        assert steered["status"] == "queued"
        (tmp_path / "release").touch()
        await updates.wait_for(uri)
        done = await read_attempt(session, accepted["attempt_id"])
        assert (done["status"], done["result"], done["terminal"]) == ("completed", "released", True)
        assert done["size_bytes"] == len("released") and done["digest"].startswith("sha256:")
        # Reading never delivers: the wait still gets the result, once.
        waited = await call(session, "wait_subagent", {"attempt_id": accepted["attempt_id"]})
        assert waited["result"] == "released"
        # An oversized result is read from its artifact, with preview, digest and size.
        accepted = await call(session, "delegate", {"subagent_name": "big", "prompt": "all"})
        waited = await call(session, "wait_subagent", {"attempt_id": accepted["attempt_id"]})
        assert waited["status"] == "completed"
        value = await read_attempt(session, accepted["attempt_id"])
        assert value["from_artifact"] is True
        assert value["result"] == BIG_OUTPUT
        assert value["size_bytes"] == len(BIG_OUTPUT)
        assert BIG_OUTPUT.startswith(value["preview"]) and len(value["preview"]) < len(BIG_OUTPUT)
        assert value["digest"].startswith("sha256:")


def _kill(workdir: Path) -> None:
    os.kill(int((workdir / "pid").read_text()), signal.SIGKILL)


async def test_sigkill_and_restart_then_wait_returns_each_outcome_exactly_once(
    tmp_path: Path,
) -> None:
    async with stdio_session(tmp_path, "--session", "ide") as session:
        done = await call(session, "delegate", {"subagent_name": "research", "prompt": "go"})
        with anyio.fail_after(DEADLINE):  # ended durably, undelivered, before the kill
            while not (await read_attempt(session, done["attempt_id"]))["terminal"]:
                await anyio.sleep(0.05)  # a bounded probe of the resource
        running = await call(session, "delegate", {"subagent_name": "slow", "prompt": "wait"})
        _kill(tmp_path)  # mid-attempt: the slow child is never released
    async with stdio_session(tmp_path, "--session", "ide") as session:
        completed = await call(session, "wait_subagent", {"attempt_id": done["attempt_id"]})
        assert (completed["status"], completed["result"]) == ("completed", "three facts")
        lost = await call(session, "wait_subagent", {"attempt_id": running["attempt_id"]})
        assert lost["status"] == "failed" and lost["delivery_status"] == "delivered"
        assert lost["timed_out"] is False and lost["owned_elsewhere"] is False
        for attempt in (done, running):
            again = await call(session, "wait_subagent", {"attempt_id": attempt["attempt_id"]})
            assert again["owned_elsewhere"] is True and again["delivery_status"] == "delivered"
            assert again["result"] is None and again["error"] is None


async def test_a_2026_client_listens_for_the_attempts_end(tmp_path: Path) -> None:
    """The SDK's ``Client`` speaks the 2026-07-28 era: ``subscriptions/listen``."""
    params = StdioServerParameters(
        command=sys.executable, args=serve_args(tmp_path), env=env(tmp_path), cwd=REPO
    )
    async with Client(params, read_timeout_seconds=DEADLINE) as client:
        assert client.protocol_version == "2026-07-28"
        accepted = (
            await client.call_tool("delegate", {"subagent_name": "slow", "prompt": "wait"})
        ).structured_content
        assert accepted is not None
        uri = accepted["resource"]
        async with client.listen(resource_subscriptions=[uri]) as events:
            assert events.honored.resource_subscriptions == [uri]
            (tmp_path / "release").touch()
            with anyio.fail_after(DEADLINE):
                event = await anext(aiter(events))
        assert isinstance(event, ResourceUpdated) and event.uri == uri
        waited = await client.call_tool("wait_subagent", {"attempt_id": accepted["attempt_id"]})
        assert waited.structured_content is not None
        assert waited.structured_content["result"] == "released"
