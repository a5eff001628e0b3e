"""A gate a child waits on until a test or a machine opens it (from any thread)."""

from __future__ import annotations

import asyncio
import threading


class Gate:
    """Opened from any thread, awaited by a child on the supervisor's loop.

    ``entered`` is set as soon as a child reaches :meth:`wait`, so a driver can
    wait for "the child is running" without polling. :meth:`open` releases every
    waiter and every later one; it is idempotent.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._opened = False
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []
        self.entered = threading.Event()

    async def wait(self) -> None:
        event = asyncio.Event()
        with self._lock:
            opened = self._opened
            if not opened:
                self._waiters.append((asyncio.get_running_loop(), event))
        self.entered.set()
        if not opened:
            await event.wait()

    def open(self) -> None:
        with self._lock:
            self._opened = True
            waiters, self._waiters = self._waiters, []
        for loop, event in waiters:
            # The waiter's loop owns its event: set it from that loop's thread.
            loop.call_soon_threadsafe(event.set)
