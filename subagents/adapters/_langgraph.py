"""The implementation of :mod:`subagents.adapters.langgraph` (see its docs)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from actors import BackgroundSubagentSupervisor

from .._agent._context import AgentContext
from .._agent._models import ToolCallPart
from .._agent._tools import Tool
from .._delegation._config import SubagentConfig, SubagentDelegationMode
from .._delegation._registry import SubagentRegistry
from .._delegation._topology import delegation_tools as _delegation_tools
from .._errors import AgentConfigError, ToolError
from ._foreign import (
    ForeignAgent,
    ForeignRun,
    ToolBridge,
    registry_of,
    require,
    waiting_description,
)

_EXTRA = "langgraph"
_ADAPTER = "subagents.adapters.langgraph"


def _messages() -> Any:
    return require("langchain_core.messages", _EXTRA, _ADAPTER)


class LangGraphChild(ForeignAgent):
    """A compiled LangGraph graph (``graph.compile()``) as a subagent.

    ``config`` is the ``RunnableConfig`` passed to every run (its callbacks
    are kept; ours are added). The prompt enters as ``{"messages": [("user",
    prompt)]}``.
    """

    framework = "langgraph"

    def __init__(
        self,
        graph: Any,
        *,
        name: str,
        model_name: str = "langgraph",
        config: dict[str, Any] | None = None,
    ) -> None:
        pregel = require("langgraph.pregel", _EXTRA, _ADAPTER)
        if not isinstance(graph, pregel.Pregel):
            raise AgentConfigError(
                f"LangGraphChild needs a compiled graph (graph.compile()), got "
                f"{type(graph).__name__}",
                name=name,
            )
        super().__init__(name=name, model_name=model_name)
        self.graph = graph
        self.config = dict(config or {})

    async def _drive(self, prompt: str, run: ForeignRun) -> str:
        pending: dict[str, ToolCallPart] = {}
        callbacks = [*self.config.get("callbacks", []), _observer(run, pending, self.model.name)]
        config = {**self.config, "callbacks": callbacks}
        last: Any = None
        earlier = [
            (role, text)
            for pair in run.exchanges()
            for role, text in zip(("user", "assistant"), pair, strict=True)
        ]
        async for update in self.graph.astream(
            {"messages": [*earlier, ("user", prompt)]}, config, stream_mode="updates"
        ):
            for values in update.values():
                for message in _messages_of(values):
                    last = message
                    await _report_tool_message(message, pending, run)
        if last is None:
            state = await self.graph.aget_state(config) if self.graph.checkpointer else None
            messages = getattr(state, "values", {}).get("messages", []) if state else []
            last = messages[-1] if messages else None
        content = getattr(last, "content", "")
        return content if isinstance(content, str) else _text_of(content)


def _messages_of(values: Any) -> list[Any]:
    if not isinstance(values, dict):
        return []
    messages = values.get("messages", [])
    return list(messages) if isinstance(messages, list | tuple) else [messages]


async def _report_tool_message(
    message: Any, pending: dict[str, ToolCallPart], run: ForeignRun
) -> None:
    if isinstance(message, _messages().ToolMessage):
        call = pending.pop(message.tool_call_id, None)
        name = call.tool_name if call is not None else str(message.name)
        args = call.args if call is not None else None
        await run.tool_return(name, message.tool_call_id, message.content, args)


def _text_of(content: Any) -> str:
    if isinstance(content, list):
        return "".join(
            part.get("text", "") if isinstance(part, dict) else str(part) for part in content
        )
    return str(content)


def _observer(run: ForeignRun, pending: dict[str, ToolCallPart], model_name: str) -> Any:
    """A LangChain callback handler reporting each chat-model call to ``run``."""
    callbacks = require("langchain_core.callbacks", _EXTRA, _ADAPTER)

    class Observer(callbacks.AsyncCallbackHandler):  # type: ignore[misc, name-defined]
        run_inline = True

        async def on_chat_model_start(self, serialized: Any, messages: Any, **kw: Any) -> None:
            await run.before_request(model_name)

        async def on_llm_end(self, response: Any, **kw: Any) -> None:
            message = _message_of(response)
            text = _text_of(getattr(message, "content", ""))
            calls = [
                ToolCallPart(tool_name=c["name"], args=c.get("args") or {}, tool_call_id=c["id"])
                for c in getattr(message, "tool_calls", None) or []
            ]
            usage = getattr(message, "usage_metadata", None) or {}
            await run.after_request(
                text=text,
                tool_calls=calls,
                input_tokens=int(usage.get("input_tokens", 0)),
                output_tokens=int(usage.get("output_tokens", 0)),
            )
            run.text(text)
            for call in calls:
                pending[call.tool_call_id] = call
                await run.tool_call(call.tool_name, call.tool_call_id, call.args)

        async def on_llm_error(self, error: BaseException, **kw: Any) -> None:
            await run.after_request(
                error=error if isinstance(error, Exception) else RuntimeError(str(error))
            )

    return Observer()


def _message_of(response: Any) -> Any:
    for generations in getattr(response, "generations", []):
        for generation in generations:
            message = getattr(generation, "message", None)
            if message is not None:
                return message
    return None


def _structured_tools(bridge: ToolBridge) -> list[Any]:
    tools_module = require("langchain_core.tools", _EXTRA, _ADAPTER)

    def make(tool: Tool) -> Any:
        async def invoke(**arguments: Any) -> Any:
            try:
                content = await bridge.call(tool.name, arguments, run_key=None, call_id=None)
            except ToolError as error:
                raise tools_module.ToolException(error.message) from error
            return content if isinstance(content, str) else json.dumps(content, default=str)

        definition = tool.definition()
        return tools_module.StructuredTool.from_function(
            coroutine=invoke,
            name=definition.name,
            description=waiting_description(tool),
            args_schema=definition.parameters_schema,
            handle_tool_error=True,
        )

    return [make(tool) for tool in bridge.tools]


def delegation_tools(
    subagents: Sequence[SubagentConfig] | SubagentRegistry,
    *,
    supervisor: object | None = None,
    mode: SubagentDelegationMode | None = None,
    context: AgentContext | None = None,
) -> list[Any]:
    """Our delegation tools over ``subagents`` as LangChain ``StructuredTool``\\ s.

    As :func:`subagents.adapters.pydantic_ai.delegation_toolset`: ``ASYNC``
    with a ``supervisor``, else ``BLOCKING``; ``context`` collects the
    children's usage and events. A refusal is returned to the model as the
    tool message (``handle_tool_error``).
    """
    registry = registry_of(subagents)
    if mode is None:
        mode = (
            SubagentDelegationMode.BLOCKING if supervisor is None else SubagentDelegationMode.ASYNC
        )
    tools = _delegation_tools(registry, mode, supervisor)
    background = supervisor if isinstance(supervisor, BackgroundSubagentSupervisor) else None
    bridge = ToolBridge(tools, AgentContext() if context is None else context, background)
    return _structured_tools(bridge)
