"""Subagents: configuration, the registry that runs delegations, and the ``delegate`` tool.

A delegation (``SubagentRegistry.delegate_task``) runs the named child agent
to completion on the caller's event loop, in a child context that shares the
parent's dependencies, carries the subagent stack, and adds its usage back to
the parent. It publishes lifecycle events on the parent context:
``subagent_started`` → ``subagent_completed`` or ``subagent_failed``.
"""

from __future__ import annotations

import asyncio
import enum
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec

from storage import Clock, IdSource, RandomIds, SystemClock

from ._context import AgentContext, AgentContextHandle
from ._errors import (
    AgentConfigError,
    MissingSubagent,
    RecursiveSubagentDelegation,
    SubagentError,
    SubagentHookError,
    SubagentRunFailed,
    ToolArgumentError,
    ToolError,
)
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
from ._hooks import SubagentExecutionHook, SubagentExecutionMetadata, SubagentExecutionOutcome
from ._ids import RunId, TaskId
from ._result import AgentResult
from ._stream import AgentStreamRecord, AgentStreamSink, AgentStreamSource
from ._sync import run_blocking
from ._task import SubagentResult, SubagentTask
from ._tools import Tool, ToolContext, ToolResult

if TYPE_CHECKING:
    from ._agent import Agent

DELEGATE_TOOL_NAME = "delegate"
# A hard ceiling even when nested delegation is allowed: recursion must end.
MAX_SUBAGENT_DEPTH = 8


class SubagentDelegationMode(enum.Enum):
    """Which delegation tools an agent with subagents exposes to its model.

    ``BLOCKING`` (default) installs ``delegate``, which runs the child and
    returns its output. ``DISABLED`` installs nothing. ``ASYNC`` and
    ``BLOCKING_AND_ASYNC`` need a background supervisor (actors/) and are not
    available yet: building with them raises :class:`AgentConfigError`.
    """

    DISABLED = "disabled"
    BLOCKING = "blocking"
    ASYNC = "async"
    BLOCKING_AND_ASYNC = "blocking_and_async"


class SubagentConfig:
    """A named, executable subagent: the child ``agent`` plus delegation policy.

    Immutable: every ``with_*`` returns a new config. Tool and capability
    inheritance policies are stored as given and applied by a later issue.
    """

    __slots__ = (
        "agent",
        "capability_inheritance",
        "description",
        "execution_hooks",
        "name",
        "nested_delegation",
        "tool_inheritance",
    )

    def __init__(self, name: str, agent: Agent, description: str | None = None) -> None:
        if not name or not isinstance(name, str):
            raise AgentConfigError("a subagent needs a non-empty name", name=name)
        self.name = name
        self.agent = agent
        self.description = description
        self.execution_hooks: tuple[SubagentExecutionHook, ...] = ()
        self.nested_delegation = False
        self.tool_inheritance: object | None = None
        self.capability_inheritance: object | None = None

    def _replace(self, **changes: Any) -> SubagentConfig:
        clone = SubagentConfig.__new__(SubagentConfig)
        for slot in SubagentConfig.__slots__:
            setattr(clone, slot, changes.get(slot, getattr(self, slot)))
        return clone

    def with_description(self, description: str) -> SubagentConfig:
        return self._replace(description=description)

    def with_execution_hook(self, hook: SubagentExecutionHook) -> SubagentConfig:
        """Add a hook; hooks run in the order they were added."""
        return self._replace(execution_hooks=(*self.execution_hooks, hook))

    def with_nested_delegation(self, allowed: bool) -> SubagentConfig:
        """Allow delegating to this subagent from inside another subagent's run."""
        return self._replace(nested_delegation=bool(allowed))

    def with_tool_inheritance(self, policy: object) -> SubagentConfig:
        return self._replace(tool_inheritance=policy)

    def with_capability_inheritance(self, policy: object) -> SubagentConfig:
        return self._replace(capability_inheritance=policy)

    def __repr__(self) -> str:
        return f"SubagentConfig({self.name!r})"


class SubagentRegistry:
    """Named subagents and the blocking delegation that runs them.

    Immutable: ``with_subagent`` returns a new registry. Delegations run on
    the caller's event loop; concurrent delegations on one registry are safe
    (it holds no per-run state). ``clock`` measures ``duration_seconds``;
    ``ids`` draws task and child run ids.
    """

    __slots__ = ("_by_name", "_clock", "_ids")

    def __init__(self, *, clock: Clock | None = None, ids: IdSource | None = None) -> None:
        self._by_name: dict[str, SubagentConfig] = {}
        self._clock: Clock = SystemClock() if clock is None else clock
        self._ids: IdSource = RandomIds() if ids is None else ids

    def _clone(self) -> SubagentRegistry:
        clone = SubagentRegistry(clock=self._clock, ids=self._ids)
        clone._by_name = self._by_name.copy()
        return clone

    def with_subagent(self, subagent: SubagentConfig) -> SubagentRegistry:
        if subagent.name in self._by_name:
            raise AgentConfigError(f"duplicate subagent name {subagent.name!r}", name=subagent.name)
        clone = self._clone()
        clone._by_name[subagent.name] = subagent
        return clone

    def with_clock(self, clock: Clock) -> SubagentRegistry:
        clone = self._clone()
        clone._clock = clock
        return clone

    def with_ids(self, ids: IdSource) -> SubagentRegistry:
        clone = self._clone()
        clone._ids = ids
        return clone

    def subagents(self) -> list[SubagentConfig]:
        return list(self._by_name.values())

    def names(self) -> list[str]:
        return list(self._by_name)

    def subagent(self, name: str) -> SubagentConfig | None:
        return self._by_name.get(name)

    def is_available(self, name: str) -> bool:
        return name in self._by_name

    def is_empty(self) -> bool:
        return not self._by_name

    def __len__(self) -> int:
        return len(self._by_name)

    def delegate_tool(self) -> Tool:
        """The typed blocking ``delegate`` tool bound to this registry."""
        return DelegateTool(self)

    async def delegate(self, name: str, prompt: str, context: AgentContext) -> AgentResult:
        """Run subagent ``name`` on ``prompt``; return the child's :class:`AgentResult`."""
        task = SubagentTask(prompt, id=TaskId.generate(self._ids))
        return (await self.delegate_task(name, task, context)).result

    async def delegate_task(
        self, name: str, task: SubagentTask, context: AgentContext
    ) -> SubagentResult:
        """Run subagent ``name`` on ``task`` and return the delegation envelope.

        ``context`` is the parent context, mutated in place: it receives the
        lifecycle events (and the child's stream records as
        ``subagent_stream_record`` events) and the child's usage. Raises
        :class:`MissingSubagent`, :class:`RecursiveSubagentDelegation`,
        :class:`SubagentHookError` or :class:`SubagentRunFailed`; each is
        preceded by a ``subagent_failed`` event.
        """
        return await self._delegate(name, task, context, None)

    async def _delegate(
        self,
        name: str,
        task: SubagentTask,
        context: AgentContext,
        stream_sink: AgentStreamSink | None,
    ) -> SubagentResult:
        subagent = self._by_name.get(name)
        if subagent is None:
            _publish(
                context,
                SubagentLifecycleEvent(
                    kind=SubagentLifecycleKind.FAILED,
                    name=name,
                    task_id=task.id,
                    metadata={**task.metadata, "error": "missing_subagent"},
                ),
            )
            raise MissingSubagent(
                f"no subagent named {name!r}",
                name=name,
                task_id=task.id.as_str(),
                registered=self.names(),
            )
        stack = context.subagent_stack
        if stack and (not subagent.nested_delegation or len(stack) >= MAX_SUBAGENT_DEPTH):
            _publish(
                context,
                SubagentLifecycleEvent(
                    kind=SubagentLifecycleKind.FAILED,
                    name=name,
                    task_id=task.id,
                    metadata={
                        **task.metadata,
                        "error": "recursive_subagent_delegation",
                        "stack": stack,
                    },
                ),
            )
            raise RecursiveSubagentDelegation(
                f"subagent {name!r} cannot be delegated to from inside subagent {stack[-1]!r} "
                "(enable with SubagentConfig.with_nested_delegation(True))"
                if not subagent.nested_delegation
                else f"subagent nesting deeper than {MAX_SUBAGENT_DEPTH} refused",
                name=name,
                task_id=task.id.as_str(),
                stack=stack,
            )

        run = _Delegation(self, name, task, context, stream_sink)
        run.publish(SubagentLifecycleKind.STARTED, None, run.base)
        hooks = subagent.execution_hooks
        metadata: SubagentExecutionMetadata | None = None
        if hooks:
            metadata = SubagentExecutionMetadata(
                name=name,
                task_id=task.id,
                prompt=task.prompt,
                task_metadata=dict(task.metadata),
                child_agent_id=run.child.agent_id,
                child_run_id=run.child_run_id,
                parent_agent_id=context.agent_id,
                parent_run_id=context.run_id,
            )
            for hook in hooks:
                try:
                    await hook.before_subagent_run(metadata, run.child)
                except Exception as error:
                    raise run.hook_failed(hook, "before_subagent_run", error) from error

        try:
            try:
                result = await subagent.agent._run_core(
                    task.prompt, run.child, run.sink, None, run.child_run_id
                )
            finally:
                context.usage.incr(run.child.usage)
        except Exception as error:
            extra: dict[str, Any] = {
                "error": str(error) or type(error).__name__,
                "error_type": type(error).__name__,
            }
            if metadata is not None:
                outcome = SubagentExecutionOutcome.Failed(
                    error=extra["error"], run_id=run.child_run_id
                )
                for hook in hooks:
                    try:
                        await hook.after_subagent_run(metadata, run.child, outcome)
                    except Exception as hook_error:
                        extra["hook_error"] = f"{type(hook).__name__}: {hook_error}"
            run.fail(extra)
            raise SubagentRunFailed(
                f"subagent {name!r} failed: {error}",
                name=name,
                task_id=task.id.as_str(),
                child_run_id=run.child_run_id.as_str(),
            ) from error
        except BaseException as signal:
            # Cancellation and kernel signals pass through untouched, but the
            # parent still learns the child stopped. Hooks are not awaited: a
            # cancelled task must not start new waits.
            cancelled = isinstance(signal, asyncio.CancelledError)
            run.fail({"error": "cancelled" if cancelled else type(signal).__name__})
            raise

        if metadata is not None:
            completed = SubagentExecutionOutcome.Completed(
                output=result.output, usage=result.usage.copy(), run_id=result.run_id
            )
            for hook in hooks:
                try:
                    await hook.after_subagent_run(metadata, run.child, completed)
                except Exception as error:
                    raise run.hook_failed(hook, "after_subagent_run", error) from error

        run.republish()
        completion = {
            **run.base,
            "duration_seconds": run.elapsed(),
            "request_count": run.child.usage.requests,
            "result_preview": compact_preview(result.output),
        }
        run.publish(SubagentLifecycleKind.COMPLETED, result.run_id, completion)
        return SubagentResult(name, task, result)

    # Sync twins for scripts (each runs its own event loop).
    def delegate_sync(self, name: str, prompt: str, context: AgentContext) -> AgentResult:
        return run_blocking(self.delegate(name, prompt, context))

    def delegate_task_sync(
        self, name: str, task: SubagentTask, context: AgentContext
    ) -> SubagentResult:
        return run_blocking(self.delegate_task(name, task, context))

    def __repr__(self) -> str:
        return f"SubagentRegistry({self.names()!r})"


def _publish(context: AgentContext, event: SubagentLifecycleEvent) -> None:
    kind = _EVENT_KINDS[event.kind]
    context.events.publish(AgentEvent(kind=kind, payload=event.to_value()))


_EVENT_KINDS = {
    SubagentLifecycleKind.STARTED: SUBAGENT_STARTED,
    SubagentLifecycleKind.COMPLETED: SUBAGENT_COMPLETED,
    SubagentLifecycleKind.FAILED: SUBAGENT_FAILED,
}


class _Delegation:
    """Per-delegation state: the child context, its sink, and the event helpers."""

    __slots__ = (
        "base",
        "child",
        "child_run_id",
        "context",
        "name",
        "records",
        "registry",
        "sink",
        "started_at",
        "task",
    )

    def __init__(
        self,
        registry: SubagentRegistry,
        name: str,
        task: SubagentTask,
        context: AgentContext,
        stream_sink: AgentStreamSink | None,
    ) -> None:
        self.registry = registry
        self.name = name
        self.task = task
        self.context = context
        agent_id = task.metadata.get("agent_id")
        child_agent_id = (
            agent_id if isinstance(agent_id, str) and agent_id.strip() else f"{name}-{task.id}"
        )
        self.child = context.subagent_context(name, child_agent_id)
        self.child_run_id = RunId.generate(registry._ids)
        self.child.run_id = self.child_run_id
        self.base: dict[str, Any] = {
            **task.metadata,
            "agent_id": child_agent_id,
            "prompt_preview": compact_preview(task.prompt),
        }
        self.records: list[AgentStreamRecord] = []
        self.sink = (
            AgentStreamSink(self.records.append, live=False)
            if stream_sink is None
            else AgentStreamSink(self._forwarder(stream_sink), live=stream_sink.live)
        )
        self.started_at = registry._clock.monotonic()

    def elapsed(self) -> float:
        return self.registry._clock.monotonic() - self.started_at

    def source(self, record: AgentStreamRecord) -> AgentStreamSource:
        # A record that already carries a source came from a grandchild: its
        # attribution is the more precise one, so only its sequence is rebased.
        return record.source or AgentStreamSource(
            agent_id=self.child.agent_id,
            agent_name=self.name,
            task_id=self.task.id,
            run_id=self.child.run_id,
            parent_run_id=self.child.parent_run_id,
            source_sequence=record.sequence,
        )

    def _forwarder(self, parent: AgentStreamSink) -> Callable[[AgentStreamRecord], None]:
        def forward(record: AgentStreamRecord) -> None:
            parent.push(record.kind, record.payload, self.source(record))

        return forward

    def publish(
        self, kind: SubagentLifecycleKind, run_id: RunId | None, metadata: dict[str, Any]
    ) -> None:
        _publish(
            self.context,
            SubagentLifecycleEvent(
                kind=kind, name=self.name, task_id=self.task.id, run_id=run_id, metadata=metadata
            ),
        )

    def republish(self) -> None:
        """Without a parent stream, child records become ``subagent_stream_record`` events."""
        for record in self.records:
            attributed = AgentStreamRecord(
                sequence=record.sequence,
                kind=record.kind,
                payload=record.payload,
                source=self.source(record),
            )
            self.context.events.publish(
                AgentEvent(
                    kind=SUBAGENT_STREAM_RECORD,
                    payload=attributed.to_value(),
                    metadata={
                        "subagent_name": self.name,
                        "task_id": self.task.id.as_str(),
                        "source_sequence": record.sequence,
                    },
                )
            )
        self.records.clear()

    def fail(self, extra: dict[str, Any]) -> None:
        self.republish()
        metadata = {
            **self.task.metadata,
            "agent_id": self.child.agent_id,
            **extra,
            "duration_seconds": self.elapsed(),
            "request_count": self.child.usage.requests,
            "child_run_id": self.child_run_id.as_str(),
        }
        self.publish(SubagentLifecycleKind.FAILED, self.child_run_id, metadata)

    def hook_failed(
        self, hook: SubagentExecutionHook, method: str, error: Exception
    ) -> SubagentHookError:
        self.fail({"error": str(error) or type(error).__name__, "hook": method})
        return SubagentHookError(
            f"{method} hook {type(hook).__name__} failed for subagent {self.name!r}: {error}",
            name=self.name,
            task_id=self.task.id.as_str(),
            hook=method,
        )


class _DelegateArgs(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    name: str
    prompt: str


_AT_PATH = re.compile(r" - at `([^`]*)`$")
_UNKNOWN_FIELD = re.compile(r"unknown field `([^`]*)`")


class DelegateTool(Tool):
    """The blocking ``delegate`` tool: arguments ``{name, prompt}``, nothing else.

    Unknown fields are rejected (a model cannot pass host metadata or invent
    an ``agent_id``). It finds the parent context through the
    :class:`AgentContextHandle` (or, failing that, the :class:`AgentContext`)
    in the tool context's dependencies and fails with :class:`ToolError` when
    neither is there, or when the delegation fails (unknown subagent, nested
    delegation, hook or child failure; ``__cause__`` is the
    :class:`SubagentError`). The result content is
    ``{name, task_id, output, usage}``.
    """

    def __init__(self, registry: SubagentRegistry, name: str = DELEGATE_TOOL_NAME) -> None:
        self.name = name
        self.registry = registry
        self.description = "Delegate a task to a registered subagent and wait for its answer."
        roster = registry.names()
        name_schema: dict[str, Any] = {
            "type": "string",
            "description": "Name of the registered subagent to delegate to.",
        }
        if roster:
            name_schema["enum"] = roster
        self.parameters_schema = {
            "type": "object",
            "properties": {
                "name": name_schema,
                "prompt": {"type": "string", "description": "The task for the subagent."},
            },
            "required": ["name", "prompt"],
            "additionalProperties": False,
        }
        self.metadata = {"kind": "delegation"}

    def validate(self, arguments: Any) -> _DelegateArgs:
        try:
            return msgspec.convert(arguments, _DelegateArgs)
        except msgspec.ValidationError as error:
            message = str(error)
            at = _AT_PATH.search(message)
            unknown = _UNKNOWN_FIELD.search(message)
            path = at.group(1) if at else (f"$.{unknown.group(1)}" if unknown else "$")
            raise ToolArgumentError(
                f"invalid arguments for tool {self.name!r} at {path}: {message}",
                tool=self.name,
                path=path,
            ) from error

    async def invoke(self, context: ToolContext, arguments: Any) -> ToolResult:
        args: _DelegateArgs = arguments
        handle = context.dependencies.get(AgentContextHandle)
        parent = handle.context if handle is not None else context.dependencies.get(AgentContext)
        if parent is None:
            raise ToolError(
                f"tool {self.name!r} needs the parent agent context: insert an "
                "AgentContextHandle (or AgentContext) into the ToolContext dependencies",
                tool=self.name,
            )
        task = SubagentTask(args.prompt, id=TaskId.generate(self.registry._ids))
        sink = context.dependencies.get(AgentStreamSink)
        try:
            delegated = await self.registry._delegate(args.name, task, parent, sink)
        except SubagentError as error:
            raise ToolError(
                f"delegation to subagent {args.name!r} failed: {error.message}",
                tool=self.name,
                subagent=args.name,
            ) from error
        return ToolResult(
            {
                "name": delegated.name,
                "task_id": delegated.task.id.as_str(),
                "output": delegated.output(),
                "usage": delegated.usage.to_value(),
            },
            {"context_mutated": True},
        )


def delegation_tools(
    registry: SubagentRegistry,
    mode: SubagentDelegationMode,
    supervisor: object | None = None,
) -> list[Tool]:
    """The delegation tools an agent installs for ``registry`` under ``mode``.

    The single place where the delegation topology is decided (async modes
    extend it once the background supervisor exists). No subagents → no tools.
    """
    if registry.is_empty() or mode is SubagentDelegationMode.DISABLED:
        return []
    if mode is SubagentDelegationMode.BLOCKING:
        return [registry.delegate_tool()]
    raise AgentConfigError(
        f"subagent delegation mode {mode.value!r} needs the background subagent supervisor, "
        "which is not available yet; use BLOCKING or DISABLED",
        mode=mode.value,
        supervisor=type(supervisor).__name__ if supervisor is not None else None,
    )
