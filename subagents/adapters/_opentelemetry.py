"""The implementation of :mod:`subagents.adapters.opentelemetry` (see its docs)."""

from __future__ import annotations

import contextlib
import threading
from collections import deque
from typing import Any

import msgspec

from .._agent._context import AgentContext
from .._agent._hooks import AgentHook, ModelRequestInfo
from .._agent._models import ModelResponse, ToolCallPart
from .._agent._tools import ToolContext, ToolResult
from .._delegation._hooks import SubagentExecutionHook, SubagentExecutionMetadata
from ._foreign import require

_EXTRA = "opentelemetry"
_ADAPTER = "subagents.adapters.opentelemetry"
_DELEGATE_TOOLS = frozenset({"delegate", "spawn_delegate"})
_WAIT_TOOL = "wait_subagent"
#: Where a background child's context carries its attempt's persisted trace context.
_LINK_KEY = "subagents.trace_link"


def _otel() -> tuple[Any, Any, Any]:
    trace = require("opentelemetry.trace", _EXTRA, _ADAPTER)
    context = require("opentelemetry.context", _EXTRA, _ADAPTER)
    propagator = require(
        "opentelemetry.trace.propagation.tracecontext", _EXTRA, _ADAPTER
    ).TraceContextTextMapPropagator()
    return trace, context, propagator


class _PendingTraces:
    """Delegating spans' trace contexts, waiting for the store to accept their attempt.

    Keyed by (parent run id, subagent name), first in first out: the supervisor
    accepts one delegation at a time, in the order the calls reached it.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[tuple[str, str], deque[dict[str, str]]] = {}

    def push(self, key: tuple[str, str], carrier: dict[str, str]) -> None:
        with self._lock:
            self._pending.setdefault(key, deque()).append(carrier)

    def pop(self, key: tuple[str, str]) -> dict[str, str] | None:
        with self._lock:
            queue = self._pending.get(key)
            if not queue:
                return None
            carrier = queue.popleft()
            if not queue:
                del self._pending[key]
            return carrier

    def discard(self, key: tuple[str, str], carrier: dict[str, str]) -> None:
        with self._lock:
            queue = self._pending.get(key)
            if queue is not None and carrier in queue:
                queue.remove(carrier)
                if not queue:
                    del self._pending[key]


_PENDING = _PendingTraces()


class _TraceContextStore:
    """A session store whose ``accept_attempt`` records the delegating span's trace context."""

    def __init__(self, store: Any) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def accept_attempt(self, record: Any) -> Any:
        if not record.trace_context:
            carrier = _PENDING.pop((record.parent_run_id, record.subagent_name))
            if carrier is not None:
                record = msgspec.structs.replace(record, trace_context=carrier)
        return self._store.accept_attempt(record)

    def __repr__(self) -> str:
        return f"trace_context_store({self._store!r})"


def trace_context_store(store: Any) -> Any:
    """``store`` (any session store), persisting each background attempt's trace context.

    Pass the result as the supervisor's store. Attempts accepted outside an
    :class:`OpenTelemetryHook` delegation are stored unchanged.
    """
    return _TraceContextStore(store)


class _Open:
    """One span this hook started, and the context token that made it current."""

    __slots__ = ("span", "token")

    def __init__(self, span: Any, token: Any) -> None:
        self.span = span
        self.token = token


class OpenTelemetryHook(AgentHook, SubagentExecutionHook):
    """An :class:`~subagents.AgentHook` that emits GenAI spans (see the module docs).

    ``tracer_provider`` defaults to the global one. ``store`` (the supervisor's
    store) lets a delivering ``wait_subagent`` span link to the persisted
    delegating span of the attempt it delivers.
    """

    capability_id = "opentelemetry"

    def __init__(self, tracer_provider: Any = None, *, store: Any = None) -> None:
        trace, self._context_api, self._propagator = _otel()
        self._trace = trace
        self._tracer = trace.get_tracer("subagents", tracer_provider=tracer_provider)
        self._store = store
        self._runs: dict[str, _Open] = {}
        self._requests: dict[tuple[str, int], _Open] = {}
        self._tools: dict[tuple[str, str], _Open] = {}
        self._delegations: dict[tuple[str, str], tuple[tuple[str, str], dict[str, str]]] = {}

    # -- spans ---------------------------------------------------------------------------------

    def _start(self, name: str, attributes: dict[str, Any], links: Any = None) -> _Open:
        span = self._tracer.start_span(name, attributes=attributes, links=links)
        token = self._context_api.attach(self._trace.set_span_in_context(span))
        return _Open(span, token)

    def _end(self, opened: _Open | None, error: BaseException | str | None = None) -> None:
        if opened is None:
            return
        if isinstance(error, str):
            opened.span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, error))
        elif error is not None:
            opened.span.record_exception(error)
            opened.span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, str(error)))
            opened.span.set_attribute("error.type", type(error).__name__)
        opened.span.end()
        with contextlib.suppress(Exception):  # detached in another context: the span ended
            self._context_api.detach(opened.token)

    # -- runs ----------------------------------------------------------------------------------

    async def before_run(self, context: AgentContext, prompt: str) -> None:
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": context.agent_name,
            "gen_ai.agent.id": context.agent_id,
            "subagents.run_id": str(context.run_id),
        }
        if context.conversation_id is not None:
            attributes["gen_ai.conversation.id"] = context.conversation_id.as_str()
        if context.parent_run_id is not None:
            attributes["subagents.parent_run_id"] = context.parent_run_id.as_str()
        self._runs[str(context.run_id)] = self._start(
            f"invoke_agent {context.agent_name}", attributes, self._links(context)
        )

    def _links(self, context: AgentContext) -> list[Any] | None:
        """A link to the persisted delegating span of this background child's attempt."""
        carrier = context.metadata.get(_LINK_KEY)
        if not isinstance(carrier, dict):
            return None
        attempt_id = carrier.get("attempt_id")
        linked = self._trace.get_current_span(self._propagator.extract(carrier))
        span_context = linked.get_span_context()
        if not span_context.is_valid:
            return None
        return [self._trace.Link(span_context, {"subagents.attempt_id": str(attempt_id)})]

    # -- delegations (as a SubagentExecutionHook) ----------------------------------------------

    async def before_subagent_run(
        self, metadata: SubagentExecutionMetadata, child_context: AgentContext
    ) -> None:
        """A background child's context gets its attempt's persisted trace context, so
        its run span links to the delegating span (``config.with_execution_hook(hook)``)."""
        if not metadata.task_metadata.get("background"):
            return
        attempt_id = metadata.task_id.as_str()
        carrier = self._persisted(attempt_id)
        if carrier:
            child_context.metadata[_LINK_KEY] = {**carrier, "attempt_id": attempt_id}

    async def after_run(self, context: AgentContext, output: str) -> None:
        opened = self._runs.pop(str(context.run_id), None)
        if opened is not None:
            usage = context.usage
            opened.span.set_attribute("gen_ai.usage.input_tokens", usage.input_tokens)
            opened.span.set_attribute("gen_ai.usage.output_tokens", usage.output_tokens)
        self._end(opened)

    async def on_run_error(self, context: AgentContext, error: Exception) -> None:
        self._end_run_children(str(context.run_id), error)
        self._end(self._runs.pop(str(context.run_id), None), error)

    def on_run_interrupted(self, context: AgentContext, signal: BaseException) -> None:
        self._end_run_children(str(context.run_id), signal)
        self._end(self._runs.pop(str(context.run_id), None), signal)

    def _end_run_children(self, run_id: str, error: BaseException) -> None:
        for key in [k for k in self._tools if k[0] == run_id]:
            self._forget_delegation(key)
            self._end(self._tools.pop(key), error)
        for request in [k for k in self._requests if k[0] == run_id]:
            self._end(self._requests.pop(request), error)

    # -- model requests ------------------------------------------------------------------------

    async def before_model_request(self, context: AgentContext, request: ModelRequestInfo) -> None:
        run_id = request.run_id.as_str()
        run = self._runs.get(run_id)
        if run is not None and request.request_number == 1:
            # The context names the agent's role ("main"); the request names the agent.
            run.span.update_name(f"invoke_agent {request.agent_name}")
            run.span.set_attribute("gen_ai.agent.name", request.agent_name)
        # A tool call answered with a retry prompt never reached after_tool_call.
        for key in [k for k in self._tools if k[0] == run_id]:
            self._forget_delegation(key)
            self._end(self._tools.pop(key), "the tool call was answered with a retry prompt")
        self._requests[(run_id, request.request_number)] = self._start(
            f"chat {request.model_name}",
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": request.model_name,
                "gen_ai.agent.name": request.agent_name,
                "gen_ai.conversation.id": request.conversation_id.as_str(),
            },
        )

    async def after_model_request(
        self,
        context: AgentContext,
        request: ModelRequestInfo,
        response: ModelResponse | None,
        error: Exception | None,
    ) -> None:
        opened = self._requests.pop((request.run_id.as_str(), request.request_number), None)
        if opened is not None and response is not None:
            span = opened.span
            span.set_attribute("gen_ai.response.model", response.model_name or request.model_name)
            span.set_attribute("gen_ai.usage.input_tokens", response.usage.input_tokens)
            span.set_attribute("gen_ai.usage.output_tokens", response.usage.output_tokens)
        self._end(opened, error)

    # -- tool calls ----------------------------------------------------------------------------

    async def before_tool_call(self, context: ToolContext, call: ToolCallPart) -> None:
        run_id = context.run_id.as_str()
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": call.tool_name,
            "gen_ai.tool.call.id": call.tool_call_id,
        }
        subagent = _subagent_name(call)
        if subagent is not None:
            attributes["subagents.delegation.subagent"] = subagent
            attributes["subagents.delegation.background"] = "subagent_name" in (
                call.args if isinstance(call.args, dict) else {}
            )
        opened = self._start(f"execute_tool {call.tool_name}", attributes)
        self._tools[(run_id, call.tool_call_id)] = opened
        if subagent is not None and attributes["subagents.delegation.background"]:
            carrier: dict[str, str] = {}
            self._propagator.inject(carrier)
            key = (run_id, subagent)
            _PENDING.push(key, carrier)
            self._delegations[(run_id, call.tool_call_id)] = (key, carrier)

    async def after_tool_call(
        self, context: ToolContext, call: ToolCallPart, result: ToolResult
    ) -> None:
        key = (context.run_id.as_str(), call.tool_call_id)
        self._forget_delegation(key)
        opened = self._tools.pop(key, None)
        if opened is not None:
            content = result.content if isinstance(result.content, dict) else {}
            attempt_id = content.get("attempt_id")
            if isinstance(attempt_id, str):
                opened.span.set_attribute("subagents.attempt_id", attempt_id)
                if call.tool_name == _WAIT_TOOL and content.get("result") is not None:
                    self._link_attempt(opened.span, attempt_id)
        self._end(opened)

    def _forget_delegation(self, key: tuple[str, str]) -> None:
        """Drop a delegation's trace context the store did not take (refused, or stored)."""
        pending = self._delegations.pop(key, None)
        if pending is not None:
            _PENDING.discard(*pending)

    def _persisted(self, attempt_id: str) -> dict[str, str] | None:
        """The attempt's persisted trace context (``None`` without a store or a record)."""
        if self._store is None:
            return None
        try:
            carrier = self._store.load_attempt(attempt_id).trace_context
        except Exception:
            return None
        return dict(carrier) if carrier else None

    def _link_attempt(self, span: Any, attempt_id: str) -> None:
        """Link ``span`` to the attempt's persisted delegating span, when there is one."""
        carrier = self._persisted(attempt_id)
        if not carrier:
            return
        linked = self._trace.get_current_span(self._propagator.extract(carrier))
        span_context = linked.get_span_context()
        if span_context.is_valid:
            span.add_link(span_context, {"subagents.attempt_id": attempt_id})


def _subagent_name(call: ToolCallPart) -> str | None:
    """The subagent a delegation tool call names, else ``None``."""
    if call.tool_name not in _DELEGATE_TOOLS or not isinstance(call.args, dict):
        return None
    name = call.args.get("subagent_name", call.args.get("name"))
    return name if isinstance(name, str) else None
