"""The kernel's side of fault injection: the named points and the cheap hook that marks them.

Storage, the actors runtime and the host call :func:`fault_point` at the places
listed in :data:`FAULT_POINTS`; :func:`instrument_backend` routes a backend's
writes through the three ``store.*`` points. Nothing here arms anything: with
nothing armed a reach costs one module-global flag check. Arming, counting and
the ``SUBAGENTS_FAULTS`` variable live in the public :mod:`storage.faults`,
which only tests, the verification harness and a host started in crash-test
mode import.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any, Final, TypeVar

from ._errors import RetryableStorage

T = TypeVar("T")

FAULT_POINTS: Final[tuple[str, ...]] = (
    "store.before_commit",
    "store.after_commit",
    "store.after_commit_before_response",
    "actor.mid_heartbeat",
    "actor.after_terminal_commit_before_callback",
    "delivery.after_continuation_admitted_before_ack",
    "actor.inside_finalizer",
)

FAULT_ACTIONS: Final[tuple[str, ...]] = (
    "raise_transient",
    "lose_response",
    "sleep_past_ttl",
    "sigkill",
)

#: How long ``sleep_past_ttl`` sleeps unless configured: longer than the default
#: lease TTL of the actors layer (30 s), with margin.
DEFAULT_SLEEP_SECONDS: Final[float] = 90.0


class Arm:
    """One arming of one point: fire on reaches ``first`` .. ``last`` (1-based)."""

    __slots__ = ("action", "first", "last", "reached")

    def __init__(self, action: str, nth: int, times: int) -> None:
        self.action = action
        self.first = nth
        self.last = nth + times - 1
        self.reached = 0


class Registry:
    """The process-wide armed set. ``active`` is the only thing the fast path reads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.arms: dict[str, list[Arm]] = {}
        self.fired: dict[str, int] = {}
        self.reached: dict[str, int] = {}
        self.sleeper: Callable[[float], object] = time.sleep
        self.sleep_seconds = DEFAULT_SLEEP_SECONDS
        self.log_path: str | None = None
        # Read without the lock on every reach: a stale read at most fires or skips
        # one reach that races with arm()/disarm_all(), which nothing relies on.
        self.active = False


REGISTRY = Registry()
"""The one registry of this process (:mod:`storage.faults` arms and reads it)."""


def _hit(name: str) -> str | None:
    """Count a reach of ``name``; return the action to perform now, if any (logged)."""
    with REGISTRY.lock:
        if not REGISTRY.active:
            return None
        REGISTRY.reached[name] = REGISTRY.reached.get(name, 0) + 1
        action = None
        for armed in REGISTRY.arms.get(name, ()):
            armed.reached += 1
            if action is None and armed.first <= armed.reached <= armed.last:
                action = armed.action
        if action is None:
            return None
        REGISTRY.fired[name] = REGISTRY.fired.get(name, 0) + 1
        REGISTRY.changed.notify_all()
        log_path = REGISTRY.log_path
    if log_path is not None:
        _log(log_path, f"{name} {action} {os.getpid()}\n")
    return action


def _log(path: str, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def _perform(name: str, action: str) -> None:
    if action == "raise_transient":
        raise RetryableStorage("injected transient fault", fault_point=name)
    if action == "lose_response":
        raise RetryableStorage("injected lost response", fault_point=name, lost_response=True)
    if action == "sleep_past_ttl":
        with REGISTRY.lock:
            sleeper, seconds = REGISTRY.sleeper, REGISTRY.sleep_seconds
        sleeper(seconds)
        return
    os.kill(os.getpid(), signal.SIGKILL)


def fault_point(name: str) -> None:
    """Mark that execution reached point ``name``; perform its armed action, if any.

    A no-op (one global flag check) unless something is armed. Raises
    :class:`~storage.RetryableStorage` for ``raise_transient`` and
    ``lose_response``; never returns for ``sigkill``. Runs the action on the
    calling thread.
    """
    if not REGISTRY.active:
        return
    action = _hit(name)
    if action is not None:
        _perform(name, action)


def _faulted_write(write: Callable[[Callable[[Any], T]], T]) -> Callable[[Callable[[Any], T]], T]:
    def faulted(fn: Callable[[Any], T]) -> T:
        if not REGISTRY.active:
            return write(fn)
        action = _hit("store.before_commit")
        if action == "lose_response":
            write(fn)
            _perform("store.before_commit", action)
        elif action is not None:
            _perform("store.before_commit", action)
        result = write(fn)
        fault_point("store.after_commit")
        fault_point("store.after_commit_before_response")
        return result

    faulted.__wrapped__ = write  # type: ignore[attr-defined]
    return faulted


def instrument_backend(backend: T) -> T:
    """Route ``backend.write`` through the three ``store.*`` points; return ``backend``.

    Instruments the instance once (a second call is a no-op), so several stores
    sharing one backend reach each point once per write. Reads are untouched.
    """
    if getattr(backend, "_subagents_fault_points", False):
        return backend
    try:
        backend.__dict__["write"] = _faulted_write(backend.write)  # type: ignore[attr-defined]
        backend.__dict__["_subagents_fault_points"] = True
    except AttributeError:
        pass  # a backend without an instance dict (a test double) just has no points
    return backend
