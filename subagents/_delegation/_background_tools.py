"""The five background tools a main agent's model calls, and supervisor errors as tool errors.

``delegate`` (or ``spawn_delegate``), ``steer_subagent``, ``cancel_subagent``,
``wait_subagent`` and ``subagent_info``. Every one needs the calling agent's
context in its dependencies (a :class:`ToolError` says so otherwise);
``delegate``, ``cancel_subagent`` and ``wait_subagent`` refuse a caller that is
itself a subagent. A typed supervisor refusal becomes a :class:`ToolError`
with a hint the model can act on.
"""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any

from actors import BackgroundSubagentError, BackgroundSubagentSupervisor

from .._agent._context import AgentContext, AgentContextHandle
from .._agent._tools import Tool, ToolContext, ToolRegistry, ToolResult, struct_schema
from .._errors import ToolError
from ._args import (
    _AsyncDelegateArgs,
    _CancelArgs,
    _convert,
    _delegate_args,
    _delegate_schema,
    _NoArgs,
    _SteerArgs,
    _WaitArgs,
)
from ._background import _LAUNCH_KEY, _Launch
from ._config import SubagentParentTools
from ._delivery import _AsyncDelegation, _delivered_by, _delivered_elsewhere, durable_run_id

DELEGATE_TOOL_NAME = "delegate"
SPAWN_DELEGATE_TOOL_NAME = "spawn_delegate"
STEER_SUBAGENT_TOOL_NAME = "steer_subagent"
CANCEL_SUBAGENT_TOOL_NAME = "cancel_subagent"
WAIT_SUBAGENT_TOOL_NAME = "wait_subagent"
SUBAGENT_INFO_TOOL_NAME = "subagent_info"


def _parent_context(context: ToolContext) -> AgentContext | None:
    handle = context.dependencies.get(AgentContextHandle)
    return handle.context if handle is not None else context.dependencies.get(AgentContext)


class _BackgroundTool(Tool):
    """What the five background tools share: the binding, the supervisor, the parent."""

    def __init__(self, delegation: _AsyncDelegation, name: str, description: str) -> None:
        self.delegation = delegation
        self.name = name
        self.description = description
        self.metadata = {"kind": "delegation", "main_agent_only": True, "background": True}

    @property
    def supervisor(self) -> BackgroundSubagentSupervisor:
        return self.delegation.supervisor

    def _parent(self, context: ToolContext, *, main_agent_only: bool = False) -> AgentContext:
        """The calling agent's context, from the call's dependencies.

        Raises :class:`ToolError` when the call carries none (the tool was
        called outside an agent run without an ``AgentContextHandle``), and,
        with ``main_agent_only``, when the caller is itself a subagent.
        """
        parent = _parent_context(context)
        if parent is None:
            raise ToolError(
                f"tool {self.name!r} needs the parent agent context: insert an "
                "AgentContextHandle (or AgentContext) into the ToolContext dependencies",
                tool=self.name,
            )
        if main_agent_only and parent.subagent_stack:
            raise ToolError(
                f"{self.name} refused: background subagents are controlled by the main "
                f"agent only, not from inside subagent {parent.subagent_stack[-1]!r}",
                tool=self.name,
                error_kind="RecursiveSubagentDelegation",
            )
        return parent

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class AsyncDelegateTool(_BackgroundTool):
    """Background ``delegate``: ``{subagent_name (alias name), prompt, agent_id?,
    linked_task_id?}`` -> ``{status: accepted|continued, subagent_name, attempt_id,
    agent_id, linked_task_id, message}``; returns at once, the child runs under the
    supervisor. Unknown fields are rejected; an ``agent_id`` the supervisor does not
    know for this subagent is refused (:class:`ToolError`)."""

    def __init__(self, delegation: _AsyncDelegation, name: str = DELEGATE_TOOL_NAME) -> None:
        super().__init__(
            delegation,
            name,
            "Start a registered subagent in the background and return at once with its "
            "attempt_id and agent_id. Do not poll: its result is delivered to you "
            "automatically. Pass agent_id (from an earlier delegate) to continue that "
            "agent's conversation after its previous attempt ended.",
        )
        self.parameters_schema = _delegate_schema(_AsyncDelegateArgs, delegation.registry.names())

    def validate(self, arguments: Any) -> _AsyncDelegateArgs:
        return _delegate_args(self.name, arguments, _AsyncDelegateArgs)

    async def invoke(self, context: ToolContext, arguments: Any) -> ToolResult:
        args: _AsyncDelegateArgs = arguments
        name = args.subagent_name
        registry = self.delegation.registry
        if not registry.is_available(name):
            raise ToolError(
                f"{self.name} refused: no subagent named {name!r}; "
                f"registered subagents: {registry.names()}",
                tool=self.name,
                error_kind="NotFound",
                subagent_name=name,
            )
        parent = self._parent(context, main_agent_only=True)
        tools = context.dependencies.get(SubagentParentTools)
        launch = _Launch(
            parent=parent,
            child=parent.subagent_context(name, name),
            loop=asyncio.get_running_loop(),
            parent_tools=ToolRegistry() if tools is None else tools.tools,
            # The child sees the caller's contextvars as they are now, at acceptance.
            context=contextvars.copy_context(),
        )
        try:
            accepted = await self.supervisor.delegate(
                name,
                args.prompt,
                args.agent_id,
                args.linked_task_id,
                runner=self.delegation.runner,
                parent_run_id=context.run_id.as_str(),
                metadata={_LAUNCH_KEY: launch},
            )
        except BackgroundSubagentError as error:
            raise _tool_error(self.name, error) from error
        self.delegation.state.launch(accepted.attempt_id)
        return ToolResult(accepted.to_value(), {"background": True})


class SteerSubagentTool(_BackgroundTool):
    """``steer_subagent {attempt_id, message, steering_id?}`` -> receipt ``queued``.

    The child sees the message at its next turn boundary. The same
    ``steering_id`` and message return the same receipt and queue once.
    """

    def __init__(self, delegation: _AsyncDelegation, name: str = STEER_SUBAGENT_TOOL_NAME) -> None:
        super().__init__(
            delegation,
            name,
            "Send guidance to a running background subagent; it sees the message at its "
            "next turn. Give a steering_id to make a retry safe.",
        )
        self.parameters_schema = struct_schema(_SteerArgs)

    def validate(self, arguments: Any) -> _SteerArgs:
        return _convert(self.name, arguments, _SteerArgs)

    async def invoke(self, context: ToolContext, arguments: Any) -> ToolResult:
        args: _SteerArgs = arguments
        self._parent(context)
        try:
            receipt = await self.supervisor.steer(args.attempt_id, args.message, args.steering_id)
        except BackgroundSubagentError as error:
            raise _tool_error(self.name, error) from error
        return ToolResult(receipt.to_value())


class CancelSubagentTool(_BackgroundTool):
    """``cancel_subagent {attempt_id, reason?, cancellation_id?}`` ->
    ``cancellation_requested``, or the terminal status the attempt already had."""

    def __init__(self, delegation: _AsyncDelegation, name: str = CANCEL_SUBAGENT_TOOL_NAME) -> None:
        super().__init__(
            delegation,
            name,
            "Ask a background subagent to stop. Its (cancelled) result is still delivered.",
        )
        self.parameters_schema = struct_schema(_CancelArgs)

    def validate(self, arguments: Any) -> _CancelArgs:
        return _convert(self.name, arguments, _CancelArgs)

    async def invoke(self, context: ToolContext, arguments: Any) -> ToolResult:
        args: _CancelArgs = arguments
        self._parent(context, main_agent_only=True)
        try:
            cancelled = await self.supervisor.cancel(
                args.attempt_id, args.reason, args.cancellation_id
            )
        except BackgroundSubagentError as error:
            raise _tool_error(self.name, error) from error
        return ToolResult(cancelled.to_value())


class WaitSubagentTool(_BackgroundTool):
    """``wait_subagent {attempt_id?, timeout_seconds=30}``: one bounded wait.

    ``timeout_seconds`` is clamped to [0, 300] (non-finite: 300). The shapes
    are those of :class:`~actors.WaitResult`. A terminal result delivered by
    this wait also applies the child's context delta to the parent context.
    """

    def __init__(self, delegation: _AsyncDelegation, name: str = WAIT_SUBAGENT_TOOL_NAME) -> None:
        super().__init__(
            delegation,
            name,
            "Wait once, bounded, for a background subagent's result. Call it only when "
            "you are blocked on that result; never in a polling loop. Without attempt_id "
            "it waits for the next result and summarizes all attempts.",
        )
        self.parameters_schema = struct_schema(_WaitArgs)

    def validate(self, arguments: Any) -> _WaitArgs:
        return _convert(self.name, arguments, _WaitArgs)

    async def invoke(self, context: ToolContext, arguments: Any) -> ToolResult:
        args: _WaitArgs = arguments
        parent = self._parent(context, main_agent_only=True)
        try:
            # An unknown or a finished attempt answers at once.
            waited = await self.supervisor.wait(
                args.attempt_id, args.timeout_seconds, durable_run_id(parent)
            )
        except BackgroundSubagentError as error:
            raise _tool_error(self.name, error) from error
        metadata: dict[str, Any] = {}
        if waited.attempt_id is not None and (
            _delivered_by(waited) or _delivered_elsewhere(waited)
        ):
            self.delegation.state.forget({waited.attempt_id})
        if _delivered_by(waited) and waited.attempt_id is not None:
            applied = self.delegation.apply(parent, waited)
            metadata["context_mutated"] = applied
        return ToolResult(waited.to_value(), metadata)


class BackgroundSubagentInfoTool(_BackgroundTool):
    """``subagent_info`` of the async topology: the registry's report plus
    ``background: {active: [...], retained: [...]}``."""

    def __init__(self, delegation: _AsyncDelegation, name: str = SUBAGENT_INFO_TOOL_NAME) -> None:
        super().__init__(
            delegation,
            name,
            "List the registered subagents (availability, inherited tools) and the "
            "background attempts: active ones and retained undelivered results.",
        )
        self.parameters_schema = struct_schema(_NoArgs)

    def validate(self, arguments: Any) -> _NoArgs:
        return _convert(self.name, arguments, _NoArgs)

    async def invoke(self, context: ToolContext, arguments: Any) -> ToolResult:
        self._parent(context)
        tools = context.dependencies.get(SubagentParentTools)
        report = self.delegation.registry.info(None if tools is None else tools.tools)
        try:
            background = await self.supervisor.info()
        except BackgroundSubagentError as error:
            raise _tool_error(self.name, error) from error
        return ToolResult({"subagents": report, "background": background.to_value()})


_HINTS: dict[str, str] = {
    "Closing": "Background delegation is closed: the supervisor is shutting down.",
    "QuotaExceeded": (
        "Too many background subagents are active or have undelivered results. "
        "Wait for one (wait_subagent) before delegating more."
    ),
    "ActiveConversation": (
        "This agent_id already has an active attempt: steer it, cancel it or wait for it "
        "before continuing the agent."
    ),
    "NotFound": (
        "Continue only an agent_id that delegate returned for this subagent; omit agent_id "
        "to start a new agent."
    ),
    "Terminal": "The attempt already ended; use wait_subagent to read its result.",
    "PromptTooLarge": "Shorten the prompt.",
    "SteeringTooLarge": "Shorten the steering message.",
    "SteeringQueueFull": "Too much steering is queued; wait for the child's next turn.",
    "CancellationReasonTooLarge": "Shorten the cancellation reason.",
    "IdempotencyConflict": "That id was already used with different content; use a new id.",
    "DeliveryClaimed": "Another consumer is delivering this result.",
    "Delivered": "The result was already delivered to you.",
    "Durability": "The store did not confirm the operation; nothing changed. Retry later.",
    "ShutdownDeadline": "The supervisor is shutting down.",
    "HostBusy": (
        "The host runs its maximum of background attempts; nothing was started. "
        "Retry in a few seconds (retry_after_seconds)."
    ),
}
_SHOWN_FIELDS = (
    "attempt_id",
    "agent_id",
    "subagent_name",
    "execution_status",
    "steering_id",
    "cancellation_id",
    "size_bytes",
    "limit",
    "active",
    "undelivered",
    "known_attempt_ids",
    "bound",
    "retry_after_seconds",
)


def _variant(error: BackgroundSubagentError) -> str:
    for name in _HINTS:
        variant = getattr(BackgroundSubagentError, name, None)
        if isinstance(variant, type) and isinstance(error, variant):
            return name
    return type(error).__name__


def _tool_error(tool: str, error: BackgroundSubagentError) -> ToolError:
    kind = _variant(error)
    shown = {k: error.fields[k] for k in _SHOWN_FIELDS if k in error.fields}
    detail = ", ".join(f"{k}={v!r}" for k, v in shown.items())
    text = f"{tool} refused: {error.message}" + (f" ({detail})" if detail else "") + "."
    hint = _HINTS.get(kind)
    if kind == "NotFound" and "attempt_id" in error.fields:
        hint = "Use an attempt_id that delegate returned (subagent_info lists them)."
    return ToolError(f"{text} {hint}" if hint else text, tool=tool, error_kind=kind, **shown)
