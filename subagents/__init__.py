"""The public SDK: agents, models, tools, context, events, streams, subagents and delegation.

Everything public is importable from ``subagents``; implementation lives in
private modules. Names follow the spec's Rust SDK (see DESIGN §2).
"""

from . import _guard  # noqa: F401 - first: refuse a foreign layer below (statemachines._guard)

# isort: split

from actors import BackgroundSubagentError as BackgroundSubagentError
from actors import BackgroundSubagentSupervisor as BackgroundSubagentSupervisor
from actors import OwnerIdentity as OwnerIdentity
from actors import SupervisorLimits as SupervisorLimits
from statemachines import SubagentsError as SubagentsError
from statemachines import SubagentsSignal as SubagentsSignal

from ._agent import Agent as Agent
from ._agent import AgentApp as AgentApp
from ._agent import AgentBuilder as AgentBuilder
from ._agent_spec import AgentSpec as AgentSpec
from ._agent_spec import AgentSpecRegistry as AgentSpecRegistry
from ._agent_spec import EnvironmentProvider as EnvironmentProvider
from ._agent_spec import ModelPreset as ModelPreset
from ._agent_spec import ModelProviderRegistry as ModelProviderRegistry
from ._agent_spec import SubagentSpecProjection as SubagentSpecProjection
from ._agent_spec import default_model_providers as default_model_providers
from ._agent_spec import make_test_model as make_test_model
from ._agent_spec import project_subagent_spec as project_subagent_spec
from ._async_delegation import AsyncDelegateTool as AsyncDelegateTool
from ._async_delegation import BackgroundSubagentInfoTool as BackgroundSubagentInfoTool
from ._async_delegation import BackgroundSubagentRunner as BackgroundSubagentRunner
from ._async_delegation import CancelSubagentTool as CancelSubagentTool
from ._async_delegation import SteerSubagentTool as SteerSubagentTool
from ._async_delegation import SubagentContextDelta as SubagentContextDelta
from ._async_delegation import WaitSubagentTool as WaitSubagentTool
from ._context import AgentContext as AgentContext
from ._context import AgentContextHandle as AgentContextHandle
from ._deps import Dependencies as Dependencies
from ._errors import AgentConfigError as AgentConfigError
from ._errors import AgentError as AgentError
from ._errors import AgentSpecError as AgentSpecError
from ._errors import ContentRefused as ContentRefused
from ._errors import DeniedRequiredTool as DeniedRequiredTool
from ._errors import MissingApiKey as MissingApiKey
from ._errors import MissingInheritedModel as MissingInheritedModel
from ._errors import MissingRequiredTool as MissingRequiredTool
from ._errors import MissingSubagent as MissingSubagent
from ._errors import ModelError as ModelError
from ._errors import ModelResolutionError as ModelResolutionError
from ._errors import PayloadError as PayloadError
from ._errors import ProviderAuthenticationError as ProviderAuthenticationError
from ._errors import ProviderConnectionError as ProviderConnectionError
from ._errors import ProviderError as ProviderError
from ._errors import ProviderNotInstalled as ProviderNotInstalled
from ._errors import ProviderRateLimited as ProviderRateLimited
from ._errors import ProviderServerError as ProviderServerError
from ._errors import ProviderTimeout as ProviderTimeout
from ._errors import RecursiveSubagentDelegation as RecursiveSubagentDelegation
from ._errors import SubagentError as SubagentError
from ._errors import SubagentHookError as SubagentHookError
from ._errors import SubagentRunFailed as SubagentRunFailed
from ._errors import SubagentSpecError as SubagentSpecError
from ._errors import SubagentToolInheritanceError as SubagentToolInheritanceError
from ._errors import ToolArgumentError as ToolArgumentError
from ._errors import ToolError as ToolError
from ._errors import ToolRetriesExceeded as ToolRetriesExceeded
from ._errors import ToolSchemaError as ToolSchemaError
from ._errors import UnknownEnvironmentProvider as UnknownEnvironmentProvider
from ._errors import UsageLimitExceeded as UsageLimitExceeded
from ._events import AgentEvent as AgentEvent
from ._events import EventBus as EventBus
from ._events import SubagentLifecycleEvent as SubagentLifecycleEvent
from ._events import SubagentLifecycleKind as SubagentLifecycleKind
from ._events import compact_preview as compact_preview
from ._hooks import AgentHook as AgentHook
from ._hooks import CapabilityBundle as CapabilityBundle
from ._hooks import StaticCapabilityBundle as StaticCapabilityBundle
from ._hooks import SubagentExecutionHook as SubagentExecutionHook
from ._hooks import SubagentExecutionMetadata as SubagentExecutionMetadata
from ._hooks import SubagentExecutionOutcome as SubagentExecutionOutcome
from ._host import DataDirBusy as DataDirBusy
from ._host import DataDirCorrupt as DataDirCorrupt
from ._host import DataDirError as DataDirError
from ._host import HostConfig as HostConfig
from ._host import HostConfigError as HostConfigError
from ._host import HostService as HostService
from ._host import RpcError as RpcError
from ._host import StoreUnreachable as StoreUnreachable
from ._host import StoreUrlError as StoreUrlError
from ._host import load_host_config as load_host_config
from ._host import open_host as open_host
from ._host import parse_host_config as parse_host_config
from ._ids import ConversationId as ConversationId
from ._ids import RunId as RunId
from ._ids import TaskId as TaskId
from ._inheritance import SubagentCapabilityInheritancePolicy as SubagentCapabilityInheritancePolicy
from ._inheritance import SubagentToolInheritancePolicy as SubagentToolInheritancePolicy
from ._inheritance import is_main_agent_only_tool as is_main_agent_only_tool
from ._models import FunctionModel as FunctionModel
from ._models import Model as Model
from ._models import ModelMessage as ModelMessage
from ._models import ModelRequest as ModelRequest
from ._models import ModelRequestParameters as ModelRequestParameters
from ._models import ModelResponse as ModelResponse
from ._models import ModelStreamEvent as ModelStreamEvent
from ._models import RequestUsage as RequestUsage
from ._models import RetryPromptPart as RetryPromptPart
from ._models import SystemPromptPart as SystemPromptPart
from ._models import TestModel as TestModel
from ._models import TextDelta as TextDelta
from ._models import TextPart as TextPart
from ._models import ToolCallDelta as ToolCallDelta
from ._models import ToolCallPart as ToolCallPart
from ._models import ToolDefinition as ToolDefinition
from ._models import ToolReturnPart as ToolReturnPart
from ._models import UserPromptPart as UserPromptPart
from ._providers import AnthropicModel as AnthropicModel
from ._providers import ModelSettings as ModelSettings
from ._providers import OpenAIChatModel as OpenAIChatModel
from ._providers import OpenAIResponsesModel as OpenAIResponsesModel
from ._providers import ProviderModel as ProviderModel
from ._providers import RetryPolicy as RetryPolicy
from ._providers import model_from_id as model_from_id
from ._providers import register_providers as register_providers
from ._records import Record as Record
from ._registry import DelegateTool as DelegateTool
from ._registry import SubagentConfig as SubagentConfig
from ._registry import SubagentDelegationMode as SubagentDelegationMode
from ._registry import SubagentInfoTool as SubagentInfoTool
from ._registry import SubagentParentTools as SubagentParentTools
from ._registry import SubagentRegistry as SubagentRegistry
from ._registry import delegation_tools as delegation_tools
from ._result import AgentResult as AgentResult
from ._spec import SubagentDirectory as SubagentDirectory
from ._spec import SubagentSpec as SubagentSpec
from ._spec import SubagentSpecDiagnostic as SubagentSpecDiagnostic
from ._spec import load_subagent_dir as load_subagent_dir
from ._spec import load_subagent_file as load_subagent_file
from ._spec import parse_subagent_markdown as parse_subagent_markdown
from ._spec import spec_error_diagnostic as spec_error_diagnostic
from ._stream import AgentStream as AgentStream
from ._stream import AgentStreamRecord as AgentStreamRecord
from ._stream import AgentStreamSink as AgentStreamSink
from ._stream import AgentStreamSource as AgentStreamSource
from ._stream import AgentStreamSourceKind as AgentStreamSourceKind
from ._task import SubagentResult as SubagentResult
from ._task import SubagentTask as SubagentTask
from ._tools import FunctionTool as FunctionTool
from ._tools import Tool as Tool
from ._tools import ToolContext as ToolContext
from ._tools import ToolRegistry as ToolRegistry
from ._tools import ToolResult as ToolResult
from ._usage import Usage as Usage

_SUBAGENTS_LAYER = "subagents"
"""Marks this package as subagents' own (checked by ``statemachines._guard``)."""

__all__ = [
    "Agent",
    "AgentApp",
    "AgentBuilder",
    "AgentConfigError",
    "AgentContext",
    "AgentContextHandle",
    "AgentError",
    "AgentEvent",
    "AgentHook",
    "AgentResult",
    "AgentSpec",
    "AgentSpecError",
    "AgentSpecRegistry",
    "AgentStream",
    "AgentStreamRecord",
    "AgentStreamSink",
    "AgentStreamSource",
    "AgentStreamSourceKind",
    "AnthropicModel",
    "AsyncDelegateTool",
    "BackgroundSubagentError",
    "BackgroundSubagentInfoTool",
    "BackgroundSubagentRunner",
    "BackgroundSubagentSupervisor",
    "CancelSubagentTool",
    "CapabilityBundle",
    "ContentRefused",
    "ConversationId",
    "DataDirBusy",
    "DataDirCorrupt",
    "DataDirError",
    "DelegateTool",
    "DeniedRequiredTool",
    "Dependencies",
    "EnvironmentProvider",
    "EventBus",
    "FunctionModel",
    "FunctionTool",
    "HostConfig",
    "HostConfigError",
    "HostService",
    "MissingApiKey",
    "MissingInheritedModel",
    "MissingRequiredTool",
    "MissingSubagent",
    "Model",
    "ModelError",
    "ModelMessage",
    "ModelPreset",
    "ModelProviderRegistry",
    "ModelRequest",
    "ModelRequestParameters",
    "ModelResolutionError",
    "ModelResponse",
    "ModelSettings",
    "ModelStreamEvent",
    "OpenAIChatModel",
    "OpenAIResponsesModel",
    "OwnerIdentity",
    "PayloadError",
    "ProviderAuthenticationError",
    "ProviderConnectionError",
    "ProviderError",
    "ProviderModel",
    "ProviderNotInstalled",
    "ProviderRateLimited",
    "ProviderServerError",
    "ProviderTimeout",
    "Record",
    "RecursiveSubagentDelegation",
    "RequestUsage",
    "RetryPolicy",
    "RetryPromptPart",
    "RpcError",
    "RunId",
    "StaticCapabilityBundle",
    "SteerSubagentTool",
    "StoreUnreachable",
    "StoreUrlError",
    "SubagentCapabilityInheritancePolicy",
    "SubagentConfig",
    "SubagentContextDelta",
    "SubagentDelegationMode",
    "SubagentDirectory",
    "SubagentError",
    "SubagentExecutionHook",
    "SubagentExecutionMetadata",
    "SubagentExecutionOutcome",
    "SubagentHookError",
    "SubagentInfoTool",
    "SubagentLifecycleEvent",
    "SubagentLifecycleKind",
    "SubagentParentTools",
    "SubagentRegistry",
    "SubagentResult",
    "SubagentRunFailed",
    "SubagentSpec",
    "SubagentSpecDiagnostic",
    "SubagentSpecError",
    "SubagentSpecProjection",
    "SubagentTask",
    "SubagentToolInheritanceError",
    "SubagentToolInheritancePolicy",
    "SubagentsError",
    "SubagentsSignal",
    "SupervisorLimits",
    "SystemPromptPart",
    "TaskId",
    "TestModel",
    "TextDelta",
    "TextPart",
    "Tool",
    "ToolArgumentError",
    "ToolCallDelta",
    "ToolCallPart",
    "ToolContext",
    "ToolDefinition",
    "ToolError",
    "ToolRegistry",
    "ToolResult",
    "ToolRetriesExceeded",
    "ToolReturnPart",
    "ToolSchemaError",
    "UnknownEnvironmentProvider",
    "Usage",
    "UsageLimitExceeded",
    "UserPromptPart",
    "WaitSubagentTool",
    "compact_preview",
    "default_model_providers",
    "delegation_tools",
    "is_main_agent_only_tool",
    "load_host_config",
    "load_subagent_dir",
    "load_subagent_file",
    "make_test_model",
    "model_from_id",
    "open_host",
    "parse_host_config",
    "parse_subagent_markdown",
    "project_subagent_spec",
    "register_providers",
    "spec_error_diagnostic",
]
