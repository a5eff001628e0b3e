"""The loopback HTTP transport: ``POST /rpc`` and server-sent events.

- ``POST /rpc``: one JSON-RPC frame per request body; ``Authorization:
  Bearer <token>`` is required (401 with an ``UNAUTHORIZED`` JSON-RPC error
  otherwise); bodies over ``max_request_bytes`` get 413 with
  ``REQUEST_TOO_LARGE``; a notification-only frame gets 204.
- ``GET /events?session_id=...&after_seq=N`` (or ``Last-Event-ID``, which
  wins): the session's events as SSE (``id`` = seq, ``event`` = kind, ``data``
  = the event as JSON), replayed from the committed log after N and then live.
  Same token. The stream opens with ``retry:`` (``[host] stream_retry_ms``),
  sends a ``: heartbeat`` comment every ``stream_heartbeat`` seconds, and ends
  with a ``stream.overflow`` event (``last_seq``) when its subscriber falls
  more than ``stream_buffer_events`` behind; reconnecting with
  ``Last-Event-ID: <last_seq>`` resumes without a gap. A sequence number that
  is not ASCII digits up to 2^63-1 gets 400 (``INVALID_PARAMS``).
- ``GET /health``: ``{"status": "ok"}`` without a token (a readiness probe).
- ``GET /`` and the routes of :mod:`._console`: the web console (its session
  cookie also opens ``GET /events``).

Served by uvicorn (h11) on ``[host] bind`` (127.0.0.1 by default) behind
:class:`~._httpguard.ConnectionGuard`: a request head deadline, a connection
cap under the fd limit, a keep-alive timeout, a body deadline (408), a header
size cap, and rate-limited logs.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import socket
from collections.abc import AsyncIterator, Callable, Iterator

import uvicorn
from sse_starlette import EventSourceResponse, ServerSentEvent
from sse_starlette.sse import SendTimeoutError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from ._config import is_loopback, resolve_bind
from ._console import Console, ConsoleAuth
from ._httpguard import ConnectionGuard, fd_budget, guarded_protocol, install_quiet_logs
from ._jsonrpc import Connection, Dispatcher, ErrorCode, RpcError, encode_frame, too_large
from ._methods import HostEvent
from ._service import HostService
from ._streams import EventBuffer, follow, parse_seq

log = logging.getLogger("subagents.host.http")

LOOPBACK = "127.0.0.1"
OVERFLOW_EVENT = "stream.overflow"
"""The SSE event that ends a stream whose subscriber fell behind (data: ``last_seq``)."""


def _error_response(error: RpcError, status: int) -> Response:
    body = {"jsonrpc": "2.0", "id": None, "error": error.to_wire()}
    return Response(encode_frame(body), status_code=status, media_type="application/json")


class _EventStream(EventSourceResponse):
    """sse-starlette's response, but a client that stopped reading (a write blocked
    past ``send_timeout``) ends its stream with one rate-limited log line instead of
    an ASGI traceback; uvicorn then closes the connection."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        except SendTimeoutError:
            log.warning("closed an SSE stream whose client stopped reading")


def _invalid_seq(field: str) -> Response:
    return _error_response(
        RpcError(
            ErrorCode.INVALID_PARAMS,
            f"{field} must be a sequence number: ASCII digits, at most 2^63-1",
            {"reason": "invalid_params", "field": field},
        ),
        400,
    )


def _start_seq(request: Request) -> int | Response:
    """Where an SSE stream starts: ``Last-Event-ID`` (a reconnecting client's resume
    point) wins over ``after_seq``; neither: 0. A bad value is a 400 response."""
    header = request.headers.get("last-event-id", "")
    if header:
        try:
            return parse_seq(header)
        except ValueError:
            return _invalid_seq("Last-Event-ID")
    query = request.query_params.get("after_seq")
    if query is None:
        return 0
    try:
        return parse_seq(query)
    except ValueError:
        return _invalid_seq("after_seq")


def _event_message(event: HostEvent) -> ServerSentEvent:
    return ServerSentEvent(
        data=encode_frame(event).decode(), event=event.kind, id=str(event.seq), sep="\n"
    )


async def _read_body(request: Request, limit: int, timeout: float) -> bytes | Response:
    """The request body; 413 past ``limit`` bytes, 408 when it takes over ``timeout`` s."""
    body = bytearray()
    try:
        async with asyncio.timeout(timeout):
            async for chunk in request.stream():
                body += chunk
                if len(body) > limit:
                    return _error_response(too_large(len(body), limit), 413)
    except TimeoutError:
        error = RpcError(
            ErrorCode.INVALID_REQUEST,
            f"the request body did not arrive within {timeout:g} s",
            {"reason": "body_timeout"},
        )
        return _error_response(error, 408)
    return bytes(body)


def _sse_response(
    service: HostService, session_id: str, after: int, streams: set[EventBuffer]
) -> Response:
    """The SSE stream of ``session_id`` after seq ``after`` (see the module docstring).

    The listener is registered when the stream starts, before the log is read (so
    nothing falls between the replay and the live events), and removed when it
    ends: a response that never streams (a HEAD request, a client gone before
    the first byte) registers nothing.
    """
    bounds = service.config.host

    async def stream() -> AsyncIterator[ServerSentEvent]:
        buffer = EventBuffer(bounds.stream_buffer_events)
        streams.add(buffer)
        sub_id = service.add_listener(session_id, buffer.push)
        last = after
        try:
            yield ServerSentEvent(comment="subscribed", retry=bounds.stream_retry_ms, sep="\n")
            async for event in follow(service, session_id, after, buffer):
                last = event.seq
                yield _event_message(event)
            if buffer.overflowed:
                data = {"session_id": session_id, "last_seq": last, "reason": "lagged"}
                yield ServerSentEvent(
                    data=encode_frame(data).decode(), event=OVERFLOW_EVENT, id=str(last), sep="\n"
                )
        finally:
            service.remove_listener(sub_id)
            streams.discard(buffer)

    return _EventStream(
        stream(),
        headers={"cache-control": "no-cache", "x-accel-buffering": "no"},
        ping=bounds.stream_heartbeat,
        ping_message_factory=lambda: ServerSentEvent(comment="heartbeat", sep="\n"),
        send_timeout=bounds.stream_send_timeout,
        sep="\n",
    )


def build_app(
    service: HostService, dispatcher: Dispatcher, token: str, console: ConsoleAuth | None = None
) -> Starlette:
    """The ASGI app (usable in-process with ``httpx.ASGITransport``).

    Bounds come from ``service.config.host``: ``stream_buffer_events``,
    ``stream_heartbeat``, ``stream_retry_ms``, ``stream_send_timeout`` (SSE) and
    ``http_body_timeout`` (``POST /rpc``). ``app.state.close_streams()`` ends every
    open SSE stream (server shutdown). ``console``: the web console's login (:mod:`._console`).
    """
    bounds = service.config.host
    expected = f"Bearer {token}".encode()
    streams: set[EventBuffer] = set()

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
        if (
            declared is not None
            and declared.isascii()
            and declared.isdigit()
            and (len(declared) > 19 or int(declared) > limit)
        ):
            return _error_response(too_large(int(declared[:19]), limit), 413)
        body = await _read_body(request, limit, bounds.http_body_timeout)
        if isinstance(body, Response):
            return body
        conn = Connection(transport="http")
        reply = await dispatcher.handle(body, conn)
        if reply is None:
            return Response(status_code=204)
        return Response(reply, media_type="application/json")

    web = Console(service, console or ConsoleAuth(token), authorized)

    async def events(request: Request) -> Response:
        if not authorized(request) and not web.auth.cookie_ok(request):
            return unauthorized()
        session_id = request.query_params.get("session_id", "")
        after = _start_seq(request)
        if isinstance(after, Response):
            return after
        try:
            service.session(session_id)
        except Exception:
            return _error_response(
                RpcError(ErrorCode.NOT_FOUND, f"no session {session_id[:100]!r}"), 404
            )
        return _sse_response(service, session_id, after, streams)

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    app = Starlette(
        routes=[
            Route("/rpc", rpc, methods=["POST"]),
            Route("/events", events, methods=["GET"]),
            Route("/health", health, methods=["GET"]),
            *web.routes(),
        ]
    )

    def close_streams() -> None:
        for buffer in list(streams):
            buffer.close()

    app.state.close_streams = close_streams
    return app


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling: the host's handlers stop the service
    first (uvicorn would re-raise SIGTERM after serving, killing the process
    before the service closed)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def _listen(bind: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in bind else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("localhost" if bind == "localhost" else bind, port))
    except BaseException:
        sock.close()
        raise
    return sock


def _server(app: Starlette, service: HostService) -> tuple[_Server, ConnectionGuard]:
    bounds = service.config.host
    cap, backlog = fd_budget(bounds.http_max_connections)
    guard = ConnectionGuard(
        max_connections=cap,
        header_timeout=bounds.http_header_timeout,
        log_interval=bounds.http_log_interval,
    )
    config = uvicorn.Config(
        app,
        http=guarded_protocol(guard),
        log_level="warning",
        lifespan="off",
        timeout_graceful_shutdown=2,
        timeout_keep_alive=bounds.http_keep_alive_timeout,  # type: ignore[arg-type]
        h11_max_incomplete_event_size=bounds.http_max_header_bytes,
        backlog=backlog,
        access_log=False,
    )
    return _Server(config), guard


async def serve_http(
    service: HostService,
    dispatcher: Dispatcher,
    token: str,
    *,
    port: int = 0,
    bind: str | None = None,
    operator_token: bool = False,
    ready: Callable[[str], None] | None = None,
    console: ConsoleAuth | None = None,
) -> None:
    """Serve on ``bind:port`` until ``shutdown``; then close the service.

    ``bind`` (default ``[host] bind``, 127.0.0.1) goes through
    :func:`resolve_bind`: a non-loopback address raises :class:`HostConfigError`
    unless ``operator_token`` says the operator chose ``token``, and is logged as
    a warning when allowed. ``port`` 0 is ephemeral. The service is closed on
    every exit path. ``console`` is the web console's login (see :func:`build_app`).
    """
    try:
        address = resolve_bind(service.config, bind, operator_token=operator_token)
        if not is_loopback(address):
            log.warning(
                "serving HTTP on %s, beyond this machine: every client that reaches it with "
                "the token can run agents; put TLS in front of it",
                address,
            )
        sock = _listen(address, port)
    except BaseException:
        await service.close()
        raise
    app = build_app(service, dispatcher, token, console)
    install_quiet_logs(service.config.host.http_log_interval)
    try:
        host, actual = sock.getsockname()[:2]
        server, _guard = _server(app, service)
        url = f"http://{f'[{host}]' if ':' in host else host}:{actual}"
        await serve_until_shutdown(
            server, sock, service, url, ready, before_exit=app.state.close_streams
        )
    finally:
        sock.close()
        await service.close()


async def serve_until_shutdown(
    server: uvicorn.Server,
    sock: socket.socket,
    service: HostService,
    url: str,
    ready: Callable[[str], None] | None,
    *,
    before_exit: Callable[[], None] | None = None,
) -> None:
    """Run ``server`` on ``sock`` until the service asks for shutdown.

    Once it listens (a readiness probe with a 10 s deadline), ``ready(url)`` is
    called on the event loop's thread; a server that ends before that returns at
    once (its error raised). At shutdown ``before_exit`` runs first (it must not
    raise), then the server is told to exit and awaited. Closing the socket and
    the service is the caller's.
    """
    loop = asyncio.get_running_loop()
    serving = loop.create_task(server.serve(sockets=[sock]))
    deadline = loop.time() + 10.0
    while not server.started and not serving.done() and loop.time() < deadline:
        await asyncio.sleep(0.01)  # readiness probe with a deadline
    if serving.done():
        await serving
        return
    if ready is not None:
        ready(url)
    stop = loop.create_task(service.shutdown_requested.wait())
    await asyncio.wait({serving, stop}, return_when=asyncio.FIRST_COMPLETED)
    if before_exit is not None:
        before_exit()
    server.should_exit = True
    with contextlib.suppress(asyncio.CancelledError):
        await serving
    stop.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await stop
