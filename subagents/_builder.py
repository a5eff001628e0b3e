"""The builder: :class:`AgentBuilder` configures an agent with its tools, hooks and
subagents, and :class:`AgentApp` pairs it with its subagent registry.

It sits above every other SDK package: it builds the run (``_agent``), the
delegation topology (``_delegation``) and the agent that carries both.
"""

from __future__ import annotations

from collections.abc import Iterable

from storage import Clock, IdSource, RandomIds

from ._agent._context import AgentContext
from ._agent._hooks import AgentHook, CapabilityBundle
from ._agent._models import Model
from ._agent._result import AgentResult
from ._agent._run import DEFAULT_REQUEST_LIMIT, DEFAULT_RETRIES
from ._agent._stream import AgentStream
from ._agent._tools import Tool, ToolRegistry
from ._delegation._config import SubagentConfig, SubagentDelegationMode
from ._delegation._registry import SubagentRegistry
from ._delegation._topology import DelegatingAgent, _delegation_topology
from ._errors import AgentConfigError


class AgentApp:
    """An agent together with its subagent registry (``AgentBuilder.build_app()``)."""

    def __init__(self, agent: DelegatingAgent) -> None:
        self.agent = agent

    def subagents(self) -> SubagentRegistry:
        return self.agent.subagents()

    def tools(self) -> ToolRegistry:
        return self.agent.tools()

    async def run(self, prompt: str, context: AgentContext | None = None) -> AgentResult:
        return await self.agent.run(prompt, context)

    def run_sync(self, prompt: str, context: AgentContext | None = None) -> AgentResult:
        return self.agent.run_sync(prompt, context)

    def run_stream(
        self, prompt: str, context: AgentContext | None = None
    ) -> AgentStream[AgentResult]:
        return self.agent.run_stream(prompt, context)


class AgentBuilder:
    """Configures an :class:`Agent`. Every method returns the builder, for chaining.

    ``build()`` validates the whole configuration (duplicate tool names,
    unusable delegation mode, limits) and raises :class:`AgentConfigError`.
    """

    def __init__(self, model: Model) -> None:
        if not isinstance(model, Model):
            raise AgentConfigError(
                f"AgentBuilder needs a Model, got {type(model).__name__}", model=repr(model)
            )
        self._model = model
        self._name = "agent"
        self._instructions: list[str] = []
        self._tools: list[Tool] = []
        self._subagents = SubagentRegistry()
        self._mode = SubagentDelegationMode.BLOCKING
        self._supervisor: object | None = None
        self._bundles: list[CapabilityBundle] = []
        self._hooks: list[AgentHook] = []
        self._request_limit = DEFAULT_REQUEST_LIMIT
        self._retries = DEFAULT_RETRIES
        self._clock: Clock | None = None
        self._ids: IdSource | None = None

    def name(self, name: str) -> AgentBuilder:
        self._name = name
        return self

    def instructions(self, text: str) -> AgentBuilder:
        """Append a system instruction (sent first in each run's first request)."""
        self._instructions.append(text)
        return self

    system_prompt = instructions

    def tool(self, tool: Tool) -> AgentBuilder:
        if not isinstance(tool, Tool):
            raise AgentConfigError(f"not a Tool: {tool!r}")
        self._tools.append(tool)
        return self

    def tools(self, tools: Iterable[Tool]) -> AgentBuilder:
        for tool in tools:
            self.tool(tool)
        return self

    def subagent(self, subagent: SubagentConfig) -> AgentBuilder:
        self._subagents = self._subagents.with_subagent(subagent)
        return self

    def subagent_registry(self, registry: SubagentRegistry) -> AgentBuilder:
        """Replace the subagent registry wholesale."""
        self._subagents = registry
        return self

    def subagent_delegation_mode(self, mode: SubagentDelegationMode) -> AgentBuilder:
        self._mode = SubagentDelegationMode(mode)
        return self

    def background_subagent_supervisor(self, supervisor: object) -> AgentBuilder:
        """The long-lived :class:`~actors.BackgroundSubagentSupervisor` that the async
        delegation modes hand attempts to (required by them: ``build()`` raises
        :class:`AgentConfigError` without one). It outlives parent runs: an agent
        built later on the same supervisor receives results still pending."""
        self._supervisor = supervisor
        return self

    def capability_bundle(self, bundle: CapabilityBundle) -> AgentBuilder:
        self._bundles.append(bundle)
        return self

    def hook(self, hook: AgentHook) -> AgentBuilder:
        self._hooks.append(hook)
        return self

    def hooks(self, hooks: Iterable[AgentHook]) -> AgentBuilder:
        self._hooks.extend(hooks)
        return self

    def request_limit(self, limit: int) -> AgentBuilder:
        """At most ``limit`` model requests per run (default 50)."""
        self._request_limit = limit
        return self

    def retries(self, retries: int) -> AgentBuilder:
        """How many failed calls per tool per run the model may retry (default 1)."""
        self._retries = retries
        return self

    def clock(self, clock: Clock) -> AgentBuilder:
        self._clock = clock
        return self

    def ids(self, ids: IdSource) -> AgentBuilder:
        self._ids = ids
        return self

    def build(self) -> DelegatingAgent:
        if not isinstance(self._request_limit, int) or self._request_limit < 1:
            raise AgentConfigError(
                f"request_limit must be a positive int, got {self._request_limit!r}"
            )
        if not isinstance(self._retries, int) or self._retries < 0:
            raise AgentConfigError(f"retries must be a non-negative int, got {self._retries!r}")
        registry = self._subagents.with_parent_capabilities(self._hooks, self._bundles)
        if self._clock is not None:
            registry = registry.with_clock(self._clock)
        if self._ids is not None:
            registry = registry.with_ids(self._ids)
        tools = list(self._tools)
        hooks = list(self._hooks)
        for bundle in self._bundles:
            tools.extend(bundle.tools())
            hooks.extend(bundle.hooks())
        delegation, background = _delegation_topology(registry, self._mode, self._supervisor)
        tools.extend(delegation)
        return DelegatingAgent(
            model=self._model,
            name=self._name,
            instructions=self._instructions,
            tools=ToolRegistry(tools),
            subagents=registry,
            delegation_mode=self._mode,
            supervisor=self._supervisor,
            hooks=hooks,
            capability_bundles=self._bundles,
            request_limit=self._request_limit,
            retries=self._retries,
            ids=RandomIds() if self._ids is None else self._ids,
            background=background,
        )

    def build_app(self) -> AgentApp:
        return AgentApp(self.build())
