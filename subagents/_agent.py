"""Agents: the builder, the run loop, and the app facade.

The run loop: send the messages and tool definitions to the model; if the
response calls tools, validate and run the calls (concurrently when there are
several, so independent delegations overlap) and send the results back, in
call order; repeat until the model answers with text only. A tool that
raises :class:`ToolError` (bad arguments included) is answered with a retry
prompt, at most ``retries`` times per tool per run, after which the run fails
with :class:`ToolRetriesExceeded`. The run fails with
:class:`UsageLimitExceeded` before it would make more than ``request_limit``
model requests. Any other exception from a tool or hook fails the run as is.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from statemachines import SubagentsError
from storage import Clock, IdSource, RandomIds

from ._context import AgentContext, AgentContextHandle
from ._deps import Dependencies
from ._errors import (
    AgentConfigError,
    ModelError,
    ToolError,
    ToolRetriesExceeded,
    UsageLimitExceeded,
)
from ._hooks import AgentHook, CapabilityBundle
from ._ids import ConversationId, RunId
from ._models import (
    Model,
    ModelMessage,
    ModelRequest,
    ModelRequestParameters,
    ModelResponse,
    RetryPromptPart,
    SystemPromptPart,
    TextDelta,
    ToolCallDelta,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from ._registry import (
    SubagentConfig,
    SubagentDelegationMode,
    SubagentParentTools,
    SubagentRegistry,
    _delegation_topology,
)
from ._result import AgentResult
from ._stream import (
    RUN_COMPLETED,
    RUN_STARTED,
    TEXT_DELTA,
    TOOL_CALL,
    TOOL_CALL_DELTA,
    TOOL_RETRY,
    TOOL_RETURN,
    AgentStream,
    AgentStreamSink,
)
from ._sync import run_blocking
from ._tools import Tool, ToolContext, ToolRegistry

if TYPE_CHECKING:
    from ._async_delegation import TurnStart, _AsyncDelegation

T = TypeVar("T")

DEFAULT_REQUEST_LIMIT = 50
DEFAULT_RETRIES = 1


async def _all_or_none(coroutines: list[Coroutine[Any, Any, T]]) -> list[T]:
    """Run ``coroutines`` concurrently; results in order, or the first error.

    The first failure (or our own cancellation) cancels the others and waits
    for them, so no tool call outlives the run step that started it. The
    error is raised as is, not wrapped in an exception group.
    """
    tasks = [asyncio.ensure_future(coroutine) for coroutine in coroutines]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    except BaseException:
        await _cancel_all(tasks)
        raise
    for task in tasks:
        error = task.exception() if task.done() and not task.cancelled() else None
        if error is not None:
            await _cancel_all(tasks)
            raise error
    return [task.result() for task in tasks]


async def _cancel_all(tasks: Sequence[asyncio.Future[Any]]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


class Agent:
    """A built, immutable agent: model, instructions, tools, subagents, hooks.

    One agent can serve many concurrent runs: all per-run state lives in the
    run's :class:`AgentContext` and local variables. Build with
    :class:`AgentBuilder`.
    """

    def __init__(
        self,
        *,
        model: Model,
        name: str,
        instructions: Sequence[str],
        tools: ToolRegistry,
        subagents: SubagentRegistry,
        delegation_mode: SubagentDelegationMode,
        supervisor: object | None,
        hooks: Sequence[AgentHook],
        capability_bundles: Sequence[CapabilityBundle],
        request_limit: int,
        retries: int,
        ids: IdSource,
        background: _AsyncDelegation | None = None,
    ) -> None:
        self.model = model
        self.name = name
        self.instructions = tuple(instructions)
        self.delegation_mode = delegation_mode
        self.supervisor = supervisor
        self.capability_bundles = tuple(capability_bundles)
        self.request_limit = request_limit
        self.retries = retries
        self._tools = tools
        self._tool_map = {tool.name: tool for tool in tools}
        self._subagents = subagents
        self._hooks = tuple(hooks)
        self._ids = ids
        self._background = background
        self._system_parts = tuple(SystemPromptPart(content=text) for text in self.instructions)
        self._params = ModelRequestParameters(tools=tools.definitions())

    def tools(self) -> ToolRegistry:
        """Every tool the model can call, delegation tools included."""
        return self._tools

    def subagents(self) -> SubagentRegistry:
        return self._subagents

    def hooks(self) -> tuple[AgentHook, ...]:
        return self._hooks

    def _with_inherited(self, tools: Sequence[Tool], hooks: Sequence[AgentHook]) -> Agent:
        """This agent plus inherited ``tools`` and ``hooks`` (self when both are empty).

        The agent's own tools win a name clash; an inherited tool repeated by
        name is added once. The result shares everything else with ``self``.
        """
        extra = [tool for tool in tools if tool.name not in self._tool_map]
        if not extra and not hooks:
            return self
        unique: dict[str, Tool] = {}
        for tool in extra:
            unique.setdefault(tool.name, tool)
        return Agent(
            model=self.model,
            name=self.name,
            instructions=self.instructions,
            tools=ToolRegistry([*self._tools, *unique.values()]),
            subagents=self._subagents,
            delegation_mode=self.delegation_mode,
            supervisor=self.supervisor,
            hooks=[*self._hooks, *hooks],
            capability_bundles=self.capability_bundles,
            request_limit=self.request_limit,
            retries=self.retries,
            ids=self._ids,
            background=self._background,
        )

    async def run(
        self,
        prompt: str,
        context: AgentContext | None = None,
        *,
        message_history: Sequence[ModelMessage] | None = None,
    ) -> AgentResult:
        """Run to text output on the current event loop.

        ``context`` (mutated in place: ``run_id``, ``usage``, events) defaults
        to a fresh one. Raises :class:`UsageLimitExceeded`,
        :class:`ToolRetriesExceeded` or :class:`ModelError`; an exception from
        a hook or a non-``ToolError`` exception from a tool propagates as is.
        """
        return await self._run_core(
            prompt, AgentContext() if context is None else context, None, message_history
        )

    def run_sync(
        self,
        prompt: str,
        context: AgentContext | None = None,
        *,
        message_history: Sequence[ModelMessage] | None = None,
    ) -> AgentResult:
        """``run`` on a fresh event loop, for scripts. Refused inside a running loop."""
        return run_blocking(self.run(prompt, context, message_history=message_history))

    def run_stream(
        self,
        prompt: str,
        context: AgentContext | None = None,
        *,
        message_history: Sequence[ModelMessage] | None = None,
    ) -> AgentStream[AgentResult]:
        """Run as a task on the current loop, yielding :class:`AgentStreamRecord`\\ s.

        Records: ``run_started``, ``text_delta``, ``tool_call_delta`` (from
        models that stream tool-call arguments), ``tool_call``,
        ``tool_retry``, ``tool_return``, ``run_completed``; a delegated
        child's records appear (with ``source`` set) before the parent's
        ``tool_return`` for that ``delegate`` call.
        """
        ctx = AgentContext() if context is None else context

        def start(sink: AgentStreamSink) -> Coroutine[Any, Any, AgentResult]:
            return self._run_core(prompt, ctx, sink, message_history)

        return AgentStream(start)

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
        """The run loop. At the start of every turn (before each model request):
        with async delegation, pending background results are delivered into
        the conversation and their context deltas applied to ``context``; then
        ``turn_start(messages, context)`` may append to the latest request (a
        background child's steering)."""
        if run_id is None:
            run_id = RunId.generate(self._ids)
        context.run_id = run_id
        conversation_id = context.conversation_id
        if conversation_id is None:
            conversation_id = context.conversation_id = ConversationId.generate(self._ids)
        usage = context.usage
        start = usage.copy()
        user = UserPromptPart(content=prompt)
        messages: list[ModelMessage]
        if message_history:
            messages = [*message_history, ModelRequest(parts=(user,))]
        else:
            messages = [ModelRequest(parts=(*self._system_parts, user))]
        if sink is not None:
            sink.push(RUN_STARTED, {"run_id": run_id.as_str(), "agent_name": self.name})
        for hook in self._hooks:
            await hook.before_run(context, prompt)

        dependencies: Dependencies | None = None
        retries: dict[str, int] = {}
        requests = 0
        while True:
            if requests >= self.request_limit:
                raise UsageLimitExceeded(
                    f"request limit of {self.request_limit} reached before the model "
                    "produced text output",
                    limit=self.request_limit,
                    requests=requests,
                    run_id=run_id.as_str(),
                )
            requests += 1
            if self._background is not None:
                await self._background.deliver_pending(messages, context)
            if turn_start is not None:
                await turn_start(messages, context)
            response = await self._request(messages, sink, run_id)
            usage.requests += 1
            usage.input_tokens += response.usage.input_tokens
            usage.output_tokens += response.usage.output_tokens
            usage.cache_read_tokens += response.usage.cache_read_tokens
            if not response.parts:
                raise ModelError(
                    f"model {self.model.name!r} returned a response with no parts",
                    model=self.model.name,
                    run_id=run_id.as_str(),
                )
            messages.append(response)
            calls = [part for part in response.parts if isinstance(part, ToolCallPart)]
            if not calls:
                output = response.text()
                result = AgentResult(
                    output=output, usage=usage.since(start), run_id=run_id, messages=tuple(messages)
                )
                for hook in self._hooks:
                    await hook.after_run(context, output)
                if sink is not None:
                    sink.push(RUN_COMPLETED, {"output": output, "usage": result.usage.to_value()})
                return result
            if dependencies is None:
                # Built once per run, on the first tool call: runs without
                # tools never pay for it.
                dependencies = context.dependencies.copy()
                dependencies.insert(context)
                dependencies.insert(AgentContextHandle(context))
                dependencies.insert(SubagentParentTools(self._tools))
                if sink is not None:
                    dependencies.insert(sink)
            calling = [
                self._call_tool(
                    call,
                    context=context,
                    run_id=run_id,
                    conversation_id=conversation_id,
                    dependencies=dependencies,
                    step=requests,
                    retries=retries,
                    sink=sink,
                )
                for call in calls
            ]
            parts = [await calling[0]] if len(calling) == 1 else await _all_or_none(calling)
            messages.append(ModelRequest(parts=tuple(parts)))

    async def _request(
        self, messages: list[ModelMessage], sink: AgentStreamSink | None, run_id: RunId
    ) -> ModelResponse:
        try:
            if sink is None or not sink.live:
                return await self.model.request(messages, self._params)
            response: ModelResponse | None = None
            async for event in self.model.request_stream(messages, self._params):
                if isinstance(event, TextDelta):
                    sink.push(TEXT_DELTA, {"content": event.content})
                elif isinstance(event, ToolCallDelta):
                    sink.push(
                        TOOL_CALL_DELTA,
                        {
                            "index": event.index,
                            "tool_call_id": event.tool_call_id,
                            "tool_name": event.tool_name,
                            "args_delta": event.args_delta,
                        },
                    )
                else:
                    response = event
        except SubagentsError:
            raise
        except Exception as error:
            raise ModelError(
                f"model {self.model.name!r} request failed: {error}",
                model=self.model.name,
                run_id=run_id.as_str(),
            ) from error
        if response is None:
            raise ModelError(
                f"model {self.model.name!r} stream ended without a response",
                model=self.model.name,
                run_id=run_id.as_str(),
            )
        return response

    async def _call_tool(
        self,
        call: ToolCallPart,
        *,
        context: AgentContext,
        run_id: RunId,
        conversation_id: ConversationId,
        dependencies: Dependencies,
        step: int,
        retries: dict[str, int],
        sink: AgentStreamSink | None,
    ) -> ToolReturnPart | RetryPromptPart:
        name = call.tool_name
        if sink is not None:
            sink.push(
                TOOL_CALL,
                {"tool_name": name, "tool_call_id": call.tool_call_id, "args": call.args},
            )
        tool_context = ToolContext(
            run_id,
            conversation_id,
            step,
            dependencies=dependencies,
            tool_call_id=call.tool_call_id,
        )
        context.usage.tool_calls += 1
        try:
            tool = self._tool_map.get(name)
            if tool is None:
                raise ToolError(
                    f"unknown tool {name!r}; available tools: {sorted(self._tool_map)}", tool=name
                )
            for hook in self._hooks:
                await hook.before_tool_call(tool_context, call)
            result = await tool.call(tool_context, call.args)
        except ToolError as error:
            count = retries.get(name, 0) + 1
            retries[name] = count
            if count > self.retries:
                raise ToolRetriesExceeded(
                    f"tool {name!r} failed {count} times (retry limit {self.retries}): {error}",
                    tool=name,
                    retries=self.retries,
                    run_id=run_id.as_str(),
                ) from error
            if sink is not None:
                sink.push(
                    TOOL_RETRY,
                    {"tool_name": name, "tool_call_id": call.tool_call_id, "error": error.message},
                )
            # The bare message: the model needs the reason, not our field dump.
            return RetryPromptPart(
                content=error.message, tool_name=name, tool_call_id=call.tool_call_id
            )
        for hook in self._hooks:
            await hook.after_tool_call(tool_context, call, result)
        if sink is not None:
            sink.push(
                TOOL_RETURN,
                {"tool_name": name, "tool_call_id": call.tool_call_id, "content": result.content},
            )
        return ToolReturnPart(
            tool_name=name, content=result.content, tool_call_id=call.tool_call_id
        )

    def __repr__(self) -> str:
        return f"Agent({self.name!r}, model={self.model.name!r}, tools={self._tools.names()!r})"


class AgentApp:
    """An agent together with its subagent registry (``AgentBuilder.build_app()``)."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent

    def subagents(self) -> SubagentRegistry:
        return self.agent.subagents()

    def tools(self) -> ToolRegistry:
        return self.agent.tools()

    async def run(self, prompt: str, context: AgentContext | None = None) -> AgentResult:
        return await self.agent.run(prompt, context)

    def run_sync(self, prompt: str, context: AgentContext | None = None) -> AgentResult:
        return self.agent.run_sync(prompt, context)

    def run_stream(
        self, prompt: str, context: AgentContext | None = None
    ) -> AgentStream[AgentResult]:
        return self.agent.run_stream(prompt, context)


class AgentBuilder:
    """Configures an :class:`Agent`. Every method returns the builder, for chaining.

    ``build()`` validates the whole configuration (duplicate tool names,
    unusable delegation mode, limits) and raises :class:`AgentConfigError`.
    """

    def __init__(self, model: Model) -> None:
        if not isinstance(model, Model):
            raise AgentConfigError(
                f"AgentBuilder needs a Model, got {type(model).__name__}", model=repr(model)
            )
        self._model = model
        self._name = "agent"
        self._instructions: list[str] = []
        self._tools: list[Tool] = []
        self._subagents = SubagentRegistry()
        self._mode = SubagentDelegationMode.BLOCKING
        self._supervisor: object | None = None
        self._bundles: list[CapabilityBundle] = []
        self._hooks: list[AgentHook] = []
        self._request_limit = DEFAULT_REQUEST_LIMIT
        self._retries = DEFAULT_RETRIES
        self._clock: Clock | None = None
        self._ids: IdSource | None = None

    def name(self, name: str) -> AgentBuilder:
        self._name = name
        return self

    def instructions(self, text: str) -> AgentBuilder:
        """Append a system instruction (sent first in each run's first request)."""
        self._instructions.append(text)
        return self

    system_prompt = instructions

    def tool(self, tool: Tool) -> AgentBuilder:
        if not isinstance(tool, Tool):
            raise AgentConfigError(f"not a Tool: {tool!r}")
        self._tools.append(tool)
        return self

    def tools(self, tools: Iterable[Tool]) -> AgentBuilder:
        for tool in tools:
            self.tool(tool)
        return self

    def subagent(self, subagent: SubagentConfig) -> AgentBuilder:
        self._subagents = self._subagents.with_subagent(subagent)
        return self

    def subagent_registry(self, registry: SubagentRegistry) -> AgentBuilder:
        """Replace the subagent registry wholesale."""
        self._subagents = registry
        return self

    def subagent_delegation_mode(self, mode: SubagentDelegationMode) -> AgentBuilder:
        self._mode = SubagentDelegationMode(mode)
        return self

    def background_subagent_supervisor(self, supervisor: object) -> AgentBuilder:
        """The long-lived :class:`~actors.BackgroundSubagentSupervisor` that the async
        delegation modes hand attempts to (required by them: ``build()`` raises
        :class:`AgentConfigError` without one). It outlives parent runs: an agent
        built later on the same supervisor receives results still pending."""
        self._supervisor = supervisor
        return self

    def capability_bundle(self, bundle: CapabilityBundle) -> AgentBuilder:
        self._bundles.append(bundle)
        return self

    def hook(self, hook: AgentHook) -> AgentBuilder:
        self._hooks.append(hook)
        return self

    def hooks(self, hooks: Iterable[AgentHook]) -> AgentBuilder:
        self._hooks.extend(hooks)
        return self

    def request_limit(self, limit: int) -> AgentBuilder:
        """At most ``limit`` model requests per run (default 50)."""
        self._request_limit = limit
        return self

    def retries(self, retries: int) -> AgentBuilder:
        """How many failed calls per tool per run the model may retry (default 1)."""
        self._retries = retries
        return self

    def clock(self, clock: Clock) -> AgentBuilder:
        self._clock = clock
        return self

    def ids(self, ids: IdSource) -> AgentBuilder:
        self._ids = ids
        return self

    def build(self) -> Agent:
        if not isinstance(self._request_limit, int) or self._request_limit < 1:
            raise AgentConfigError(
                f"request_limit must be a positive int, got {self._request_limit!r}"
            )
        if not isinstance(self._retries, int) or self._retries < 0:
            raise AgentConfigError(f"retries must be a non-negative int, got {self._retries!r}")
        registry = self._subagents.with_parent_capabilities(self._hooks, self._bundles)
        if self._clock is not None:
            registry = registry.with_clock(self._clock)
        if self._ids is not None:
            registry = registry.with_ids(self._ids)
        tools = list(self._tools)
        hooks = list(self._hooks)
        for bundle in self._bundles:
            tools.extend(bundle.tools())
            hooks.extend(bundle.hooks())
        delegation, background = _delegation_topology(registry, self._mode, self._supervisor)
        tools.extend(delegation)
        return Agent(
            model=self._model,
            name=self._name,
            instructions=self._instructions,
            tools=ToolRegistry(tools),
            subagents=registry,
            delegation_mode=self._mode,
            supervisor=self._supervisor,
            hooks=hooks,
            capability_bundles=self._bundles,
            request_limit=self._request_limit,
            retries=self._retries,
            ids=RandomIds() if self._ids is None else self._ids,
            background=background,
        )

    def build_app(self) -> AgentApp:
        return AgentApp(self.build())
