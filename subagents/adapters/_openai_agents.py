"""The implementation of :mod:`subagents.adapters.openai_agents` (see its docs)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
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

_EXTRA = "openai-agents"
_ADAPTER = "subagents.adapters.openai_agents"


def _agents() -> Any:
    return require("agents", _EXTRA, _ADAPTER)


class OpenAIAgentsChild(ForeignAgent):
    """An OpenAI Agents SDK ``Agent`` as a subagent (its final output as text).

    ``context`` is the SDK run context passed to every run; ``max_turns`` and
    ``run_config`` are passed to ``Runner.run``. Inherited parent tools are
    added to the agent as ``FunctionTool``\\ s.
    """

    framework = "openai-agents"

    def __init__(
        self,
        agent: Any,
        *,
        name: str | None = None,
        context: Any = None,
        max_turns: int = 10,
        run_config: Any = None,
    ) -> None:
        sdk = _agents()
        if not isinstance(agent, sdk.Agent):
            raise AgentConfigError(
                f"OpenAIAgentsChild needs an agents.Agent, got {type(agent).__name__}", name=name
            )
        model = agent.model
        model_name = model if isinstance(model, str) else getattr(model, "model", None)
        super().__init__(
            name=name or agent.name, model_name=str(model_name or type(model).__name__)
        )
        self.agent = agent
        self.run_context = context
        self.max_turns = max_turns
        self.run_config = (
            run_config if run_config is not None else sdk.RunConfig(tracing_disabled=True)
        )

    async def _drive(self, prompt: str, run: ForeignRun) -> str:
        sdk = _agents()
        agent = self.agent
        if self.inherited_tools():
            bridge = ToolBridge(self.inherited_tools(), run.context)
            agent = agent.clone(tools=[*agent.tools, *_function_tools(bridge)])
        model = agent.model
        if model is None or isinstance(model, str):
            provider = self.run_config.model_provider
            model = provider.get_model(model)
        agent = agent.clone(model=_ObservedModel(sdk, model, run, self.model.name))
        earlier = [
            {"role": role, "content": text}
            for pair in run.exchanges()
            for role, text in zip(("user", "assistant"), pair, strict=True)
        ]
        result = await sdk.Runner.run(
            agent,
            [*earlier, {"role": "user", "content": prompt}] if earlier else prompt,
            context=self.run_context,
            max_turns=self.max_turns,
            run_config=self.run_config,
        )
        output = result.final_output
        return output if isinstance(output, str) else json.dumps(output, default=str)


def _ObservedModel(sdk: Any, inner: Any, run: ForeignRun, model_name: str) -> Any:
    """``inner`` (an ``agents.Model``) with every request reported to ``run``."""

    class ObservedModel(sdk.Model):  # type: ignore[misc]
        def __init__(self) -> None:
            self.pending: dict[str, ToolCallPart] = {}

        async def get_response(
            self, system_instructions: Any, input: Any, *args: Any, **kw: Any
        ) -> Any:
            input = await self._before(input)
            try:
                response = await inner.get_response(system_instructions, input, *args, **kw)
            except Exception as error:
                await run.after_request(error=error)
                raise
            await self._after(response)
            return response

        def stream_response(self, *args: Any, **kw: Any) -> AsyncIterator[Any]:
            raise NotImplementedError("the adapter runs agents with Runner.run")

        async def _before(self, input: Any) -> Any:
            items = [{"role": "user", "content": input}] if isinstance(input, str) else input
            for item in items:
                if isinstance(item, dict) and item.get("type") == "function_call_output":
                    call = self.pending.pop(str(item.get("call_id")), None)
                    if call is not None:
                        await run.tool_return(
                            call.tool_name, call.tool_call_id, item.get("output"), call.args
                        )
            steering = await run.steering()
            if steering:
                items = [*items, *({"role": "user", "content": text} for text in steering)]
            await run.before_request(model_name)
            return items

        async def _after(self, response: Any) -> None:
            text: list[str] = []
            calls: list[ToolCallPart] = []
            for item in response.output:
                kind = getattr(item, "type", None)
                if kind == "message":
                    text.extend(
                        c.text for c in item.content if getattr(c, "type", "") == "output_text"
                    )
                elif kind == "function_call":
                    calls.append(
                        ToolCallPart(
                            tool_name=item.name,
                            args=_args(item.arguments),
                            tool_call_id=item.call_id,
                        )
                    )
            usage = response.usage
            await run.after_request(
                text="".join(text),
                tool_calls=calls,
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
            )
            run.text("".join(text))
            for call in calls:
                self.pending[call.tool_call_id] = call
                await run.tool_call(call.tool_name, call.tool_call_id, call.args)

    return ObservedModel()


def _args(arguments: str) -> dict[str, Any] | str:
    try:
        value = json.loads(arguments or "{}")
    except ValueError:
        return arguments
    return value if isinstance(value, dict) else arguments


def _function_tools(bridge: ToolBridge) -> list[Any]:
    sdk = _agents()

    def make(tool: Tool) -> Any:
        async def invoke(ctx: Any, arguments: str) -> Any:
            try:
                args = json.loads(arguments or "{}")
            except ValueError as error:
                return f"error: arguments are not JSON: {error}"
            try:
                content = await bridge.call(
                    tool.name, args, run_key=None, call_id=getattr(ctx, "tool_call_id", None)
                )
            except ToolError as error:
                return f"error: {error.message}"
            return json.dumps(content, default=str) if not isinstance(content, str) else content

        definition = tool.definition()
        return sdk.FunctionTool(
            name=definition.name,
            description=waiting_description(tool),
            params_json_schema=definition.parameters_schema,
            on_invoke_tool=invoke,
            strict_json_schema=False,
        )

    return [make(tool) for tool in bridge.tools]


def delegation_tools(
    subagents: Sequence[SubagentConfig] | SubagentRegistry,
    *,
    supervisor: object | None = None,
    mode: SubagentDelegationMode | None = None,
    context: AgentContext | None = None,
) -> list[Any]:
    """Our delegation tools over ``subagents`` as OpenAI Agents ``FunctionTool``\\ s.

    As :func:`subagents.adapters.pydantic_ai.delegation_toolset`: ``ASYNC``
    with a ``supervisor``, else ``BLOCKING``; ``context`` collects the
    children's usage and events. A refusal is returned to the model as
    ``"error: ..."`` text.
    """
    registry = registry_of(subagents)
    if mode is None:
        mode = (
            SubagentDelegationMode.BLOCKING if supervisor is None else SubagentDelegationMode.ASYNC
        )
    tools = _delegation_tools(registry, mode, supervisor)
    background = supervisor if isinstance(supervisor, BackgroundSubagentSupervisor) else None
    bridge = ToolBridge(tools, AgentContext() if context is None else context, background)
    return _function_tools(bridge)
