"""The mutable state one agent run works in: metadata, dependencies, events, usage, ids."""

from __future__ import annotations

from typing import Any, TypeVar

from ._deps import Dependencies
from ._events import AgentEvent, EventBus
from ._ids import ConversationId, RunId
from ._usage import Usage

T = TypeVar("T")

SUBAGENT_STACK_KEY = "subagents.subagent_stack"


class AgentContext:
    """Everything a run reads and writes besides its messages.

    - ``metadata``: a JSON dict for application data; the subagent stack (the
      names of the subagents currently running, outermost first) lives under
      ``"subagents.subagent_stack"``.
    - ``dependencies``: a type-keyed container (:class:`Dependencies`).
    - ``events``: this context's :class:`EventBus`.
    - ``usage``: live counters; a delegation adds its child's usage here.
    - ``run_id`` / ``parent_run_id`` / ``conversation_id``, ``agent_id`` and
      ``agent_name``.

    Passing a context to ``Agent.run`` mutates it in place (``&mut`` in the
    spec). ``copy()`` is independent: new metadata dict (with its own stack
    list), dependency container, event log and usage counters. Not
    thread-safe: one event loop at a time.
    """

    __slots__ = (
        "agent_id",
        "agent_name",
        "conversation_id",
        "dependencies",
        "events",
        "metadata",
        "parent_run_id",
        "run_id",
        "usage",
    )

    def __init__(
        self,
        *,
        metadata: dict[str, Any] | None = None,
        dependencies: Dependencies | None = None,
        events: EventBus | None = None,
        usage: Usage | None = None,
        run_id: RunId | None = None,
        parent_run_id: RunId | None = None,
        conversation_id: ConversationId | None = None,
        agent_id: str = "main",
        agent_name: str = "main",
    ) -> None:
        self.metadata: dict[str, Any] = {} if metadata is None else metadata
        self.dependencies = Dependencies() if dependencies is None else dependencies
        self.events = EventBus() if events is None else events
        self.usage = Usage() if usage is None else usage
        self.run_id = run_id
        self.parent_run_id = parent_run_id
        self.conversation_id = conversation_id
        self.agent_id = agent_id
        self.agent_name = agent_name

    def publish_event(self, event: AgentEvent) -> None:
        self.events.publish(event)

    def dependency(self, key: type[T]) -> T | None:
        return self.dependencies.get(key)

    @property
    def subagent_stack(self) -> list[str]:
        """Names of the subagents running around this context, outermost first (a copy)."""
        stack = self.metadata.get(SUBAGENT_STACK_KEY)
        return [str(name) for name in stack] if isinstance(stack, list) else []

    def copy(self) -> AgentContext:
        metadata = dict(self.metadata)
        if isinstance(metadata.get(SUBAGENT_STACK_KEY), list):
            metadata[SUBAGENT_STACK_KEY] = list(metadata[SUBAGENT_STACK_KEY])
        return AgentContext(
            metadata=metadata,
            dependencies=self.dependencies.copy(),
            events=self.events.copy(),
            usage=self.usage.copy(),
            run_id=self.run_id,
            parent_run_id=self.parent_run_id,
            conversation_id=self.conversation_id,
            agent_id=self.agent_id,
            agent_name=self.agent_name,
        )

    def subagent_context(self, name: str, agent_id: str) -> AgentContext:
        """A fresh child context for delegating to subagent ``name``.

        The child shares this context's dependency *values* (a shallow copy of
        the container), inherits a copy of its metadata with ``name`` pushed on
        the subagent stack, gets its own event log and zeroed usage (the
        registry adds the child's usage back here when the delegation ends),
        and records this context's run id as its ``parent_run_id``.
        """
        metadata = dict(self.metadata)
        metadata[SUBAGENT_STACK_KEY] = [*self.subagent_stack, name]
        return AgentContext(
            metadata=metadata,
            dependencies=self.dependencies.copy(),
            parent_run_id=self.run_id,
            agent_id=agent_id,
            agent_name=name,
        )

    def __repr__(self) -> str:
        return (
            f"AgentContext(agent_id={self.agent_id!r}, run_id={self.run_id!r}, "
            f"events={len(self.events)}, usage={self.usage!r})"
        )


class AgentContextHandle:
    """A shared handle on the :class:`AgentContext` a run is working in.

    Tools find it in their dependencies to read and mutate the live parent
    context (the ``delegate`` tool publishes lifecycle events and adds child
    usage through it). ``snapshot()`` returns an independent copy;
    ``replace()`` swaps the context the handle points at. Not thread-safe.
    """

    __slots__ = ("_context",)

    def __init__(self, context: AgentContext) -> None:
        self._context = context

    @property
    def context(self) -> AgentContext:
        """The live context (mutations are visible to the run)."""
        return self._context

    def snapshot(self) -> AgentContext:
        return self._context.copy()

    def replace(self, context: AgentContext) -> None:
        self._context = context

    def __repr__(self) -> str:
        return f"AgentContextHandle({self._context!r})"
