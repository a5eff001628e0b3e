"""Bad frames get JSON-RPC errors with stable codes, and the host keeps serving."""

from __future__ import annotations

import json

from host_helpers import Client

from subagents._host import ERROR_CODES, Dispatcher, ErrorCode, HostService
from subagents._host._jsonrpc import Binding, Connection, RpcError

PARSE, INVALID, UNKNOWN, PARAMS = -32700, -32600, -32601, -32602


def test_codes_are_stable() -> None:
    assert ERROR_CODES == {
        "PARSE_ERROR": -32700,
        "INVALID_REQUEST": -32600,
        "METHOD_NOT_FOUND": -32601,
        "INVALID_PARAMS": -32602,
        "INTERNAL_ERROR": -32603,
        "SERVER_ERROR": -32000,
        "UNSUPPORTED_FEATURE": -32002,
        "REQUEST_TOO_LARGE": -32003,
        "UNAUTHORIZED": -32004,
        "SHUTTING_DOWN": -32005,
        "NOT_FOUND": -32010,
        "ALREADY_EXISTS": -32011,
        "IDEMPOTENCY_CONFLICT": -32012,
        "RUN_CONFLICT": -32013,
        "STALE_FENCE": -32014,
        "STORAGE_UNAVAILABLE": -32015,
        "CONFLICT": -32016,
        "QUOTA_EXCEEDED": -32017,
        "CONFIGURATION_FAILED": -32050,
    }


# Malformed frames, wrong params for every method, batch abuse and oversized
# frames are cases of the hostile corpus: properties/reliability/_hostile/
# FRAME_CASES, run on every transport by tests/hostile/.


async def test_error_keeps_the_request_id_when_it_is_valid(client: Client) -> None:
    reply = await client.raw(b'{"jsonrpc":"2.0","id":"abc","method":"nope"}')
    assert reply["id"] == "abc"
    assert reply["error"]["data"]["method"] == "nope"
    reply = await client.raw(b'{"jsonrpc":"2.0","id":{},"method":"nope"}')
    assert reply["id"] is None


async def test_invalid_params_names_the_path(client: Client) -> None:
    reply = await client.call("run.start", {"session_id": "s", "input": 3})
    assert reply["error"]["code"] == PARAMS
    assert reply["error"]["data"]["path"] == "params.input"
    reply = await client.call("session.list", {"bogus": 1})
    assert reply["error"]["code"] == PARAMS
    assert "bogus" in reply["error"]["message"]


async def test_an_mcp_client_is_told_to_use_serve_mcp(client: Client) -> None:
    """An MCP client's initialize (issue 21) used to get only "unknown field
    'protocolVersion'"; it now also names the command MCP clients need."""
    mcp_initialize = {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "mcp", "version": "2.3"},
    }
    reply = await client.call("initialize", mcp_initialize)
    assert reply["error"]["code"] == PARAMS
    assert "subagents serve --mcp" in reply["error"]["message"]
    assert "serve --mcp" in reply["error"]["data"]["hint"]
    assert reply["error"]["data"]["reason"] == "invalid_params"
    plain = await client.call("initialize", {"bogus": 1})
    assert "serve --mcp" not in plain["error"]["message"]


async def test_notifications_are_never_answered(client: Client) -> None:
    assert await client.raw(b'{"jsonrpc":"2.0","method":"diagnostics.get"}') is None
    assert await client.raw(b'{"jsonrpc":"2.0","method":"no.such.method"}') is None
    assert await client.raw(b'{"jsonrpc":"2.0","method":"session.get","params":1}') is None


async def test_batches(client: Client) -> None:
    reply = await client.raw(
        b'[{"jsonrpc":"2.0","id":1,"method":"diagnostics.get"},'
        b'{"jsonrpc":"2.0","method":"diagnostics.get"},'
        b'{"jsonrpc":"2.0","id":2,"method":"nope"},'
        b"7]"
    )
    assert [r.get("id") for r in reply] == [1, 2, None]
    assert "result" in reply[0]
    assert reply[1]["error"]["code"] == UNKNOWN
    assert reply[2]["error"]["code"] == INVALID
    # Notifications only: nothing comes back.
    assert await client.raw(b'[{"jsonrpc":"2.0","method":"diagnostics.get"}]') is None


async def test_oversized_frames(client: Client) -> None:
    limit = client.dispatcher.max_request_bytes
    frame = json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "run.start", "params": {"input": "x" * limit}}
    ).encode()
    reply = await client.raw(frame)
    assert reply["error"]["code"] == int(ErrorCode.REQUEST_TOO_LARGE)
    assert reply["error"]["data"]["limit"] == limit
    assert (await client.result("diagnostics.get"))["accepting"] is True


async def test_handler_crash_is_internal_error_and_redacted() -> None:
    class Empty:
        pass

    import msgspec

    class P(msgspec.Struct, forbid_unknown_fields=True):
        pass

    async def boom(params: object, conn: Connection) -> object:
        raise RuntimeError("secret-token-value /private/path")

    async def typed(params: object, conn: Connection) -> object:
        raise RpcError(ErrorCode.NOT_FOUND, "no such thing")

    dispatcher = Dispatcher({"boom": Binding(P, boom), "typed": Binding(P, typed)})
    client = Client(dispatcher)
    reply = await client.call("boom")
    assert reply["error"]["code"] == -32603
    assert "secret" not in json.dumps(reply)
    reply = await client.call("typed")
    assert reply["error"] == {"code": -32010, "message": "no such thing"}
    del Empty


async def test_store_errors_map_to_stable_codes(client: Client, service: HostService) -> None:
    missing = await client.call("session.get", {"session_id": "nope"})
    assert missing["error"]["code"] == -32010
    await client.result("session.create", {"session_id": "s1"})
    clash = await client.call("session.create", {"session_id": "s1", "metadata": {"a": "b"}})
    assert clash["error"]["code"] == -32011
    unknown_profile = await client.call("session.create", {"profile": "ghost"})
    assert unknown_profile["error"]["code"] == -32050
    assert unknown_profile["error"]["data"]["known"] == ["default", "research"]
    run = await client.call("run.status", {"session_id": "s1", "run_id": "run_x"})
    assert run["error"]["code"] == -32010
