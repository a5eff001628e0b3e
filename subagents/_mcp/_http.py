"""MCP over streamable HTTP: the SDK's session manager behind the host's guards.

``POST/GET/DELETE /mcp`` is the SDK's streamable HTTP transport. In front of
it, :class:`McpGuard` refuses, each with a typed JSON-RPC error body (and
nothing reaches the SDK):

- a ``Host`` header that is not this server's address (``421``,
  ``reason: bad_host``): a DNS-rebinding page names its own host;
- an ``Origin`` header that is not a loopback origin (``403``,
  ``reason: bad_origin``): a browser can reach a local server;
- a missing or wrong bearer token (``401``, ``reason: auth``), the host's token;
- a declared body over ``[host] max_request_bytes`` (``413``, ``reason: too_large``).

The SDK's own DNS-rebinding protection stays on behind it. Each MCP session
(``Mcp-Session-Id``) gets its own :class:`~._bridge.McpBridge`; its durable
session is named by the ``Subagents-Session`` header of its first request,
else by ``--session``, else created on first use.
"""

from __future__ import annotations

import collections
import hmac
import json
from collections.abc import Callable
from typing import Any

from mcp.server.context import ServerRequestContext
from mcp.server.transport_security import TransportSecuritySettings
from starlette.types import ASGIApp, Receive, Scope, Send

from .._host import HostService
from .._host._config import is_loopback, resolve_bind
from .._host._http import _listen, _server, serve_until_shutdown
from .._host._jsonrpc import ErrorCode, too_large
from ._bridge import McpBridge
from ._server import build_server

MCP_PATH = "/mcp"
SESSION_HEADER = "subagents-session"
MCP_SESSION_ID = "mcp-session-id"
MAX_BRIDGES = 1024
LOOPBACK_ORIGIN_HOSTS = ("127.0.0.1", "localhost", "[::1]")


def _error_body(code: ErrorCode, message: str, data: dict[str, Any]) -> bytes:
    error = {"code": int(code), "message": message, "data": data}
    return json.dumps({"jsonrpc": "2.0", "id": None, "error": error}).encode()


class McpGuard:
    """The ASGI guard in front of the SDK app: Host, Origin, bearer token, body size."""

    def __init__(self, app: ASGIApp, *, token: str, hosts: set[str], max_bytes: int) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()
        self.hosts = hosts
        self.max_bytes = max_bytes

    def refusal(self, scope: Scope) -> tuple[int, bytes] | None:
        headers = {k.decode("latin-1").lower(): v for k, v in scope.get("headers", [])}
        host = headers.get("host", b"").decode("latin-1")
        if host not in self.hosts:
            return 421, _error_body(
                ErrorCode.UNAUTHORIZED,
                "the Host header does not name this server",
                {"reason": "bad_host", "host": host[:200]},
            )
        origin = headers.get("origin")
        if origin is not None and not _loopback_origin(origin.decode("latin-1")):
            return 403, _error_body(
                ErrorCode.UNAUTHORIZED,
                "cross-origin requests are refused",
                {"reason": "bad_origin", "origin": origin.decode("latin-1")[:200]},
            )
        if not hmac.compare_digest(headers.get("authorization", b""), self.expected):
            return 401, _error_body(
                ErrorCode.UNAUTHORIZED, "missing or wrong bearer token", {"reason": "auth"}
            )
        declared = headers.get("content-length", b"").decode("latin-1")
        if declared.isascii() and declared.isdigit():
            size = int(declared[:19])
            if size > self.max_bytes:
                error = too_large(size, self.max_bytes)
                return 413, _error_body(error.code, error.message, error.data or {})
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refused = self.refusal(scope)
        if refused is None:
            await self.app(scope, receive, send)
            return
        status, body = refused
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


def _loopback_origin(origin: str) -> bool:
    for scheme in ("http://", "https://"):
        if origin.startswith(scheme):
            rest = origin[len(scheme) :]
            return any(rest == h or rest.startswith(h + ":") for h in LOOPBACK_ORIGIN_HOSTS)
    return False


def _bridges(
    service: HostService, session: str | None, profile: str | None
) -> Callable[[ServerRequestContext[Any, Any]], McpBridge]:
    """One bridge per MCP session (its ``Mcp-Session-Id``) and durable session (the
    ``Subagents-Session`` header, else ``--session``, else a fresh one). At most
    :data:`MAX_BRIDGES` are kept (the oldest is forgotten; a named one comes back)."""
    bridges: collections.OrderedDict[str, McpBridge] = collections.OrderedDict()

    def bridge_for(ctx: ServerRequestContext[Any, Any]) -> McpBridge:
        request = ctx.request
        headers = getattr(request, "headers", None) or {}
        named = headers.get(SESSION_HEADER) or session
        # A 2026-07-28 client has no MCP session: the durable session it names is its key.
        key = f"{headers.get(MCP_SESSION_ID) or ''}\0{named or ''}"
        found = bridges.get(key)
        if found is None:
            found = bridges[key] = McpBridge(service, session_id=named, profile=profile)
            while len(bridges) > MAX_BRIDGES:
                bridges.popitem(last=False)
        return found

    return bridge_for


async def serve_mcp_http(
    service: HostService,
    token: str,
    *,
    port: int = 0,
    bind: str | None = None,
    operator_token: bool = False,
    session: str | None = None,
    profile: str | None = None,
    ready: Callable[[str], None] | None = None,
) -> None:
    """Serve MCP on ``http://bind:port/mcp`` until shutdown; then close the service."""
    try:
        address = resolve_bind(service.config, bind, operator_token=operator_token)
        sock = _listen(address, port)
    except BaseException:
        await service.close()
        raise
    try:
        host, actual = sock.getsockname()[:2]
        shown = f"[{host}]" if ":" in host else host
        hosts = {f"{shown}:{actual}"}
        if is_loopback(address):
            hosts |= {f"{h}:{actual}" for h in LOOPBACK_ORIGIN_HOSTS}
        mcp_server = build_server(service, _bridges(service, session, profile))
        security = TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=sorted(hosts),
            allowed_origins=[f"http://{h}:*" for h in LOOPBACK_ORIGIN_HOSTS],
        )
        app = mcp_server.streamable_http_app(
            streamable_http_path=MCP_PATH,
            transport_security=security,
            max_request_body_size=service.config.host.max_request_bytes,
            host=address,
        )
        guarded = McpGuard(
            app, token=token, hosts=hosts, max_bytes=service.config.host.max_request_bytes
        )
        server, _guard = _server(guarded, service)  # type: ignore[arg-type]
        async with mcp_server.session_manager.run():
            url = f"http://{shown}:{actual}{MCP_PATH}"
            await serve_until_shutdown(server, sock, service, url, ready)
    finally:
        sock.close()
        await service.close()
