"""MCP over stdio: the SDK's server on the host's bounded line transport.

Lines are read by the host's stdio reader (:func:`subagents._host._stdio._reader`:
a line over ``[host] max_request_bytes`` is discarded up to its newline) and
frames are written by its ordered outbox, with file descriptor 1 re-pointed at
stderr while serving. A line the SDK cannot take gets a typed JSON-RPC error
and the server keeps serving: oversized ``-32003`` (``reason: too_large``),
not JSON ``-32700``, JSON but not a JSON-RPC message ``-32600`` (also a request whose
``id`` is ``null`` or not a string or integer, which the SDK would drop unanswered). Unknown
methods and bad params are the SDK's own errors (``-32601``, ``-32602``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import threading
from typing import Any, BinaryIO

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.shared.message import SessionMessage

from .._host import HostService
from .._host._jsonrpc import ErrorCode, encode_frame, too_large
from .._host._stdio import _EOF, _Outbox, _Oversized, _reader


def _error_frame(request_id: Any, code: int, message: str, reason: str) -> bytes:
    error = {"code": code, "message": message, "data": {"reason": reason}}
    return encode_frame({"jsonrpc": "2.0", "id": request_id, "error": error})


INVALID = int(ErrorCode.INVALID_REQUEST)
_BAD_ID = "invalid request: id must be a string or an integer"


def _has_id(line: bytes) -> bool:
    """Whether a frame the SDK read as a notification has an ``id`` (``null``, ``true``...):
    a request with an unusable id, refused rather than silently dropped."""
    if b'"id"' not in line:
        return False
    try:
        value = json.loads(line)
    except ValueError:
        return False
    return isinstance(value, dict) and "id" in value


def _refusal(line: bytes) -> bytes:
    """The typed error for a line that is not one JSON-RPC message."""
    try:
        value = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return _error_frame(None, int(ErrorCode.PARSE_ERROR), "parse error: not JSON", "parse")
    request_id = value.get("id") if isinstance(value, dict) else None
    if not isinstance(request_id, str | int) or isinstance(request_id, bool):
        request_id = None
    return _error_frame(
        request_id,
        int(ErrorCode.INVALID_REQUEST),
        "invalid request: not a JSON-RPC 2.0 message",
        "invalid_request",
    )


def _admit(item: Any, limit: int, outbox: _Outbox) -> Any:
    """The message a line holds, or ``None`` once its typed refusal is queued."""
    if isinstance(item, _Oversized):
        error = too_large(item.size, limit).to_wire()
        outbox.send(encode_frame({"jsonrpc": "2.0", "id": None, "error": error}))
        return None
    try:
        message = types.jsonrpc_message_adapter.validate_json(item, by_name=False)
    except ValueError:
        outbox.send(_refusal(item))
        return None
    if isinstance(message, types.JSONRPCNotification) and _has_id(item):
        outbox.send(_error_frame(None, INVALID, _BAD_ID, "invalid_id"))
        return None
    return message


async def serve_mcp_stdio(
    service: HostService,
    server: Server[Any],
    stdin: BinaryIO | None = None,
    stdout: BinaryIO | None = None,
) -> None:
    """Serve ``server`` on stdin/stdout until end of input or shutdown; then close ``service``."""
    loop = asyncio.get_running_loop()
    own_out = stdout is None
    if stdout is None:
        sys.stdout.flush()
        out: BinaryIO = os.fdopen(os.dup(1), "wb", buffering=0)
        os.dup2(2, 1)  # stray writes to fd 1 now land on stderr
        sys.stdout = sys.stderr
    else:
        out = stdout
    limit = service.config.host.max_request_bytes

    def gone() -> None:  # the client went away (called on the writer thread)
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(service.shutdown_requested.set)

    outbox = _Outbox(out, service.config.host.stream_buffer_events, gone)
    lines: asyncio.Queue[Any] = asyncio.Queue()
    source = stdin if stdin is not None else sys.stdin.buffer
    threading.Thread(
        target=_reader,
        args=(source.fileno(), limit, loop, lines),
        name="subagents-mcp-stdio-reader",
        daemon=True,
    ).start()
    read_in, read_out = anyio.create_memory_object_stream[SessionMessage | Exception](64)
    write_in, write_out = anyio.create_memory_object_stream[SessionMessage](64)

    async def pump_in() -> None:
        async with read_in:
            while (item := await lines.get()) is not _EOF:
                message = _admit(item, limit, outbox)
                if message is not None:
                    await read_in.send(SessionMessage(message))

    async def pump_out() -> None:
        async with write_out:
            async for sent in write_out:
                text = sent.message.model_dump_json(by_alias=True, exclude_unset=True)
                outbox.send(text.encode("utf-8"))

    async def serve() -> None:
        await server.run(read_out, write_in, server.create_initialization_options())

    try:
        async with anyio.create_task_group() as group:
            group.start_soon(pump_out)
            group.start_soon(serve)

            async def stop_when_done() -> None:
                reading = asyncio.ensure_future(pump_in())
                stopping = asyncio.ensure_future(service.shutdown_requested.wait())
                await asyncio.wait({reading, stopping}, return_when=asyncio.FIRST_COMPLETED)
                for task in (reading, stopping):
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await task
                group.cancel_scope.cancel()

            group.start_soon(stop_when_done)
    finally:
        await service.close()
        await asyncio.to_thread(outbox.close, service.shutdown_timeout)
        if own_out:
            with contextlib.suppress(OSError):
                out.close()
