"""Agent run hooks and capability bundles."""

from __future__ import annotations

from collections.abc import Sequence

from ._context import AgentContext
from ._models import ToolCallPart
from ._tools import Tool, ToolContext, ToolResult


class AgentHook:
    """Observes an agent's runs. Subclass and override what you need.

    Every method is awaited inline on the loop running the agent, in
    registration order. An exception from a hook fails the run with that
    exception (it is not converted into a tool retry).
    """

    capability_id: str = "hook"

    async def before_run(self, context: AgentContext, prompt: str) -> None:
        return None

    async def before_tool_call(self, context: ToolContext, call: ToolCallPart) -> None:
        return None

    async def after_tool_call(
        self, context: ToolContext, call: ToolCallPart, result: ToolResult
    ) -> None:
        return None

    async def after_run(self, context: AgentContext, output: str) -> None:
        return None


class CapabilityBundle:
    """A named group of hooks and tools added to an agent with ``.capability_bundle(...)``."""

    name: str
    capability_id: str

    def hooks(self) -> Sequence[AgentHook]:
        return ()

    def tools(self) -> Sequence[Tool]:
        return ()


class StaticCapabilityBundle(CapabilityBundle):
    """A bundle with a fixed name, hooks and tools."""

    def __init__(
        self,
        name: str,
        *,
        hooks: Sequence[AgentHook] = (),
        tools: Sequence[Tool] = (),
        capability_id: str | None = None,
    ) -> None:
        self.name = name
        self.capability_id = capability_id or name
        self._hooks = tuple(hooks)
        self._tools = tuple(tools)

    def hooks(self) -> Sequence[AgentHook]:
        return self._hooks

    def tools(self) -> Sequence[Tool]:
        return self._tools

    def __repr__(self) -> str:
        return f"StaticCapabilityBundle({self.name!r})"
