"""The delegation topology: which delegation tools an agent installs, and the agent
that carries them. The only module that sees both delegation modes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from actors import BackgroundSubagentSupervisor
from storage import IdSource

from .._agent._context import AgentContext
from .._agent._hooks import AgentHook, CapabilityBundle
from .._agent._models import Model, ModelMessage
from .._agent._run import Agent
from .._agent._tools import Tool, ToolRegistry
from .._errors import AgentConfigError
from ._background_tools import (
    SPAWN_DELEGATE_TOOL_NAME,
    AsyncDelegateTool,
    BackgroundSubagentInfoTool,
    CancelSubagentTool,
    SteerSubagentTool,
    WaitSubagentTool,
)
from ._config import SubagentDelegationMode, SubagentParentTools
from ._delivery import _AsyncDelegation
from ._registry import DELEGATE_TOOL_NAME, SubagentRegistry


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
) -> tuple[list[Tool], _AsyncDelegation | None]:
    """``delegation_tools`` plus the async binding the agent's turn loop needs (or None)."""
    if registry.is_empty() or mode is SubagentDelegationMode.DISABLED:
        return [], None
    if mode is SubagentDelegationMode.BLOCKING:
        return [registry.delegate_tool()], None
    if not isinstance(supervisor, BackgroundSubagentSupervisor):
        raise AgentConfigError(
            f"subagent delegation mode {mode.value!r} needs a BackgroundSubagentSupervisor: "
            "pass one with AgentBuilder.background_subagent_supervisor(...)",
            mode=mode.value,
            supervisor=type(supervisor).__name__ if supervisor is not None else None,
        )
    delegation = _AsyncDelegation(registry, supervisor)
    if mode is SubagentDelegationMode.ASYNC:
        return _async_tools(delegation, delegate_name=DELEGATE_TOOL_NAME), delegation
    return [
        registry.delegate_tool(),
        *_async_tools(delegation, delegate_name=SPAWN_DELEGATE_TOOL_NAME),
    ], delegation


def _async_tools(delegation: _AsyncDelegation, *, delegate_name: str) -> list[Tool]:
    """The background tool set, the background delegate named ``delegate_name``."""
    return [
        AsyncDelegateTool(delegation, delegate_name),
        SteerSubagentTool(delegation),
        CancelSubagentTool(delegation),
        WaitSubagentTool(delegation),
        BackgroundSubagentInfoTool(delegation),
    ]


class DelegatingAgent(Agent):
    """An :class:`Agent` with subagents: what :class:`~subagents.AgentBuilder` builds.

    On top of the plain run it gives every tool call a
    :class:`SubagentParentTools` dependency (the tools a delegated child
    inherits from), and with async delegation it delivers pending background
    results at the start of every turn (on the run's loop, before the model
    request; store trouble leaves them pending). ``subagents()``,
    ``delegation_mode`` and ``supervisor`` describe its delegation.
    """

    def __init__(
        self,
        *,
        model: Model,
        name: str,
        instructions: Sequence[str],
        tools: ToolRegistry,
        hooks: Sequence[AgentHook],
        capability_bundles: Sequence[CapabilityBundle],
        request_limit: int,
        retries: int,
        ids: IdSource,
        subagents: SubagentRegistry,
        delegation_mode: SubagentDelegationMode,
        supervisor: object | None,
        background: _AsyncDelegation | None,
    ) -> None:
        super().__init__(
            model=model,
            name=name,
            instructions=instructions,
            tools=tools,
            hooks=hooks,
            capability_bundles=capability_bundles,
            request_limit=request_limit,
            retries=retries,
            ids=ids,
        )
        self.delegation_mode = delegation_mode
        self.supervisor = supervisor
        self._subagents = subagents
        self._background = background

    def subagents(self) -> SubagentRegistry:
        return self._subagents

    def _tool_dependencies(self) -> Iterable[object]:
        return (SubagentParentTools(self._tools),)

    async def _before_turn(self, messages: list[ModelMessage], context: AgentContext) -> None:
        if self._background is not None:
            await self._background.deliver_pending(messages, context)
