"""The model protocol, the message records it consumes and produces, and test models.

A :class:`Model` takes the conversation so far (a sequence of
:data:`ModelMessage`) plus :class:`ModelRequestParameters` (the tool
definitions, built once per agent) and returns one :class:`ModelResponse`
(text and/or tool calls, with the request's token usage). Streaming is the
same exchange yielding :class:`TextDelta` (and :class:`ToolCallDelta`)
chunks and then the full response.
Provider adapters (OpenAI, Anthropic, ...) implement ``request`` and, if they
stream natively, ``request_stream``; everything else is provider-neutral.

Both methods are awaited on the event loop running the agent; an exception
from them (other than a ``SubagentsError`` or a ``BaseException`` signal) is
wrapped by the run loop into :class:`ModelError`.
"""

from __future__ import annotations

import abc
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

from .._errors import ModelError
from ._records import Record

# ---------------------------------------------------------------- message parts


class SystemPromptPart(Record, frozen=True, kw_only=True, tag_field="part_kind", tag="system"):
    """Instructions for the model, placed first in the first request."""

    content: str


class UserPromptPart(Record, frozen=True, kw_only=True, tag_field="part_kind", tag="user"):
    """The prompt a run was started with."""

    content: str


class ToolReturnPart(Record, frozen=True, kw_only=True, tag_field="part_kind", tag="tool_return"):
    """The result of one tool call, sent back to the model."""

    tool_name: str
    content: Any
    tool_call_id: str


class RetryPromptPart(Record, frozen=True, kw_only=True, tag_field="part_kind", tag="retry_prompt"):
    """Tells the model its last tool call failed and why, so it can try again."""

    content: str
    tool_name: str | None = None
    tool_call_id: str | None = None


class TextPart(Record, frozen=True, kw_only=True, tag_field="part_kind", tag="text"):
    """Text produced by the model."""

    content: str


class ToolCallPart(Record, frozen=True, kw_only=True, tag_field="part_kind", tag="tool_call"):
    """A tool call requested by the model. ``args`` is a JSON object or its JSON text."""

    tool_name: str
    args: dict[str, Any] | str
    tool_call_id: str


RequestPart = SystemPromptPart | UserPromptPart | ToolReturnPart | RetryPromptPart
ResponsePart = TextPart | ToolCallPart


class RequestUsage(Record, frozen=True, kw_only=True):
    """Tokens spent by one model request."""

    input_tokens: int = 0
    output_tokens: int = 0
    #: Of ``input_tokens``, how many the provider read from its prompt cache.
    cache_read_tokens: int = 0


class ModelRequest(Record, frozen=True, kw_only=True, tag_field="message_kind", tag="request"):
    """What the agent sent to the model in one turn."""

    parts: tuple[RequestPart, ...]


class ModelResponse(Record, frozen=True, kw_only=True, tag_field="message_kind", tag="response"):
    """What the model answered in one turn: text and/or tool calls, plus usage."""

    parts: tuple[ResponsePart, ...]
    usage: RequestUsage = RequestUsage()
    model_name: str = ""

    def text(self) -> str:
        """All text parts joined (empty when the response only calls tools)."""
        return "".join(p.content for p in self.parts if isinstance(p, TextPart))

    def tool_calls(self) -> list[ToolCallPart]:
        return [p for p in self.parts if isinstance(p, ToolCallPart)]


ModelMessage = ModelRequest | ModelResponse


class TextDelta(Record, frozen=True, kw_only=True, tag_field="event_kind", tag="text_delta"):
    """A chunk of streamed text."""

    content: str


class ToolCallDelta(
    Record, frozen=True, kw_only=True, tag_field="event_kind", tag="tool_call_delta"
):
    """A fragment of a streamed tool call: its arguments arrive as JSON text in pieces.

    ``index`` is the call's position in the response; ``tool_call_id`` and
    ``tool_name`` are set once the provider sent them (empty before). The
    complete call is in the final :class:`ModelResponse`.
    """

    index: int
    tool_call_id: str = ""
    tool_name: str = ""
    args_delta: str = ""


ModelStreamEvent = TextDelta | ToolCallDelta | ModelResponse


class ToolDefinition(Record, frozen=True, kw_only=True):
    """A tool as the model sees it: name, description, JSON schema of its arguments."""

    name: str
    description: str | None = None
    parameters_schema: dict[str, Any]


class ModelRequestParameters(Record, frozen=True, kw_only=True):
    """Per-agent request parameters, built once when the agent is built."""

    tools: tuple[ToolDefinition, ...] = ()


# ---------------------------------------------------------------- the protocol


class Model(abc.ABC):
    """An LLM behind the agent loop.

    Implementations must be safe to share between agents and concurrent runs
    (keep per-run state out of ``self``) and must not keep the ``messages``
    sequence: the run loop appends to it after the call returns. A response
    must have at least one part (an empty one fails the run with
    :class:`ModelError`). ``request`` is awaited once per turn;
    ``request_stream`` is used by ``Agent.run_stream`` and must end with the
    complete :class:`ModelResponse` as its last item.
    """

    name: str = "model"

    @abc.abstractmethod
    async def request(
        self, messages: Sequence[ModelMessage], params: ModelRequestParameters
    ) -> ModelResponse:
        """Answer one turn."""

    async def request_stream(
        self, messages: Sequence[ModelMessage], params: ModelRequestParameters
    ) -> AsyncIterator[ModelStreamEvent]:
        """Stream one turn; the default yields the whole text once, then the response."""
        response = await self.request(messages, params)
        text = response.text()
        if text:
            yield TextDelta(content=text)
        yield response


def _current_turn(messages: Sequence[ModelMessage]) -> int:
    """How many responses the model already gave since the latest user prompt."""
    turn = 0
    for message in reversed(messages):
        if isinstance(message, ModelResponse):
            turn += 1
        elif any(isinstance(p, UserPromptPart) for p in message.parts):
            break
    return turn


def _estimate_usage(parts: Sequence[ResponsePart]) -> RequestUsage:
    output = 0
    for part in parts:
        output += len(part.content.split()) if isinstance(part, TextPart) else 1
    # A fixed, deterministic input estimate: test models have no tokenizer.
    return RequestUsage(input_tokens=10, output_tokens=output)


ScriptItem = str | ToolCallPart | Sequence[ToolCallPart] | ModelResponse


class TestModel(Model):
    """A deterministic model for tests and benchmarks.

    It plays ``script`` one response per turn (a ``str`` is a text response, a
    :class:`ToolCallPart` or a list of them is a tool-call response), counting
    turns from the latest user prompt in the messages, so one instance can
    serve many runs, concurrently. After the script it answers ``text`` forever
    when given, else raises :class:`ModelError` (the script ran out).
    Responses are built once, at construction.
    """

    __test__ = False  # not a pytest test class

    def __init__(
        self, script: Sequence[ScriptItem] = (), *, text: str | None = None, name: str = "test"
    ) -> None:
        self.name = name
        self._script = tuple(self._response(item, turn) for turn, item in enumerate(script))
        self._final = None if text is None else self._response(text, len(self._script))

    @classmethod
    def with_text(cls, text: str) -> TestModel:
        """A model that answers ``text`` to every request."""
        return cls(text=text)

    @classmethod
    def with_tool_calls(
        cls, calls: Sequence[tuple[str, dict[str, Any]]], then: str, *, name: str = "test"
    ) -> TestModel:
        """First call every ``(tool_name, args)`` in one response, then answer ``then``."""
        parts = [cls.tool_call(tool, args, f"call_0_{i}") for i, (tool, args) in enumerate(calls)]
        return cls([parts], text=then, name=name)

    @staticmethod
    def tool_call(
        tool_name: str, args: dict[str, Any] | str, tool_call_id: str = ""
    ) -> ToolCallPart:
        """A tool call script item (its id defaults to ``call_<turn>_<index>``)."""
        return ToolCallPart(tool_name=tool_name, args=args, tool_call_id=tool_call_id)

    def _response(self, item: ScriptItem, turn: int) -> ModelResponse:
        if isinstance(item, ModelResponse):
            return item
        parts: list[ResponsePart]
        if isinstance(item, str):
            parts = [TextPart(content=item)]
        elif isinstance(item, ToolCallPart):
            parts = [item]
        else:
            parts = list(item)
        parts = [
            ToolCallPart(tool_name=p.tool_name, args=p.args, tool_call_id=f"call_{turn}_{i}")
            if isinstance(p, ToolCallPart) and not p.tool_call_id
            else p
            for i, p in enumerate(parts)
        ]
        return ModelResponse(parts=tuple(parts), usage=_estimate_usage(parts), model_name=self.name)

    async def request(
        self, messages: Sequence[ModelMessage], params: ModelRequestParameters
    ) -> ModelResponse:
        if not self._script and self._final is not None:
            return self._final
        turn = _current_turn(messages)
        if turn < len(self._script):
            return self._script[turn]
        if self._final is not None:
            return self._final
        raise ModelError(
            f"TestModel script exhausted after {len(self._script)} responses",
            model=self.name,
            turn=turn,
        )


FunctionResult = ModelResponse | str
ModelFunction = Callable[
    [Sequence[ModelMessage], ModelRequestParameters], FunctionResult | Awaitable[FunctionResult]
]


class FunctionModel(Model):
    """A model whose answers come from ``fn(messages, params)`` (sync or async).

    ``fn`` may return a :class:`ModelResponse` or a ``str`` (a text response).
    It runs on the event loop running the agent; if it raises, the run fails
    with :class:`ModelError` whose ``__cause__`` is that exception.
    """

    def __init__(self, fn: ModelFunction, *, name: str = "function") -> None:
        self.name = name
        self._fn = fn
        self._is_async = inspect.iscoroutinefunction(fn)

    async def request(
        self, messages: Sequence[ModelMessage], params: ModelRequestParameters
    ) -> ModelResponse:
        result = self._fn(messages, params)
        if self._is_async or inspect.isawaitable(result):
            result = await result  # type: ignore[misc]
        if isinstance(result, str):
            parts = (TextPart(content=result),)
            return ModelResponse(parts=parts, usage=_estimate_usage(parts), model_name=self.name)
        if isinstance(result, ModelResponse):
            return result
        raise ModelError(
            f"FunctionModel function returned {type(result).__name__}, "
            "expected ModelResponse or str",
            model=self.name,
        )
