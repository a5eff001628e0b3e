"""Bounded event streams: replay from the committed log, then a bounded live buffer.

Every subscriber (an SSE stream, an ``events.subscribe`` subscription) holds at
most ``capacity`` live events it has not consumed yet. One more and it is
*cut*: the buffer drops what it held and takes nothing more, and the stream
ends with the last sequence number it delivered (``stream.overflow`` over SSE,
an ``events.overflow`` notification on stdio). Nothing is lost: every event is
in the committed event log first, so the client resumes from its last
delivered sequence (``Last-Event-ID`` / ``after_seq``) without a gap.
"""

from __future__ import annotations

import asyncio
import collections
import re
import threading
from collections.abc import AsyncIterator

from ._methods import MAX_SEQ, HostEvent
from ._service import REPLAY_PAGE, HostService

_ASCII_SEQ = re.compile(r"[0-9]{1,19}")


def parse_seq(raw: str) -> int:
    """A sequence number from an HTTP value: ASCII digits only, at most :data:`MAX_SEQ`.

    Raises ``ValueError`` otherwise (negative, signs, spaces, non-ASCII digits such
    as Arabic-Indic numerals, anything over 2^63 - 1, huge strings).
    """
    if not _ASCII_SEQ.fullmatch(raw):
        raise ValueError("not a sequence number")
    value = int(raw)
    if value > MAX_SEQ:
        raise ValueError("sequence number out of range")
    return value


class EventBuffer:
    """The live events of one subscriber, at most ``capacity`` waiting.

    :meth:`push` is a service listener: call it on the loop the buffer was made
    on, or from any other thread (it then wakes the loop thread-safely). When a
    push finds ``capacity`` events waiting, the buffer is :attr:`overflowed`:
    it empties and ignores every later push, and :meth:`get` returns ``None``.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.overflowed = False
        self.closed = False
        self._loop = asyncio.get_running_loop()
        self._thread = threading.get_ident()
        self._lock = threading.Lock()
        self._items: collections.deque[HostEvent] = collections.deque()
        self._ready = asyncio.Event()

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def push(self, event: HostEvent) -> None:
        with self._lock:
            if self.overflowed or self.closed:
                return
            if len(self._items) >= self.capacity:
                self.overflowed = True
                self._items.clear()
            else:
                self._items.append(event)
        self._wake()

    def close(self) -> None:
        """End the stream (server shutdown): :meth:`get` returns ``None``."""
        with self._lock:
            self.closed = True
            self._items.clear()
        self._wake()

    def _wake(self) -> None:
        if threading.get_ident() == self._thread:
            self._ready.set()
        else:
            self._loop.call_soon_threadsafe(self._ready.set)

    async def get(self) -> HostEvent | None:
        """The next live event; ``None`` once overflowed or closed."""
        while True:
            with self._lock:
                if self.overflowed or self.closed:
                    return None
                if self._items:
                    return self._items.popleft()
                self._ready.clear()
            await self._ready.wait()


async def follow(
    service: HostService, session_id: str, after: int, buffer: EventBuffer
) -> AsyncIterator[HostEvent]:
    """The session's events after ``after``: the committed log page by page, then the
    live ``buffer`` (already listening), in order and without a gap or a repeat.

    Ends when the buffer is overflowed or closed; the last event yielded is the
    last delivered one. Log reads run on the calling (loop) thread.
    """
    last = after
    while True:
        page = service.events.replay(session_id, last, REPLAY_PAGE)
        for event in page:
            last = event.seq
            yield event
        if len(page) < REPLAY_PAGE:
            break
    while True:
        item = await buffer.get()
        if item is None:
            return
        if item.seq <= last:
            continue  # already read from the log while catching up
        if item.seq > last + 1:  # an append this host never heard of: fill from the log
            for event in service.events.replay(session_id, last, item.seq - last - 1):
                last = event.seq
                yield event
        last = item.seq
        yield item
