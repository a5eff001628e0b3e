"""The loopback HTTP transport: ``POST /rpc`` and server-sent events.

- ``POST /rpc``: one JSON-RPC frame per request body; ``Authorization:
  Bearer <token>`` is required (401 with an ``UNAUTHORIZED`` JSON-RPC error
  otherwise); bodies over ``max_request_bytes`` get 413 with
  ``REQUEST_TOO_LARGE``; a notification-only frame gets 204.
- ``GET /events?session_id=...&after_seq=N`` (or ``Last-Event-ID``): the
  session's events as SSE (``id`` = seq, ``event`` = kind, ``data`` = the
  event as JSON), replayed from ``after_seq`` and then live. Same token.
- ``GET /health``: ``{"status": "ok"}`` without a token (a readiness probe).

Served by uvicorn on 127.0.0.1 only.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import socket
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from ._jsonrpc import Connection, Dispatcher, ErrorCode, RpcError, encode_frame, too_large
from ._methods import HostEvent
from ._service import HostService

LOOPBACK = "127.0.0.1"
_CLOSE = object()


def _error_response(error: RpcError, status: int) -> Response:
    body = {"jsonrpc": "2.0", "id": None, "error": error.to_wire()}
    return Response(encode_frame(body), status_code=status, media_type="application/json")


def build_app(service: HostService, dispatcher: Dispatcher, token: str) -> Starlette:
    """The ASGI app (usable in-process with ``httpx.ASGITransport``)."""
    expected = f"Bearer {token}".encode()
    streams: set[asyncio.Queue[Any]] = set()

    def authorized(request: Request) -> bool:
        given = request.headers.get("authorization", "").encode()
        return hmac.compare_digest(given, expected)

    def unauthorized() -> Response:
        return _error_response(
            RpcError(ErrorCode.UNAUTHORIZED, "missing or wrong bearer token", {"reason": "auth"}),
            401,
        )

    async def rpc(request: Request) -> Response:
        if not authorized(request):
            return unauthorized()
        limit = dispatcher.max_request_bytes
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            return _error_response(too_large(int(declared), limit), 413)
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > limit:
                return _error_response(too_large(len(body), limit), 413)
        conn = Connection(transport="http")
        reply = await dispatcher.handle(bytes(body), conn)
        if reply is None:
            return Response(status_code=204)
        return Response(reply, media_type="application/json")

    async def events(request: Request) -> Response:
        if not authorized(request):
            return unauthorized()
        session_id = request.query_params.get("session_id", "")
        raw_after = request.query_params.get("after_seq") or request.headers.get(
            "last-event-id", "0"
        )
        if not raw_after.isdigit():
            return _error_response(
                RpcError(ErrorCode.INVALID_PARAMS, "after_seq must be a non-negative integer"), 400
            )
        after = int(raw_after)
        try:
            service.session(session_id)
        except Exception:
            return _error_response(
                RpcError(ErrorCode.NOT_FOUND, f"no session {session_id[:100]!r}"), 404
            )
        queue: asyncio.Queue[Any] = asyncio.Queue()
        streams.add(queue)
        sub_id = service.add_listener(session_id, queue.put_nowait)

        async def stream() -> AsyncIterator[bytes]:
            last = after
            try:
                yield b": subscribed\n\n"
                for event in service.events.replay(session_id, after, 10_000):
                    last = event.seq
                    yield _sse(event)
                while True:
                    item = await queue.get()
                    if item is _CLOSE:
                        return
                    if isinstance(item, HostEvent) and item.seq > last:
                        last = item.seq
                        yield _sse(item)
            finally:
                service.remove_listener(sub_id)
                streams.discard(queue)

        return StreamingResponse(
            stream(),
            media_type="text/event-stream",
            headers={"cache-control": "no-cache", "x-accel-buffering": "no"},
        )

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    app = Starlette(
        routes=[
            Route("/rpc", rpc, methods=["POST"]),
            Route("/events", events, methods=["GET"]),
            Route("/health", health, methods=["GET"]),
        ]
    )

    def close_streams() -> None:
        for queue in list(streams):
            queue.put_nowait(_CLOSE)

    app.state.close_streams = close_streams
    return app


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling: the host's handlers stop the service
    first (uvicorn would re-raise SIGTERM after serving, killing the process
    before the service closed)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def _sse(event: HostEvent) -> bytes:
    return f"id: {event.seq}\nevent: {event.kind}\ndata: ".encode() + encode_frame(event) + b"\n\n"


async def serve_http(
    service: HostService,
    dispatcher: Dispatcher,
    token: str,
    *,
    port: int = 0,
    ready: Callable[[str], None] | None = None,
) -> None:
    """Serve on 127.0.0.1:``port`` (0: ephemeral) until ``shutdown``; then close the service."""
    app = build_app(service, dispatcher, token)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((LOOPBACK, port))
        actual = sock.getsockname()[1]
        config = uvicorn.Config(
            app,
            log_level="warning",
            lifespan="off",
            timeout_graceful_shutdown=2,
            access_log=False,
        )
        server = _Server(config)
        loop = asyncio.get_running_loop()
        serving = loop.create_task(server.serve(sockets=[sock]))
        deadline = loop.time() + 10.0
        while not server.started and not serving.done() and loop.time() < deadline:
            await asyncio.sleep(0.01)  # readiness probe with a deadline
        if serving.done():
            await serving
            return
        if ready is not None:
            ready(f"http://{LOOPBACK}:{actual}")
        stop = loop.create_task(service.shutdown_requested.wait())
        await asyncio.wait({serving, stop}, return_when=asyncio.FIRST_COMPLETED)
        app.state.close_streams()
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await serving
        stop.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await stop
    finally:
        sock.close()
        await service.close()
