"""The stdio transport: one JSON-RPC frame per line in, one per line out.

stdout carries protocol frames only: while serving, file descriptor 1 is
re-pointed at stderr (so a stray ``print`` in a tool cannot corrupt the
stream) and frames go to a private duplicate of the original stdout. Logs go
to stderr. A line longer than ``max_request_bytes`` is discarded up to its
newline and answered with ``REQUEST_TOO_LARGE``; the host keeps serving.
Frames are handled concurrently (responses may come out of order, matched by
``id``); ``events.subscribe`` pushes ``events.event`` notifications on the same
stream. The host stops at end of input, after ``shutdown`` or on SIGTERM/SIGINT.

Output goes through :class:`_Outbox`: one writer thread writes frames in order,
so a client that stops reading blocks that thread, never the host loop. Each
subscription may have at most ``[host] stream_buffer_events`` notifications
waiting to be written; one more and the subscription is dropped and an
``events.overflow`` notification (``last_seq``: the last event queued for it)
follows its last event; ``events.subscribe`` with ``after_seq = last_seq``
resumes from the committed log without a gap.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import queue
import sys
import threading
from collections.abc import Callable
from typing import Any, BinaryIO

from ._jsonrpc import Connection, Dispatcher, encode_frame, too_large
from ._methods import EVENT_NOTIFICATION, OVERFLOW_NOTIFICATION, HostEvent
from ._service import HostService

_EOF = object()


class _Outbox:
    """Frames to ``out``, written in order by one thread (``subagents-stdio-writer``).

    :meth:`send` never blocks. :meth:`notify` queues a subscription's frame
    unless ``capacity`` of its frames are still unwritten (then ``False``). A
    write error calls ``on_error`` once (from the writer thread) and discards
    the rest. :meth:`close` writes what is queued, then stops the thread.
    """

    def __init__(self, out: BinaryIO, capacity: int, on_error: Callable[[], None]) -> None:
        self._out = out
        self.capacity = capacity
        self._on_error = on_error
        self._queue: queue.SimpleQueue[tuple[bytes, str | None] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._pending: collections.Counter[str] = collections.Counter()
        self._failed = False
        self._thread = threading.Thread(
            target=self._run,
            name="subagents-stdio-writer",
            daemon=True,  # blocked in write() on a client that stopped reading
        )
        self._thread.start()

    def send(self, frame: bytes) -> None:
        self._queue.put((frame, None))

    def notify(self, subscription_id: str, frame: bytes) -> bool:
        with self._lock:
            if self._pending[subscription_id] >= self.capacity:
                return False
            self._pending[subscription_id] += 1
        self._queue.put((frame, subscription_id))
        return True

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            frame, subscription_id = item
            if not self._failed:
                try:
                    self._out.write(frame + b"\n")
                    self._out.flush()
                except (OSError, ValueError):
                    self._failed = True
                    self._on_error()
            if subscription_id is not None:
                with self._lock:
                    self._pending[subscription_id] -= 1
                    if self._pending[subscription_id] <= 0:
                        del self._pending[subscription_id]

    def close(self, timeout: float) -> None:
        """Write what is queued (at most ``timeout`` seconds), then stop the writer."""
        self._queue.put(None)
        self._thread.join(timeout)


def _bounded_push(
    service: HostService, conn: Connection, outbox: _Outbox
) -> Callable[[dict[str, Any]], None]:
    """The connection's push: event notifications count against their subscription's
    buffer; one over it drops the subscription with an ``events.overflow`` notice."""
    last_queued: dict[str, int] = {}
    dropped: set[str] = set()

    def drop(sub_id: str) -> None:
        service.remove_listener(sub_id)
        conn.subscriptions.discard(sub_id)

    def prune(current: str) -> None:
        """Forget ended subscriptions, so a connection that subscribes for months
        keeps state only for the live ones (and ``current``, maybe mid-replay)."""
        if len(last_queued) + len(dropped) <= 64 + 4 * len(conn.subscriptions):
            return
        keep = conn.subscriptions | {current}
        for sub_id in [s for s in last_queued if s not in keep]:
            del last_queued[sub_id]
        dropped.intersection_update(keep)

    def push(value: dict[str, Any]) -> None:
        params = value.get("params")
        if value.get("method") != EVENT_NOTIFICATION or not isinstance(params, dict):
            outbox.send(encode_frame(value))
            return
        sub_id, event = params.get("subscription_id"), params.get("event")
        if not isinstance(sub_id, str) or not isinstance(event, HostEvent):
            outbox.send(encode_frame(value))
            return
        prune(sub_id)
        if sub_id in dropped:  # cut during its own replay: registered after the cut
            drop(sub_id)
            return
        if outbox.notify(sub_id, encode_frame(value)):
            last_queued[sub_id] = event.seq
            return
        dropped.add(sub_id)
        drop(sub_id)
        notice = {
            "subscription_id": sub_id,
            "session_id": event.session_id,
            "last_seq": last_queued.pop(sub_id, event.seq - 1),
            "reason": "lagged",
        }
        frame = {"jsonrpc": "2.0", "method": OVERFLOW_NOTIFICATION, "params": notice}
        outbox.send(encode_frame(frame))

    return push


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
    frames: asyncio.Queue[Any] = asyncio.Queue()

    def gone() -> None:  # the client went away (called on the writer thread)
        with contextlib.suppress(RuntimeError):  # the loop already closed
            loop.call_soon_threadsafe(service.shutdown_requested.set)

    outbox = _Outbox(out, service.config.host.stream_buffer_events, gone)
    write = outbox.send
    conn = Connection(transport="stdio")
    conn.push = _bounded_push(service, conn, outbox)
    thread = threading.Thread(
        target=_reader,
        args=(fd, dispatcher.max_request_bytes, loop, frames),
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
            get = loop.create_task(frames.get())
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
        await asyncio.to_thread(outbox.close, service.shutdown_timeout)
        if own_out:
            with contextlib.suppress(OSError):
                out.close()
