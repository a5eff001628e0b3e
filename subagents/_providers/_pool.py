"""One pooled SDK client per provider model and event loop.

An SDK's async client holds an HTTP connection pool bound to the event loop
that opened its connections: it cannot serve another loop, and a loop that
ends with the client open leaks its sockets. So the pool keeps one client
per loop (per API key: a rotated key gets a new client), reused by every
request on that loop, and closes it at the first of:

- :meth:`ClientPool.aclose` / :meth:`ClientPool.close`;
- the pool being dropped unclosed (a model built per run and forgotten): its
  clients are closed on their loops by a task the garbage collector's
  finalizer schedules, so a long-lived loop does not pile them up;
- the loop shutting down its async generators (``asyncio.run``, pytest's
  runners and the actors' loop threads do): each client is held by a tiny
  async generator whose ``finally`` closes it, so a forgotten ``close()``
  leaks nothing once the loop ends. The holders are kept alive (strongly,
  per loop) until then: a holder dropped with its pool would otherwise be
  finalized by the garbage collector, which only schedules its close, and
  a loop that shuts down before that close runs leaves its sockets open.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import weakref
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from typing import Any

#: How long :meth:`ClientPool.close` waits for a client on another thread's loop.
CLOSE_TIMEOUT = 5.0

# Release tasks scheduled for dropped pools, kept until done (a task the loop
# only references weakly could be collected before it ran).
_RELEASING: set[asyncio.Task[None]] = set()

# Every open holder, by loop, until the loop shuts it down or a pool closes it.
_HELD: dict[asyncio.AbstractEventLoop, set[AsyncGenerator[None, None]]] = {}
_HELD_LOCK = threading.Lock()


def _hold(loop: asyncio.AbstractEventLoop, holder: AsyncGenerator[None, None]) -> None:
    with _HELD_LOCK:
        for closed in [key for key in _HELD if key.is_closed()]:
            del _HELD[closed]
        _HELD.setdefault(loop, set()).add(holder)


def _unhold(loop: asyncio.AbstractEventLoop, holder: AsyncGenerator[None, None]) -> None:
    with _HELD_LOCK:
        _HELD.get(loop, set()).discard(holder)


async def _holder(client: Any) -> AsyncGenerator[None, None]:
    """Suspended at ``yield`` while the client lives; closing it closes the client."""
    try:
        yield
    finally:
        await client.close()


async def _release(holder: AsyncGenerator[None, None]) -> None:
    try:
        await holder.aclose()
    finally:
        _unhold(asyncio.get_running_loop(), holder)


@dataclass
class _Entry:
    api_key: str
    client: Any
    holder: AsyncGenerator[None, None]


class ClientPool:
    """SDK clients built by ``factory(api_key)``, one per event loop. Thread-safe."""

    def __init__(self, factory: Callable[[str], Any]) -> None:
        self._factory = factory
        self._lock = threading.Lock()
        self._entries: dict[asyncio.AbstractEventLoop, _Entry] = {}
        # Runs in whichever thread collects the pool; it must not refer to ``self``.
        weakref.finalize(self, _retire, self._entries, self._lock)

    async def client(self, api_key: str) -> Any:
        """The client for the running loop and ``api_key``, opened on first use."""
        loop = asyncio.get_running_loop()
        with self._lock:
            entry = self._entries.get(loop)
            stale = [key for key in self._entries if key.is_closed()]
            for key in stale:
                del self._entries[key]
        if entry is not None and entry.api_key == api_key:
            return entry.client
        if entry is not None:  # the key was rotated: retire the old client
            await _release(entry.holder)
        client = self._factory(api_key)
        holder = _holder(client)
        await holder.__anext__()  # registers it with the loop's async-generator hooks
        _hold(loop, holder)
        with self._lock:
            self._entries[loop] = _Entry(api_key, client, holder)
        return client

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    async def aclose(self) -> None:
        """Close every client: this loop's awaited, other loops' as :meth:`close` does."""
        loop = asyncio.get_running_loop()
        with self._lock:
            entries = dict(self._entries)
            self._entries.clear()
        for owner, entry in entries.items():
            if owner is loop:
                await _release(entry.holder)
            else:
                _close_elsewhere(owner, entry)

    def close(self) -> None:
        """Close every client from synchronous code. Idempotent.

        A client on a loop running in another thread is closed there (waiting
        up to :data:`CLOSE_TIMEOUT`); one on a loop that is not running is
        closed by running that loop briefly; one on a closed loop was closed
        when the loop shut down. Called from a coroutine, it only schedules
        the close of the running loop's client: ``await aclose()`` instead.
        """
        with self._lock:
            entries = dict(self._entries)
            self._entries.clear()
        for owner, entry in entries.items():
            _close_elsewhere(owner, entry)


def _retire(entries: dict[asyncio.AbstractEventLoop, _Entry], lock: threading.Lock) -> None:
    """The pool was dropped unclosed: close each client on its own loop, soon."""
    with lock:
        held = list(entries.items())
        entries.clear()
    for loop, entry in held:
        if loop.is_closed():
            continue  # closed with the loop
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(_spawn_release, loop, entry.holder)


def _spawn_release(loop: asyncio.AbstractEventLoop, holder: AsyncGenerator[None, None]) -> None:
    task = loop.create_task(_release(holder))
    _RELEASING.add(task)
    task.add_done_callback(_RELEASING.discard)


def _close_elsewhere(owner: asyncio.AbstractEventLoop, entry: _Entry) -> None:
    if owner.is_closed():
        return
    try:
        current = asyncio.get_running_loop()
    except RuntimeError:
        current = None
    if owner is current:
        owner.create_task(_release(entry.holder))
    elif owner.is_running():
        future = asyncio.run_coroutine_threadsafe(_release(entry.holder), owner)
        with contextlib.suppress(Exception):
            future.result(CLOSE_TIMEOUT)
    elif current is None:
        owner.run_until_complete(_release(entry.holder))
