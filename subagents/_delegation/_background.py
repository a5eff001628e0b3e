"""Background delegation: the child runner that plugs a registry into a supervisor.

How one background attempt runs (:class:`BackgroundSubagentRunner`): the
supervisor calls the runner on its event loop with a
:class:`~actors.ChildRequest`; the runner runs the registered subagent under
the same child-run protocol as blocking delegation (``_child_run``: tool
inheritance resolved against the delegating parent's tools, the same
materialization and the same hook rules), reports the child's run id, and
runs it with a turn-start hook that drains the attempt's queued steering into
the child's conversation as user messages (so the child's model sees steering
at its next turn boundary). Cancellation stops the child run at its next
``await``. The child runs in a copy of the :mod:`contextvars` context of the
``delegate`` call that launched it (copied when the supervisor accepted the
attempt), so a contextvar the caller set is visible inside the child; an
attempt recovered after a restart has no such context.

What the parent gets back:

- Live, while the child runs: its stream records, attributed exactly as in
  blocking mode (``source = {kind: "subagent", agent_id, agent_name, task_id,
  run_id, parent_run_id, source_sequence}``), are published on the accepting
  parent context's event bus as ``subagent_stream_record`` events (the
  parent's own stream may be long finished), after a ``subagent_started``
  event. ``task_id`` is the attempt id.
- Once, at delivery (``_delivery``): a :class:`SubagentContextDelta` (the
  child's usage, its ``subagent_completed`` / ``subagent_failed`` lifecycle
  event and any events of its own context, and the history suffix it added)
  applied to the parent context that receives the result: by
  ``wait_subagent`` or at the start of the parent's next turn. The
  supervisor hands each terminal result out once; the delta follows the
  same claim.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from actors import (
    BackgroundSubagentSupervisor,
    ChildControl,
    ChildOutcome,
    ChildRequest,
    SupervisorLimits,
)
from storage import StoreError

from .._agent._context import SUBAGENT_STACK_KEY, AgentContext
from .._agent._events import AgentEvent, compact_preview
from .._agent._ids import RunId, TaskId
from .._agent._models import ModelMessage, ModelRequest, UserPromptPart
from .._agent._result import AgentResult
from .._agent._run import Agent
from .._agent._stream import AgentStreamRecord, AgentStreamSink
from .._agent._tools import ToolRegistry
from .._agent._usage import Usage
from ._child_run import (
    ChildEnd,
    ChildRun,
    ChildRunMode,
    HookFailed,
    RunFailed,
    Unavailable,
    error_text,
    run_child,
)
from ._events import SubagentLifecycleKind, child_source, lifecycle_event, stream_record_event
from ._hooks import SubagentExecutionMetadata
from ._registry import SubagentRegistry

#: Prefix of a steering message as the child's model sees it.
STEERING_PREFIX = "[steering from the parent agent] "

_LAUNCH_KEY = "subagents.launch"


# -- the context delta --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class SubagentContextDelta:
    """What one background attempt adds to its parent's context, applied once at delivery.

    ``usage`` is the child's usage in this attempt; ``events`` are published
    on the receiving parent's bus (the child's own context events, then its
    ``subagent_completed`` or ``subagent_failed`` lifecycle event);
    ``messages`` is the history suffix the attempt added to the child's
    conversation (empty when it failed or was cancelled).
    """

    attempt_id: str
    agent_id: str
    subagent_name: str
    status: str
    child_run_id: str | None = None
    usage: Usage = field(default_factory=Usage)
    events: tuple[AgentEvent, ...] = ()
    messages: tuple[ModelMessage, ...] = ()

    def apply(self, context: AgentContext) -> None:
        """Add the usage into ``context`` and publish the events on its bus."""
        context.usage.incr(self.usage)
        for event in self.events:
            context.events.publish(event)


# -- state shared by every agent on one supervisor ----------------------------------------------


class ChildHistories:
    """Child conversations kept for continuations: the ``limit`` most recently used,
    keyed by (session id, agent id), shared by every supervisor on one set of
    :class:`~actors.SupervisorPools` (a host's: ``[host] max_child_histories``; a
    supervisor with private pools: its ``SupervisorLimits.max_known_agents``).

    Guaranteed: at most ``limit`` conversations are held, whatever the number of
    sessions; an evicted one is gone as after a process restart (that agent's next
    continuation starts from an empty history). Thread-safe: one lock, each critical
    section a dict operation.
    """

    __slots__ = ("_entries", "_lock", "limit")

    def __init__(self, limit: int) -> None:
        if limit < 0:
            raise ValueError(f"limit must be at least 0, not {limit}")
        self.limit = limit
        # A plain dict: insertion order is the LRU order (least recently used first).
        self._entries: dict[tuple[str, str], tuple[ModelMessage, ...]] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, session_id: str, agent_id: str) -> tuple[ModelMessage, ...]:
        """The agent's conversation (now the most recently used), ``()`` if not kept."""
        key = (session_id, agent_id)
        with self._lock:
            messages = self._entries.pop(key, None)
            if messages is None:
                return ()
            self._entries[key] = messages
            return messages

    def put(self, session_id: str, agent_id: str, messages: tuple[ModelMessage, ...]) -> None:
        """Keep ``messages`` as the agent's conversation, evicting the least recently used."""
        key = (session_id, agent_id)
        with self._lock:
            self._entries.pop(key, None)
            self._entries[key] = messages
            while len(self._entries) > self.limit:
                del self._entries[next(iter(self._entries))]


class _SharedState:
    """Per-supervisor memory: where its child conversations are kept (for
    continuations) and the attempts the SDK's tools launched whose results the SDK
    has not delivered yet. Shared by every agent built on the supervisor, so a
    restored parent (a new agent and context on the same supervisor) finds them.
    Thread-safe.

    Context deltas are not kept here: the supervisor hands each one out with the
    delivery that claims its result (``WaitResult.context_delta``). The histories
    live in the pools' :class:`ChildHistories`, bounded across every session.
    """

    # Slots, no set until the first launch and one lock for all states (each critical
    # section is a set operation): a host keeps one of these per session, idle ones
    # included (issue 16).
    __slots__ = ("histories", "launched", "session_id")

    lock = threading.Lock()

    def __init__(self, histories: ChildHistories, session_id: str) -> None:
        self.histories = histories
        self.session_id = session_id
        self.launched: set[str] | None = None

    def launch(self, attempt_id: str) -> None:
        with self.lock:
            if self.launched is None:
                self.launched = set()
            self.launched.add(attempt_id)

    def launched_ids(self) -> set[str]:
        with self.lock:
            return set(self.launched or ())

    def forget(self, attempt_ids: set[str]) -> None:
        with self.lock:
            if self.launched is not None:
                self.launched -= attempt_ids
                if not self.launched:
                    self.launched = None

    def history(self, agent_id: str) -> tuple[ModelMessage, ...]:
        return self.histories.get(self.session_id, agent_id)

    def remember(self, agent_id: str, messages: tuple[ModelMessage, ...]) -> None:
        self.histories.put(self.session_id, agent_id, messages)


_STATES_LOCK = threading.Lock()


def forget_settled_launches(supervisor: BackgroundSubagentSupervisor) -> int:
    """Forget the launched attempts of ``supervisor`` whose result is no longer
    pending (a host's continuation run, or another engine, delivered it); how many.

    For a supervisor that just hibernated: idle, so none of the launched attempts
    is active, and one neither active nor pending is one the next turn boundary
    would forget anyway (:meth:`_AsyncDelegation.deliver_pending`). Without this an
    idle session kept its last launched ids (and their set) for good. Ids launched
    after the snapshot are never forgotten here. No store read when nothing was
    launched; store trouble keeps them all (the next turn boundary decides)."""
    with _STATES_LOCK:
        state = supervisor.extension
    assert state is None or isinstance(state, _SharedState)
    launched = state.launched_ids() if state is not None else set()
    if state is None or not launched:
        return 0
    try:
        pending = supervisor.store.list_pending_attempts(
            supervisor.namespace_id, supervisor.session_id
        )
    except StoreError:
        return 0
    settled = launched - {record.attempt_id for record in pending}
    state.forget(settled)
    return len(settled)


def child_histories(supervisor: BackgroundSubagentSupervisor) -> ChildHistories:
    """The conversations kept for ``supervisor``'s continuations: its pools' (made on
    first need with ``max_known_agents`` unless the host installed its own)."""
    with _STATES_LOCK:
        return _pool_histories(supervisor)


def _pool_histories(supervisor: BackgroundSubagentSupervisor) -> ChildHistories:
    pools = supervisor.pools
    histories = pools.extension
    if histories is None:
        histories = pools.extension = ChildHistories(supervisor.limits.max_known_agents)
    assert isinstance(histories, ChildHistories)
    return histories


def _shared_state(supervisor: BackgroundSubagentSupervisor | None) -> _SharedState:
    if supervisor is None:
        return _SharedState(ChildHistories(SupervisorLimits().max_known_agents), "")
    with _STATES_LOCK:
        # Kept in the supervisor's slot for its layer above, not in a weak mapping: an
        # entry there costs about 140 bytes per session (issue 16).
        state = supervisor.extension
        if state is None:
            histories = _pool_histories(supervisor)
            state = supervisor.extension = _SharedState(histories, supervisor.session_id)
        assert isinstance(state, _SharedState)
        return state


# -- the launch: what the delegating turn hands to the child, in process ------------------------


@dataclass(frozen=True, slots=True)
class _Launch:
    """Carried in ``ChildRequest.metadata`` (in process only, never persisted).

    ``context`` is the delegating call's :mod:`contextvars` context, copied when
    the delegation is accepted; the child runs in a copy of it.
    """

    parent: AgentContext | None
    child: AgentContext | None
    loop: asyncio.AbstractEventLoop | None
    parent_tools: ToolRegistry
    context: contextvars.Context | None = None


def _publish(launch: _Launch | None, event: AgentEvent) -> None:
    """Publish ``event`` on the accepting parent's bus, from the parent's loop when it runs."""
    if launch is None or launch.parent is None:
        return
    bus = launch.parent.events
    loop = launch.loop
    try:
        current: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        current = None
    if loop is None or loop is current or loop.is_closed() or not loop.is_running():
        bus.publish(event)
        return
    try:
        loop.call_soon_threadsafe(bus.publish, event)
    except RuntimeError:  # the loop closed in between
        bus.publish(event)


def _append_parts(messages: list[ModelMessage], parts: list[UserPromptPart]) -> None:
    """Append ``parts`` to the latest request (a turn always starts on one)."""
    if not parts:
        return
    last = messages[-1] if messages else None
    if isinstance(last, ModelRequest):
        messages[-1] = ModelRequest(parts=(*last.parts, *parts))
    else:
        messages.append(ModelRequest(parts=tuple(parts)))


# -- the child runner ---------------------------------------------------------------------------


class BackgroundSubagentRunner:
    """The :class:`~actors.ChildRunner` that runs ``registry``'s subagents as background children.

    ``runner(request, control) -> ChildOutcome``: see the module docstring.
    The child's conversation is kept per ``agent_id`` (shared by every runner
    on the same ``supervisor``), so a continuation (``request.continued``)
    resumes it. The child runs under the same protocol as blocking
    delegation (``_child_run``: the same hook rules; ``task_id`` is the
    attempt id): a raising before-hook, or an after-hook raising after a
    completed child, ends the attempt ``failed`` naming the hook. A subagent
    the registry does not know, or whose required tools the parent cannot
    supply, ends the attempt ``failed``; an exception in the child run ends it
    ``failed`` with the error text; a cancellation request ends it
    ``cancelled``.
    """

    def __init__(
        self, registry: SubagentRegistry, supervisor: BackgroundSubagentSupervisor | None = None
    ) -> None:
        self.registry = registry
        self._state = _shared_state(supervisor)

    def __repr__(self) -> str:
        return f"BackgroundSubagentRunner({self.registry.names()!r})"

    async def __call__(self, request: ChildRequest, control: ChildControl) -> ChildOutcome:
        name = request.subagent_name
        config = self.registry.subagent(name)
        if config is None:
            return ChildOutcome.failed(
                f"no subagent named {name!r}; registered: {self.registry.names()}"
            )
        found = request.metadata.get(_LAUNCH_KEY)
        launch = found if isinstance(found, _Launch) else None
        mode = _BackgroundMode(self.registry, self._state, request, control, launch)
        parent_tools = ToolRegistry() if launch is None else launch.parent_tools
        running = run_child(config, parent_tools, mode)
        if launch is None or launch.context is None:
            # Recovered after a restart (or launched without the SDK's tools): no caller
            # context survives; the child runs in the supervisor's.
            return mode.conclude(await running)
        # The caller's contextvars (trace context, request ids) carry into the child; a
        # copy, so what the child sets stays in the child. Cancelling this call cancels
        # the task, which the child protocol handles as for a direct await.
        task = asyncio.get_running_loop().create_task(running, context=launch.context.copy())
        return mode.conclude(await task)


class _Cancelled(Exception):
    """The supervisor asked the attempt to stop (``cancel_subagent``): ``cancelled: reason``."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"cancelled: {reason}")
        self.reason = reason


class _RunCancelled(Exception):
    """The child run's own task was cancelled (not by the supervisor)."""

    def __init__(self) -> None:
        super().__init__("cancelled")


@dataclass(eq=False)
class _BackgroundMode(ChildRunMode):
    """Background delegation under the child-run protocol: one supervisor attempt.

    Lifecycle: ``subagent_started`` and the child's stream records are
    published live on the accepting parent's bus; the terminal lifecycle event
    travels in the attempt's :class:`SubagentContextDelta`. The run races the
    attempt's cancellation; the child sees queued steering at each turn start.
    """

    registry: SubagentRegistry
    state: _SharedState
    request: ChildRequest
    control: ChildControl
    launch: _Launch | None

    def __post_init__(self) -> None:
        request = self.request
        self.name = request.subagent_name
        self.task_id = TaskId.from_string(request.attempt_id)
        self.history = self.state.history(request.agent_id) if request.continued else ()
        self.base: dict[str, Any] = {
            "agent_id": request.agent_id,
            "attempt_id": request.attempt_id,
            "background": True,
            "continued": request.continued,
            "prompt_preview": compact_preview(request.prompt),
        }
        if request.linked_task_id is not None:
            self.base["linked_task_id"] = request.linked_task_id

    # -- the protocol's steps ----------------------------------------------------------------

    def begin(self) -> ChildRun:
        request, launch, name = self.request, self.launch, self.name
        child = launch.child if launch is not None and launch.child is not None else None
        if child is None:
            child = AgentContext(metadata={SUBAGENT_STACK_KEY: [name]}, agent_name=name)
            if request.parent_run_id:
                child.parent_run_id = RunId.from_string(request.parent_run_id)
        child.agent_id = request.agent_id
        child.agent_name = name
        run_id = child.run_id = RunId.generate(self.registry._ids)
        metadata = SubagentExecutionMetadata(
            name=name,
            task_id=self.task_id,
            prompt=request.prompt,
            task_metadata={k: v for k, v in self.base.items() if k != "prompt_preview"},
            child_agent_id=request.agent_id,
            child_run_id=run_id,
            parent_agent_id=launch.parent.agent_id if launch and launch.parent else "main",
            parent_run_id=child.parent_run_id,
        )
        return ChildRun(child=child, run_id=run_id, metadata=metadata)

    def started(self, run: ChildRun) -> None:
        self.control.report_child_run_id(run.run_id.as_str())
        self.control.report_progress("running")
        started = lifecycle_event(SubagentLifecycleKind.STARTED, self.name, self.task_id, self.base)
        _publish(self.launch, started)

    async def execute(self, agent: Agent, run: ChildRun) -> AgentResult:
        """Run the child until it ends or the attempt is cancelled (:class:`_Cancelled`)."""
        sink = AgentStreamSink(self._forwarder(run), live=False)
        child_run = asyncio.ensure_future(
            agent._run_core(
                self.request.prompt,
                run.child,
                sink,
                self.history or None,
                run.run_id,
                turn_start=self._steer,
            )
        )
        stop = asyncio.ensure_future(self.control.wait_cancelled())
        try:
            await asyncio.wait({child_run, stop}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            # The supervisor aborted this task (cancellation grace ran out, or shutdown).
            await _stopped(child_run)
            raise
        finally:
            stop.cancel()
        if not child_run.done():
            await _stopped(child_run)
            raise _Cancelled(self.control.cancellation_reason or "cancelled")
        if child_run.cancelled():
            raise _RunCancelled()
        return child_run.result()

    def interrupted(self, run: ChildRun, signal: BaseException) -> None:
        # What the child consumed still reaches the parent with the cancelled result.
        self.control.hand_over(self._failed(run, "cancelled", {}, status="cancelled"))

    # -- the end, as a supervisor outcome ----------------------------------------------------

    def conclude(self, end: ChildEnd) -> ChildOutcome:
        name = self.name
        if isinstance(end, Unavailable):
            return ChildOutcome.failed(f"subagent {name!r} is unavailable: {end.error.message}")
        if isinstance(end, HookFailed):
            return self._failed(end.run, end.message(name), {"hook": end.method})
        if isinstance(end, RunFailed):
            return self._run_failed(end)
        result = end.result
        suffix = tuple(result.messages[len(self.history) :])
        self.state.remember(self.request.agent_id, tuple(result.messages))
        extra = {"result_preview": compact_preview(result.output)}
        delta = self._delta(end.run, "completed", extra, suffix)
        return ChildOutcome.completed(
            result.output,
            usage=end.run.child.usage.to_value(),
            context_delta=delta,
            child_run_id=end.run.run_id.as_str(),
        )

    def _run_failed(self, end: RunFailed) -> ChildOutcome:
        error = end.error
        extra: dict[str, Any] = {}
        if isinstance(error, _Cancelled):
            extra["reason"] = error.reason
        else:
            kind = "CancelledError" if isinstance(error, _RunCancelled) else type(error).__name__
            extra["error_type"] = kind
        if end.hook_error is not None:
            extra["hook_error"] = end.hook_error
        if isinstance(error, _Cancelled):
            return self._failed(end.run, str(error), extra, status="cancelled")
        return self._failed(end.run, f"subagent {self.name!r} failed: {error_text(error)}", extra)

    def _failed(
        self, run: ChildRun, text: str, extra: dict[str, Any], status: str = "failed"
    ) -> ChildOutcome:
        delta = self._delta(run, status, {"error": text, **extra}, ())
        return ChildOutcome.failed(
            text,
            usage=run.child.usage.to_value(),
            context_delta=delta,
            child_run_id=run.run_id.as_str(),
        )

    def _delta(
        self,
        run: ChildRun,
        status: str,
        extra: dict[str, Any],
        messages: tuple[ModelMessage, ...],
    ) -> SubagentContextDelta:
        kind = (
            SubagentLifecycleKind.COMPLETED
            if status == "completed"
            else SubagentLifecycleKind.FAILED
        )
        metadata = {
            **self.base,
            **extra,
            "request_count": run.child.usage.requests,
            "child_run_id": run.run_id.as_str(),
        }
        lifecycle = lifecycle_event(kind, self.name, self.task_id, metadata, run.run_id)
        return SubagentContextDelta(
            attempt_id=self.request.attempt_id,
            agent_id=self.request.agent_id,
            subagent_name=self.name,
            status=status,
            child_run_id=run.run_id.as_str(),
            usage=run.child.usage.copy(),
            events=(*run.child.events.events(), lifecycle),
            messages=messages,
        )

    # -- helpers -----------------------------------------------------------------------------

    async def _steer(self, messages: list[ModelMessage], _context: AgentContext) -> None:
        pending = self.control.steering()
        _append_parts(messages, [UserPromptPart(content=STEERING_PREFIX + m) for m in pending])

    def _forwarder(self, run: ChildRun) -> Callable[[AgentStreamRecord], None]:
        request, name, task_id = self.request, self.name, self.task_id

        def forward(record: AgentStreamRecord) -> None:
            source = child_source(
                record,
                agent_id=request.agent_id,
                agent_name=name,
                task_id=task_id,
                run_id=run.run_id,
                parent_run_id=run.child.parent_run_id,
            )
            metadata = {
                "subagent_name": name,
                "task_id": task_id.as_str(),
                "source_sequence": record.sequence,
                "agent_id": request.agent_id,
                "attempt_id": request.attempt_id,
            }
            _publish(self.launch, stream_record_event(record, source, metadata))

        return forward


async def _stopped(task: asyncio.Future[Any]) -> None:
    """Cancel ``task`` and wait until it has finished (whatever it raises)."""
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task
