"""One agent run: the run loop, with no knowledge of delegation.

The run loop: send the messages and tool definitions to the model; if the
response calls tools, validate and run the calls (concurrently when there are
several, so independent delegations overlap) and send the results back, in
call order; repeat until the model answers with text only. A tool that
raises :class:`ToolError` (bad arguments included) is answered with a retry
prompt, at most ``retries`` times per tool per run, after which the run fails
with :class:`ToolRetriesExceeded`. The run fails with
:class:`UsageLimitExceeded` before it would make more than ``request_limit``
model requests. Any other exception from a tool or hook fails the run as is.

Delegation plugs in from above by subclassing (``_delegation``): an
:class:`Agent` offers two extension points, :meth:`Agent._tool_dependencies`
(extra objects every tool call sees) and :meth:`Agent._before_turn` (awaited
at the start of every turn), and ``_run_core`` takes a per-run ``turn_start``.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Awaitable, Callable, Collection, Coroutine, Iterable, Sequence
from typing import Any, TypeVar

from statemachines import SubagentsError
from storage import IdSource, RandomIds

from .._errors import ModelError, ToolError, ToolRetriesExceeded, UsageLimitExceeded
from ._context import AgentContext, AgentContextHandle
from ._deps import Dependencies
from ._hooks import AgentHook, CapabilityBundle, ModelRequestInfo
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
from ._usage import Usage

T = TypeVar("T")

DEFAULT_REQUEST_LIMIT = 50
DEFAULT_RETRIES = 1

TurnStart = Callable[[list[ModelMessage], AgentContext], Awaitable[None]]
"""Awaited at the start of every turn of one run, before the model request."""


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


async def _notify_all(
    hooks: Sequence[AgentHook], call: Callable[[AgentHook], Awaitable[None]]
) -> tuple[AgentHook, Exception] | None:
    """Await ``call(hook)`` for every hook, even after one raised; the first failure."""
    first: tuple[AgentHook, Exception] | None = None
    for hook in hooks:
        try:
            await call(hook)
        except Exception as error:
            first = first or (hook, error)
    return first


async def _notify_failure(
    method: str,
    hooks: Sequence[AgentHook],
    error: Exception,
    call: Callable[[AgentHook, Exception], Awaitable[None]],
) -> None:
    """Tell every hook about ``error``; a hook's own exception becomes a note on ``error``
    (the run's error is what the caller must see)."""
    for hook in hooks:
        try:
            await call(hook, error)
        except Exception as hook_error:
            error.add_note(f"{method} hook {type(hook).__name__} also failed: {hook_error!r}")


def _interrupted(hooks: Sequence[AgentHook], context: AgentContext, signal: BaseException) -> None:
    """``on_run_interrupted`` on every hook; their exceptions become notes on ``signal``."""
    for hook in hooks:
        try:
            hook.on_run_interrupted(context, signal)
        except Exception as hook_error:
            signal.add_note(f"on_run_interrupted hook {type(hook).__name__} failed: {hook_error!r}")


class Agent:
    """A built, immutable agent: model, instructions, tools, hooks.

    One agent can serve many concurrent runs: all per-run state lives in the
    run's :class:`AgentContext` and local variables. Build with
    :class:`AgentBuilder` (whose agents also carry their subagents).
    """

    def __init__(
        self,
        *,
        model: Model,
        name: str = "agent",
        instructions: Sequence[str] = (),
        tools: ToolRegistry | None = None,
        hooks: Sequence[AgentHook] = (),
        capability_bundles: Sequence[CapabilityBundle] = (),
        request_limit: int = DEFAULT_REQUEST_LIMIT,
        retries: int = DEFAULT_RETRIES,
        ids: IdSource | None = None,
    ) -> None:
        self.model = model
        self.name = name
        self.instructions = tuple(instructions)
        self.capability_bundles = tuple(capability_bundles)
        self.request_limit = request_limit
        self.retries = retries
        self._tools = ToolRegistry() if tools is None else tools
        self._tool_map = {tool.name: tool for tool in self._tools}
        self._hooks = tuple(hooks)
        self._ids: IdSource = RandomIds() if ids is None else ids
        self._system_parts = tuple(SystemPromptPart(content=text) for text in self.instructions)
        self._params = ModelRequestParameters(tools=self._tools.definitions())

    def tools(self) -> ToolRegistry:
        """Every tool the model can call, delegation tools included."""
        return self._tools

    def hooks(self) -> tuple[AgentHook, ...]:
        return self._hooks

    def _tool_dependencies(self) -> Iterable[object]:
        """Extra dependencies every tool call of every run sees (none here)."""
        return ()

    async def _before_turn(self, messages: list[ModelMessage], context: AgentContext) -> None:
        """Awaited at the start of every turn, before ``turn_start`` (nothing here)."""
        return

    def _with_inherited(
        self,
        tools: Sequence[Tool],
        hooks: Sequence[AgentHook],
        *,
        exclude: Collection[str] = (),
    ) -> Agent:
        """This agent plus inherited ``tools`` and ``hooks``, without the tools named
        in ``exclude`` (its own included); ``self`` when nothing changes.

        The agent's own tools win a name clash; an inherited tool repeated by
        name is added once. The result is a shallow copy of ``self`` (same
        class, everything else shared).
        """
        unique: dict[str, Tool] = {}
        for tool in tools:
            if tool.name not in self._tool_map:
                unique.setdefault(tool.name, tool)
        kept = [tool for tool in [*self._tools, *unique.values()] if tool.name not in exclude]
        if len(kept) == len(self._tools) and not unique and not hooks:
            return self
        clone = copy.copy(self)
        clone._tools = ToolRegistry(kept)
        clone._tool_map = {tool.name: tool for tool in kept}
        clone._params = ModelRequestParameters(tools=clone._tools.definitions())
        clone._hooks = (*self._hooks, *hooks)
        return clone

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
        """The run loop. At the start of every turn (before each model request)
        ``_before_turn(messages, context)`` runs (with async delegation it
        delivers pending background results), then ``turn_start(messages,
        context)`` may append to the latest request (a background child's
        steering). A failure reaches the hooks' ``on_run_error`` (a signal,
        ``on_run_interrupted``) before it propagates."""
        run_id = RunId.generate(self._ids) if run_id is None else run_id
        context.run_id = run_id
        try:
            return await self._run_loop(
                prompt, context, sink, message_history, run_id=run_id, turn_start=turn_start
            )
        except Exception as error:
            await _notify_failure(
                "on_run_error", self._hooks, error, lambda h, e: h.on_run_error(context, e)
            )
            raise
        except BaseException as signal:
            _interrupted(self._hooks, context, signal)
            raise

    async def _run_loop(
        self,
        prompt: str,
        context: AgentContext,
        sink: AgentStreamSink | None,
        message_history: Sequence[ModelMessage] | None,
        *,
        run_id: RunId,
        turn_start: TurnStart | None,
    ) -> AgentResult:
        conversation_id = context.conversation_id
        if conversation_id is None:
            conversation_id = context.conversation_id = ConversationId.generate(self._ids)
        start = context.usage.copy()
        messages = self._first_messages(prompt, message_history)
        if sink is not None:
            sink.push(RUN_STARTED, {"run_id": run_id.as_str(), "agent_name": self.name})
        for hook in self._hooks:
            await hook.before_run(context, prompt)
        turn = _Turn(context, run_id, conversation_id, sink)
        while True:
            if turn.requests >= self.request_limit:
                raise UsageLimitExceeded(
                    f"request limit of {self.request_limit} reached before the model "
                    "produced text output",
                    limit=self.request_limit,
                    requests=turn.requests,
                    run_id=run_id.as_str(),
                )
            turn.requests += 1
            await self._before_turn(messages, context)
            if turn_start is not None:
                await turn_start(messages, context)
            response = await self._respond(messages, turn)
            calls = [part for part in response.parts if isinstance(part, ToolCallPart)]
            if not calls:
                return await self._finish(response, messages, turn, start)
            parts = await self._call_tools(calls, turn)
            messages.append(ModelRequest(parts=tuple(parts)))

    def _first_messages(
        self, prompt: str, message_history: Sequence[ModelMessage] | None
    ) -> list[ModelMessage]:
        user = UserPromptPart(content=prompt)
        if message_history:
            return [*message_history, ModelRequest(parts=(user,))]
        return [ModelRequest(parts=(*self._system_parts, user))]

    async def _respond(self, messages: list[ModelMessage], turn: _Turn) -> ModelResponse:
        """One model request (the model-request hooks around it): usage counted, an empty
        response refused, the reply appended."""
        if not self._hooks:
            response = await self._request(messages, turn.sink, turn.run_id)
        else:
            response = await self._observed_request(messages, turn)
        usage = turn.context.usage
        usage.requests += 1
        usage.input_tokens += response.usage.input_tokens
        usage.output_tokens += response.usage.output_tokens
        usage.cache_read_tokens += response.usage.cache_read_tokens
        if not response.parts:
            raise ModelError(
                f"model {self.model.name!r} returned a response with no parts",
                model=self.model.name,
                run_id=turn.run_id.as_str(),
            )
        messages.append(response)
        return response

    async def _observed_request(self, messages: list[ModelMessage], turn: _Turn) -> ModelResponse:
        """``_request`` between ``before_model_request`` and ``after_model_request``."""
        context = turn.context
        info = ModelRequestInfo(
            run_id=turn.run_id,
            conversation_id=turn.conversation_id,
            agent_name=self.name,
            model_name=self.model.name,
            request_number=turn.requests,
            messages=tuple(messages),
            parameters=self._params,
            streamed=turn.sink is not None and turn.sink.live,
        )
        for hook in self._hooks:
            await hook.before_model_request(context, info)
        try:
            response = await self._request(messages, turn.sink, turn.run_id)
        except Exception as error:
            await _notify_failure(
                "after_model_request",
                self._hooks,
                error,
                lambda h, e: h.after_model_request(context, info, None, e),
            )
            raise
        first = await _notify_all(
            self._hooks, lambda h: h.after_model_request(context, info, response, None)
        )
        if first is not None:
            raise first[1]
        return response

    async def _finish(
        self, response: ModelResponse, messages: list[ModelMessage], turn: _Turn, start: Usage
    ) -> AgentResult:
        output = response.text()
        result = AgentResult(
            output=output,
            usage=turn.context.usage.since(start),
            run_id=turn.run_id,
            messages=tuple(messages),
        )
        for hook in self._hooks:
            await hook.after_run(turn.context, output)
        if turn.sink is not None:
            turn.sink.push(RUN_COMPLETED, {"output": output, "usage": result.usage.to_value()})
        return result

    async def _call_tools(
        self, calls: list[ToolCallPart], turn: _Turn
    ) -> list[ToolReturnPart | RetryPromptPart]:
        if turn.dependencies is None:
            # Built once per run, on the first tool call: runs without
            # tools never pay for it.
            turn.dependencies = self._run_dependencies(turn.context, turn.sink)
        calling = [self._call_tool(call, turn) for call in calls]
        if len(calling) == 1:
            return [await calling[0]]
        return await _all_or_none(calling)

    def _run_dependencies(
        self, context: AgentContext, sink: AgentStreamSink | None
    ) -> Dependencies:
        dependencies = context.dependencies.copy()
        dependencies.insert(context)
        dependencies.insert(AgentContextHandle(context))
        for extra in self._tool_dependencies():
            dependencies.insert(extra)
        if sink is not None:
            dependencies.insert(sink)
        return dependencies

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

    async def _call_tool(self, call: ToolCallPart, turn: _Turn) -> ToolReturnPart | RetryPromptPart:
        name = call.tool_name
        sink = turn.sink
        if sink is not None:
            sink.push(
                TOOL_CALL,
                {"tool_name": name, "tool_call_id": call.tool_call_id, "args": call.args},
            )
        assert turn.dependencies is not None  # built by _call_tools before any call
        tool_context = ToolContext(
            turn.run_id,
            turn.conversation_id,
            turn.requests,
            dependencies=turn.dependencies,
            tool_call_id=call.tool_call_id,
        )
        turn.context.usage.tool_calls += 1
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
            return self._retry(call, error, turn)
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

    def _retry(self, call: ToolCallPart, error: ToolError, turn: _Turn) -> RetryPromptPart:
        """The retry prompt for a failed call, or :class:`ToolRetriesExceeded` past the limit."""
        name = call.tool_name
        count = turn.retries.get(name, 0) + 1
        turn.retries[name] = count
        if count > self.retries:
            raise ToolRetriesExceeded(
                f"tool {name!r} failed {count} times (retry limit {self.retries}): {error}",
                tool=name,
                retries=self.retries,
                run_id=turn.run_id.as_str(),
            ) from error
        if turn.sink is not None:
            turn.sink.push(
                TOOL_RETRY,
                {"tool_name": name, "tool_call_id": call.tool_call_id, "error": error.message},
            )
        # The bare message: the model needs the reason, not our field dump.
        return RetryPromptPart(
            content=error.message, tool_name=name, tool_call_id=call.tool_call_id
        )

    def __repr__(self) -> str:
        return f"Agent({self.name!r}, model={self.model.name!r}, tools={self._tools.names()!r})"


class _Turn:
    """The mutable state of one run, shared by its steps (one run, one loop: no locking)."""

    __slots__ = (
        "context",
        "conversation_id",
        "dependencies",
        "requests",
        "retries",
        "run_id",
        "sink",
    )

    def __init__(
        self,
        context: AgentContext,
        run_id: RunId,
        conversation_id: ConversationId,
        sink: AgentStreamSink | None,
    ) -> None:
        self.context = context
        self.run_id = run_id
        self.conversation_id = conversation_id
        self.sink = sink
        self.requests = 0
        self.retries: dict[str, int] = {}
        self.dependencies: Dependencies | None = None
