"""The host's one seam to the SDK's delegation topology.

RPC exposes the async-only tool set for configured subagents (``delegate``,
``steer_subagent``, ``cancel_subagent``, ``wait_subagent``,
``subagent_info``) backed by the session's supervisor.
"""

from __future__ import annotations

from collections.abc import Sequence

from .._agent import Agent
from .._builder import AgentBuilder
from .._delegation._config import SubagentConfig, SubagentDelegationMode

ASYNC = "async"
DISABLED = "disabled"


def build_parent_agent(
    builder: AgentBuilder, subagents: Sequence[SubagentConfig], supervisor: object | None
) -> tuple[Agent, str]:
    """Install ``subagents`` on ``builder`` with the async-only topology.

    Returns the agent and the delegation mode installed: ``"async"``, or
    ``"disabled"`` (no subagents). A configuration the SDK refuses raises its
    ``AgentConfigError``.
    """
    if not subagents:
        return builder.subagent_delegation_mode(SubagentDelegationMode.DISABLED).build(), DISABLED
    for config in subagents:
        builder.subagent(config)
    builder.subagent_delegation_mode(SubagentDelegationMode.ASYNC)
    if supervisor is not None:
        builder.background_subagent_supervisor(supervisor)
    return builder.build(), ASYNC
