"""JSON-RPC 2.0 framing for the host: parsing, dispatch, stable error codes.

One :class:`Dispatcher` serves every transport. It takes the raw bytes of one
frame (a request, a notification or a batch) and returns the raw response
bytes (``None`` when nothing is to be sent back: notifications only). Bad
input never escapes as an exception: it becomes a JSON-RPC error with a code
from :data:`ERROR_CODES`, and the dispatcher keeps serving.

Error codes (stable; ``data.reason`` adds a machine-readable detail):

=======  =======================  ==================================================
code     name                     meaning
=======  =======================  ==================================================
-32700   PARSE_ERROR              the frame is not UTF-8 JSON
-32600   INVALID_REQUEST          not a JSON-RPC 2.0 request object (or a bad batch)
-32601   METHOD_NOT_FOUND         no such method in the v1 table
-32602   INVALID_PARAMS           params missing, of the wrong type, or unknown fields
-32603   INTERNAL_ERROR           a bug in the host; details go to the host's log only
-32000   SERVER_ERROR             durable storage or the runtime failed (redacted)
-32002   UNSUPPORTED_FEATURE      the method needs what this transport lacks
-32003   REQUEST_TOO_LARGE        the frame exceeds ``max_request_bytes``
-32004   UNAUTHORIZED             missing or wrong bearer token (HTTP)
-32005   SHUTTING_DOWN            the host stopped admitting work
-32010   NOT_FOUND                no such session, run, profile or subscription
-32011   ALREADY_EXISTS           a create collided with a different record
-32012   IDEMPOTENCY_CONFLICT     an idempotency key reused with other params
-32013   RUN_CONFLICT             another run of the session is live
-32014   STALE_FENCE              the caller no longer owns the fenced lease
-32015   STORAGE_UNAVAILABLE      transient storage failure: retry
-32016   CONFLICT                 the record's state forbids it (e.g. not active)
-32017   QUOTA_EXCEEDED           a limit was reached
-32050   CONFIGURATION_FAILED     unknown profile or unusable configuration
=======  =======================  ==================================================
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import msgspec

from statemachines import SubagentsError

log = logging.getLogger("subagents.host")

JSONRPC_VERSION = "2.0"


class ErrorCode(IntEnum):
    """Every error code the host sends (see the module table)."""

    PARSE_ERROR = -32700
    INVALID_REQUEST = -32600
    METHOD_NOT_FOUND = -32601
    INVALID_PARAMS = -32602
    INTERNAL_ERROR = -32603
    SERVER_ERROR = -32000
    UNSUPPORTED_FEATURE = -32002
    REQUEST_TOO_LARGE = -32003
    UNAUTHORIZED = -32004
    SHUTTING_DOWN = -32005
    NOT_FOUND = -32010
    ALREADY_EXISTS = -32011
    IDEMPOTENCY_CONFLICT = -32012
    RUN_CONFLICT = -32013
    STALE_FENCE = -32014
    STORAGE_UNAVAILABLE = -32015
    CONFLICT = -32016
    QUOTA_EXCEEDED = -32017
    CONFIGURATION_FAILED = -32050


ERROR_CODES: dict[str, int] = {code.name: int(code) for code in ErrorCode}
"""The stable table: name → code (documented in the module docstring and openrpc.json)."""


class RpcError(SubagentsError):
    """A JSON-RPC error a method handler raises on purpose.

    ``code`` is an :class:`ErrorCode`; ``message`` is safe to show a client
    (never a path, a key or a stack); ``data`` is optional structured detail.
    Both are keyword fields too; ``str(error)`` is the message alone.
    """

    code: ErrorCode
    data: dict[str, Any] | None

    def __init__(
        self, code: ErrorCode, message: str, data: Mapping[str, Any] | None = None
    ) -> None:
        super().__init__(
            message, code=ErrorCode(code), data=dict(data) if data is not None else None
        )

    def __str__(self) -> str:
        return self.message

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.code, self.message, self.data))

    def to_wire(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": int(self.code), "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return error

    def __repr__(self) -> str:
        return f"RpcError({self.code.name}, {self.message!r})"


@dataclass
class Connection:
    """Per-connection state handed to every handler.

    ``push`` sends a server notification on this connection (stdio); it is
    ``None`` where the transport cannot push (HTTP ``POST /rpc``: events go
    over SSE). ``subscriptions`` holds this connection's event subscription
    ids, so they are dropped when it closes.
    """

    transport: str
    push: Callable[[dict[str, Any]], None] | None = None
    subscriptions: set[str] = field(default_factory=set)
    initialized: bool = False


Handler = Callable[[Any, Connection], Awaitable[Any]]


@dataclass(frozen=True)
class Binding:
    """One method: its params type (a msgspec Struct) and its handler."""

    params: type[Any]
    handler: Handler


RequestId = str | int | None

_decoder = msgspec.json.Decoder()
_encoder = msgspec.json.Encoder()


def _error_frame(request_id: RequestId, error: RpcError) -> dict[str, Any]:
    return {"jsonrpc": JSONRPC_VERSION, "id": request_id, "error": error.to_wire()}


def encode_frame(frame: Any) -> bytes:
    """Compact JSON (no newline inside), for one stdio line or one HTTP body."""
    return _encoder.encode(frame)


def _invalid(reason: str, message: str) -> RpcError:
    return RpcError(ErrorCode.INVALID_REQUEST, message, {"reason": reason})


def too_large(size: int, limit: int) -> RpcError:
    return RpcError(
        ErrorCode.REQUEST_TOO_LARGE,
        f"request of {size} bytes exceeds the limit of {limit} bytes",
        {"reason": "too_large", "size_bytes": size, "limit": limit},
    )


def _params_error(exc: msgspec.ValidationError) -> RpcError:
    text = str(exc)
    path = "$"
    marker = " - at `"
    if marker in text:
        text, _, rest = text.partition(marker)
        path = rest.rstrip("`")
    where = path.replace("$", "params", 1)
    return RpcError(
        ErrorCode.INVALID_PARAMS,
        f"invalid params: {text} at {where}",
        {"reason": "invalid_params", "path": where, "detail": text},
    )


def _mcp_client_error(exc: msgspec.ValidationError) -> RpcError:
    """An MCP client's ``initialize`` (it carries ``protocolVersion``) sent to the
    JSON-RPC host: the same refusal, with the command MCP clients need instead."""
    error = _params_error(exc)
    hint = "this is the subagents JSON-RPC host; MCP clients use `subagents serve --mcp`"
    data = {**(error.data or {}), "hint": hint}
    return RpcError(error.code, f"{error.message} ({hint})", data)


class Dispatcher:
    """Parses frames, validates requests and params, calls handlers, frames replies.

    ``max_request_bytes`` bounds one frame; ``max_batch`` bounds the requests
    in one batch (a bigger batch is refused whole, with one error). Handler
    exceptions other than :class:`RpcError` become ``INTERNAL_ERROR`` with a
    redacted message; the traceback goes to the host's log (stderr).
    """

    def __init__(
        self,
        methods: Mapping[str, Binding],
        *,
        max_request_bytes: int = 1 << 20,
        max_batch: int = 32,
        map_error: Callable[[Exception], RpcError | None] | None = None,
    ) -> None:
        self.methods = dict(methods)
        self.max_request_bytes = max_request_bytes
        self.max_batch = max_batch
        self._map_error = map_error

    async def handle(self, raw: bytes, conn: Connection) -> bytes | None:
        """One frame in, the response frame out (``None``: nothing to send)."""
        frame = await self.handle_value(raw, conn)
        return None if frame is None else encode_frame(frame)

    async def handle_value(self, raw: bytes, conn: Connection) -> Any:
        if len(raw) > self.max_request_bytes:
            return _error_frame(None, too_large(len(raw), self.max_request_bytes))
        try:
            message = _decoder.decode(raw)
        except msgspec.DecodeError as exc:
            return _error_frame(
                None,
                RpcError(
                    ErrorCode.PARSE_ERROR,
                    "parse error: the frame is not valid JSON",
                    {"reason": "parse_error", "detail": str(exc)},
                ),
            )
        except RecursionError:
            # msgspec gives up on very deep nesting with RecursionError, not DecodeError.
            return _error_frame(
                None,
                RpcError(
                    ErrorCode.PARSE_ERROR,
                    "parse error: the frame is nested too deeply",
                    {"reason": "too_deep"},
                ),
            )
        if isinstance(message, list):
            if not message:
                return _error_frame(None, _invalid("empty_batch", "invalid request: empty batch"))
            if len(message) > self.max_batch:
                return _error_frame(
                    None,
                    _invalid(
                        "batch_too_large",
                        f"invalid request: batch of {len(message)} requests exceeds the "
                        f"limit of {self.max_batch}",
                    ),
                )
            replies = []
            for item in message:
                reply = await self._one(item, conn)
                if reply is not None:
                    replies.append(reply)
            return replies or None
        return await self._one(message, conn)

    async def _one(self, message: Any, conn: Connection) -> dict[str, Any] | None:
        if not isinstance(message, dict):
            return _error_frame(
                None, _invalid("not_an_object", "invalid request: expected a JSON object")
            )
        has_id = "id" in message
        request_id = message.get("id")
        if (request_id is not None and not isinstance(request_id, str | int)) or isinstance(
            request_id, bool
        ):
            return _error_frame(
                None, _invalid("bad_id", "invalid request: id must be a string, an integer or null")
            )
        if message.get("jsonrpc") != JSONRPC_VERSION:
            return _error_frame(
                request_id, _invalid("bad_version", 'invalid request: "jsonrpc" must be "2.0"')
            )
        unknown = sorted(set(message) - {"jsonrpc", "id", "method", "params"})
        if unknown:
            return _error_frame(
                request_id,
                _invalid("unknown_member", f"invalid request: unknown member {unknown[0]!r}"),
            )
        method = message.get("method")
        if not isinstance(method, str) or not method:
            return _error_frame(
                request_id, _invalid("bad_method", "invalid request: method must be a string")
            )
        result_or_error = await self._call(method, message.get("params"), "params" in message, conn)
        if not has_id:
            return None  # a notification: never answered, even on error
        if isinstance(result_or_error, RpcError):
            return _error_frame(request_id, result_or_error)
        return {"jsonrpc": JSONRPC_VERSION, "id": request_id, "result": result_or_error}

    async def _call(self, method: str, params: Any, has_params: bool, conn: Connection) -> Any:
        binding = self.methods.get(method)
        if binding is None:
            return RpcError(
                ErrorCode.METHOD_NOT_FOUND,
                f"method not found: {method[:100]!r}",
                {"reason": "method_not_found", "method": method[:100]},
            )
        if not has_params or params is None:
            params = {}
        if not isinstance(params, dict):
            return RpcError(
                ErrorCode.INVALID_PARAMS,
                "invalid params: params must be an object (by-name parameters only)",
                {"reason": "invalid_params", "path": "params"},
            )
        try:
            typed = msgspec.convert(params, binding.params, strict=True)
        except msgspec.ValidationError as exc:
            if method == "initialize" and "protocolVersion" in params:
                return _mcp_client_error(exc)
            return _params_error(exc)
        try:
            result = await binding.handler(typed, conn)
        except RpcError as exc:
            return exc
        except Exception as exc:
            mapped = self._map_error(exc) if self._map_error is not None else None
            if mapped is not None:
                return mapped
            log.exception("internal error in %s", method)
            return RpcError(
                ErrorCode.INTERNAL_ERROR,
                "internal error; see the host log",
                {"reason": "internal_error", "method": method},
            )
        return msgspec.to_builtins(result)
