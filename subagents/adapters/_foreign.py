"""What every adapter shares: a foreign agent as a delegated child, the missing-extra
error, and our tools seen from a foreign parent.

:class:`ForeignAgent` is an :class:`~subagents.Agent` whose run loop is another
framework's: a subclass implements :meth:`ForeignAgent._drive`, which runs the
foreign agent once and reports what happens through the :class:`ForeignRun` it
is given (text, tool calls and returns, usage, model requests). Everything a
delegation needs around it (the run id, the stream records with subagent
attribution, the child's usage, the hooks, steering) is done here, so a
foreign child runs under the same child-run protocol as our own agents, in
both delegation modes.
"""

from __future__ import annotations

import copy
import importlib
from collections.abc import Awaitable, Callable, Collection, Sequence
from types import ModuleType
from typing import Any

from actors import BackgroundSubagentSupervisor
from statemachines import SubagentsError

from .._agent._context import AgentContext, AgentContextHandle
from .._agent._deps import Dependencies
from .._agent._hooks import AgentHook, ModelRequestInfo
from .._agent._ids import ConversationId, RunId
from .._agent._models import (
    Model,
    ModelMessage,
    ModelRequest,
    ModelRequestParameters,
    ModelResponse,
    RequestUsage,
    TextPart,
    ToolCallPart,
    UserPromptPart,
)
from .._agent._result import AgentResult
from .._agent._run import Agent
from .._agent._stream import (
    RUN_COMPLETED,
    RUN_STARTED,
    TEXT_DELTA,
    TOOL_CALL,
    TOOL_RETURN,
    AgentStreamSink,
)
from .._agent._tools import Tool, ToolContext, ToolRegistry, ToolResult
from .._delegation._background_tools import WAIT_SUBAGENT_TOOL_NAME, AsyncDelegateTool
from .._delegation._config import SubagentConfig, SubagentParentTools
from .._delegation._registry import SubagentRegistry
from .._errors import AdapterNotInstalled, ModelError, ToolError

TurnStart = Callable[[list[ModelMessage], AgentContext], Awaitable[None]]


def require(module: str, extra: str, adapter: str) -> ModuleType:
    """Import ``module`` or raise :class:`AdapterNotInstalled` naming the extra to install."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise AdapterNotInstalled(
            f"{adapter} needs the {module!r} package: pip install 'subagents[{extra}]'",
            adapter=adapter,
            extra=extra,
            module=module,
        ) from error


class _ForeignModel(Model):
    """Stands in for the foreign agent's model: our loop never calls it."""

    def __init__(self, name: str) -> None:
        self.name = name

    async def request(
        self, messages: Sequence[ModelMessage], params: ModelRequestParameters
    ) -> ModelResponse:
        raise ModelError(
            f"model {self.name!r} belongs to a foreign agent and is driven by its framework",
            model=self.name,
        )


class ForeignRun:
    """One run of a foreign agent, as its driver reports it.

    ``text``, ``tool_call`` and ``tool_return`` push stream records (the
    delegation attributes them to the subagent); ``usage`` adds to the run's
    counters; ``before_request`` / ``after_request`` bracket one model request
    for the hooks; ``steering()`` drains what the parent queued for this turn
    (background children), as plain strings in arrival order. ``history`` is
    the conversation so far when a background agent is continued
    (:meth:`exchanges` gives it as prompt/answer pairs).
    """

    def __init__(
        self,
        agent: ForeignAgent,
        context: AgentContext,
        *,
        sink: AgentStreamSink | None,
        run_id: RunId,
        conversation_id: ConversationId,
        turn_start: TurnStart | None,
        history: Sequence[ModelMessage] = (),
    ) -> None:
        self.agent = agent
        self.context = context
        self.history = tuple(history)
        self.sink = sink
        self.run_id = run_id
        self.conversation_id = conversation_id
        self.requests = 0
        self._turn_start = turn_start
        self._info: ModelRequestInfo | None = None
        self._tool_contexts: dict[str, ToolContext] = {}

    def exchanges(self) -> list[tuple[str, str]]:
        """The continued conversation as ``(user prompt, answer)`` pairs, oldest first."""
        pairs: list[tuple[str, str]] = []
        prompt: str | None = None
        for message in self.history:
            if isinstance(message, ModelRequest):
                texts = [p.content for p in message.parts if isinstance(p, UserPromptPart)]
                prompt = "\n".join(texts) if texts else prompt
            elif prompt is not None:
                pairs.append((prompt, message.text()))
                prompt = None
        return pairs

    @property
    def live(self) -> bool:
        return self.sink is not None and self.sink.live

    def text(self, content: str) -> None:
        if content and self.sink is not None:
            self.sink.push(TEXT_DELTA, {"content": content})

    async def tool_call(self, name: str, call_id: str, args: dict[str, Any] | str) -> None:
        self.context.usage.tool_calls += 1
        if self.sink is not None:
            self.sink.push(TOOL_CALL, {"tool_name": name, "tool_call_id": call_id, "args": args})
        hooks = self.agent.hooks()
        if hooks:
            tool_context = self._tool_context(call_id)
            self._tool_contexts[call_id] = tool_context
            call = ToolCallPart(tool_name=name, args=args, tool_call_id=call_id)
            for hook in hooks:
                await hook.before_tool_call(tool_context, call)

    async def tool_return(
        self, name: str, call_id: str, content: Any, args: dict[str, Any] | str | None = None
    ) -> None:
        hooks = self.agent.hooks()
        tool_context = self._tool_contexts.pop(call_id, None)
        if hooks and tool_context is not None:
            call = ToolCallPart(tool_name=name, args=args or {}, tool_call_id=call_id)
            for hook in hooks:
                await hook.after_tool_call(tool_context, call, ToolResult(content))
        if self.sink is not None:
            self.sink.push(
                TOOL_RETURN, {"tool_name": name, "tool_call_id": call_id, "content": content}
            )

    def _tool_context(self, call_id: str) -> ToolContext:
        dependencies = Dependencies()
        dependencies.insert(self.context)
        dependencies.insert(AgentContextHandle(self.context))
        return ToolContext(
            self.run_id,
            self.conversation_id,
            self.requests,
            dependencies=dependencies,
            tool_call_id=call_id,
        )

    def usage(self, *, input_tokens: int = 0, output_tokens: int = 0, requests: int = 0) -> None:
        usage = self.context.usage
        usage.requests += requests
        usage.input_tokens += input_tokens
        usage.output_tokens += output_tokens

    async def steering(self) -> list[str]:
        """The parent's queued steering for this turn (empty for a blocking child)."""
        if self._turn_start is None:
            return []
        scratch: list[ModelMessage] = [ModelRequest(parts=())]
        await self._turn_start(scratch, self.context)
        return [
            part.content
            for message in scratch
            if isinstance(message, ModelRequest)
            for part in message.parts
            if isinstance(part, UserPromptPart)
        ]

    async def before_request(self, model_name: str) -> None:
        """One model request starts: counted, and the model-request hooks see it."""
        self.requests += 1
        hooks = self.agent.hooks()
        if not hooks:
            return
        info = ModelRequestInfo(
            run_id=self.run_id,
            conversation_id=self.conversation_id,
            agent_name=self.agent.name,
            model_name=model_name,
            request_number=self.requests,
            messages=(),
            parameters=ModelRequestParameters(),
            streamed=self.live,
        )
        self._info = info
        for hook in hooks:
            await hook.before_model_request(self.context, info)

    async def after_request(
        self,
        *,
        text: str = "",
        tool_calls: Sequence[ToolCallPart] = (),
        input_tokens: int = 0,
        output_tokens: int = 0,
        error: Exception | None = None,
    ) -> None:
        """The request ended: its usage counted, the hooks told (with ``error`` if it failed)."""
        if error is None:
            self.usage(input_tokens=input_tokens, output_tokens=output_tokens, requests=1)
        info, self._info = self._info, None
        if info is None:
            return
        response = None
        if error is None:
            parts: list[TextPart | ToolCallPart] = [TextPart(content=text)] if text else []
            response = ModelResponse(
                parts=(*parts, *tool_calls),
                usage=RequestUsage(input_tokens=input_tokens, output_tokens=output_tokens),
                model_name=info.model_name,
            )
        for hook in self.agent.hooks():
            await hook.after_model_request(self.context, info, response, error)


class ForeignAgent(Agent):
    """An agent another framework runs, usable wherever an :class:`~subagents.Agent` is.

    ``SubagentConfig(name, adapter)`` delegates to it in blocking and
    background mode. Hooks (ours, and those a child inherits) observe its run,
    its model requests and its tool calls as far as the framework reports
    them. Inherited parent tools are offered to the foreign agent when the
    adapter supports it (:meth:`inherited_tools`).
    """

    framework = "foreign"

    def __init__(self, *, name: str, model_name: str, hooks: Sequence[AgentHook] = ()) -> None:
        super().__init__(model=_ForeignModel(model_name), name=name, hooks=hooks)
        self._inherited: tuple[Tool, ...] = ()

    def inherited_tools(self) -> tuple[Tool, ...]:
        """Parent tools this child received at delegation (its tool policy chose them)."""
        return self._inherited

    def _with_inherited(
        self,
        tools: Sequence[Tool],
        hooks: Sequence[AgentHook],
        *,
        exclude: Collection[str] = (),
    ) -> Agent:
        kept = tuple(tool for tool in tools if tool.name not in exclude)
        if not kept and not hooks:
            return self
        clone = copy.copy(self)
        clone._inherited = kept
        clone._tools = ToolRegistry(kept)
        clone._tool_map = {tool.name: tool for tool in kept}
        clone._hooks = (*self._hooks, *hooks)
        return clone

    async def _drive(self, prompt: str, run: ForeignRun) -> str:
        """Run the foreign agent on ``prompt`` once; its text output."""
        raise NotImplementedError

    async def _run_core(
        self,
        prompt: str,
        context: AgentContext,
        sink: AgentStreamSink | None,
        message_history: Sequence[ModelMessage] | None,
        run_id: RunId | None = None,
        *,
        turn_start: TurnStart | None = None,
    ) -> AgentResult:
        run_id = RunId.generate(self._ids) if run_id is None else run_id
        context.run_id = run_id
        hooks = self.hooks()
        try:
            conversation_id = context.conversation_id
            if conversation_id is None:
                conversation_id = context.conversation_id = ConversationId.generate(self._ids)
            start = context.usage.copy()
            run = ForeignRun(
                self,
                context,
                sink=sink,
                run_id=run_id,
                conversation_id=conversation_id,
                turn_start=turn_start,
                history=message_history or (),
            )
            if sink is not None:
                sink.push(RUN_STARTED, {"run_id": run_id.as_str(), "agent_name": self.name})
            for hook in hooks:
                await hook.before_run(context, prompt)
            output = await self._drive_mapped(prompt, run)
            for hook in hooks:
                await hook.after_run(context, output)
        except Exception as error:
            for hook in hooks:
                try:
                    await hook.on_run_error(context, error)
                except Exception as hook_error:
                    error.add_note(
                        f"on_run_error hook {type(hook).__name__} failed: {hook_error!r}"
                    )
            raise
        except BaseException as signal:
            for hook in hooks:
                try:
                    hook.on_run_interrupted(context, signal)
                except Exception as hook_error:
                    signal.add_note(f"on_run_interrupted hook failed: {hook_error!r}")
            raise
        usage = context.usage.since(start)
        if sink is not None:
            sink.push(RUN_COMPLETED, {"output": output, "usage": usage.to_value()})
        messages = (
            *(message_history or ()),
            ModelRequest(parts=(UserPromptPart(content=prompt),)),
            ModelResponse(parts=(TextPart(content=output),), model_name=self.model.name),
        )
        return AgentResult(output=output, usage=usage, run_id=run_id, messages=messages)

    async def _drive_mapped(self, prompt: str, run: ForeignRun) -> str:
        """``_drive``; a foreign framework's own exception becomes :class:`ModelError`."""
        try:
            return await self._drive(prompt, run)
        except (SubagentsError, ToolError):
            raise
        except Exception as error:
            raise ModelError(
                f"{self.framework} agent {self.name!r} failed: {type(error).__name__}: {error}",
                model=self.model.name,
                run_id=run.run_id.as_str(),
            ) from error

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, model={self.model.name!r})"


class ToolBridge:
    """Our tools called from a foreign framework's tool calls.

    Every call runs in ``context`` (the parent's :class:`AgentContext`, which
    keeps the usage, events and background results across the foreign
    parent's runs): the tool sees it through :class:`AgentContextHandle`, as
    inside our own run loop. ``run_key`` (the foreign run's id) becomes the
    call's run id, so a background attempt records which parent run started it.
    """

    def __init__(
        self,
        tools: Sequence[Tool],
        context: AgentContext,
        supervisor: BackgroundSubagentSupervisor | None = None,
    ) -> None:
        self.tools = ToolRegistry(tools)
        self.context = context
        self.supervisor = supervisor
        self._run_ids: dict[str, RunId] = {}
        self._recovered: dict[str, dict[str, Any]] = {}

    def run_id(self, run_key: str | None) -> RunId:
        if not run_key:
            run_key = "foreign"
        run_id = self._run_ids.get(run_key)
        if run_id is None:
            run_id = self._run_ids[run_key] = RunId.from_string(f"run_{run_key}")
        return run_id

    async def call(
        self, name: str, arguments: Any, *, run_key: str | None, call_id: str | None
    ) -> Any:
        """``name``'s result content; :class:`ToolError` (a retry for the model) on bad input."""
        tool = self.tools.lookup(name)
        if tool is None:
            raise ToolError(f"unknown tool {name!r}", tool=name)
        context = self.context
        run_id = self.run_id(run_key)
        if context.run_id is None:
            context.run_id = run_id
        if context.conversation_id is None:
            context.conversation_id = ConversationId.from_string(f"conv_{run_id.as_str()}")
        dependencies = context.dependencies.copy()
        dependencies.insert(context)
        dependencies.insert(AgentContextHandle(context))
        dependencies.insert(SubagentParentTools(ToolRegistry()))
        tool_context = ToolContext(
            run_id,
            context.conversation_id,
            0,
            dependencies=dependencies,
            tool_call_id=call_id or "",
        )
        context.usage.tool_calls += 1
        result = await tool.call(tool_context, arguments)
        content = result.content
        if name == WAIT_SUBAGENT_TOOL_NAME and isinstance(content, dict):
            return await self._recover(content)
        return content

    async def deliver_pending(self, run_key: str | None) -> list[str]:
        """The background results finished since the last call, each once, as the user
        messages our own parent gets at its turn boundary (their deltas applied to
        :attr:`context`); none without background tools."""
        delegation = next(
            (t.delegation for t in self.tools if isinstance(t, AsyncDelegateTool)), None
        )
        if delegation is None:
            return []
        scratch: list[ModelMessage] = [ModelRequest(parts=())]
        self.context.run_id = self.context.run_id or self.run_id(run_key)
        await delegation.deliver_pending(scratch, self.context)
        return [
            part.content
            for message in scratch
            if isinstance(message, ModelRequest)
            for part in message.parts
            if isinstance(part, UserPromptPart)
        ]

    async def _recover(self, waited: dict[str, Any]) -> dict[str, Any]:
        """A wait for an attempt this supervisor never ran (its host died before
        delivering): the session's pending results are claimed, each handed out once,
        to the wait that names it (as our own parent gets them at its next turn)."""
        attempt_id = waited.get("attempt_id")
        if waited.get("status") != "not_found" or not attempt_id or self.supervisor is None:
            return waited
        if attempt_id not in self._recovered:
            # A foreign parent has no durable run of ours: each result is claimed
            # and acknowledged as it is handed out (the SDK parent's semantics).
            for result in await self.supervisor.take_pending():
                self._recovered[result.attempt_id] = {
                    **result.to_value(),
                    "result": result.output,
                    "recovered": True,
                }
        return self._recovered.pop(attempt_id, waited)


#: What our background ``delegate`` promises that a parent without turn delivery lacks.
_AUTOMATIC = "Do not poll: its result is delivered to you automatically."
_BY_WAITING = "Call wait_subagent with its attempt_id to get its result."


def waiting_description(tool: Tool) -> str:
    """``tool``'s description for a foreign parent that gets background results only by
    calling ``wait_subagent`` (no turn-boundary delivery)."""
    description = tool.definition().description or tool.name
    return description.replace(_AUTOMATIC, _BY_WAITING)


def registry_of(subagents: Sequence[SubagentConfig] | SubagentRegistry) -> SubagentRegistry:
    """``subagents`` as a registry (a sequence of configs is registered in order)."""
    if isinstance(subagents, SubagentRegistry):
        return subagents
    registry = SubagentRegistry()
    for config in subagents:
        registry = registry.with_subagent(config)
    return registry
