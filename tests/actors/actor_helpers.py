"""Test helpers for the actors package: gates, thread checks; the fault-injecting store
(``Fault``, ``FaultyStore``) lives in :mod:`properties` (the supervisor machine uses it too)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pykka

from actors import BackgroundSubagentSupervisor, SupervisorLimits
from actors._attempt import AttemptActor
from actors._messages import WatchRequest
from actors._supervisor import SupervisorActor

FAST = SupervisorLimits(heartbeat_interval=0.01, retry_interval=0.002, cancellation_grace=0.05)
SupervisorFactory = Callable[..., BackgroundSubagentSupervisor]

OUR_THREAD_PREFIXES = ("subagents-", "AttemptActor", "SupervisorActor")


def our_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith(OUR_THREAD_PREFIXES)]


def our_actors() -> list[Any]:
    return [
        ref
        for ref in pykka.ActorRegistry.get_all()
        if ref.actor_class in (AttemptActor, SupervisorActor)
    ]


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
    done = supervisor._ask(WatchRequest(attempt_id=attempt_id)).result(timeout=10)[2]
    return str(done.result(timeout=10))
