"""The stdio transport: one JSON-RPC frame per line in, one per line out.

stdout carries protocol frames only: while serving, file descriptor 1 is
re-pointed at stderr (so a stray ``print`` in a tool cannot corrupt the
stream) and frames go to a private duplicate of the original stdout. Logs go
to stderr. A line longer than ``max_request_bytes`` is discarded up to its
newline and answered with ``REQUEST_TOO_LARGE``; the host keeps serving.
Frames are handled concurrently (responses may come out of order, matched by
``id``); ``events.subscribe`` pushes ``events.event`` notifications on the same
stream. The host stops at end of input, after ``shutdown`` or on SIGTERM/SIGINT.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import threading
from typing import Any, BinaryIO

from ._jsonrpc import Connection, Dispatcher, encode_frame, too_large
from ._service import HostService

_EOF = object()


class _Oversized:
    def __init__(self, size: int) -> None:
        self.size = size


def _reader(
    fd: int, limit: int, loop: asyncio.AbstractEventLoop, queue: asyncio.Queue[Any]
) -> None:
    """Split the bytes of ``fd`` into lines (raw ``os.read``: no buffered-reader lock,
    so the interpreter may exit while this daemon thread waits for input)."""

    def post(item: Any) -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody is listening
            loop.call_soon_threadsafe(queue.put_nowait, item)

    def frame(line: bytes) -> None:
        line = line.rstrip(b"\r")
        if len(line) > limit:
            post(_Oversized(len(line)))
        elif line.strip():
            post(line)

    buf = bytearray()
    skipped = 0  # bytes of an oversized line being discarded, 0 when none
    try:
        while True:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            buf += chunk
            while True:
                end = buf.find(b"\n")
                if end < 0:
                    if len(buf) > limit:  # never hold more than one frame's worth
                        skipped += len(buf)
                        buf.clear()
                    break
                line = bytes(buf[:end])
                del buf[: end + 1]
                if skipped:
                    post(_Oversized(skipped + len(line)))
                    skipped = 0
                else:
                    frame(line)
    except OSError:
        pass
    if skipped:
        post(_Oversized(skipped + len(buf)))
    elif buf:
        frame(bytes(buf))
    post(_EOF)


async def serve_stdio(
    service: HostService,
    dispatcher: Dispatcher,
    stdin: BinaryIO | None = None,
    stdout: BinaryIO | None = None,
) -> None:
    """Serve until end of input or ``shutdown``; then close the service."""
    loop = asyncio.get_running_loop()
    if stdout is None:
        sys.stdout.flush()
        out: BinaryIO = os.fdopen(os.dup(1), "wb", buffering=0)
        os.dup2(2, 1)  # stray writes to fd 1 now land on stderr
        sys.stdout = sys.stderr
        own_out = True
    else:
        out = stdout
        own_out = False
    source = stdin if stdin is not None else sys.stdin.buffer
    fd = source.fileno()
    queue: asyncio.Queue[Any] = asyncio.Queue()

    def write(frame: bytes) -> None:
        try:
            out.write(frame + b"\n")
            out.flush()
        except (OSError, ValueError):
            service.shutdown_requested.set()  # the client went away

    conn = Connection(transport="stdio", push=lambda value: write(encode_frame(value)))
    thread = threading.Thread(
        target=_reader,
        args=(fd, dispatcher.max_request_bytes, loop, queue),
        name="subagents-stdio-reader",
        daemon=True,  # blocked in os.read(); the process may exit while it waits
    )
    thread.start()
    inflight: set[asyncio.Task[None]] = set()

    async def handle(frame: bytes) -> None:
        reply = await dispatcher.handle(frame, conn)
        if reply is not None:
            write(reply)

    stop = loop.create_task(service.shutdown_requested.wait())
    try:
        while True:
            get = loop.create_task(queue.get())
            done, _ = await asyncio.wait({get, stop}, return_when=asyncio.FIRST_COMPLETED)
            if get not in done:
                get.cancel()
                break
            item = get.result()
            if item is _EOF:
                break
            if isinstance(item, _Oversized):
                write(
                    encode_frame(
                        {
                            "jsonrpc": "2.0",
                            "id": None,
                            "error": too_large(item.size, dispatcher.max_request_bytes).to_wire(),
                        }
                    )
                )
                continue
            task = loop.create_task(handle(item))
            inflight.add(task)
            task.add_done_callback(inflight.discard)
        if inflight:
            await asyncio.wait(set(inflight), timeout=service.shutdown_timeout)
    finally:
        stop.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await stop
        service.disconnect(conn)
        await service.close()
        if own_out:
            with contextlib.suppress(OSError):
                out.close()
