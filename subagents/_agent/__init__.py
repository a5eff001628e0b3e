"""One agent run, with no knowledge of delegation.

The run loop (:class:`Agent`), its context, dependencies, events, stream,
usage, models (the :class:`Model` protocol, :class:`TestModel`,
:class:`FunctionModel`), tools and their schemas, run hooks, records and ids.
Everything here is re-exported from ``subagents``; the packages above
(``_providers``, ``_specs``, ``_delegation``, ``_builder``) build on it.
"""

from ._context import AgentContext as AgentContext
from ._context import AgentContextHandle as AgentContextHandle
from ._deps import Dependencies as Dependencies
from ._events import AgentEvent as AgentEvent
from ._events import EventBus as EventBus
from ._events import compact_preview as compact_preview
from ._hooks import AgentHook as AgentHook
from ._hooks import CapabilityBundle as CapabilityBundle
from ._hooks import ModelRequestInfo as ModelRequestInfo
from ._hooks import StaticCapabilityBundle as StaticCapabilityBundle
from ._ids import ConversationId as ConversationId
from ._ids import RunId as RunId
from ._ids import TaskId as TaskId
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
from ._records import Record as Record
from ._result import AgentResult as AgentResult
from ._run import Agent as Agent
from ._stream import AgentStream as AgentStream
from ._stream import AgentStreamRecord as AgentStreamRecord
from ._stream import AgentStreamSink as AgentStreamSink
from ._stream import AgentStreamSource as AgentStreamSource
from ._stream import AgentStreamSourceKind as AgentStreamSourceKind
from ._tools import FunctionTool as FunctionTool
from ._tools import Tool as Tool
from ._tools import ToolContext as ToolContext
from ._tools import ToolRegistry as ToolRegistry
from ._tools import ToolResult as ToolResult
from ._tools import convert_arguments as convert_arguments
from ._tools import struct_schema as struct_schema
from ._tools import tool as tool
from ._usage import Usage as Usage

__all__ = [
    "Agent",
    "AgentContext",
    "AgentContextHandle",
    "AgentEvent",
    "AgentHook",
    "AgentResult",
    "AgentStream",
    "AgentStreamRecord",
    "AgentStreamSink",
    "AgentStreamSource",
    "AgentStreamSourceKind",
    "CapabilityBundle",
    "ConversationId",
    "Dependencies",
    "EventBus",
    "FunctionModel",
    "FunctionTool",
    "Model",
    "ModelMessage",
    "ModelRequest",
    "ModelRequestInfo",
    "ModelRequestParameters",
    "ModelResponse",
    "ModelStreamEvent",
    "Record",
    "RequestUsage",
    "RetryPromptPart",
    "RunId",
    "StaticCapabilityBundle",
    "SystemPromptPart",
    "TaskId",
    "TestModel",
    "TextDelta",
    "TextPart",
    "Tool",
    "ToolCallDelta",
    "ToolCallPart",
    "ToolContext",
    "ToolDefinition",
    "ToolRegistry",
    "ToolResult",
    "ToolReturnPart",
    "Usage",
    "UserPromptPart",
    "compact_preview",
    "convert_arguments",
    "struct_schema",
    "tool",
]
