"""Delegation: subagents, their config and inheritance, and the two delegation modes.

``_config`` (modes, :class:`SubagentConfig`, materializing a child),
``_inheritance`` (tool and capability policies), ``_projection`` (a markdown
subagent onto the ``AgentSpec`` path), ``_child_run`` (the ONE protocol both
modes run a child with), ``_registry`` (the registry, blocking delegation and
its ``delegate`` / ``subagent_info`` tools), ``_background`` (the supervisor's
child runner), ``_delivery`` (background results at the parent's turn
boundary), ``_background_tools`` (the five background tools) and
``_topology`` (which tools an agent installs; the only module that sees both
modes, and the agent that carries them).
"""

from ._background import BackgroundSubagentRunner as BackgroundSubagentRunner
from ._background import SubagentContextDelta as SubagentContextDelta
from ._background_tools import AsyncDelegateTool as AsyncDelegateTool
from ._background_tools import BackgroundSubagentInfoTool as BackgroundSubagentInfoTool
from ._background_tools import CancelSubagentTool as CancelSubagentTool
from ._background_tools import SteerSubagentTool as SteerSubagentTool
from ._background_tools import WaitSubagentTool as WaitSubagentTool
from ._config import SubagentConfig as SubagentConfig
from ._config import SubagentDelegationMode as SubagentDelegationMode
from ._config import SubagentParentTools as SubagentParentTools
from ._events import SubagentLifecycleEvent as SubagentLifecycleEvent
from ._events import SubagentLifecycleKind as SubagentLifecycleKind
from ._hooks import SubagentExecutionHook as SubagentExecutionHook
from ._hooks import SubagentExecutionMetadata as SubagentExecutionMetadata
from ._hooks import SubagentExecutionOutcome as SubagentExecutionOutcome
from ._inheritance import (
    SubagentCapabilityInheritancePolicy as SubagentCapabilityInheritancePolicy,
)
from ._inheritance import SubagentToolInheritancePolicy as SubagentToolInheritancePolicy
from ._inheritance import is_main_agent_only_tool as is_main_agent_only_tool
from ._projection import SubagentSpecProjection as SubagentSpecProjection
from ._projection import project_subagent_spec as project_subagent_spec
from ._registry import DelegateTool as DelegateTool
from ._registry import SubagentInfoTool as SubagentInfoTool
from ._registry import SubagentRegistry as SubagentRegistry
from ._task import SubagentResult as SubagentResult
from ._task import SubagentTask as SubagentTask
from ._topology import delegation_tools as delegation_tools

__all__ = [
    "AsyncDelegateTool",
    "BackgroundSubagentInfoTool",
    "BackgroundSubagentRunner",
    "CancelSubagentTool",
    "DelegateTool",
    "SteerSubagentTool",
    "SubagentCapabilityInheritancePolicy",
    "SubagentConfig",
    "SubagentContextDelta",
    "SubagentDelegationMode",
    "SubagentExecutionHook",
    "SubagentExecutionMetadata",
    "SubagentExecutionOutcome",
    "SubagentInfoTool",
    "SubagentLifecycleEvent",
    "SubagentLifecycleKind",
    "SubagentParentTools",
    "SubagentRegistry",
    "SubagentResult",
    "SubagentSpecProjection",
    "SubagentTask",
    "SubagentToolInheritancePolicy",
    "WaitSubagentTool",
    "delegation_tools",
    "is_main_agent_only_tool",
    "project_subagent_spec",
]
