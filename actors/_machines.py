"""Per-attempt resources made cheap: reusable execution machines and buffered ids.

Reusable execution machines: building a ``transitions.Machine`` costs far more
than an attempt's own work, so each attempt borrows
one already bound to its plain model and gives it back when its actor stops.

Every live attempt still owns its own machine (DESIGN §3); only a finished
attempt's machine is reset (``set_state``, no callbacks) and lent again.
"""

from __future__ import annotations

import os
import threading
import uuid

from transitions import Machine

from statemachines import EXECUTION, build_machine


class ExecutionModel:
    """The plain model the execution machine binds to (never the actor itself)."""

    state: str


class MachinePool:
    """Idle (model, machine) pairs of the EXECUTION table. Thread-safe, bounded."""

    def __init__(self, keep: int = 256) -> None:
        self._keep = keep
        self._lock = threading.Lock()
        self._idle: list[tuple[ExecutionModel, Machine]] = []

    def acquire(self, initial: str) -> tuple[ExecutionModel, Machine]:
        """A model in state ``initial`` with its own machine (built when none is idle)."""
        with self._lock:
            pair = self._idle.pop() if self._idle else None
        if pair is None:
            model = ExecutionModel()
            return model, build_machine(EXECUTION, model, initial=initial)
        model, machine = pair
        if model.state != initial:
            machine.set_state(initial, model=model)
        return pair

    def release(self, model: ExecutionModel, machine: Machine) -> None:
        """Give a pair back once its attempt is over (dropped when enough are idle)."""
        with self._lock:
            if len(self._idle) < self._keep:
                self._idle.append((model, machine))


class BufferedRandomIds:
    """:class:`~storage.RandomIds` drawn from the OS in blocks: the same randomness
    (``os.urandom``), one system call per 4 KiB instead of one per id.

    Every system call on the hot path releases the GIL and, with the supervisor's
    threads busy, waits to get it back; an attempt needs three or four ids.
    Thread-safe.
    """

    BLOCK = 4096

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._buffer = b""
        self._offset = 0

    def _take(self, nbytes: int) -> bytes:
        with self._lock:
            if self._offset + nbytes > len(self._buffer):
                self._buffer = os.urandom(max(self.BLOCK, nbytes))
                self._offset = 0
            start = self._offset
            self._offset += nbytes
            return self._buffer[start : start + nbytes]

    def uuid4(self) -> uuid.UUID:
        return uuid.UUID(bytes=self._take(16), version=4)

    def token_hex(self, nbytes: int) -> str:
        return self._take(nbytes).hex()

    def __repr__(self) -> str:
        return "BufferedRandomIds()"
