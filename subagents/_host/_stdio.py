"""The stdio transport: one JSON-RPC frame per line in, one per line out.

stdout carries protocol frames only: while serving, file descriptor 1 is
re-pointed at stderr (so a stray ``print`` in a tool cannot corrupt the
stream) and frames go to a private duplicate of the original stdout. Logs go
to stderr. A line longer than ``max_request_bytes`` is discarded up to its
newline and answered with ``REQUEST_TOO_LARGE``; the host keeps serving.
Frames are handled concurrently (responses may come out of order, matched by
``id``); ``events.subscribe`` pushes ``events.event`` notifications on the same
stream. The host stops at end of input or after ``shutdown``.
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
    stream: BinaryIO, limit: int, loop: asyncio.AbstractEventLoop, queue: asyncio.Queue[Any]
) -> None:
    def post(item: Any) -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody is listening
            loop.call_soon_threadsafe(queue.put_nowait, item)

    try:
        while True:
            line = stream.readline(limit + 2)
            if not line:
                break
            if len(line) > limit + 1 or (len(line) == limit + 2 and not line.endswith(b"\n")):
                size = len(line)
                while not line.endswith(b"\n"):
                    line = stream.readline(1 << 16)
                    if not line:
                        break
                    size += len(line)
                post(_Oversized(size))
                continue
            frame = line.rstrip(b"\r\n")
            if frame.strip():
                post(frame)
    except (OSError, ValueError):
        pass
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
        args=(source, dispatcher.max_request_bytes, loop, queue),
        name="subagents-stdio-reader",
        daemon=True,  # blocked in read(); the process may exit while it waits
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
