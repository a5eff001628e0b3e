"""``rpc.discover`` (OpenRPC service discovery) answers with the shipped document
on the dispatcher every transport uses, and over HTTP with the bearer token."""

from __future__ import annotations

from host_helpers import Client

from subagents._host import HostService
from subagents._host._openrpc import build_openrpc


async def test_rpc_discover_serves_the_openrpc_document(client: Client) -> None:
    document = await client.result("rpc.discover")
    assert document == build_openrpc()
    assert document["openrpc"].startswith("1.")
    assert "rpc.discover" not in [m["name"] for m in document["methods"]]
    again = await client.result("rpc.discover", {})
    assert again == document


async def test_rpc_discover_takes_no_params(client: Client, service: HostService) -> None:
    bad = await client.call("rpc.discover", {"verbose": True})
    assert bad["error"]["code"] == -32602
    assert "rpc.discover" not in service.bindings()  # the v1 table stays as documented
