"""Subagents: configuration, the registry that runs delegations, and the ``delegate`` tool.

A delegation (``SubagentRegistry.delegate_task``) runs the named child agent
to completion on the caller's event loop, in a child context that shares the
parent's dependencies, carries the subagent stack, and adds its usage back to
the parent. It publishes lifecycle events on the parent context:
``subagent_started`` → ``subagent_completed`` or ``subagent_failed``.

Before the child starts, its tool inheritance policy is resolved against the
parent's tools (a :class:`SubagentParentTools` dependency, which every agent
run provides): the child runs with its own tools plus the inherited ones and
the parent hooks and bundles its capability policy selected. A required tool
the parent cannot supply refuses the delegation with ``subagent_failed``
(``error_kind``, ``tool_name``, ``message``) and no ``subagent_started``.
"""

from __future__ import annotations

import asyncio
import enum
import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from actors import BackgroundSubagentSupervisor
from storage import Clock, IdSource, RandomIds, SystemClock

from ._agent_spec import AgentSpec, AgentSpecRegistry, EnvironmentProvider
from ._context import AgentContext, AgentContextHandle
from ._errors import (
    AgentConfigError,
    MissingSubagent,
    RecursiveSubagentDelegation,
    SubagentError,
    SubagentHookError,
    SubagentRunFailed,
    SubagentToolInheritanceError,
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
from ._hooks import (
    AgentHook,
    CapabilityBundle,
    SubagentExecutionHook,
    SubagentExecutionMetadata,
    SubagentExecutionOutcome,
)
from ._ids import RunId, TaskId
from ._inheritance import (
    SubagentCapabilityInheritancePolicy,
    SubagentToolInheritancePolicy,
    is_main_agent_only_tool,
)
from ._result import AgentResult
from ._stream import AgentStreamRecord, AgentStreamSink, AgentStreamSource
from ._sync import run_blocking
from ._task import SubagentResult, SubagentTask
from ._tools import Tool, ToolContext, ToolRegistry, ToolResult

if TYPE_CHECKING:
    from ._agent import Agent

DELEGATE_TOOL_NAME = "delegate"
SUBAGENT_INFO_TOOL_NAME = "subagent_info"
# A hard ceiling even when nested delegation is allowed: recursion must end.
MAX_SUBAGENT_DEPTH = 8


class SubagentDelegationMode(enum.Enum):
    """Which delegation tools an agent with subagents exposes to its model.

    ``BLOCKING`` (default) installs ``delegate``, which runs the child and
    returns its output. ``DISABLED`` installs nothing. ``ASYNC`` installs the
    background tools (``delegate``, ``steer_subagent``, ``cancel_subagent``,
    ``wait_subagent``, ``subagent_info``) and ``BLOCKING_AND_ASYNC`` the
    blocking ``delegate`` plus the background set with its delegate named
    ``spawn_delegate``; both need a
    :class:`~actors.BackgroundSubagentSupervisor`
    (``AgentBuilder.background_subagent_supervisor``), else building raises
    :class:`AgentConfigError`. See :func:`delegation_tools`.
    """

    DISABLED = "disabled"
    BLOCKING = "blocking"
    ASYNC = "async"
    BLOCKING_AND_ASYNC = "blocking_and_async"


class SubagentParentTools:
    """The parent's tool registry, as a dependency: what a child inherits tools from.

    An agent run puts one (holding the agent's own tools) into the
    dependencies of every tool call, so ``delegate`` and ``subagent_info``
    resolve inheritance against the same tools. A delegation outside a run
    looks for one in the parent context's dependencies; without it the parent
    counts as having no tools.
    """

    __slots__ = ("tools",)

    def __init__(self, tools: ToolRegistry) -> None:
        self.tools = tools

    def __repr__(self) -> str:
        return f"SubagentParentTools({self.tools.names()!r})"


class SubagentConfig:
    """A named, executable subagent: the child ``agent`` plus delegation policy.

    Immutable: every ``with_*`` returns a new config. At each delegation the
    child runs with its own tools plus the parent tools its
    :class:`SubagentToolInheritancePolicy` selects (default: only tools whose
    metadata says ``auto_inherit: true``), plus the parent hooks and bundles
    its :class:`SubagentCapabilityInheritancePolicy` selects when the parent
    agent is built (default: none). With an ``environment_provider`` the
    child context uses it instead of the parent's.
    """

    __slots__ = (
        "agent",
        "capability_inheritance",
        "description",
        "environment_provider",
        "execution_hooks",
        "inherited_bundles",
        "inherited_hooks",
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
        self.tool_inheritance: SubagentToolInheritancePolicy | None = None
        self.capability_inheritance: SubagentCapabilityInheritancePolicy | None = None
        self.environment_provider: EnvironmentProvider | None = None
        self.inherited_hooks: tuple[AgentHook, ...] = ()
        self.inherited_bundles: tuple[CapabilityBundle, ...] = ()

    @classmethod
    def from_agent_spec(
        cls,
        agent_spec: AgentSpec,
        tool_policy: SubagentToolInheritancePolicy | None = None,
        registry: AgentSpecRegistry | None = None,
    ) -> SubagentConfig:
        """An executable subagent built from ``agent_spec`` through ``registry``.

        The child agent is materialized by ``registry.build_agent`` (default: a
        fresh :class:`AgentSpecRegistry` over the default model providers); the
        capability policy is read from the spec's metadata
        (``subagent_capability_inheritance``, as ``project_subagent_spec``
        writes it, else the markdown keys); the environment provider the spec
        names is attached to every delegated child context. Raises the
        registry's :class:`AgentSpecError` subclasses.
        """
        registry = AgentSpecRegistry() if registry is None else registry
        agent = registry.build_agent(agent_spec)
        config = cls(agent_spec.name, agent, agent_spec.description)
        config = config.with_tool_inheritance(
            SubagentToolInheritancePolicy() if tool_policy is None else tool_policy
        ).with_capability_inheritance(
            SubagentCapabilityInheritancePolicy.from_metadata(agent_spec.metadata)
        )
        environment = registry.resolve_environment(agent_spec)
        if environment is not None:
            config = config.with_environment_provider(environment)
        return config

    def tool_policy(self) -> SubagentToolInheritancePolicy:
        """The tool policy in force (the default policy when none was set)."""
        return _DEFAULT_TOOL_POLICY if self.tool_inheritance is None else self.tool_inheritance

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

    def with_tool_inheritance(self, policy: SubagentToolInheritancePolicy) -> SubagentConfig:
        """Select the parent tools this child inherits at each delegation."""
        if not isinstance(policy, SubagentToolInheritancePolicy):
            raise AgentConfigError(
                f"expected a SubagentToolInheritancePolicy, got {type(policy).__name__}",
                name=self.name,
            )
        return self._replace(tool_inheritance=policy)

    def with_capability_inheritance(
        self, policy: SubagentCapabilityInheritancePolicy
    ) -> SubagentConfig:
        """Select the parent hooks and bundles this child inherits (applied at parent build)."""
        if not isinstance(policy, SubagentCapabilityInheritancePolicy):
            raise AgentConfigError(
                f"expected a SubagentCapabilityInheritancePolicy, got {type(policy).__name__}",
                name=self.name,
            )
        return self._replace(capability_inheritance=policy)

    def with_environment_provider(self, provider: EnvironmentProvider) -> SubagentConfig:
        """Run every delegated child with ``provider`` instead of the parent's environment."""
        return self._replace(environment_provider=provider)

    def _with_parent_capabilities(
        self, hooks: Sequence[AgentHook], bundles: Sequence[CapabilityBundle]
    ) -> SubagentConfig:
        policy = self.capability_inheritance
        if policy is None:
            return self._replace(inherited_hooks=(), inherited_bundles=())
        return self._replace(
            inherited_hooks=policy.inherited_hooks(hooks),
            inherited_bundles=policy.inherited_bundles(bundles),
        )

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

        if parent_tools is None:
            found = context.dependencies.get(SubagentParentTools)
            parent_tools = ToolRegistry() if found is None else found.tools
        try:
            inherited = subagent.tool_policy().resolve(parent_tools)
        except SubagentToolInheritanceError as error:
            _publish(
                context,
                SubagentLifecycleEvent(
                    kind=SubagentLifecycleKind.FAILED,
                    name=name,
                    task_id=task.id,
                    metadata={**task.metadata, **error.diagnostic()},
                ),
            )
            raise type(error)(
                f"subagent {name!r} is unavailable: {error.message}",
                tool_name=error.tool_name,
                name=name,
                task_id=task.id.as_str(),
            ) from error
        agent = _materialize_child(subagent, inherited)

        run = _Delegation(self, name, task, context, stream_sink)
        if subagent.environment_provider is not None:
            subagent.environment_provider.attach(run.child)
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
                result = await agent._run_core(
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


def _materialize_child(subagent: SubagentConfig, inherited: ToolRegistry) -> Agent:
    """The child agent a delegation runs: its own tools plus ``inherited`` and the
    parent hooks and bundles its capability policy selected (main-agent-only
    tools of a bundle never reach a child). Blocking and background delegation
    both build children here."""
    bundles = subagent.inherited_bundles
    return subagent.agent._with_inherited(
        [
            *inherited,
            *(
                tool
                for bundle in bundles
                for tool in bundle.tools()
                if not is_main_agent_only_tool(tool)
            ),
        ],
        [*subagent.inherited_hooks, *(hook for bundle in bundles for hook in bundle.hooks())],
    )


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
_A = TypeVar("_A", bound=msgspec.Struct)


def _convert(tool: str, arguments: Any, kind: type[_A]) -> _A:
    """Validate tool ``arguments`` into ``kind``; :class:`ToolArgumentError` naming the path."""
    try:
        return msgspec.convert(arguments, kind)
    except msgspec.ValidationError as error:
        message = str(error)
        at = _AT_PATH.search(message)
        unknown = _UNKNOWN_FIELD.search(message)
        path = at.group(1) if at else (f"$.{unknown.group(1)}" if unknown else "$")
        raise ToolArgumentError(
            f"invalid arguments for tool {tool!r} at {path}: {message}", tool=tool, path=path
        ) from error


class DelegateTool(Tool):
    """The blocking ``delegate`` tool: arguments ``{name, prompt}``, nothing else.

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
        return _convert(self.name, arguments, _DelegateArgs)

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
        parent_tools = context.dependencies.get(SubagentParentTools)
        try:
            delegated = await self.registry._delegate(
                args.name, task, parent, sink, None if parent_tools is None else parent_tools.tools
            )
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


class _NoArgs(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    pass


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
        self.parameters_schema = {"type": "object", "properties": {}, "additionalProperties": False}
        self.metadata = {"kind": "delegation"}

    def validate(self, arguments: Any) -> _NoArgs:
        return _convert(self.name, arguments, _NoArgs)

    async def invoke(self, context: ToolContext, arguments: Any) -> ToolResult:
        parent_tools = context.dependencies.get(SubagentParentTools)
        return ToolResult(
            {"subagents": self.registry.info(None if parent_tools is None else parent_tools.tools)}
        )


_DEFAULT_TOOL_POLICY = SubagentToolInheritancePolicy()


def delegation_tools(
    registry: SubagentRegistry,
    mode: SubagentDelegationMode,
    supervisor: object | None = None,
) -> list[Tool]:
    """The delegation tools an agent installs for ``registry`` under ``mode``.

    The single place where the delegation topology is decided. No subagents
    → no tools, in every mode.

    - ``DISABLED``: none.
    - ``BLOCKING``: ``delegate`` (runs the child, returns its output).
    - ``ASYNC``: ``delegate`` (background), ``steer_subagent``,
      ``cancel_subagent``, ``wait_subagent``, ``subagent_info``; no blocking
      backend is visible to the model.
    - ``BLOCKING_AND_ASYNC``: the blocking ``delegate``, the background
      delegate as ``spawn_delegate`` (as the Rust SDK names explicit background
      delegation next to a blocking ``delegate``), then ``steer_subagent``,
      ``cancel_subagent``, ``wait_subagent``, ``subagent_info``.

    The async modes need a :class:`~actors.BackgroundSubagentSupervisor`
    (else :class:`AgentConfigError`); every background tool delegates
    through it with this registry's runner adapter
    (:class:`~subagents.BackgroundSubagentRunner`). Tool definitions depend
    only on the registry's names, so they are identical across turns.
    """
    tools, _ = _delegation_topology(registry, mode, supervisor)
    return tools


def _delegation_topology(
    registry: SubagentRegistry,
    mode: SubagentDelegationMode,
    supervisor: object | None,
) -> tuple[list[Tool], Any]:
    """``delegation_tools`` plus the async binding the agent's turn loop needs (or None)."""
    if registry.is_empty() or mode is SubagentDelegationMode.DISABLED:
        return [], None
    if mode is SubagentDelegationMode.BLOCKING:
        return [registry.delegate_tool()], None
    # _async_delegation builds on this module: imported at first use.
    from . import _async_delegation as background  # noqa: PLC0415

    if not isinstance(supervisor, BackgroundSubagentSupervisor):
        raise AgentConfigError(
            f"subagent delegation mode {mode.value!r} needs a BackgroundSubagentSupervisor: "
            "pass one with AgentBuilder.background_subagent_supervisor(...)",
            mode=mode.value,
            supervisor=type(supervisor).__name__ if supervisor is not None else None,
        )
    delegation = background._AsyncDelegation(registry, supervisor)
    if mode is SubagentDelegationMode.ASYNC:
        return background._async_tools(delegation, delegate_name=DELEGATE_TOOL_NAME), delegation
    return [
        registry.delegate_tool(),
        *background._async_tools(delegation, delegate_name=background.SPAWN_DELEGATE_TOOL_NAME),
    ], delegation
