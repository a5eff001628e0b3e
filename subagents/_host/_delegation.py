"""The host's one seam to the SDK's delegation topology.

RPC exposes the async-only tool set for configured subagents (``delegate``,
``steer_subagent``, ``cancel_subagent``, ``wait_subagent``,
``subagent_info``) backed by the session's supervisor. Until the SDK builds
that mode, :func:`build_parent_agent` falls back to blocking delegation and
says so (``"blocking-fallback"``); once the SDK accepts
``SubagentDelegationMode.ASYNC`` this function picks it up with no other
change in the host.
"""

from __future__ import annotations

from collections.abc import Sequence

from .._agent import Agent
from .._builder import AgentBuilder
from .._delegation._config import SubagentConfig, SubagentDelegationMode
from .._errors import AgentConfigError

ASYNC = "async"
BLOCKING_FALLBACK = "blocking-fallback"
DISABLED = "disabled"


def build_parent_agent(
    builder: AgentBuilder, subagents: Sequence[SubagentConfig], supervisor: object | None
) -> tuple[Agent, str]:
    """Install ``subagents`` on ``builder`` with the async-only topology.

    Returns the agent and the delegation mode actually installed:
    ``"async"``, ``"blocking-fallback"`` (the SDK has no async mode yet) or
    ``"disabled"`` (no subagents).
    """
    if not subagents:
        return builder.subagent_delegation_mode(SubagentDelegationMode.DISABLED).build(), DISABLED
    for config in subagents:
        builder.subagent(config)
    builder.subagent_delegation_mode(SubagentDelegationMode.ASYNC)
    if supervisor is not None:
        builder.background_subagent_supervisor(supervisor)
    try:
        return builder.build(), ASYNC
    except AgentConfigError:
        builder.subagent_delegation_mode(SubagentDelegationMode.BLOCKING)
        return builder.build(), BLOCKING_FALLBACK
