"""The subagent registry, blocking delegation, and its ``delegate`` and ``subagent_info`` tools.

A blocking delegation (``SubagentRegistry.delegate_task``) runs the named child agent
to completion on the caller's event loop, in a child context that shares the
parent's dependencies, carries the subagent stack, and adds its usage back to
the parent. It publishes lifecycle events on the parent context:
``subagent_started`` → ``subagent_completed`` or ``subagent_failed``. The
child runs under the child-run protocol (``_child_run``) that background
delegation uses too; :class:`_BlockingMode` is this mode's side of it.

Before the child starts, its tool inheritance policy is resolved against the
parent's tools (a :class:`SubagentParentTools` dependency, which every agent
run provides): the child runs with its own tools plus the inherited ones and
the parent hooks and bundles its capability policy selected. A required tool
the parent cannot supply refuses the delegation with ``subagent_failed``
(``error_kind``, ``tool_name``, ``message``) and no ``subagent_started``.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from storage import Clock, IdSource, RandomIds, SystemClock

from .._agent._context import AgentContext, AgentContextHandle
from .._agent._events import compact_preview
from .._agent._hooks import AgentHook, CapabilityBundle
from .._agent._ids import RunId, TaskId
from .._agent._result import AgentResult
from .._agent._run import Agent
from .._agent._stream import AgentStreamRecord, AgentStreamSink, AgentStreamSource
from .._agent._sync import run_blocking
from .._agent._tools import Tool, ToolContext, ToolRegistry, ToolResult, struct_schema
from .._errors import (
    AgentConfigError,
    MissingSubagent,
    RecursiveSubagentDelegation,
    SubagentError,
    SubagentHookError,
    SubagentRunFailed,
    SubagentToolInheritanceError,
    ToolError,
)
from ._args import (
    _convert,
    _delegate_args,
    _delegate_schema,
    _DelegateArgs,
    _NoArgs,
)
from ._child_run import (
    ChildEnd,
    ChildRun,
    ChildRunMode,
    Completed,
    HookFailed,
    RunFailed,
    Unavailable,
    error_text,
    run_child,
)
from ._config import SubagentConfig, SubagentParentTools
from ._events import SubagentLifecycleKind, child_source, lifecycle_event, stream_record_event
from ._hooks import SubagentExecutionMetadata
from ._task import SubagentResult, SubagentTask

DELEGATE_TOOL_NAME = "delegate"
SUBAGENT_INFO_TOOL_NAME = "subagent_info"
# A hard ceiling even when nested delegation is allowed: recursion must end.
MAX_SUBAGENT_DEPTH = 8


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

    def with_parent_capabilities(
        self, hooks: Sequence[AgentHook], bundles: Sequence[CapabilityBundle]
    ) -> SubagentRegistry:
        """A registry whose subagents carry the parent hooks and bundles their policies select.

        ``AgentBuilder.build`` calls this with the builder's hooks and bundles.
        """
        clone = self._clone()
        clone._by_name = {
            name: config._with_parent_capabilities(hooks, bundles)
            for name, config in self._by_name.items()
        }
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

    def subagent_info_tool(self) -> Tool:
        """The ``subagent_info`` tool: each subagent's availability against the parent's tools."""
        return SubagentInfoTool(self)

    def info(self, parent_tools: ToolRegistry | None = None) -> list[dict[str, Any]]:
        """What ``subagent_info`` reports, in registration order.

        For each subagent: ``name``, ``description``, ``available`` (its
        required tools can be supplied by ``parent_tools``; no registry
        counts as no tools), ``inherited_tools`` (names the child would
        inherit; empty when unavailable) and ``diagnostics`` (one entry with
        ``error_kind``, ``tool_name`` and ``message`` when unavailable).
        """
        parent = ToolRegistry() if parent_tools is None else parent_tools
        report = []
        for config in self._by_name.values():
            entry: dict[str, Any] = {"name": config.name, "description": config.description}
            try:
                inherited = config.tool_policy().resolve(parent)
            except SubagentToolInheritanceError as error:
                entry.update(available=False, inherited_tools=[], diagnostics=[error.diagnostic()])
            else:
                entry.update(available=True, inherited_tools=inherited.names(), diagnostics=[])
            report.append(entry)
        return report

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
        :class:`MissingRequiredTool` / :class:`DeniedRequiredTool` (the
        parent's tools, from a :class:`SubagentParentTools` dependency of
        ``context``, cannot satisfy the child's tool policy; the event's
        metadata carries ``error_kind``, ``tool_name`` and ``message``),
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
        parent_tools: ToolRegistry | None = None,
    ) -> SubagentResult:
        subagent = self._admit(name, task, context)
        if parent_tools is None:
            found = context.dependencies.get(SubagentParentTools)
            parent_tools = ToolRegistry() if found is None else found.tools
        mode = _BlockingMode(self, name, task, context, stream_sink)
        return mode.conclude(await run_child(subagent, parent_tools, mode))

    def _admit(self, name: str, task: SubagentTask, context: AgentContext) -> SubagentConfig:
        """The subagent ``name``, unless it is unknown or nesting refuses it (each
        refusal is published as ``subagent_failed`` and raised)."""
        subagent = self._by_name.get(name)
        if subagent is None:
            _publish_failed(context, name, task, {"error": "missing_subagent"})
            raise MissingSubagent(
                f"no subagent named {name!r}",
                name=name,
                task_id=task.id.as_str(),
                registered=self.names(),
            )
        stack = context.subagent_stack
        if stack and (not subagent.nested_delegation or len(stack) >= MAX_SUBAGENT_DEPTH):
            _publish_failed(
                context, name, task, {"error": "recursive_subagent_delegation", "stack": stack}
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
        return subagent

    # Sync twins for scripts (each runs its own event loop).
    def delegate_sync(self, name: str, prompt: str, context: AgentContext) -> AgentResult:
        return run_blocking(self.delegate(name, prompt, context))

    def delegate_task_sync(
        self, name: str, task: SubagentTask, context: AgentContext
    ) -> SubagentResult:
        return run_blocking(self.delegate_task(name, task, context))

    def __repr__(self) -> str:
        return f"SubagentRegistry({self.names()!r})"


def _publish_failed(
    context: AgentContext, name: str, task: SubagentTask, extra: dict[str, Any]
) -> None:
    """``subagent_failed`` for a delegation refused before its child started."""
    failed = lifecycle_event(
        SubagentLifecycleKind.FAILED, name, task.id, {**task.metadata, **extra}
    )
    context.events.publish(failed)


@dataclass(eq=False)
class _BlockingMode(ChildRunMode):
    """Blocking delegation under the child-run protocol: the child runs inline in a
    child of the parent context; lifecycle events go straight onto the parent's bus,
    child stream records to the parent's stream (or, without one, onto its bus as
    ``subagent_stream_record`` events), child usage into the parent's usage."""

    registry: SubagentRegistry
    name: str
    task: SubagentTask
    context: AgentContext
    stream_sink: AgentStreamSink | None
    records: list[AgentStreamRecord] = field(default_factory=list)
    base: dict[str, Any] = field(default_factory=dict)
    started_at: float = 0.0

    # -- the protocol's steps ----------------------------------------------------------------

    def begin(self) -> ChildRun:
        task, context = self.task, self.context
        agent_id = task.metadata.get("agent_id")
        child_agent_id = (
            agent_id if isinstance(agent_id, str) and agent_id.strip() else f"{self.name}-{task.id}"
        )
        child = context.subagent_context(self.name, child_agent_id)
        run_id = child.run_id = RunId.generate(self.registry._ids)
        self.base = {
            **task.metadata,
            "agent_id": child_agent_id,
            "prompt_preview": compact_preview(task.prompt),
        }
        self.started_at = self.registry._clock.monotonic()
        metadata = SubagentExecutionMetadata(
            name=self.name,
            task_id=task.id,
            prompt=task.prompt,
            task_metadata=dict(task.metadata),
            child_agent_id=child_agent_id,
            child_run_id=run_id,
            parent_agent_id=context.agent_id,
            parent_run_id=context.run_id,
        )
        return ChildRun(child=child, run_id=run_id, metadata=metadata)

    def started(self, run: ChildRun) -> None:
        self._lifecycle(SubagentLifecycleKind.STARTED, None, self.base)

    async def execute(self, agent: Agent, run: ChildRun) -> AgentResult:
        parent_sink = self.stream_sink
        sink = (
            AgentStreamSink(self.records.append, live=False)
            if parent_sink is None
            else AgentStreamSink(self._forwarder(run, parent_sink), live=parent_sink.live)
        )
        running = agent._run_core(self.task.prompt, run.child, sink, None, run.run_id)
        # In a copy of the caller's contextvars, as a background child: the child sees what
        # the caller set, and what the child sets does not leak back into the parent's run.
        child_task = asyncio.get_running_loop().create_task(
            running, context=contextvars.copy_context()
        )
        try:
            return await child_task
        finally:
            self.context.usage.incr(run.child.usage)

    def interrupted(self, run: ChildRun, signal: BaseException) -> None:
        # The parent still learns the child stopped; the signal passes on untouched.
        cancelled = isinstance(signal, asyncio.CancelledError)
        self._fail(run, {"error": "cancelled" if cancelled else type(signal).__name__})

    # -- the end, as blocking delegation reports it ------------------------------------------

    def conclude(self, end: ChildEnd) -> SubagentResult:
        """Return the delegation envelope, or raise the typed failure after ``subagent_failed``."""
        name, task = self.name, self.task
        if isinstance(end, Unavailable):
            error = end.error
            _publish_failed(self.context, name, task, error.diagnostic())
            raise type(error)(
                f"subagent {name!r} is unavailable: {error.message}",
                tool_name=error.tool_name,
                name=name,
                task_id=task.id.as_str(),
            ) from error
        if isinstance(end, HookFailed):
            self._fail(end.run, {"error": error_text(end.error), "hook": end.method})
            raise SubagentHookError(
                end.message(name), name=name, task_id=task.id.as_str(), hook=end.method
            ) from end.error
        if isinstance(end, RunFailed):
            extra: dict[str, Any] = {
                "error": error_text(end.error),
                "error_type": type(end.error).__name__,
            }
            if end.hook_error is not None:
                extra["hook_error"] = end.hook_error
            self._fail(end.run, extra)
            raise SubagentRunFailed(
                f"subagent {name!r} failed: {end.error}",
                name=name,
                task_id=task.id.as_str(),
                child_run_id=end.run.run_id.as_str(),
            ) from end.error
        return self._complete(end)

    def _complete(self, end: Completed) -> SubagentResult:
        result = end.result
        self._republish(end.run)
        completion = {
            **self.base,
            "duration_seconds": self._elapsed(),
            "request_count": end.run.child.usage.requests,
            "result_preview": compact_preview(result.output),
        }
        self._lifecycle(SubagentLifecycleKind.COMPLETED, result.run_id, completion)
        return SubagentResult(self.name, self.task, result)

    # -- helpers -----------------------------------------------------------------------------

    def _elapsed(self) -> float:
        return self.registry._clock.monotonic() - self.started_at

    def _source(self, run: ChildRun, record: AgentStreamRecord) -> AgentStreamSource:
        return child_source(
            record,
            agent_id=run.child.agent_id,
            agent_name=self.name,
            task_id=self.task.id,
            run_id=run.child.run_id,
            parent_run_id=run.child.parent_run_id,
        )

    def _forwarder(
        self, run: ChildRun, parent: AgentStreamSink
    ) -> Callable[[AgentStreamRecord], None]:
        def forward(record: AgentStreamRecord) -> None:
            parent.push(record.kind, record.payload, self._source(run, record))

        return forward

    def _lifecycle(
        self, kind: SubagentLifecycleKind, run_id: RunId | None, metadata: dict[str, Any]
    ) -> None:
        event = lifecycle_event(kind, self.name, self.task.id, metadata, run_id)
        self.context.events.publish(event)

    def _republish(self, run: ChildRun) -> None:
        """Without a parent stream, child records become ``subagent_stream_record`` events."""
        for record in self.records:
            metadata = {
                "subagent_name": self.name,
                "task_id": self.task.id.as_str(),
                "source_sequence": record.sequence,
            }
            self.context.events.publish(
                stream_record_event(record, self._source(run, record), metadata)
            )
        self.records.clear()

    def _fail(self, run: ChildRun, extra: dict[str, Any]) -> None:
        self._republish(run)
        metadata = {
            **self.task.metadata,
            "agent_id": run.child.agent_id,
            **extra,
            "duration_seconds": self._elapsed(),
            "request_count": run.child.usage.requests,
            "child_run_id": run.run_id.as_str(),
        }
        self._lifecycle(SubagentLifecycleKind.FAILED, run.run_id, metadata)


class DelegateTool(Tool):
    """The blocking ``delegate`` tool: arguments ``{subagent_name (alias name), prompt}``.

    Unknown fields are rejected (a model cannot pass host metadata or invent
    an ``agent_id``). It finds the parent context through the
    :class:`AgentContextHandle` (or, failing that, the :class:`AgentContext`)
    in the tool context's dependencies and fails with :class:`ToolError` when
    neither is there, or when the delegation fails (unknown subagent, nested
    delegation, a required tool the parent lacks or denies, hook or child
    failure; ``__cause__`` is the :class:`SubagentError`). Children inherit
    from the :class:`SubagentParentTools` in the call's dependencies. The result content is
    ``{name, task_id, output, usage}``.
    """

    def __init__(self, registry: SubagentRegistry, name: str = DELEGATE_TOOL_NAME) -> None:
        self.name = name
        self.registry = registry
        self.description = "Delegate a task to a registered subagent and wait for its answer."
        self.parameters_schema = _delegate_schema(_DelegateArgs, registry.names())
        self.metadata = {"kind": "delegation"}

    def validate(self, arguments: Any) -> _DelegateArgs:
        return _delegate_args(self.name, arguments, _DelegateArgs)

    async def invoke(self, context: ToolContext, arguments: Any) -> ToolResult:
        args: _DelegateArgs = arguments
        name = args.subagent_name
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
        parent_tools = context.dependencies.get(SubagentParentTools)
        try:
            delegated = await self.registry._delegate(
                name, task, parent, sink, None if parent_tools is None else parent_tools.tools
            )
        except SubagentError as error:
            raise ToolError(
                f"delegation to subagent {name!r} failed: {error.message}",
                tool=self.name,
                subagent=name,
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


class SubagentInfoTool(Tool):
    """The ``subagent_info`` tool: no arguments (unknown fields rejected).

    Returns ``{"subagents": registry.info(parent_tools)}`` where the parent
    tools are the :class:`SubagentParentTools` in the call's dependencies,
    the same registry ``delegate`` resolves against in that run. Main-agent
    only: never inherited by a child.
    """

    def __init__(self, registry: SubagentRegistry, name: str = SUBAGENT_INFO_TOOL_NAME) -> None:
        self.name = name
        self.registry = registry
        self.description = (
            "List the registered subagents: description, whether each is available "
            "with the current tools, which tools it would inherit, and why not."
        )
        self.parameters_schema = struct_schema(_NoArgs)
        self.metadata = {"kind": "delegation"}

    def validate(self, arguments: Any) -> _NoArgs:
        return _convert(self.name, arguments, _NoArgs)

    async def invoke(self, context: ToolContext, arguments: Any) -> ToolResult:
        parent_tools = context.dependencies.get(SubagentParentTools)
        return ToolResult(
            {"subagents": self.registry.info(None if parent_tools is None else parent_tools.tools)}
        )
