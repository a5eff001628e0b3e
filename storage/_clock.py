"""Injectable time and identity sources.

Kernel code never reads the wall clock or global randomness directly: stores,
supervisors and agents take a :class:`Clock` and an :class:`IdSource`, so tests
and Hypothesis drive time and ids explicitly.
"""

from __future__ import annotations

import os
import random
import threading
import time
import uuid
from collections.abc import Callable
from typing import Protocol, runtime_checkable


@runtime_checkable
class Clock(Protocol):
    """A source of time, in float seconds.

    ``now()`` is wall time (used for leases, deadlines and records);
    ``monotonic()`` is for measuring durations. Implementations must be safe
    to call from any thread.
    """

    def now(self) -> float: ...

    def monotonic(self) -> float: ...


class SystemClock:
    """The real clock: ``time.time()`` and ``time.monotonic()``."""

    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    def __repr__(self) -> str:
        return "SystemClock()"


class AnchoredClock:
    """Wall time read once, then advanced by a monotonic source: immune to wall-clock steps.

    ``now()`` is ``wall()`` taken at construction plus the ``monotonic()``
    seconds elapsed since; ``monotonic()`` is the monotonic source itself. A
    step of the system clock after construction (an NTP correction, a VM
    resume, an operator's ``date -s``) of either sign changes neither, so
    lease expiry, heartbeats and reconciliation inside one process keep their
    meaning. The embedded stores (LMDB, memory) use one, anchored when the
    store is opened. The default monotonic source is ``time.monotonic`` (Linux
    ``CLOCK_MONOTONIC``, which does not count a suspend: a resumed host does
    not judge its own leases expired). ``wall`` and ``monotonic`` are injectable
    for tests. Thread-safe; ``now()`` never goes backwards.
    """

    def __init__(
        self,
        *,
        wall: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._lock = threading.Lock()
        self._wall = wall
        self._mono = monotonic
        self._anchor_wall = float(wall())
        self._anchor_mono = float(monotonic())

    @property
    def anchor(self) -> float:
        """The wall time read when this clock was (re)anchored."""
        with self._lock:
            return self._anchor_wall

    def now(self) -> float:
        with self._lock:
            return self._anchor_wall + (float(self._mono()) - self._anchor_mono)

    def monotonic(self) -> float:
        return float(self._mono())

    def __repr__(self) -> str:
        return f"AnchoredClock(anchor={self.anchor!r})"


class ManualClock:
    """A clock that only moves when told to. Thread-safe.

    ``monotonic()`` follows ``now()`` but never goes backwards, even when
    ``now()`` is set back (a wall-clock step does not reverse durations).
    """

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._lock = threading.Lock()
        self._now = float(start)
        self._mono = 0.0

    def now(self) -> float:
        with self._lock:
            return self._now

    def monotonic(self) -> float:
        with self._lock:
            return self._mono

    def advance(self, seconds: float) -> float:
        """Move time by ``seconds`` (may be negative for a wall-clock step back)."""
        with self._lock:
            self._now += seconds
            if seconds > 0:
                self._mono += seconds
            return self._now

    def set(self, when: float) -> None:
        """Jump wall time to ``when``; monotonic time only moves forward."""
        with self._lock:
            delta = when - self._now
            self._now = float(when)
            if delta > 0:
                self._mono += delta

    def __repr__(self) -> str:
        return f"ManualClock(now={self.now()!r})"


class SkewedClock:
    """One host's view of another clock: ``base.now()`` plus an offset a test moves.

    Models a host whose wall clock is wrong or steps (NTP jumps, a VM resumed):
    ``now()`` is ``base.now() + offset``; ``monotonic()`` is the base's, since a
    wall-clock step never moves a monotonic clock. Lease decisions must not
    depend on such a clock: the store's clock decides them. Thread-safe.
    """

    def __init__(self, base: Clock, offset: float = 0.0) -> None:
        self._lock = threading.Lock()
        self._base = base
        self._offset = float(offset)

    @property
    def offset(self) -> float:
        with self._lock:
            return self._offset

    def set_offset(self, offset: float) -> None:
        """Make this host's wall clock ``offset`` seconds ahead of the base (negative: behind)."""
        with self._lock:
            self._offset = float(offset)

    def step(self, seconds: float) -> float:
        """Jump this host's wall clock by ``seconds`` (negative: backwards); the new offset."""
        with self._lock:
            self._offset += seconds
            return self._offset

    def now(self) -> float:
        with self._lock:
            offset = self._offset
        return self._base.now() + offset

    def monotonic(self) -> float:
        return self._base.monotonic()

    def __repr__(self) -> str:
        return f"SkewedClock(offset={self.offset!r})"


@runtime_checkable
class IdSource(Protocol):
    """A source of fresh identifiers. Must be safe to call from any thread."""

    def uuid4(self) -> uuid.UUID: ...

    def token_hex(self, nbytes: int) -> str: ...


class RandomIds:
    """Ids from the operating system's randomness."""

    def uuid4(self) -> uuid.UUID:
        return uuid.uuid4()

    def token_hex(self, nbytes: int) -> str:
        return os.urandom(nbytes).hex()

    def __repr__(self) -> str:
        return "RandomIds()"


class SeededIds:
    """Deterministic ids from a seed, for tests and reproducible runs."""

    def __init__(self, seed: int = 0) -> None:
        self._lock = threading.Lock()
        self._rng = random.Random(seed)

    def uuid4(self) -> uuid.UUID:
        with self._lock:
            return uuid.UUID(int=self._rng.getrandbits(128), version=4)

    def token_hex(self, nbytes: int) -> str:
        with self._lock:
            return self._rng.getrandbits(8 * nbytes).to_bytes(nbytes, "big").hex()
