"""Subagent configuration: the delegation modes, the parent-tools dependency, one
subagent's config, and how a delegated child agent is materialized from it."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any

from .._agent._hooks import AgentHook, CapabilityBundle
from .._agent._run import Agent
from .._agent._tools import ToolRegistry
from .._errors import AgentConfigError, UnsupportedAgent
from .._specs._agent_spec import AgentSpec, AgentSpecRegistry, EnvironmentProvider
from ._hooks import SubagentExecutionHook
from ._inheritance import (
    SubagentCapabilityInheritancePolicy,
    SubagentToolInheritancePolicy,
    is_main_agent_only_tool,
)

#: Tools a delegated child never gets, not even its own: a subagent has no
#: human-in-the-loop responder (the spec's ``ask_user_question`` rule).
CHILD_FORBIDDEN_TOOLS = frozenset({"ask_user_question"})


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
        if not isinstance(agent, Agent):
            raise _unsupported(name, agent)
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


_DEFAULT_TOOL_POLICY = SubagentToolInheritancePolicy()

#: Which adapter runs another framework's agent, by the top-level package of its type.
ADAPTERS = {
    "pydantic_ai": "subagents.adapters.pydantic_ai.PydanticAIChild",
    "agents": "subagents.adapters.openai_agents.OpenAIAgentsChild",
    "langgraph": "subagents.adapters.langgraph.LangGraphChild",
}


def _unsupported(name: str, agent: object) -> UnsupportedAgent:
    kind = type(agent)
    qualified = f"{kind.__module__}.{kind.__qualname__}"
    adapter = ADAPTERS.get(kind.__module__.split(".")[0])
    hint = (
        f"; wrap it: SubagentConfig({name!r}, {adapter.rsplit('.', 1)[1]}(agent)) "
        f"from {adapter.rsplit('.', 1)[0]}"
        if adapter is not None
        else "; pass a subagents.Agent (AgentBuilder(...).build()) or an adapter's child"
    )
    return UnsupportedAgent(
        f"subagent {name!r}: cannot run a {qualified} as a child{hint}",
        name=name,
        agent_type=qualified,
        adapter=adapter,
    )


def materialize_child(subagent: SubagentConfig, inherited: ToolRegistry) -> Agent:
    """The child agent a delegation runs: its own tools plus ``inherited`` and the
    parent hooks and bundles its capability policy selected (main-agent-only
    tools of a bundle never reach a child), without ``ask_user_question`` (not
    even the child's own). Both delegation modes build children here."""
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
        exclude=CHILD_FORBIDDEN_TOOLS,
    )
