"""The ``jsonrpc`` family, in process: every hostile frame against the host's dispatcher
and its HTTP app (called over ASGI), judged by reply, store and probe."""

from __future__ import annotations

import json
from collections.abc import Iterator, MutableMapping
from dataclasses import dataclass
from typing import Any

import msgspec

from subagents._host._http import build_app
from subagents._host._jsonrpc import ErrorCode
from subagents._host._methods import ID_FIELDS, MAX_ID_BYTES, METHODS

from ._common import (
    HUGE,
    INVALID,
    MIB,
    PARAMS,
    PARSE,
    RESULT,
    TOO_LARGE,
    UNKNOWN,
    untyped,
)
from ._host import SEED_SESSION, HostileHost


@dataclass(frozen=True)
class FrameCase:
    """One raw JSON-RPC frame. ``code`` is the expected error code (:data:`RESULT`:
    a result; ``None``: no reply at all); ``reason`` the expected ``error.data.reason``
    when given; ``batch`` the expected codes of a batch reply, in order."""

    name: str
    frame: bytes
    code: int | None
    reason: str | None = None
    batch: tuple[int, ...] | None = None
    path: str | None = None
    """The expected ``error.data.path`` (the field the error names), when given."""


def rpc_frame(method: str, params: Any = None, *, request_id: Any = 1, **extra: Any) -> bytes:
    value: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        value["params"] = params
    value.update(extra)
    return json.dumps(value).encode()


_DIAG = {"jsonrpc": "2.0", "method": "diagnostics.get"}


def _wrong_value(kind: type[Any], name: str) -> Any:
    """A value of the wrong type for field ``name`` of params struct ``kind``."""
    for candidate in ([["list"]], {"o": 1}, 1.5, "text", True, None):
        try:
            msgspec.convert({name: candidate}, kind, strict=True)
        except msgspec.ValidationError as error:
            if f"$.{name}" in str(error):
                return candidate
    raise AssertionError(f"no wrong value for {kind.__name__}.{name}")


def _method_cases() -> Iterator[FrameCase]:
    """For every method: each params field with a wrong type, an unknown field, a
    reserved owner field, params as an array, and a duplicate of the method name
    with a trailing NUL."""
    for spec in METHODS:
        fields = msgspec.structs.fields(spec.params)
        for info in fields:
            wrong = _wrong_value(spec.params, info.name)
            yield FrameCase(
                f"{spec.name}-{info.name}-wrong-type",
                rpc_frame(spec.name, {info.name: wrong}),
                PARAMS,
                "invalid_params",
            )
        yield FrameCase(f"{spec.name}-unknown-field", rpc_frame(spec.name, {"bogus": 1}), PARAMS)
        yield FrameCase(
            f"{spec.name}-reserved-fencing",
            rpc_frame(spec.name, {"owner": "h", "fencing_generation": 99}),
            PARAMS,
        )
        yield FrameCase(f"{spec.name}-params-array", rpc_frame(spec.name, [1]), PARAMS)
        yield FrameCase(f"{spec.name}-nul-suffix", rpc_frame(spec.name + "\u0000", {}), UNKNOWN)


_OVERLONG_IDS = {
    "one-byte-over": "x" * (MAX_ID_BYTES + 1),
    "multibyte-over": "\u00e9" * (MAX_ID_BYTES // 2 + 1),  # fewer characters than bytes
    "over-lmdb-key-limit": "k" * 600,  # LMDB refuses keys over 511 bytes
}


def _overlong_id_cases() -> Iterator[FrameCase]:
    """For every method and id-like param: the id one byte over :data:`MAX_ID_BYTES`,
    over it in bytes but not in characters, and over LMDB's key limit; the other
    params are valid, so the reply must name the id (``-32602``, on every store)."""
    for spec in METHODS:
        fields = msgspec.structs.fields(spec.params)
        base: dict[str, Any] = {}
        for info in fields:
            if info.required:
                base[info.name] = SEED_SESSION if info.name == "session_id" else "x"
        for info in fields:
            if info.name not in ID_FIELDS:
                continue
            for variant, value in _OVERLONG_IDS.items():
                yield FrameCase(
                    f"{spec.name}-{info.name}-{variant}",
                    rpc_frame(spec.name, {**base, info.name: value}),
                    PARAMS,
                    "invalid_params",
                    path=f"params.{info.name}",
                )


_MALFORMED: tuple[FrameCase, ...] = (
    FrameCase("not-json", b"{nope", PARSE, "parse_error"),
    FrameCase("truncated", b'{"jsonrpc":"2.0","id":1,"method":"initialize"', PARSE),
    FrameCase("not-utf8", b'{"jsonrpc":"2.0","id":1,"method":"\xff"}', PARSE),
    FrameCase("overlong-utf8", b'{"jsonrpc":"2.0","id":1,"method":"\xc0\xaf"}', PARSE),
    FrameCase("utf16", rpc_frame("diagnostics.get").decode().encode("utf-16"), PARSE),
    FrameCase("raw-nul", b'{"jsonrpc":"2.0","id":1,"method":"diag\x00"}', PARSE),
    FrameCase("nul-only", b"\x00\x00\x00", PARSE),
    FrameCase("empty", b"", PARSE),
    FrameCase("two-objects", rpc_frame("diagnostics.get") + rpc_frame("diagnostics.get"), PARSE),
    FrameCase("trailing-garbage", rpc_frame("diagnostics.get") + b"x", PARSE),
    FrameCase("nan", b'{"jsonrpc":"2.0","id":NaN,"method":"diagnostics.get"}', PARSE),
    FrameCase("scalar", b"42", INVALID, "not_an_object"),
    FrameCase("string", b'"initialize"', INVALID),
    FrameCase("null", b"null", INVALID),
    FrameCase("true", b"true", INVALID),
    FrameCase("no-version", b'{"id":1,"method":"initialize"}', INVALID, "bad_version"),
    FrameCase("wrong-version", b'{"jsonrpc":"1.0","id":1,"method":"initialize"}', INVALID),
    FrameCase("version-number", b'{"jsonrpc":2.0,"id":1,"method":"initialize"}', INVALID),
    FrameCase("no-method", b'{"jsonrpc":"2.0","id":1}', INVALID, "bad_method"),
    FrameCase("method-type", b'{"jsonrpc":"2.0","id":1,"method":7}', INVALID),
    FrameCase("method-null", b'{"jsonrpc":"2.0","id":1,"method":null}', INVALID),
    FrameCase("empty-method", b'{"jsonrpc":"2.0","id":1,"method":""}', INVALID),
    FrameCase("id-object", b'{"jsonrpc":"2.0","id":{},"method":"initialize"}', INVALID, "bad_id"),
    FrameCase("id-array", b'{"jsonrpc":"2.0","id":[1],"method":"initialize"}', INVALID),
    FrameCase("id-bool", b'{"jsonrpc":"2.0","id":true,"method":"initialize"}', INVALID),
    FrameCase("id-float", b'{"jsonrpc":"2.0","id":1.5,"method":"initialize"}', INVALID),
    FrameCase(
        "id-huge-int", b'{"jsonrpc":"2.0","id":' + b"9" * 400 + b',"method":"nope"}', UNKNOWN
    ),
    FrameCase("extra-member", b'{"jsonrpc":"2.0","id":1,"method":"initialize","x":1}', INVALID),
    FrameCase(
        "duplicate-members", b'{"jsonrpc":"2.0","id":1,"method":"nope","method":"nope"}', UNKNOWN
    ),
    FrameCase("unknown-method", rpc_frame("session.nuke"), UNKNOWN, "method_not_found"),
    FrameCase("huge-method-name", rpc_frame("m" * 500_000), UNKNOWN),
    # rpc.discover is OpenRPC's discovery method (served); any other rpc.* name is not.
    FrameCase("rpc-internal-name", rpc_frame("rpc.shutdown"), UNKNOWN),
    FrameCase("attempts-not-public", rpc_frame("attempts.cancel"), UNKNOWN),
    FrameCase("escaped-nul-method", rpc_frame("diagnostics.get\u0000"), UNKNOWN),
    FrameCase("params-scalar", rpc_frame("session.get", 3), PARAMS),
    FrameCase("params-string", rpc_frame("session.get", "s"), PARAMS),
    FrameCase("params-missing", rpc_frame("session.get"), PARAMS),
    FrameCase(
        "params-null", b'{"jsonrpc":"2.0","id":1,"method":"session.get","params":null}', PARAMS
    ),
    FrameCase(
        "nested-type", rpc_frame("initialize", {"client": {"name": 1}}), PARAMS, "invalid_params"
    ),
    FrameCase(
        "bool-for-int", rpc_frame("events.replay", {"session_id": "s", "after_seq": True}), PARAMS
    ),
    FrameCase("metadata-not-text", rpc_frame("session.create", {"metadata": {"a": 1}}), PARAMS),
    FrameCase(
        "steer-reserved-attempt-id",
        rpc_frame(
            "run.steer", {"session_id": "s", "run_id": "r", "message": "m", "attempt_id": "x"}
        ),
        PARAMS,
    ),
    FrameCase(
        "escaped-nul-session",
        rpc_frame("session.get", {"session_id": "\u0000"}),
        int(ErrorCode.NOT_FOUND),
    ),
    FrameCase(
        "nul-in-new-session-id",
        rpc_frame("session.create", {"session_id": "a\u0000b"}),
        int(ErrorCode.CONFLICT),
    ),
    FrameCase(
        "unknown-profile",
        rpc_frame("session.create", {"profile": "\u0000"}),
        int(ErrorCode.CONFIGURATION_FAILED),
    ),
    FrameCase(
        "negative-after-seq",
        rpc_frame("events.replay", {"session_id": SEED_SESSION, "after_seq": -1}),
        PARAMS,
    ),
    FrameCase(
        "huge-limit",
        rpc_frame("events.replay", {"session_id": SEED_SESSION, "limit": 10**12}),
        PARAMS,
    ),
    FrameCase("protocol-version", rpc_frame("initialize", {"protocol_version": "999"}), PARAMS),
    FrameCase("deep-nesting", b"[" * 100_000 + b"]" * 100_000, PARSE, "too_deep"),
    FrameCase(
        "deep-params",
        b'{"jsonrpc":"2.0","id":1,"method":"session.create","params":'
        + b'{"a":' * 5000
        + b"1"
        + b"}" * 5000
        + b"}",
        PARSE,
        "too_deep",
    ),
    FrameCase(
        "over-the-frame-limit",
        rpc_frame("run.start", {"session_id": "s", "input": "x" * MIB}),
        TOO_LARGE,
        "too_large",
    ),
    FrameCase(
        "16-mib-frame",
        rpc_frame("run.start", {"session_id": "s", "input": "x" * HUGE}),
        TOO_LARGE,
        "too_large",
    ),
    # notifications are never answered, even when wrong
    FrameCase("notification", json.dumps(_DIAG).encode(), None),
    FrameCase("notification-unknown-method", b'{"jsonrpc":"2.0","method":"no.such"}', None),
    FrameCase(
        "notification-bad-params", b'{"jsonrpc":"2.0","method":"session.get","params":1}', None
    ),
    # batches
    FrameCase("empty-batch", b"[]", INVALID, "empty_batch"),
    FrameCase(
        "10,000-entry batch",
        json.dumps([{**_DIAG, "id": i} for i in range(10_000)]).encode(),
        INVALID,
        "batch_too_large",
    ),
    FrameCase(
        "batch-over-limit",
        json.dumps([{**_DIAG, "id": i} for i in range(33)]).encode(),
        INVALID,
        "batch_too_large",
    ),
    FrameCase(
        "batch-at-limit",
        json.dumps([{**_DIAG, "id": i} for i in range(32)]).encode(),
        RESULT,
        batch=(RESULT,) * 32,
    ),
    FrameCase("nested-empty-batch", b"[[]]", RESULT, batch=(INVALID,)),
    FrameCase(
        "nested-batch",
        b"[[" + json.dumps({**_DIAG, "id": 1}).encode() + b"]]",
        RESULT,
        batch=(INVALID,),
    ),
    FrameCase("batch-of-garbage", b'[1, "x", null, true, {}, []]', RESULT, batch=(INVALID,) * 6),
    FrameCase(
        "batch-mixed",
        b'[{"jsonrpc":"2.0","id":1,"method":"diagnostics.get"},'
        b'{"jsonrpc":"2.0","method":"diagnostics.get"},'
        b'{"jsonrpc":"2.0","id":2,"method":"nope"},7]',
        RESULT,
        batch=(RESULT, UNKNOWN, INVALID),
    ),
    FrameCase(
        "batch-duplicate-ids",
        json.dumps(
            [{**_DIAG, "id": 7}, {**_DIAG, "id": 7}, {"jsonrpc": "2.0", "id": 7, "method": "x"}]
        ).encode(),
        RESULT,
        batch=(RESULT, RESULT, UNKNOWN),
    ),
    FrameCase("batch-of-notifications", json.dumps([_DIAG, _DIAG]).encode(), None),
    FrameCase(
        "batch-of-shutdown-with-bad-params",
        json.dumps(
            [
                {"jsonrpc": "2.0", "id": i, "method": "shutdown", "params": {"now": True}}
                for i in range(3)
            ]
        ).encode(),
        RESULT,
        batch=(PARAMS,) * 3,
    ),
)

FRAME_CASES: tuple[FrameCase, ...] = (
    _MALFORMED + tuple(_method_cases()) + tuple(_overlong_id_cases())
)
"""Every hostile frame, sent on every transport (the stdio line framing skips the
frames a line cannot carry: empty and multi-line ones)."""


def judge_reply(where: str, case: FrameCase, reply: Any) -> list[str]:
    """Compare one decoded reply (``None``: nothing came back) with ``case``."""
    if case.code is None:
        return [] if reply is None else [f"{where}: a reply to a notification: {str(reply)[:200]}"]
    if reply is None:
        return [f"{where}: no reply, expected code {case.code}"]
    if "Traceback" in json.dumps(reply):
        return [f"{where}: a traceback in the reply"]
    if case.batch is not None:
        if not isinstance(reply, list) or len(reply) != len(case.batch):
            return [f"{where}: expected a batch reply of {len(case.batch)}: {str(reply)[:200]}"]
        codes = tuple(
            RESULT if isinstance(r, dict) and "result" in r else code_of(r) for r in reply
        )
        return (
            [] if codes == case.batch else [f"{where}: batch codes {codes}, expected {case.batch}"]
        )
    if not isinstance(reply, dict) or reply.get("jsonrpc") != "2.0":
        return [f"{where}: not a JSON-RPC reply: {str(reply)[:200]}"]
    if case.code == RESULT:
        return [] if "result" in reply else [f"{where}: expected a result: {str(reply)[:200]}"]
    found = []
    error = reply.get("error")
    if not isinstance(error, dict) or error.get("code") != case.code:
        return [f"{where}: expected error {case.code}, got {str(reply)[:200]}"]
    if not isinstance(error.get("message"), str):
        found.append(f"{where}: error without a message")
    if case.reason is not None and (error.get("data") or {}).get("reason") != case.reason:
        found.append(
            f"{where}: reason {(error.get('data') or {}).get('reason')!r}, expected {case.reason!r}"
        )
    if case.path is not None and (error.get("data") or {}).get("path") != case.path:
        found.append(
            f"{where}: error names {(error.get('data') or {}).get('path')!r}, "
            f"expected {case.path!r}"
        )
    return found


def code_of(reply: Any) -> int:
    try:
        return int(reply["error"]["code"])
    except (KeyError, TypeError, ValueError):
        return -1


async def check_frame(
    host: HostileHost, case: FrameCase, *, surface: str = "dispatcher"
) -> list[str]:
    """Send ``case`` to the host's dispatcher; judge the reply, the store and the probe."""
    where = f"jsonrpc[{surface}:{case.name}]"
    before = host.snapshot()
    try:
        raw = await host.dispatcher.handle(case.frame, host.conn)
        reply = None if raw is None else json.loads(raw)
    except BaseException as exc:
        return [untyped(where, exc)]
    found = judge_reply(where, case, reply)
    if host.snapshot() != before:
        found.append(f"{where}: the store changed")
    return found + await host.probe(where)


HTTP_TOKEN = "hostile-token"


class HttpApp:
    """The host's HTTP app, called in process over ASGI (no client library needed).

    :meth:`post` sends one ``POST /rpc`` body and returns the status and the
    decoded JSON reply (``None`` for an empty body).
    """

    def __init__(self, host: HostileHost) -> None:
        self.app = build_app(host.service, host.dispatcher, HTTP_TOKEN)

    async def post(self, body: bytes, *, token: str | None = HTTP_TOKEN) -> tuple[int, Any]:
        headers = [(b"content-type", b"application/json")]
        headers.append((b"content-length", str(len(body)).encode()))
        if token is not None:
            headers.append((b"authorization", f"Bearer {token}".encode()))
        scope: dict[str, Any] = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": "/rpc",
            "raw_path": b"/rpc",
            "query_string": b"",
            "root_path": "",
            "headers": headers,
            "client": ("127.0.0.1", 1),
            "server": ("127.0.0.1", 80),
        }
        pending = [{"type": "http.request", "body": body, "more_body": False}]
        status = 0
        chunks: list[bytes] = []

        async def receive() -> dict[str, Any]:
            return pending.pop() if pending else {"type": "http.disconnect"}

        async def send(message: MutableMapping[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            elif message["type"] == "http.response.body":
                chunks.append(bytes(message.get("body", b"")))

        await self.app(scope, receive, send)
        data = b"".join(chunks)
        return status, json.loads(data) if data else None


async def check_http_frame(host: HostileHost, app: HttpApp, case: FrameCase) -> list[str]:
    """POST ``case`` to the HTTP app: 200 with the reply, 204 for none, 413 when too large."""
    where = f"jsonrpc[http:{case.name}]"
    before = host.snapshot()
    try:
        status, reply = await app.post(case.frame)
    except BaseException as exc:
        return [untyped(where, exc)]
    found = judge_reply(where, case, reply)
    expected_status = 413 if case.code == TOO_LARGE else 204 if case.code is None else 200
    if status != expected_status:
        found.append(f"{where}: HTTP {status}, expected {expected_status}")
    if host.snapshot() != before:
        found.append(f"{where}: the store changed")
    return found + await host.probe(where)


async def check_http_unauthorized(host: HostileHost, app: HttpApp) -> list[str]:
    """A missing or wrong bearer token: 401 and ``UNAUTHORIZED``, nothing dispatched."""
    found = []
    for name, token in (("no-token", None), ("wrong-token", "nope")):
        where = f"jsonrpc[http:{name}]"
        try:
            status, reply = await app.post(
                rpc_frame("session.create", {"session_id": "intruder"}), token=token
            )
        except BaseException as exc:
            found.append(untyped(where, exc))
            continue
        if status != 401 or code_of(reply) != int(ErrorCode.UNAUTHORIZED):
            found.append(f"{where}: HTTP {status} {str(reply)[:100]}")
        found += await host.probe(where)
    seen = await host.call("session.get", {"session_id": "intruder"})
    if "result" in seen:
        found.append("jsonrpc[http:no-token]: an unauthorized request was dispatched")
    return found
