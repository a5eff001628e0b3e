"""Asynchronous delegation: the child runner that plugs a registry into a supervisor,
and the five background tools a main agent's model calls.

Topology (DESIGN §7; decided in :func:`subagents.delegation_tools`):

- ``ASYNC``: ``delegate``, ``steer_subagent``, ``cancel_subagent``,
  ``wait_subagent``, ``subagent_info``. No blocking backend is visible.
- ``BLOCKING_AND_ASYNC``: the blocking ``delegate`` stays, the background
  delegate is ``spawn_delegate`` (the Rust SDK's name for explicit
  background delegation next to a blocking ``delegate``), plus the same
  ``steer_subagent``, ``cancel_subagent``, ``wait_subagent`` and
  ``subagent_info``.

How one background attempt runs (:class:`BackgroundSubagentRunner`): the
supervisor calls the runner on its event loop with a
:class:`~actors.ChildRequest`; the runner materializes the registered
subagent's agent exactly as blocking delegation does (tool inheritance
resolved against the delegating parent's tools, parent hooks and bundles its
capability policy selected), reports the child's run id, and runs it with a
turn-start hook that drains the attempt's queued steering into the child's
conversation as user messages (so the child's model sees steering at its next
turn boundary). Cancellation stops the child run at its next ``await``.

What the parent gets back:

- Live, while the child runs: its stream records, attributed exactly as in
  blocking mode (``source = {kind: "subagent", agent_id, agent_name, task_id,
  run_id, parent_run_id, source_sequence}``), are published on the accepting
  parent context's event bus as ``subagent_stream_record`` events (the
  parent's own stream may be long finished), after a ``subagent_started``
  event. ``task_id`` is the attempt id.
- Once, at delivery: a :class:`SubagentContextDelta` (the child's usage, its
  ``subagent_completed`` / ``subagent_failed`` lifecycle event and any events
  of its own context, and the history suffix it added) applied to the parent
  context that receives the result: by ``wait_subagent`` or at the start of
  the parent's next turn (``Agent`` injects pending results into its messages
  there). The supervisor hands each terminal result out once; the delta
  follows the same claim.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import weakref
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from actors import (
    BackgroundSubagentError,
    BackgroundSubagentSupervisor,
    ChildControl,
    ChildOutcome,
    ChildRequest,
    SupervisorLimits,
    WaitResult,
)

from ._context import SUBAGENT_STACK_KEY, AgentContext, AgentContextHandle
from ._errors import SubagentToolInheritanceError, ToolError
from ._events import (
    SUBAGENT_COMPLETED,
    SUBAGENT_FAILED,
    SUBAGENT_STARTED,
    SUBAGENT_STREAM_RECORD,
    AgentEvent,
    SubagentLifecycleEvent,
    SubagentLifecycleKind,
    compact_preview,
)
from ._hooks import SubagentExecutionMetadata, SubagentExecutionOutcome
from ._ids import RunId, TaskId
from ._models import ModelMessage, ModelRequest, UserPromptPart
from ._registry import SubagentParentTools, SubagentRegistry, _convert, _materialize_child
from ._stream import AgentStreamRecord, AgentStreamSink, AgentStreamSource
from ._tools import Tool, ToolContext, ToolRegistry, ToolResult
from ._usage import Usage

log = logging.getLogger("subagents")

DELEGATE_TOOL_NAME = "delegate"
SPAWN_DELEGATE_TOOL_NAME = "spawn_delegate"
STEER_SUBAGENT_TOOL_NAME = "steer_subagent"
CANCEL_SUBAGENT_TOOL_NAME = "cancel_subagent"
WAIT_SUBAGENT_TOOL_NAME = "wait_subagent"
SUBAGENT_INFO_TOOL_NAME = "subagent_info"

#: Prefix of a steering message as the child's model sees it.
STEERING_PREFIX = "[steering from the parent agent] "
#: Prefix of a background result injected into the parent's next turn.
BACKGROUND_RESULT_PREFIX = "[background subagent result] "

_LAUNCH_KEY = "subagents.launch"
_TURN_CLAIM_WAIT = 1.0

TurnStart = Callable[[list[ModelMessage], AgentContext], Awaitable[None]]


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


class _SharedState:
    """Per-supervisor memory: child conversations (for continuations) and the attempts
    the SDK's tools launched whose results the SDK has not delivered yet. Shared by
    every agent built on the supervisor, so a restored parent (a new agent and
    context on the same supervisor) finds them. Thread-safe.

    Context deltas are not kept here: the supervisor hands each one out with the
    delivery that claims its result (``WaitResult.context_delta``). Histories are
    kept for the ``max_histories`` most recently used agents (the supervisor's
    ``SupervisorLimits.max_known_agents``); a continuation of a forgotten agent
    starts from an empty history, as after a process restart.
    """

    def __init__(self, max_histories: int = SupervisorLimits().max_known_agents) -> None:
        self.lock = threading.Lock()
        self.max_histories = max_histories
        self.histories: OrderedDict[str, tuple[ModelMessage, ...]] = OrderedDict()
        self.launched: set[str] = set()

    def launch(self, attempt_id: str) -> None:
        with self.lock:
            self.launched.add(attempt_id)

    def launched_ids(self) -> set[str]:
        with self.lock:
            return set(self.launched)

    def forget(self, attempt_ids: set[str]) -> None:
        with self.lock:
            self.launched -= attempt_ids

    def history(self, agent_id: str) -> tuple[ModelMessage, ...]:
        with self.lock:
            messages = self.histories.get(agent_id)
            if messages is None:
                return ()
            self.histories.move_to_end(agent_id)
            return messages

    def remember(self, agent_id: str, messages: tuple[ModelMessage, ...]) -> None:
        with self.lock:
            self.histories[agent_id] = messages
            self.histories.move_to_end(agent_id)
            while len(self.histories) > self.max_histories:
                self.histories.popitem(last=False)


_STATES: weakref.WeakKeyDictionary[BackgroundSubagentSupervisor, _SharedState] = (
    weakref.WeakKeyDictionary()
)
_STATES_LOCK = threading.Lock()


def _shared_state(supervisor: BackgroundSubagentSupervisor | None) -> _SharedState:
    if supervisor is None:
        return _SharedState()
    with _STATES_LOCK:
        state = _STATES.get(supervisor)
        if state is None:
            state = _STATES[supervisor] = _SharedState(supervisor.limits.max_known_agents)
        return state


# -- the launch: what the delegating turn hands to the child, in process ------------------------


@dataclass(frozen=True, slots=True)
class _Launch:
    """Carried in ``ChildRequest.metadata`` (in process only, never persisted)."""

    parent: AgentContext | None
    child: AgentContext | None
    loop: asyncio.AbstractEventLoop | None
    parent_tools: ToolRegistry


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
    resumes it. The subagent's execution hooks run around the child as in
    blocking delegation (``task_id`` is the attempt id); a raising hook ends
    the attempt ``failed``, naming the hook. A subagent the registry does not
    know, or whose required tools the parent cannot supply, ends the attempt
    ``failed``; an exception in the child run ends it ``failed`` with the
    error text.
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
        found = request.metadata.get(_LAUNCH_KEY)
        launch = found if isinstance(found, _Launch) else None
        config = self.registry.subagent(name)
        if config is None:
            return ChildOutcome.failed(
                f"no subagent named {name!r}; registered: {self.registry.names()}"
            )
        parent_tools = ToolRegistry() if launch is None else launch.parent_tools
        try:
            inherited = config.tool_policy().resolve(parent_tools)
        except SubagentToolInheritanceError as error:
            return ChildOutcome.failed(f"subagent {name!r} is unavailable: {error.message}")
        agent = _materialize_child(config, inherited)

        child = launch.child if launch is not None and launch.child is not None else None
        if child is None:
            child = AgentContext(metadata={SUBAGENT_STACK_KEY: [name]}, agent_name=name)
            if request.parent_run_id:
                child.parent_run_id = RunId.from_string(request.parent_run_id)
        child.agent_id = request.agent_id
        child.agent_name = name
        run_id = RunId.generate(self.registry._ids)
        child.run_id = run_id
        if config.environment_provider is not None:
            config.environment_provider.attach(child)
        task_id = TaskId.from_string(request.attempt_id)
        control.report_child_run_id(run_id.as_str())
        control.report_progress("running")

        base: dict[str, Any] = {
            "agent_id": request.agent_id,
            "attempt_id": request.attempt_id,
            "background": True,
            "continued": request.continued,
            "prompt_preview": compact_preview(request.prompt),
        }
        if request.linked_task_id is not None:
            base["linked_task_id"] = request.linked_task_id
        _publish(
            launch,
            AgentEvent(
                kind=SUBAGENT_STARTED,
                payload=SubagentLifecycleEvent(
                    kind=SubagentLifecycleKind.STARTED, name=name, task_id=task_id, metadata=base
                ).to_value(),
            ),
        )

        def forward(record: AgentStreamRecord) -> None:
            source = record.source or AgentStreamSource(
                agent_id=request.agent_id,
                agent_name=name,
                task_id=task_id,
                run_id=run_id,
                parent_run_id=child.parent_run_id,
                source_sequence=record.sequence,
            )
            attributed = AgentStreamRecord(
                sequence=record.sequence, kind=record.kind, payload=record.payload, source=source
            )
            _publish(
                launch,
                AgentEvent(
                    kind=SUBAGENT_STREAM_RECORD,
                    payload=attributed.to_value(),
                    metadata={
                        "subagent_name": name,
                        "task_id": task_id.as_str(),
                        "source_sequence": record.sequence,
                        "agent_id": request.agent_id,
                        "attempt_id": request.attempt_id,
                    },
                ),
            )

        async def steer(messages: list[ModelMessage], _context: AgentContext) -> None:
            pending = control.steering()
            _append_parts(messages, [UserPromptPart(content=STEERING_PREFIX + m) for m in pending])

        history = self._state.history(request.agent_id) if request.continued else ()

        def delta(status: str, extra: dict[str, Any], messages: tuple[ModelMessage, ...]) -> Any:
            kind = (
                SubagentLifecycleKind.COMPLETED
                if status == "completed"
                else SubagentLifecycleKind.FAILED
            )
            lifecycle = AgentEvent(
                kind=SUBAGENT_COMPLETED if status == "completed" else SUBAGENT_FAILED,
                payload=SubagentLifecycleEvent(
                    kind=kind,
                    name=name,
                    task_id=task_id,
                    run_id=run_id,
                    metadata={
                        **base,
                        **extra,
                        "request_count": child.usage.requests,
                        "child_run_id": run_id.as_str(),
                    },
                ).to_value(),
            )
            return SubagentContextDelta(
                attempt_id=request.attempt_id,
                agent_id=request.agent_id,
                subagent_name=name,
                status=status,
                child_run_id=run_id.as_str(),
                usage=child.usage.copy(),
                events=(*child.events.events(), lifecycle),
                messages=messages,
            )

        def failed(text: str, extra: dict[str, Any], status: str = "failed") -> ChildOutcome:
            made = delta(status, {"error": text, **extra}, ())
            return ChildOutcome.failed(
                text,
                usage=child.usage.to_value(),
                context_delta=made,
                child_run_id=run_id.as_str(),
            )

        hooks = config.execution_hooks
        metadata = SubagentExecutionMetadata(
            name=name,
            task_id=task_id,
            prompt=request.prompt,
            task_metadata={k: v for k, v in base.items() if k != "prompt_preview"},
            child_agent_id=request.agent_id,
            child_run_id=run_id,
            parent_agent_id=launch.parent.agent_id if launch and launch.parent else "main",
            parent_run_id=child.parent_run_id,
        )

        async def after(outcome: SubagentExecutionOutcome) -> str | None:
            """Run every after-hook; the first failure as text (the others still run)."""
            first: str | None = None
            for hook in hooks:
                try:
                    await hook.after_subagent_run(metadata, child, outcome)
                except Exception as error:
                    first = first or f"{type(hook).__name__}: {error}"
            return first

        for hook in hooks:
            try:
                await hook.before_subagent_run(metadata, child)
            except Exception as error:
                return failed(
                    f"before_subagent_run hook {type(hook).__name__} failed for subagent "
                    f"{name!r}: {error}",
                    {"hook": "before_subagent_run"},
                )

        sink = AgentStreamSink(forward, live=False)
        run = asyncio.ensure_future(
            agent._run_core(request.prompt, child, sink, history or None, run_id, turn_start=steer)
        )
        stop = asyncio.ensure_future(control.wait_cancelled())
        try:
            await asyncio.wait({run, stop}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            # The supervisor aborted this task (cancellation grace ran out, or shutdown).
            # Hooks are not awaited: a cancelled task must not start new waits.
            run.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await run
            # What the child consumed still reaches the parent with the cancelled result.
            control.hand_over(failed("cancelled", {}, status="cancelled"))
            raise
        finally:
            stop.cancel()
        if not run.done():
            run.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await run
            reason = control.cancellation_reason or "cancelled"
            text = f"cancelled: {reason}"
            hook_error = await after(SubagentExecutionOutcome.Failed(error=text, run_id=run_id))
            extra: dict[str, Any] = {"reason": reason}
            if hook_error is not None:
                extra["hook_error"] = hook_error
            return failed(text, extra, status="cancelled")
        failure = None if run.cancelled() else run.exception()
        if run.cancelled() or failure is not None:
            text = "cancelled" if failure is None else (str(failure) or type(failure).__name__)
            kind = type(failure).__name__ if failure is not None else "CancelledError"
            hook_error = await after(SubagentExecutionOutcome.Failed(error=text, run_id=run_id))
            extra = {"error_type": kind}
            if hook_error is not None:
                extra["hook_error"] = hook_error
            return failed(f"subagent {name!r} failed: {text}", extra)
        result = run.result()
        hook_error = await after(
            SubagentExecutionOutcome.Completed(
                output=result.output, usage=result.usage.copy(), run_id=result.run_id
            )
        )
        if hook_error is not None:
            return failed(
                f"after_subagent_run hook {hook_error} failed for subagent {name!r}",
                {"hook": "after_subagent_run"},
            )
        suffix = tuple(result.messages[len(history) :])
        self._state.remember(request.agent_id, tuple(result.messages))
        made = delta("completed", {"result_preview": compact_preview(result.output)}, suffix)
        return ChildOutcome.completed(
            result.output,
            usage=child.usage.to_value(),
            context_delta=made,
            child_run_id=run_id.as_str(),
        )


# -- tool arguments -----------------------------------------------------------------------------


class _AsyncDelegateArgs(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    subagent_name: str | None = None
    name: str | None = None  # alias of subagent_name
    prompt: str
    agent_id: str | None = None
    linked_task_id: str | None = None


class _SteerArgs(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    attempt_id: str
    message: str
    steering_id: str | None = None


class _CancelArgs(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    attempt_id: str
    reason: str | None = None
    cancellation_id: str | None = None


class _WaitArgs(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    attempt_id: str | None = None
    timeout_seconds: float | None = 30.0


class _NoArgs(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    pass


# -- typed supervisor errors as tool errors -----------------------------------------------------

_HINTS: dict[str, str] = {
    "Closing": "Background delegation is closed: the supervisor is shutting down.",
    "QuotaExceeded": (
        "Too many background subagents are active or have undelivered results. "
        "Wait for one (wait_subagent) before delegating more."
    ),
    "ActiveConversation": (
        "This agent_id already has an active attempt: steer it, cancel it or wait for it "
        "before continuing the agent."
    ),
    "NotFound": (
        "Continue only an agent_id that delegate returned for this subagent; omit agent_id "
        "to start a new agent."
    ),
    "Terminal": "The attempt already ended; use wait_subagent to read its result.",
    "PromptTooLarge": "Shorten the prompt.",
    "SteeringTooLarge": "Shorten the steering message.",
    "SteeringQueueFull": "Too much steering is queued; wait for the child's next turn.",
    "CancellationReasonTooLarge": "Shorten the cancellation reason.",
    "IdempotencyConflict": "That id was already used with different content; use a new id.",
    "DeliveryClaimed": "Another consumer is delivering this result.",
    "Delivered": "The result was already delivered to you.",
    "Durability": "The store did not confirm the operation; nothing changed. Retry later.",
    "ShutdownDeadline": "The supervisor is shutting down.",
}
_SHOWN_FIELDS = (
    "attempt_id",
    "agent_id",
    "subagent_name",
    "execution_status",
    "steering_id",
    "cancellation_id",
    "size_bytes",
    "limit",
    "active",
    "undelivered",
    "known_attempt_ids",
)


def _variant(error: BackgroundSubagentError) -> str:
    for name in _HINTS:
        variant = getattr(BackgroundSubagentError, name, None)
        if isinstance(variant, type) and isinstance(error, variant):
            return name
    return type(error).__name__


def _tool_error(tool: str, error: BackgroundSubagentError) -> ToolError:
    kind = _variant(error)
    shown = {k: error.fields[k] for k in _SHOWN_FIELDS if k in error.fields}
    detail = ", ".join(f"{k}={v!r}" for k, v in shown.items())
    text = f"{tool} refused: {error.message}" + (f" ({detail})" if detail else "") + "."
    hint = _HINTS.get(kind)
    if kind == "NotFound" and "attempt_id" in error.fields:
        hint = "Use an attempt_id that delegate returned (subagent_info lists them)."
    return ToolError(f"{text} {hint}" if hint else text, tool=tool, error_kind=kind, **shown)


# -- the binding of one agent's registry to a supervisor ----------------------------------------


class _AsyncDelegation:
    """One agent's async delegation: its registry, the supervisor, the runner adapter.

    Built by :func:`subagents.delegation_tools` and held by the agent, which
    calls :meth:`deliver_pending` at the start of every turn.
    """

    def __init__(
        self, registry: SubagentRegistry, supervisor: BackgroundSubagentSupervisor
    ) -> None:
        self.registry = registry
        self.supervisor = supervisor
        self.runner = BackgroundSubagentRunner(registry, supervisor)
        self.state = _shared_state(supervisor)

    @staticmethod
    def apply(context: AgentContext | None, waited: WaitResult) -> bool:
        """Apply the delta a delivering wait handed out into ``context`` (the
        supervisor hands each delta out once, with the delivery); whether one was."""
        delta = waited.context_delta
        if not isinstance(delta, SubagentContextDelta) or context is None:
            return False
        delta.apply(context)
        return True

    async def deliver_pending(
        self, messages: list[ModelMessage], context: AgentContext
    ) -> list[WaitResult]:
        """The parent's turn boundary: deliver the pending results of attempts the
        SDK's background tools launched on this supervisor (and nobody else claimed),
        apply each delta to ``context`` once, and append each result to the latest
        request as a user message. Nothing to do (and no store call) when every
        launched attempt was delivered already.

        Attempts a host accepted directly through the supervisor are the host's
        to deliver (RPC links each late result to its own continuation run), so
        they are left alone. Store trouble leaves results pending (logged).
        """
        launched = self.state.launched_ids()
        if not launched:
            return []
        try:
            info = await self.supervisor.info()
        except BackgroundSubagentError.Closing:
            # Shut down: the results stay in the store (take_pending still reads them).
            return []
        except BackgroundSubagentError as error:
            log.warning("pending background results stay pending: %s", error)
            return []
        active = {a.attempt_id for a in info.active}
        ready = [r.attempt_id for r in info.retained if r.attempt_id in launched]
        # Neither running nor pending: delivered elsewhere (a callback) or lost.
        self.state.forget(launched - active - set(ready))
        delivered: list[WaitResult] = []
        for attempt_id in ready:
            try:
                # Terminal already: this returns at once (the bound only covers the
                # moment between the terminal commit and the supervisor seeing it).
                waited = await self.supervisor.wait(attempt_id, _TURN_CLAIM_WAIT)
            except BackgroundSubagentError as error:
                log.warning("background result %s stays pending: %s", attempt_id, error)
                continue
            if _delivered_elsewhere(waited):
                self.state.forget({attempt_id})
            if not _delivered_by(waited):
                continue
            self.state.forget({attempt_id})
            self.apply(context, waited)
            delivered.append(waited)
        _append_parts(
            messages,
            [
                UserPromptPart(
                    content=BACKGROUND_RESULT_PREFIX
                    + msgspec.json.encode(waited.to_value()).decode()
                )
                for waited in delivered
            ],
        )
        return delivered


def _delivered_by(waited: WaitResult) -> bool:
    """Whether this wait itself delivered a terminal result."""
    return (
        waited.attempt_id is not None
        and not waited.timed_out
        and not waited.owned_elsewhere
        and waited.status not in ("not_found", "summary")
        and waited.delivery_status == "delivered"
    )


def _delivered_elsewhere(waited: WaitResult) -> bool:
    return waited.owned_elsewhere and waited.delivery_status == "delivered"


# -- the tools ----------------------------------------------------------------------------------


def _parent_context(context: ToolContext) -> AgentContext | None:
    handle = context.dependencies.get(AgentContextHandle)
    return handle.context if handle is not None else context.dependencies.get(AgentContext)


def _convert_args(tool: str, arguments: Any, kind: type[Any]) -> Any:
    return _convert(tool, arguments, kind)


class _BackgroundTool(Tool):
    def __init__(self, delegation: _AsyncDelegation, name: str, description: str) -> None:
        self.delegation = delegation
        self.name = name
        self.description = description
        self.metadata = {"kind": "delegation", "main_agent_only": True, "background": True}

    @property
    def supervisor(self) -> BackgroundSubagentSupervisor:
        return self.delegation.supervisor

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class AsyncDelegateTool(_BackgroundTool):
    """Background ``delegate``: ``{subagent_name (alias name), prompt, agent_id?,
    linked_task_id?}`` -> ``{status: accepted|continued, subagent_name, attempt_id,
    agent_id, linked_task_id, message}``; returns at once, the child runs under the
    supervisor. Unknown fields are rejected; an ``agent_id`` the supervisor does not
    know for this subagent is refused (:class:`ToolError`)."""

    def __init__(self, delegation: _AsyncDelegation, name: str = DELEGATE_TOOL_NAME) -> None:
        super().__init__(
            delegation,
            name,
            "Start a registered subagent in the background and return at once with its "
            "attempt_id and agent_id. Do not poll: its result is delivered to you "
            "automatically. Pass agent_id (from an earlier delegate) to continue that "
            "agent's conversation after its previous attempt ended.",
        )
        roster = delegation.registry.names()
        name_schema: dict[str, Any] = {
            "type": "string",
            "description": "Name of the registered subagent to delegate to.",
        }
        if roster:
            name_schema["enum"] = roster
        self.parameters_schema = {
            "type": "object",
            "properties": {
                "subagent_name": name_schema,
                "prompt": {"type": "string", "description": "The task for the subagent."},
                "agent_id": {
                    "type": "string",
                    "description": "Continue this background agent (an agent_id delegate "
                    "returned earlier). Omit to start a new agent.",
                },
                "linked_task_id": {
                    "type": "string",
                    "description": "Optional id of the task this work belongs to.",
                },
            },
            "required": ["subagent_name", "prompt"],
            "additionalProperties": False,
        }

    def validate(self, arguments: Any) -> _AsyncDelegateArgs:
        args: _AsyncDelegateArgs = _convert_args(self.name, arguments, _AsyncDelegateArgs)
        if args.subagent_name is None and args.name is None:
            raise ToolError(
                f"tool {self.name!r} needs subagent_name", tool=self.name, path="$.subagent_name"
            )
        if args.subagent_name is not None and args.name not in (None, args.subagent_name):
            raise ToolError(
                f"tool {self.name!r}: name is an alias of subagent_name; give one",
                tool=self.name,
                path="$.name",
            )
        return args

    async def invoke(self, context: ToolContext, arguments: Any) -> ToolResult:
        args: _AsyncDelegateArgs = arguments
        name = args.subagent_name if args.subagent_name is not None else args.name
        assert name is not None
        registry = self.delegation.registry
        if not registry.is_available(name):
            raise ToolError(
                f"{self.name} refused: no subagent named {name!r}; "
                f"registered subagents: {registry.names()}",
                tool=self.name,
                error_kind="NotFound",
                subagent_name=name,
            )
        parent = _parent_context(context)
        if parent is not None and parent.subagent_stack:
            raise ToolError(
                f"{self.name} refused: background delegation is for the main agent only",
                tool=self.name,
                error_kind="RecursiveSubagentDelegation",
            )
        tools = context.dependencies.get(SubagentParentTools)
        launch = _Launch(
            parent=parent,
            child=None if parent is None else parent.subagent_context(name, name),
            loop=asyncio.get_running_loop(),
            parent_tools=ToolRegistry() if tools is None else tools.tools,
        )
        try:
            accepted = await self.supervisor.delegate(
                name,
                args.prompt,
                args.agent_id,
                args.linked_task_id,
                runner=self.delegation.runner,
                parent_run_id=context.run_id.as_str(),
                metadata={_LAUNCH_KEY: launch},
            )
        except BackgroundSubagentError as error:
            raise _tool_error(self.name, error) from error
        self.delegation.state.launch(accepted.attempt_id)
        return ToolResult(accepted.to_value(), {"background": True})


class SteerSubagentTool(_BackgroundTool):
    """``steer_subagent {attempt_id, message, steering_id?}`` -> receipt ``queued``.

    The child sees the message at its next turn boundary. The same
    ``steering_id`` and message return the same receipt and queue once.
    """

    def __init__(self, delegation: _AsyncDelegation, name: str = STEER_SUBAGENT_TOOL_NAME) -> None:
        super().__init__(
            delegation,
            name,
            "Send guidance to a running background subagent; it sees the message at its "
            "next turn. Give a steering_id to make a retry safe.",
        )
        self.parameters_schema = {
            "type": "object",
            "properties": {
                "attempt_id": {"type": "string", "description": "The attempt to steer."},
                "message": {"type": "string", "description": "The guidance."},
                "steering_id": {"type": "string", "description": "Optional idempotency id."},
            },
            "required": ["attempt_id", "message"],
            "additionalProperties": False,
        }

    def validate(self, arguments: Any) -> _SteerArgs:
        result: _SteerArgs = _convert_args(self.name, arguments, _SteerArgs)
        return result

    async def invoke(self, context: ToolContext, arguments: Any) -> ToolResult:
        args: _SteerArgs = arguments
        try:
            receipt = await self.supervisor.steer(args.attempt_id, args.message, args.steering_id)
        except BackgroundSubagentError as error:
            raise _tool_error(self.name, error) from error
        return ToolResult(receipt.to_value())


class CancelSubagentTool(_BackgroundTool):
    """``cancel_subagent {attempt_id, reason?, cancellation_id?}`` ->
    ``cancellation_requested``, or the terminal status the attempt already had."""

    def __init__(self, delegation: _AsyncDelegation, name: str = CANCEL_SUBAGENT_TOOL_NAME) -> None:
        super().__init__(
            delegation,
            name,
            "Ask a background subagent to stop. Its (cancelled) result is still delivered.",
        )
        self.parameters_schema = {
            "type": "object",
            "properties": {
                "attempt_id": {"type": "string", "description": "The attempt to cancel."},
                "reason": {"type": "string", "description": "Why (kept: the first reason)."},
                "cancellation_id": {
                    "type": "string",
                    "description": "Optional idempotency id.",
                },
            },
            "required": ["attempt_id"],
            "additionalProperties": False,
        }

    def validate(self, arguments: Any) -> _CancelArgs:
        result: _CancelArgs = _convert_args(self.name, arguments, _CancelArgs)
        return result

    async def invoke(self, context: ToolContext, arguments: Any) -> ToolResult:
        args: _CancelArgs = arguments
        try:
            cancelled = await self.supervisor.cancel(
                args.attempt_id, args.reason, args.cancellation_id
            )
        except BackgroundSubagentError as error:
            raise _tool_error(self.name, error) from error
        return ToolResult(cancelled.to_value())


class WaitSubagentTool(_BackgroundTool):
    """``wait_subagent {attempt_id?, timeout_seconds=30}``: one bounded wait.

    ``timeout_seconds`` is clamped to [0, 300] (non-finite: 300). The shapes
    are those of :class:`~actors.WaitResult`. A terminal result delivered by
    this wait also applies the child's context delta to the parent context.
    """

    def __init__(self, delegation: _AsyncDelegation, name: str = WAIT_SUBAGENT_TOOL_NAME) -> None:
        super().__init__(
            delegation,
            name,
            "Wait once, bounded, for a background subagent's result. Call it only when "
            "you are blocked on that result; never in a polling loop. Without attempt_id "
            "it waits for the next result and summarizes all attempts.",
        )
        self.parameters_schema = {
            "type": "object",
            "properties": {
                "attempt_id": {"type": "string", "description": "The attempt to wait for."},
                "timeout_seconds": {
                    "type": "number",
                    "description": "Longest wait in seconds (0 to 300, default 30).",
                },
            },
            "additionalProperties": False,
        }

    def validate(self, arguments: Any) -> _WaitArgs:
        result: _WaitArgs = _convert_args(self.name, arguments, _WaitArgs)
        return result

    async def invoke(self, context: ToolContext, arguments: Any) -> ToolResult:
        args: _WaitArgs = arguments
        try:
            # An unknown or a finished attempt answers at once.
            # ``wait`` clamps the timeout itself.
            waited = await self.supervisor.wait(args.attempt_id, args.timeout_seconds)
        except BackgroundSubagentError as error:
            raise _tool_error(self.name, error) from error
        metadata: dict[str, Any] = {}
        if waited.attempt_id is not None and (
            _delivered_by(waited) or _delivered_elsewhere(waited)
        ):
            self.delegation.state.forget({waited.attempt_id})
        if _delivered_by(waited) and waited.attempt_id is not None:
            applied = self.delegation.apply(_parent_context(context), waited)
            metadata["context_mutated"] = applied
        return ToolResult(waited.to_value(), metadata)


class BackgroundSubagentInfoTool(_BackgroundTool):
    """``subagent_info`` of the async topology: the registry's report plus
    ``background: {active: [...], retained: [...]}``."""

    def __init__(self, delegation: _AsyncDelegation, name: str = SUBAGENT_INFO_TOOL_NAME) -> None:
        super().__init__(
            delegation,
            name,
            "List the registered subagents (availability, inherited tools) and the "
            "background attempts: active ones and retained undelivered results.",
        )
        self.parameters_schema = {"type": "object", "properties": {}, "additionalProperties": False}

    def validate(self, arguments: Any) -> _NoArgs:
        result: _NoArgs = _convert_args(self.name, arguments, _NoArgs)
        return result

    async def invoke(self, context: ToolContext, arguments: Any) -> ToolResult:
        tools = context.dependencies.get(SubagentParentTools)
        report = self.delegation.registry.info(None if tools is None else tools.tools)
        try:
            background = await self.supervisor.info()
        except BackgroundSubagentError as error:
            raise _tool_error(self.name, error) from error
        return ToolResult({"subagents": report, "background": background.to_value()})


def _async_tools(delegation: _AsyncDelegation, *, delegate_name: str) -> list[Tool]:
    """The background tool set, the background delegate named ``delegate_name``."""
    return [
        AsyncDelegateTool(delegation, delegate_name),
        SteerSubagentTool(delegation),
        CancelSubagentTool(delegation),
        WaitSubagentTool(delegation),
        BackgroundSubagentInfoTool(delegation),
    ]
