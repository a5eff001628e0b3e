"""A local fake model server: replays recorded provider responses on 127.0.0.1.

The server speaks HTTP/1.0 from a thread (stdlib ``ThreadingHTTPServer`` on
an ephemeral port). Tests script it with :class:`Reply` objects, usually
loaded from ``fixtures/<provider>/<name>.json`` (one JSON response: status,
headers, body) or ``<name>.sse`` (a recorded event stream, served verbatim
as ``text/event-stream``). Every request is recorded (path, headers, JSON
body) so tests can assert what the provider adapter sent.

``$API_KEY`` in a fixture is replaced by the key the client sent, the way a
real server echoes a bad key back in its 401 message: the redaction tests
rely on it. A reply with ``hang=True`` answers nothing until the server is
closed (the client's timeout fires first); ``hang_after=True`` sends its
body without a length and then keeps the connection open until the server
is closed or the client hangs up (a stream that never ends). With no reply left, the server
answers 599 with a message naming the request, so a short script fails
loudly instead of hanging.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).parent / "fixtures"


@dataclass(frozen=True)
class Reply:
    """One scripted HTTP response."""

    status: int = 200
    body: Any = None
    sse: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    hang: bool = False
    hang_after: bool = False

    @classmethod
    def fixture(cls, provider: str, name: str, *, stream: bool = False) -> Reply:
        """``fixtures/<provider>/<name>.sse`` when ``stream``, else ``<name>.json``."""
        if stream:
            return cls(sse=(FIXTURES / provider / f"{name}.sse").read_text())
        recorded = json.loads((FIXTURES / provider / f"{name}.json").read_text())
        return cls(
            status=recorded.get("status", 200),
            body=recorded["body"],
            headers=recorded.get("headers", {}),
        )


@dataclass(frozen=True)
class Recorded:
    """One request the server received."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any


class FakeProviderServer:
    """A scripted HTTP server on ``127.0.0.1:<ephemeral port>``; close it with :meth:`close`."""

    def __init__(self) -> None:
        self._replies: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._release = threading.Event()
        self.requests: list[Recorded] = []
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._httpd.daemon_threads = False
        self._httpd.block_on_close = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def script(self, *replies: Reply) -> FakeProviderServer:
        with self._lock:
            self._replies.extend(replies)
        return self

    def bodies(self) -> list[Any]:
        """The JSON body of every request so far, in order."""
        return [request.body for request in self.requests]

    def close(self) -> None:
        """Release hanging replies, stop serving and join every handler thread."""
        self._release.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()

    def _next(self, recorded: Recorded) -> Reply:
        with self._lock:
            self.requests.append(recorded)
            if self._replies:
                return self._replies.popleft()
        return Reply(
            status=599,
            body={"error": {"message": f"no scripted reply for {recorded.path}"}},
        )

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                headers = {key.lower(): value for key, value in self.headers.items()}
                recorded = Recorded(
                    method="POST",
                    path=self.path,
                    headers=headers,
                    body=json.loads(raw) if raw else None,
                )
                reply = server._next(recorded)
                if reply.hang:
                    server._release.wait()
                    return
                key = headers.get("x-api-key") or headers.get("authorization", "").removeprefix(
                    "Bearer "
                )
                if reply.sse is not None:
                    payload = reply.sse.replace("$API_KEY", key).encode()
                    content_type = "text/event-stream"
                else:
                    payload = json.dumps(reply.body).replace("$API_KEY", key).encode()
                    content_type = "application/json"
                self.send_response(reply.status)
                self.send_header("Content-Type", content_type)
                if not reply.hang_after:
                    self.send_header("Content-Length", str(len(payload)))
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(payload)
                if reply.hang_after:
                    self.wfile.flush()
                    server._release.wait()

            def log_message(self, format: str, *args: Any) -> None:
                pass  # keep test output clean

        return Handler


ServerFactory = Callable[[], FakeProviderServer]
