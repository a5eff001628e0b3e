"""A fault-injecting store wrapper, shared by the supervisor machine and the actor tests.

:class:`FaultyStore` delegates every :class:`~storage.SessionStore` operation to
an inner store and injects planned faults: a transient failure before the call
(nothing written), a lost response (the call applied, then an error), a slow
call (store time moves on while the call is "in flight": the injected clock is
advanced before the call, never a real sleep), or a call held until released.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable
from typing import Any, Protocol

from storage import RetryableStorage, SessionStore

from ._planted import StoreProxy

FAULT_MODES = ("raise", "lost", "slow", "block")


class AdvancingClock(Protocol):
    """A clock a slow call can move (e.g. :class:`~storage.ManualClock`)."""

    def advance(self, seconds: float) -> float: ...


class Fault:
    """One planned fault: ``times`` faulty calls of one store operation.

    ``mode`` is ``"raise"`` (raise before calling the store: nothing written),
    ``"lost"`` (call the store, then raise: the write applied, the response is
    lost), ``"slow"`` (advance the store's clock by ``delay`` seconds, then call
    the store normally: the call took that long in store time; needs a
    :class:`FaultyStore` built with ``clock=``) or ``"block"`` (wait for
    ``release`` before calling).
    """

    def __init__(
        self,
        times: int,
        error: Callable[[], BaseException] = lambda: RetryableStorage("injected"),
        mode: str = "raise",
        delay: float = 0.0,
    ) -> None:
        if mode not in FAULT_MODES:
            raise ValueError(f"unknown fault mode {mode!r}")
        if mode == "slow" and not delay > 0:
            raise ValueError("a slow fault needs a positive delay")
        self.times = times
        self.error = error
        self.mode = mode
        self.delay = float(delay)
        self.release = threading.Event()
        self.entered = threading.Event()


class FaultyStore(StoreProxy):
    """Delegates every contract operation to ``inner`` and injects planned faults.

    ``calls[op]`` counts calls, ``failures[op]`` injected failures (raised and
    lost), ``slowed[op]`` slow calls; :meth:`when_failed` gives an event that
    fires once ``op`` failed ``count`` times. ``clock`` (kept as ``slow_clock``;
    ``clock`` stays the inner store's) is advanced by slow calls on the calling
    thread: pass the inner store's :class:`~storage.ManualClock`. Thread-safe.
    """

    def __init__(self, inner: SessionStore, *, clock: AdvancingClock | None = None) -> None:
        super().__init__(inner)
        self.slow_clock = clock
        self.slowed: dict[str, int] = defaultdict(int)
        self.lock = threading.Lock()
        self.faults: dict[str, list[Fault]] = defaultdict(list)
        self.calls: dict[str, int] = defaultdict(int)
        self.failures: dict[str, int] = defaultdict(int)
        self.failure_events: dict[str, list[tuple[int, threading.Event]]] = defaultdict(list)
        self.sticky: dict[str, Callable[[], BaseException] | None] = {}

    def plan(self, op: str, fault: Fault) -> Fault:
        """Queue ``fault`` for the next calls of ``op`` (after the faults already planned)."""
        if op not in OPS:
            raise ValueError(f"{op!r} is not a SessionStore operation")
        if fault.mode == "slow" and self.slow_clock is None:
            raise ValueError("slow faults need a FaultyStore built with clock=")
        with self.lock:
            self.faults[op].append(fault)
        return fault

    def planned(self) -> int:
        """How many injected failures are still planned (over every operation)."""
        with self.lock:
            return sum(f.times for queue in self.faults.values() for f in queue)

    def clear(self) -> None:
        """Drop every planned and sticky fault (blocked calls are released)."""
        with self.lock:
            queues, self.faults = self.faults, defaultdict(list)
            self.sticky.clear()
        for queue in queues.values():
            for fault in queue:
                fault.release.set()

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
        if fault.mode == "slow":
            assert self.slow_clock is not None
            self.slow_clock.advance(fault.delay)
            with self.lock:
                self.slowed[op] += 1
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


COMPOSITE_OPS = ("advance_attempt", "claim_and_acknowledge")
"""Operations with a contract default made of other operations, which a real store does
in one transaction: the wrapper forwards each as one faultable call to the inner store
(whose default, or own transaction, then runs), as a store under test sees them."""
OPS = frozenset(SessionStore.__abstractmethods__) | frozenset(COMPOSITE_OPS)
"""The operations a fault may be planned for."""

for _op in sorted(OPS):
    setattr(FaultyStore, _op, _delegating(_op))
