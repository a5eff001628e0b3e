"""Reusable execution machines: building a ``transitions.Machine`` costs far more
than an attempt's own work (hundreds of microseconds), so each attempt borrows
one already bound to its plain model and gives it back when its actor stops.

Every live attempt still owns its own machine (DESIGN §3); only a finished
attempt's machine is reset (``set_state``, no callbacks) and lent again.
"""

from __future__ import annotations

import threading

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
