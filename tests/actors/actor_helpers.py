"""Test helpers for the actors package: gates, thread checks; the fault-injecting store
(``Fault``, ``FaultyStore``) lives in :mod:`properties` (the supervisor machine uses it too)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pykka

from actors import BackgroundSubagentSupervisor, SupervisorLimits

FAST = SupervisorLimits(heartbeat_interval=0.01, retry_interval=0.002, cancellation_grace=0.05)
SupervisorFactory = Callable[..., BackgroundSubagentSupervisor]

OUR_THREAD_PREFIXES = ("subagents-", "AttemptActor", "SupervisorActor")


def our_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith(OUR_THREAD_PREFIXES)]


def our_actors() -> list[Any]:
    from actors import AttemptActor, SupervisorActor

    return [
        ref
        for ref in pykka.ActorRegistry.get_all()
        if ref.actor_class in (AttemptActor, SupervisorActor)
    ]


class Gate:
    """Opened from any thread, awaited on the supervisor's loop."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._opened = False
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []
        self.entered = threading.Event()

    async def wait(self) -> None:
        event = asyncio.Event()
        with self._lock:
            if self._opened:
                self.entered.set()
                return
            self._waiters.append((asyncio.get_running_loop(), event))
        self.entered.set()
        await event.wait()

    def open(self) -> None:
        with self._lock:
            self._opened = True
            waiters, self._waiters = self._waiters, []
        for loop, event in waiters:
            loop.call_soon_threadsafe(event.set)


class Collector:
    """A completion callback that records every result it is given (thread-safe)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.results: list[Any] = []
        self.event = threading.Event()

    def __call__(self, result: Any) -> None:
        with self.lock:
            self.results.append(result)
        self.event.set()

    def for_attempt(self, attempt_id: str) -> list[Any]:
        with self.lock:
            return [r for r in self.results if r.attempt_id == attempt_id]


def wait_terminal(supervisor: BackgroundSubagentSupervisor, attempt_id: str) -> str:
    """Block until the attempt's terminal state (or loss) is visible, without claiming it."""
    done = supervisor._call("watch", attempt_id).result(timeout=10)[2]
    return str(done.result(timeout=10))
