"""The implementation of :mod:`subagents.adapters.pydantic_ai` (see its docs)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from actors import BackgroundSubagentSupervisor

from .._agent._context import AgentContext
from .._agent._models import ToolCallPart
from .._agent._tools import Tool
from .._delegation._config import SubagentConfig, SubagentDelegationMode
from .._delegation._registry import SubagentRegistry
from .._delegation._topology import delegation_tools
from .._errors import AgentConfigError, ToolError
from ._foreign import ForeignAgent, ForeignRun, ToolBridge, registry_of, require

_EXTRA = "pydantic-ai"
_ADAPTER = "subagents.adapters.pydantic_ai"


def _pydantic_ai() -> Any:
    return require("pydantic_ai", _EXTRA, _ADAPTER)


def _model_name(agent: Any) -> str:
    model = getattr(agent, "model", None)
    name = getattr(model, "model_name", None)
    return str(name if name is not None else model or "pydantic-ai")


class PydanticAIChild(ForeignAgent):
    """A ``pydantic_ai.Agent`` (text output) as a subagent.

    ``deps`` are passed to every run; parent tools the child inherits (its
    tool policy) are offered to the pydantic-ai agent as an extra toolset.
    """

    framework = "pydantic-ai"

    def __init__(self, agent: Any, *, name: str | None = None, deps: Any = None) -> None:
        pai = _pydantic_ai()
        if not isinstance(agent, pai.Agent):
            raise AgentConfigError(
                f"PydanticAIChild needs a pydantic_ai.Agent, got {type(agent).__name__}",
                name=name,
            )
        super().__init__(name=name or agent.name or "pydantic-ai", model_name=_model_name(agent))
        self.agent = agent
        self.deps = deps

    async def _drive(self, prompt: str, run: ForeignRun) -> str:
        pai = _pydantic_ai()
        toolsets = []
        if self.inherited_tools():
            toolsets.append(_toolset(ToolBridge(self.inherited_tools(), run.context)))
        history = _history(run.exchanges()) or None
        async with self.agent.iter(
            prompt, deps=self.deps, toolsets=toolsets or None, message_history=history
        ) as agent_run:
            node: Any = agent_run.next_node
            pending: dict[str, ToolCallPart] = {}
            while not pai.Agent.is_end_node(node):
                if pai.Agent.is_model_request_node(node):
                    node = await self._steered(node, run)
                    await self._report_returns(node.request.parts, pending, run)
                    await run.before_request(self.model.name)
                    try:
                        node = await agent_run.next(node)
                    except Exception as error:
                        await run.after_request(error=error)
                        raise
                    if pai.Agent.is_call_tools_node(node):
                        await self._report_response(node.model_response, pending, run)
                else:
                    node = await agent_run.next(node)
            return str(node.data.output)

    @staticmethod
    async def _steered(node: Any, run: ForeignRun) -> Any:
        """The model-request node with the parent's queued steering appended."""
        steering = await run.steering()
        if not steering:
            return node
        messages = _pydantic_ai().messages
        parts = [messages.UserPromptPart(content=text) for text in steering]
        node.request = dataclasses.replace(node.request, parts=[*node.request.parts, *parts])
        return node

    @staticmethod
    async def _report_response(
        response: Any, pending: dict[str, ToolCallPart], run: ForeignRun
    ) -> None:
        messages = _pydantic_ai().messages
        text = "".join(p.content for p in response.parts if isinstance(p, messages.TextPart))
        calls = [
            ToolCallPart(tool_name=p.tool_name, args=p.args or {}, tool_call_id=p.tool_call_id)
            for p in response.parts
            if isinstance(p, messages.ToolCallPart)
        ]
        usage = response.usage
        await run.after_request(
            text=text,
            tool_calls=calls,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
        )
        run.text(text)
        for call in calls:
            pending[call.tool_call_id] = call
            await run.tool_call(call.tool_name, call.tool_call_id, call.args)

    @staticmethod
    async def _report_returns(
        parts: Sequence[Any], pending: dict[str, ToolCallPart], run: ForeignRun
    ) -> None:
        messages = _pydantic_ai().messages
        for part in parts:
            if isinstance(part, messages.ToolReturnPart | messages.RetryPromptPart):
                call = pending.pop(part.tool_call_id, None)
                if call is not None:
                    content = part.content if isinstance(part, messages.ToolReturnPart) else None
                    await run.tool_return(call.tool_name, call.tool_call_id, content, call.args)


def _history(exchanges: list[tuple[str, str]]) -> list[Any]:
    """A continued conversation as pydantic-ai messages."""
    messages = _pydantic_ai().messages
    history: list[Any] = []
    for prompt, answer in exchanges:
        history.append(messages.ModelRequest(parts=[messages.UserPromptPart(content=prompt)]))
        history.append(messages.ModelResponse(parts=[messages.TextPart(content=answer)]))
    return history


def _toolset(bridge: ToolBridge) -> Any:
    """A pydantic-ai ``FunctionToolset`` calling ``bridge``'s tools (schemas as ours)."""
    pai = _pydantic_ai()

    def make(tool: Tool) -> Any:
        async def call(ctx: Any, **arguments: Any) -> Any:
            try:
                return await bridge.call(
                    tool.name, arguments, run_key=ctx.run_id, call_id=ctx.tool_call_id
                )
            except ToolError as error:
                raise pai.ModelRetry(error.message) from error

        definition = tool.definition()
        return pai.Tool.from_schema(
            call,
            name=definition.name,
            description=definition.description,
            json_schema=definition.parameters_schema,
            takes_ctx=True,
        )

    class DelegationToolset(pai.FunctionToolset):  # type: ignore[misc, name-defined]
        """Delivers finished background results at the start of every run step."""

        async def for_run_step(self, ctx: Any) -> Any:
            delivered = await bridge.deliver_pending(ctx.run_id)
            if delivered and ctx.pending_messages is not None:
                ctx.enqueue(*delivered)
            return await super().for_run_step(ctx)

    toolset = DelegationToolset([make(tool) for tool in bridge.tools])
    toolset.subagents_context = bridge.context
    toolset.subagents_bridge = bridge
    return toolset


def delegation_toolset(
    subagents: Sequence[SubagentConfig] | SubagentRegistry,
    *,
    supervisor: object | None = None,
    mode: SubagentDelegationMode | None = None,
    context: AgentContext | None = None,
) -> Any:
    """A pydantic-ai toolset with our delegation tools over ``subagents``.

    ``mode`` defaults to ``ASYNC`` with a ``supervisor`` (durable background
    delegation: the attempt is accepted in the supervisor's store, and
    ``wait_subagent`` delivers its result exactly once, also from a new
    supervisor after a restart) and ``BLOCKING`` without. ``context`` (kept by
    the toolset as ``.subagents_context``) collects the children's usage and
    events across the parent's runs. A tool's typed refusal reaches the model
    as a retry (``ModelRetry``). As for our own parent, a finished background
    result the model did not wait for is delivered at the start of the
    parent's next run step (``RunContext.enqueue``), once.
    """
    registry = registry_of(subagents)
    if mode is None:
        mode = (
            SubagentDelegationMode.BLOCKING if supervisor is None else SubagentDelegationMode.ASYNC
        )
    tools = delegation_tools(registry, mode, supervisor)
    background = supervisor if isinstance(supervisor, BackgroundSubagentSupervisor) else None
    context = AgentContext() if context is None else context
    return _toolset(ToolBridge(tools, context, background))
