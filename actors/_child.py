"""The child-runner protocol: the seam between the supervisor and whatever runs a child.

The SDK plugs its agent in here. A runner is an async callable
``runner(request, control) -> ChildOutcome`` that the supervisor runs as a task
on its event loop (never on an actor thread). Whatever the runner does, the
attempt ends with terminal evidence: an exception it raises becomes a
``failed`` outcome, and a cancelled task becomes ``cancelled``.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

PROGRESS_STATES = ("running", "waiting")


@dataclass(frozen=True, slots=True, kw_only=True)
class ChildRequest:
    """What one execution attempt of a background child is asked to do.

    ``continued`` is true when the attempt continues a known ``agent_id``
    after an earlier attempt of it ended (the runner restores that child's
    conversation by ``agent_id``).
    """

    subagent_name: str
    prompt: str
    agent_id: str
    attempt_id: str
    linked_task_id: str | None = None
    parent_run_id: str = ""
    continued: bool = False
    metadata: Mapping[str, Any] = field(default_factory=dict)


class ChildOutcome:
    """How a child run ended: ``ChildOutcome.Completed`` or ``ChildOutcome.Failed``.

    Build with :meth:`completed` / :meth:`failed`; match with
    ``isinstance(o, ChildOutcome.Completed)``.
    """

    __slots__ = ()

    Completed: ClassVar[type[_Completed]]
    Failed: ClassVar[type[_Failed]]

    @staticmethod
    def completed(
        output: str,
        *,
        usage: Mapping[str, Any] | None = None,
        metadata: Mapping[str, Any] | None = None,
        context_delta: Any = None,
        child_run_id: str | None = None,
    ) -> _Completed:
        """A successful run. ``context_delta`` (usage, events, history suffix: any
        object the parent knows how to apply) is handed to the parent exactly
        once, after the terminal state is persisted."""
        return _Completed(
            output=output,
            usage=dict(usage or {}),
            metadata=dict(metadata or {}),
            context_delta=context_delta,
            child_run_id=child_run_id,
        )

    @staticmethod
    def failed(
        error: str,
        *,
        usage: Mapping[str, Any] | None = None,
        context_delta: Any = None,
        child_run_id: str | None = None,
    ) -> _Failed:
        """A failed run; ``error`` is the safe, public failure text."""
        return _Failed(
            error=error,
            usage=dict(usage or {}),
            context_delta=context_delta,
            child_run_id=child_run_id,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class _Completed(ChildOutcome):
    output: str
    usage: Mapping[str, Any] = field(default_factory=dict)
    metadata: Mapping[str, Any] = field(default_factory=dict)
    context_delta: Any = None
    child_run_id: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class _Failed(ChildOutcome):
    error: str
    usage: Mapping[str, Any] = field(default_factory=dict)
    context_delta: Any = None
    child_run_id: str | None = None


_Completed.__qualname__ = "ChildOutcome.Completed"
_Failed.__qualname__ = "ChildOutcome.Failed"
ChildOutcome.Completed = _Completed
ChildOutcome.Failed = _Failed


@dataclass(frozen=True, slots=True)
class ChildProgress:
    """Message from the child to its attempt actor: a progress state and/or its run id."""

    status: str | None
    child_run_id: str | None


@dataclass(frozen=True, slots=True)
class SteeringTaken:
    """Message from the child to its attempt actor: it drained these steering messages
    (their ids, in the order they were queued)."""

    steering_ids: tuple[str, ...]


class ChildRunner(Protocol):
    """``async runner(request, control) -> ChildOutcome``; runs on the supervisor's loop."""

    async def __call__(self, request: ChildRequest, control: ChildControl) -> ChildOutcome: ...


class ChildControl:
    """The child's handle on its attempt. Every method is thread-safe.

    - :meth:`steering` drains the steering messages queued so far (call it at a
      turn boundary); each queued message is returned exactly once.
    - :attr:`cancelled` / :meth:`wait_cancelled`: cooperative cancellation.
      When the child does not stop within the cancellation grace, its task is
      cancelled (``asyncio.CancelledError`` at its next ``await``).
    - :meth:`report_child_run_id` and :meth:`report_progress` tell the attempt
      actor; they return at once (the actor persists, then applies).
    """

    def __init__(
        self,
        *,
        attempt_id: str,
        notify: Callable[[object], None],
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.attempt_id = attempt_id
        self._notify = notify
        self._loop = loop
        self._lock = threading.Lock()
        self._queue: deque[tuple[str, str]] = deque()  # (steering_id, message)
        self._cancelled = False
        self._reason: str | None = None
        # Created on the loop thread by the first ``wait_cancelled`` (most children
        # never wait for cancellation, and an attempt should cost as little as it can).
        self._async_cancelled: asyncio.Event | None = None
        self.handed_over: ChildOutcome | None = None

    # -- used by the child (on the event loop) ----------------------------------------------

    def steering(self) -> list[str]:
        """Drain and return every queued steering message, oldest first. The attempt
        records which ones the child took (``attempt.steering_delivered``)."""
        with self._lock:
            items = list(self._queue)
            self._queue.clear()
        if items:
            self._notify(SteeringTaken(steering_ids=tuple(sid for sid, _ in items)))
        return [text for _, text in items]

    @property
    def cancelled(self) -> bool:
        """Whether cancellation (by the parent or by shutdown) was requested."""
        return self._cancelled

    @property
    def cancellation_reason(self) -> str | None:
        return self._reason

    async def wait_cancelled(self) -> None:
        """Return once cancellation is requested. Call on the supervisor's loop."""
        if self._cancelled:
            return
        if self._async_cancelled is None:
            self._async_cancelled = asyncio.Event()
        # ``request_cancel`` sets the flag first, then wakes the event on this loop, so a
        # request made before the event existed still wakes it.
        await self._async_cancelled.wait()

    def hand_over(self, outcome: ChildOutcome) -> None:
        """For a child whose task is being aborted (cancelled): call just before
        re-raising ``CancelledError``. The attempt keeps the outcome's context
        delta, usage and child run id as if the child had returned it; it still
        ends ``cancelled``."""
        self.handed_over = outcome

    def report_child_run_id(self, child_run_id: str) -> None:
        """Record the child's run id (persisted before it becomes visible)."""
        self._notify(ChildProgress(status=None, child_run_id=child_run_id))

    def report_progress(self, status: str) -> None:
        """Report ``running`` or ``waiting`` (the execution lifecycle's active states)."""
        if status not in PROGRESS_STATES:
            raise ValueError(f"progress must be one of {PROGRESS_STATES}, got {status!r}")
        self._notify(ChildProgress(status=status, child_run_id=None))

    # -- used by the attempt actor ----------------------------------------------------------

    def queued_steering(self) -> int:
        with self._lock:
            return len(self._queue)

    def push_steering(self, steering_id: str, message: str, limit: int) -> bool:
        """Queue ``message`` unless ``limit`` messages are already queued."""
        with self._lock:
            if len(self._queue) >= limit:
                return False
            self._queue.append((steering_id, message))
            return True

    def request_cancel(self, reason: str | None) -> None:
        with self._lock:
            if self._cancelled:
                return
            self._reason = reason
            self._cancelled = True
        # A closed loop raises RuntimeError: then nobody can be waiting on the event.
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._wake_waiters)

    def _wake_waiters(self) -> None:
        # On the loop thread, like every ``wait_cancelled``.
        if self._async_cancelled is not None:
            self._async_cancelled.set()
