"""Test helpers for the actors package: gates, a fault-injecting store, thread checks."""

from __future__ import annotations

import asyncio
import threading
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import pykka

from actors import BackgroundSubagentSupervisor, SupervisorLimits
from storage import RetryableStorage, SessionStore

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


class Fault:
    """One planned fault: ``times`` failures of one store operation.

    ``mode`` is ``"raise"`` (raise before calling the store: nothing written),
    ``"lost"`` (call the store, then raise: the write applied, the response is
    lost) or ``"block"`` (wait for ``release`` before calling).
    """

    def __init__(
        self,
        times: int,
        error: Callable[[], BaseException] = lambda: RetryableStorage("injected"),
        mode: str = "raise",
    ) -> None:
        self.times = times
        self.error = error
        self.mode = mode
        self.release = threading.Event()
        self.entered = threading.Event()


class FaultyStore(SessionStore):
    """Delegates every contract operation to ``inner`` and injects planned faults.

    ``calls[op]`` counts calls, ``failures[op]`` injected failures;
    ``on_failure[op]`` events fire after each injected failure.
    """

    def __init__(self, inner: SessionStore) -> None:
        self.inner = inner
        self.clock = inner.clock
        self.lock = threading.Lock()
        self.faults: dict[str, list[Fault]] = defaultdict(list)
        self.calls: dict[str, int] = defaultdict(int)
        self.failures: dict[str, int] = defaultdict(int)
        self.failure_events: dict[str, list[tuple[int, threading.Event]]] = defaultdict(list)
        self.sticky: dict[str, Callable[[], BaseException] | None] = {}

    def plan(self, op: str, fault: Fault) -> Fault:
        with self.lock:
            self.faults[op].append(fault)
        return fault

    def fail_always(self, op: str, error: Callable[[], BaseException] | None) -> None:
        """Fail every call of ``op`` with ``error()`` until called again with ``None``."""
        with self.lock:
            self.sticky[op] = error

    def when_failed(self, op: str, count: int) -> threading.Event:
        event = threading.Event()
        with self.lock:
            if self.failures[op] >= count:
                event.set()
            else:
                self.failure_events[op].append((count, event))
        return event

    def _failed(self, op: str) -> None:
        with self.lock:
            self.failures[op] += 1
            n = self.failures[op]
            for count, event in self.failure_events[op]:
                if n >= count:
                    event.set()

    def _invoke(self, op: str, *args: Any, **kwargs: Any) -> Any:
        with self.lock:
            self.calls[op] += 1
            sticky = self.sticky.get(op)
            fault = None
            queue = self.faults[op]
            if sticky is None and queue:
                fault = queue[0]
                fault.times -= 1
                if fault.times <= 0:
                    queue.pop(0)
        if sticky is not None:
            self._failed(op)
            raise sticky()
        if fault is None:
            return getattr(self.inner, op)(*args, **kwargs)
        if fault.mode == "block":
            fault.entered.set()
            fault.release.wait(10)
            return getattr(self.inner, op)(*args, **kwargs)
        if fault.mode == "lost":
            getattr(self.inner, op)(*args, **kwargs)
        self._failed(op)
        raise fault.error()

    def drain(self) -> None:
        self.inner.drain()

    def close(self) -> None:
        self.inner.close()


def _delegating(op: str) -> Callable[..., Any]:
    def method(self: FaultyStore, *args: Any, **kwargs: Any) -> Any:
        return self._invoke(op, *args, **kwargs)

    method.__name__ = op
    return method


for _op in sorted(SessionStore.__abstractmethods__):
    setattr(FaultyStore, _op, _delegating(_op))
FaultyStore.__abstractmethods__ = frozenset()


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
