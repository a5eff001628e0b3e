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
from ._agent import AgentContext as AgentContext
from ._agent import AgentContextHandle as AgentContextHandle
from ._agent import AgentEvent as AgentEvent
from ._agent import AgentHook as AgentHook
from ._agent import AgentResult as AgentResult
from ._agent import AgentStream as AgentStream
from ._agent import AgentStreamRecord as AgentStreamRecord
from ._agent import AgentStreamSink as AgentStreamSink
from ._agent import AgentStreamSource as AgentStreamSource
from ._agent import AgentStreamSourceKind as AgentStreamSourceKind
from ._agent import CapabilityBundle as CapabilityBundle
from ._agent import ConversationId as ConversationId
from ._agent import Dependencies as Dependencies
from ._agent import EventBus as EventBus
from ._agent import FunctionModel as FunctionModel
from ._agent import FunctionTool as FunctionTool
from ._agent import Model as Model
from ._agent import ModelMessage as ModelMessage
from ._agent import ModelRequest as ModelRequest
from ._agent import ModelRequestInfo as ModelRequestInfo
from ._agent import ModelRequestParameters as ModelRequestParameters
from ._agent import ModelResponse as ModelResponse
from ._agent import ModelStreamEvent as ModelStreamEvent
from ._agent import Record as Record
from ._agent import RequestUsage as RequestUsage
from ._agent import RetryPromptPart as RetryPromptPart
from ._agent import RunId as RunId
from ._agent import StaticCapabilityBundle as StaticCapabilityBundle
from ._agent import SystemPromptPart as SystemPromptPart
from ._agent import TaskId as TaskId
from ._agent import TestModel as TestModel
from ._agent import TextDelta as TextDelta
from ._agent import TextPart as TextPart
from ._agent import Tool as Tool
from ._agent import ToolCallDelta as ToolCallDelta
from ._agent import ToolCallPart as ToolCallPart
from ._agent import ToolContext as ToolContext
from ._agent import ToolDefinition as ToolDefinition
from ._agent import ToolRegistry as ToolRegistry
from ._agent import ToolResult as ToolResult
from ._agent import ToolReturnPart as ToolReturnPart
from ._agent import Usage as Usage
from ._agent import UserPromptPart as UserPromptPart
from ._agent import compact_preview as compact_preview
from ._agent import convert_arguments as convert_arguments
from ._agent import struct_schema as struct_schema
from ._agent import tool as tool
from ._builder import AgentApp as AgentApp
from ._builder import AgentBuilder as AgentBuilder
from ._delegation import AsyncDelegateTool as AsyncDelegateTool
from ._delegation import BackgroundSubagentInfoTool as BackgroundSubagentInfoTool
from ._delegation import BackgroundSubagentRunner as BackgroundSubagentRunner
from ._delegation import CancelSubagentTool as CancelSubagentTool
from ._delegation import DelegateTool as DelegateTool
from ._delegation import SteerSubagentTool as SteerSubagentTool
from ._delegation import SubagentCapabilityInheritancePolicy as SubagentCapabilityInheritancePolicy
from ._delegation import SubagentConfig as SubagentConfig
from ._delegation import SubagentContextDelta as SubagentContextDelta
from ._delegation import SubagentDelegationMode as SubagentDelegationMode
from ._delegation import SubagentExecutionHook as SubagentExecutionHook
from ._delegation import SubagentExecutionMetadata as SubagentExecutionMetadata
from ._delegation import SubagentExecutionOutcome as SubagentExecutionOutcome
from ._delegation import SubagentInfoTool as SubagentInfoTool
from ._delegation import SubagentLifecycleEvent as SubagentLifecycleEvent
from ._delegation import SubagentLifecycleKind as SubagentLifecycleKind
from ._delegation import SubagentParentTools as SubagentParentTools
from ._delegation import SubagentRegistry as SubagentRegistry
from ._delegation import SubagentResult as SubagentResult
from ._delegation import SubagentSpecProjection as SubagentSpecProjection
from ._delegation import SubagentTask as SubagentTask
from ._delegation import SubagentToolInheritancePolicy as SubagentToolInheritancePolicy
from ._delegation import WaitSubagentTool as WaitSubagentTool
from ._delegation import delegation_tools as delegation_tools
from ._delegation import is_main_agent_only_tool as is_main_agent_only_tool
from ._delegation import project_subagent_spec as project_subagent_spec
from ._errors import AdapterNotInstalled as AdapterNotInstalled
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
from ._errors import OutputTruncated as OutputTruncated
from ._errors import PayloadError as PayloadError
from ._errors import ProviderAuthenticationError as ProviderAuthenticationError
from ._errors import ProviderConnectionError as ProviderConnectionError
from ._errors import ProviderError as ProviderError
from ._errors import ProviderNotInstalled as ProviderNotInstalled
from ._errors import ProviderRateLimited as ProviderRateLimited
from ._errors import ProviderServerError as ProviderServerError
from ._errors import ProviderStreamIncomplete as ProviderStreamIncomplete
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
from ._errors import UnsupportedAgent as UnsupportedAgent
from ._errors import UsageLimitExceeded as UsageLimitExceeded
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
from ._providers import AnthropicModel as AnthropicModel
from ._providers import ModelSettings as ModelSettings
from ._providers import OpenAIChatModel as OpenAIChatModel
from ._providers import OpenAIResponsesModel as OpenAIResponsesModel
from ._providers import ProviderModel as ProviderModel
from ._providers import RetryPolicy as RetryPolicy
from ._providers import model_from_id as model_from_id
from ._providers import register_providers as register_providers
from ._specs import AgentSpec as AgentSpec
from ._specs import AgentSpecRegistry as AgentSpecRegistry
from ._specs import EnvironmentProvider as EnvironmentProvider
from ._specs import ModelPreset as ModelPreset
from ._specs import ModelProviderRegistry as ModelProviderRegistry
from ._specs import SubagentDirectory as SubagentDirectory
from ._specs import SubagentSpec as SubagentSpec
from ._specs import SubagentSpecDiagnostic as SubagentSpecDiagnostic
from ._specs import default_model_providers as default_model_providers
from ._specs import load_subagent_dir as load_subagent_dir
from ._specs import load_subagent_file as load_subagent_file
from ._specs import make_test_model as make_test_model
from ._specs import parse_subagent_markdown as parse_subagent_markdown
from ._specs import spec_error_diagnostic as spec_error_diagnostic

_SUBAGENTS_LAYER = "subagents"
"""Marks this package as subagents' own (checked by ``statemachines._guard``)."""

__all__ = [
    "AdapterNotInstalled",
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
    "ModelRequestInfo",
    "ModelRequestParameters",
    "ModelResolutionError",
    "ModelResponse",
    "ModelSettings",
    "ModelStreamEvent",
    "OpenAIChatModel",
    "OpenAIResponsesModel",
    "OutputTruncated",
    "OwnerIdentity",
    "PayloadError",
    "ProviderAuthenticationError",
    "ProviderConnectionError",
    "ProviderError",
    "ProviderModel",
    "ProviderNotInstalled",
    "ProviderRateLimited",
    "ProviderServerError",
    "ProviderStreamIncomplete",
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
    "UnsupportedAgent",
    "Usage",
    "UsageLimitExceeded",
    "UserPromptPart",
    "WaitSubagentTool",
    "compact_preview",
    "convert_arguments",
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
    "struct_schema",
    "tool",
]
