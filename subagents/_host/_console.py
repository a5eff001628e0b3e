"""The web console of the HTTP host: static pages, a read-only JSON API and one cancel.

Routes (added to :func:`~._http.build_app`):

- ``GET /`` and ``GET /login``: the console page and the login page (static
  files of ``subagents/_host/console``, plain HTML, CSS and JavaScript, no build
  step and nothing from a CDN); ``GET /console/static/<name>``: their assets;
- ``POST /login`` ``{"code": ...}``: redeems a one-time login code for an
  ``HttpOnly`` ``SameSite=Strict`` session cookie. The CLI prints the code in a
  link's fragment (``/login#<code>``), which browsers never send to a server,
  so it is in no request line or log; the page posts it in a body and drops it
  from the address bar. The bearer token itself never reaches the browser;
- ``POST /console/login-link`` (bearer token): a fresh one-time login link;
- ``GET /console/api/sessions``, ``/console/api/session?session_id=&page=&run_id=``,
  ``/console/api/attempt?attempt_id=``, ``/console/api/artifact?attempt_id=``:
  what the views show (see :mod:`._console_views`), with the cookie or the token;
- ``POST /console/api/cancel`` ``{"attempt_id", "reason"}``: asks the attempt's
  session supervisor to cancel it, the same call and checks as the
  ``cancel_subagent`` tool (reason size, idempotency, terminal and unknown
  attempts). The trusted operator operations (take-over cancel) stay out.

Every console response carries a strict CSP (``'self'`` only, no inline script),
``nosniff``, ``no-referrer`` and ``frame-ancestors 'none'``; a ``Host`` header
that is not this server's loopback name or bind address is refused (DNS
rebinding), and so is a ``POST`` whose ``Origin`` is not this server.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from actors import BackgroundSubagentError
from storage import NotFound, StoreError

from ._console_views import attempt_view, session_view, sessions_view
from ._jsonrpc import RpcError
from ._service import HostService

STATIC_DIR = Path(__file__).with_name("console")
COOKIE = "subagents_console"
COOKIE_SECONDS = 12 * 3600
CODE_SECONDS = 600.0
MAX_CODES = 32
MAX_BODY = 16 * 1024
_LOOPBACK_NAMES = {"127.0.0.1", "localhost", "::1", "[::1]"}
_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".png": "image/png",
    ".svg": "image/svg+xml",
}
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
    "cross-origin-opener-policy": "same-origin",
    "cross-origin-resource-policy": "same-origin",
}

Handler = Callable[[Request], Awaitable[Response]]


class ConsoleAuth:
    """One-time login codes and the session cookies they buy.

    A cookie is ``<expiry>.<nonce>.<mac>``, the MAC keyed by the bearer token:
    stateless, so a page left open through a host restart (same token, e.g.
    ``$SUBAGENTS_HOST_TOKEN``) stays logged in; a new random token logs every
    browser out. Codes live in memory (hashed), once each, ``CODE_SECONDS``.
    ``now`` is the wall clock (cookie expiry), ``token`` the random source.
    """

    def __init__(
        self,
        token: str,
        *,
        now: Callable[[], float] = time.time,
        new_secret: Callable[[], str] = lambda: secrets.token_urlsafe(24),
    ) -> None:
        self._key = hashlib.sha256(b"subagents-console\0" + token.encode()).digest()
        self._now = now
        self._new_secret = new_secret
        self._codes: dict[bytes, float] = {}

    def mint(self) -> str:
        """A new one-time login code (the oldest is dropped past :data:`MAX_CODES`)."""
        now = self._now()
        self._codes = {h: exp for h, exp in self._codes.items() if exp > now}
        while len(self._codes) >= MAX_CODES:
            self._codes.pop(next(iter(self._codes)))
        code = self._new_secret()
        self._codes[hashlib.sha256(code.encode()).digest()] = now + CODE_SECONDS
        return code

    def login_link(self, base_url: str) -> str:
        """``<base_url>/login#<code>`` with a new code (the fragment is never sent)."""
        return f"{base_url.rstrip('/')}/login#{self.mint()}"

    def redeem(self, code: str) -> str | None:
        """The cookie value for a valid unused code (the code is spent), else ``None``."""
        expires = self._codes.pop(hashlib.sha256(code.encode()).digest(), None)
        now = self._now()
        if expires is None or expires <= now:
            return None
        payload = f"{int(now + COOKIE_SECONDS)}.{self._new_secret()}"
        return f"{payload}.{self._mac(payload)}"

    def _mac(self, payload: str) -> str:
        return hmac.new(self._key, payload.encode(), hashlib.sha256).hexdigest()

    def valid(self, cookie: str | None) -> bool:
        if not cookie or cookie.count(".") != 2 or len(cookie) > 200:
            return False
        payload, _, mac = cookie.rpartition(".")
        expiry = payload.split(".", 1)[0]
        if not hmac.compare_digest(mac.encode(), self._mac(payload).encode()):
            return False
        return expiry.isdigit() and int(expiry) > self._now()

    def cookie_ok(self, request: Request) -> bool:
        return host_ok(request) and self.valid(request.cookies.get(COOKIE))


def host_ok(request: Request) -> bool:
    """Whether ``Host`` names this server: a loopback name or the bound address, and
    the bound port (a DNS-rebound name is refused)."""
    server = request.scope.get("server")
    raw = request.headers.get("host", "")
    name, sep, port = raw.rpartition(":")
    if not sep or not port.isdigit():
        return False
    if server is None:
        return name in _LOOPBACK_NAMES
    address, bound = str(server[0]), int(server[1])
    allowed = {address, f"[{address}]"} | (_LOOPBACK_NAMES if _is_loopback(address) else set())
    return int(port) == bound and name in allowed


def _is_loopback(address: str) -> bool:
    return address.startswith("127.") or address in {"::1", "localhost"}


def origin_ok(request: Request) -> bool:
    """A state-changing request must come from a page of this server."""
    origin = request.headers.get("origin")
    return origin is not None and origin == f"http://{request.headers.get('host', '')}"


def _secure(response: Response, cache: bool = False) -> Response:
    response.headers.update(SECURITY_HEADERS)
    response.headers["cache-control"] = "no-cache" if cache else "no-store"
    return response


def _problem(status: int, message: str, reason: str) -> Response:
    return _secure(JSONResponse({"error": message, "reason": reason}, status_code=status))


class StaticFiles:
    """The console's files, read once from the package directory."""

    def __init__(self, directory: Path = STATIC_DIR) -> None:
        self.files: dict[str, tuple[bytes, str]] = {}
        for path in sorted(directory.iterdir()):
            if path.is_file() and path.suffix in _TYPES:
                self.files[path.name] = (path.read_bytes(), _TYPES[path.suffix])

    def response(self, name: str) -> Response:
        found = self.files.get(name)
        if found is None:
            return _problem(404, "no such file", "not_found")
        body, media = found
        return _secure(Response(body, media_type=media), cache=True)


async def _json_body(request: Request) -> dict[str, Any] | Response:
    body = await request.body()
    if len(body) > MAX_BODY:
        return _problem(413, f"the body is over {MAX_BODY} bytes", "too_large")
    try:
        value = json.loads(body)
    except ValueError:
        return _problem(400, "the body is not JSON", "invalid_json")
    if not isinstance(value, dict):
        return _problem(400, "the body must be a JSON object", "invalid_json")
    return value


def _page_number(raw: str | None) -> int:
    return int(raw) if raw is not None and raw.isascii() and raw.isdigit() and len(raw) < 7 else 0


class Console:
    """The console's routes over one service (see the module docstring).

    ``bearer_ok`` checks a request's ``Authorization`` header (the RPC's check).
    """

    def __init__(
        self, service: HostService, auth: ConsoleAuth, bearer_ok: Callable[[Request], bool]
    ) -> None:
        self.service = service
        self.auth = auth
        self.bearer_ok = bearer_ok
        self.static = StaticFiles()

    def routes(self) -> list[Route]:
        return [
            Route("/", self.page("index.html"), methods=["GET"]),
            Route("/login", self.page("login.html"), methods=["GET"]),
            Route("/login", self.login, methods=["POST"]),
            Route("/console/static/{name}", self.asset, methods=["GET"]),
            Route("/console/login-link", self.login_link, methods=["POST"]),
            Route("/console/api/sessions", self.reader(self.sessions), methods=["GET"]),
            Route("/console/api/session", self.reader(self.session), methods=["GET"]),
            Route("/console/api/attempt", self.reader(self.attempt), methods=["GET"]),
            Route("/console/api/artifact", self.reader(self.artifact), methods=["GET"]),
            Route("/console/api/cancel", self.cancel, methods=["POST"]),
        ]

    def allowed(self, request: Request) -> bool:
        """The console cookie (on a good ``Host``) or the bearer token."""
        return self.auth.cookie_ok(request) or self.bearer_ok(request)

    def page(self, name: str) -> Handler:
        async def serve(request: Request) -> Response:
            if not host_ok(request):
                return _problem(421, "this Host is not served here", "bad_host")
            return self.static.response(name)

        return serve

    async def asset(self, request: Request) -> Response:
        if not host_ok(request):
            return _problem(421, "this Host is not served here", "bad_host")
        return self.static.response(request.path_params["name"])

    async def login(self, request: Request) -> Response:
        if not host_ok(request) or not origin_ok(request):
            return _problem(403, "cross-origin login refused", "bad_origin")
        body = await _json_body(request)
        if isinstance(body, Response):
            return body
        code = body.get("code")
        cookie = self.auth.redeem(code) if isinstance(code, str) and len(code) < 200 else None
        if cookie is None:
            return _problem(401, "this login link was used already or has expired", "login_expired")
        response = _secure(Response(status_code=204))
        response.set_cookie(
            COOKIE, cookie, max_age=COOKIE_SECONDS, httponly=True, samesite="strict", path="/"
        )
        return response

    async def login_link(self, request: Request) -> Response:
        if not self.bearer_ok(request):
            return _problem(401, "missing or wrong bearer token", "auth")
        base = f"http://{request.headers.get('host', '')}"
        return _secure(JSONResponse({"url": self.auth.login_link(base)}))

    def reader(self, view: Callable[[Request], dict[str, Any] | Response]) -> Handler:
        async def read(request: Request) -> Response:
            if not host_ok(request) and not self.bearer_ok(request):
                return _problem(421, "this Host is not served here", "bad_host")
            if not self.allowed(request):
                return _problem(401, "log in with the link `subagents serve` printed", "auth")
            try:
                result = view(request)
            except NotFound:
                return _problem(404, "not found", "not_found")
            except StoreError:
                return _problem(503, "the store could not be read", "storage")
            if isinstance(result, Response):  # its own (stricter) CSP wins
                own = result.headers.get("content-security-policy")
                _secure(result)
                if own:
                    result.headers["content-security-policy"] = own
                return result
            return _secure(JSONResponse(result))

        return read

    def sessions(self, request: Request) -> dict[str, Any]:
        return sessions_view(self.service)

    def session(self, request: Request) -> dict[str, Any]:
        query = request.query_params
        return session_view(
            self.service,
            query.get("session_id", "")[:200],
            page=_page_number(query.get("page")),
            run_id=query.get("run_id"),
        )

    def attempt(self, request: Request) -> dict[str, Any]:
        return attempt_view(self.service, request.query_params.get("attempt_id", "")[:200])

    def artifact(self, request: Request) -> Response:
        """The full result (artifact or inline) as plain text, sandboxed."""
        store = self.service.store
        record = store.load_attempt(request.query_params.get("attempt_id", "")[:200])
        ref = record.result_ref
        if record.namespace_id != self.service.namespace_id or ref is None:
            raise NotFound("no result", attempt_id=record.attempt_id)
        if ref.artifact_ref:
            text = store.load_artifact(ref.artifact_ref).content
        else:
            text = ref.content if ref.content is not None else (ref.error or "")
        response = Response(text, media_type="text/plain; charset=utf-8")
        response.headers["content-security-policy"] = "sandbox; default-src 'none'"
        return response

    async def cancel(self, request: Request) -> Response:
        if not host_ok(request) or not origin_ok(request):
            return _problem(403, "cross-origin request refused", "bad_origin")
        if not self.allowed(request):
            return _problem(401, "log in with the link `subagents serve` printed", "auth")
        body = await _json_body(request)
        if isinstance(body, Response):
            return body
        attempt_id, reason = body.get("attempt_id"), body.get("reason", "cancelled in the console")
        if not isinstance(attempt_id, str) or not isinstance(reason, str) or len(attempt_id) > 200:
            return _problem(400, "attempt_id and reason must be strings", "invalid_params")
        try:
            record = self.service.store.load_attempt(attempt_id)
            if record.namespace_id != self.service.namespace_id:
                raise NotFound("no such attempt", attempt_id=attempt_id)
            supervisor = self.service.supervisor(record.parent_session_id)
            result = await supervisor.cancel(attempt_id, reason or None)
        except NotFound:
            return _problem(404, "no such attempt", "not_found")
        except RpcError as error:
            return _problem(503, error.message, "unavailable")
        except BackgroundSubagentError as error:
            message = getattr(error, "message", "") or type(error).__name__
            return _problem(409, str(message), type(error).__name__)
        return _secure(JSONResponse(result.to_value()))
