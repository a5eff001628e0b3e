"""The attempt's lifecycle machine, and a pool that makes one per attempt cheap.

:data:`ATTEMPT` is the lifecycle of one live attempt as its actor runs it: its
child task and its terminal outcome. It is never persisted: the attempt's
execution status is its last persisted record, moved only by store writes (the
store checks them against ``statemachines.EXECUTION``). Reusable machines:
building a ``transitions.Machine`` costs far more than an attempt's own work,
so each attempt borrows one already bound to its plain model and gives it back
when its actor stops. Every live attempt still
owns its own machine (DESIGN §3); only a finished attempt's machine is reset
(``set_state``, no callbacks) and lent again.
"""

from __future__ import annotations

import threading

from transitions import Machine

from statemachines import MachineSpec, Transition, build_machine

IDLE = "idle"
RUNNING = "running"
FINISHED = "finished"
STOPPING = "stopping"
COMMITTING = "committing"
TERMINAL = "terminal"
LOST = "lost"

ATTEMPT = MachineSpec(
    name="attempt",
    description="One live attempt as its actor runs it (local, never persisted).",
    states=(IDLE, RUNNING, FINISHED, STOPPING, COMMITTING, TERMINAL, LOST),
    initial=IDLE,
    terminal=frozenset({TERMINAL, LOST}),
    transitions=(
        # idle: accepted, no child task yet, no outcome chosen.
        Transition("launch", IDLE, RUNNING),
        # running: the child's task is on the loop; finished: it ended (or could not be
        # launched) and the outcome is being chosen, within the same message.
        Transition("child_ended", RUNNING, FINISHED),
        # The outcome is chosen: committing when no child runs, stopping while the
        # child's task is still being cancelled.
        Transition("decide", IDLE, COMMITTING),
        Transition("decide", FINISHED, COMMITTING),
        Transition("decide", RUNNING, STOPPING),
        Transition("child_ended", STOPPING, COMMITTING),
        # terminal: the terminal commit is persisted.
        Transition("commit", COMMITTING, TERMINAL),
        Transition("commit", STOPPING, TERMINAL),
        # lost: owner loss was confirmed and the local state abandoned.
        *(Transition("lose", s, LOST) for s in (IDLE, RUNNING, FINISHED, STOPPING, COMMITTING)),
    ),
)


class AttemptModel:
    """The plain model the attempt's machine binds to (never the actor itself)."""

    state: str


class MachinePool:
    """Idle (model, machine) pairs of one spec. Thread-safe, bounded."""

    def __init__(self, spec: MachineSpec = ATTEMPT, keep: int = 256) -> None:
        self._spec = spec
        self._keep = keep
        self._lock = threading.Lock()
        self._idle: list[tuple[AttemptModel, Machine]] = []

    def acquire(self, initial: str) -> tuple[AttemptModel, Machine]:
        """A model in state ``initial`` with its own machine (built when none is idle)."""
        with self._lock:
            pair = self._idle.pop() if self._idle else None
        if pair is None:
            model = AttemptModel()
            return model, build_machine(self._spec, model, initial=initial)
        model, machine = pair
        if model.state != initial:
            machine.set_state(initial, model=model)
        return pair

    def release(self, model: AttemptModel, machine: Machine) -> None:
        """Give a pair back once its attempt is over (dropped when enough are idle)."""
        with self._lock:
            if len(self._idle) < self._keep:
                self._idle.append((model, machine))
