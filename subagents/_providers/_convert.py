"""The conversion every protocol shares, written once.

Outbound, :meth:`MessageSink.feed` walks our conversation and tells a protocol's
:class:`MessageSink` what each part is (a system prompt, a user prompt, a
tool result, an assistant turn); the sink only decides the wire shape.
Inbound, a :class:`TurnBuilder` collects a turn's text and tool calls (whole
or streamed in fragments) and how it finished, and either builds the
:class:`ModelResponse` or raises the typed outcome (:class:`Finish`): a turn
that was cut short, truncated or refused is never a clean success.
"""

from __future__ import annotations

import abc
import enum
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .._agent._models import (
    ModelMessage,
    ModelRequest,
    ModelRequestParameters,
    ModelResponse,
    RequestUsage,
    ResponsePart,
    RetryPromptPart,
    SystemPromptPart,
    TextDelta,
    TextPart,
    ToolCallDelta,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from ._failures import Failure, StreamError, get


def dumps(value: Any) -> str:
    """Compact JSON text of a tool argument or return value (strings stay as they are)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def retry_text(content: str) -> str:
    """What a retry prompt tells the model."""
    return f"{content}\n\nFix the errors and try again."


def arguments_object(args: dict[str, Any] | str) -> dict[str, Any] | None:
    """``args`` as a JSON object, or ``None`` when it is not one (bad or cut-off JSON)."""
    if isinstance(args, dict):
        return args
    try:
        value = json.loads(args) if args else {}
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def arguments_text(args: dict[str, Any] | str) -> str:
    """Tool-call arguments to send back in the history: always a JSON object's text.

    Servers re-parse the arguments of every replayed call, and one that is
    not an object (empty, cut off by ``max_tokens``, a list) fails every
    later turn of the conversation, so it is replaced by ``"{}"``; the
    tool's retry prompt already told the model what was wrong.
    """
    if isinstance(args, str) and arguments_object(args) is not None:
        return args or "{}"
    value = arguments_object(args)
    return "{}" if value is None else dumps(value)


class MessageSink(abc.ABC):
    """A protocol's wire shapes for the parts :func:`convert` walks, in order."""

    @abc.abstractmethod
    def system(self, text: str) -> None: ...

    @abc.abstractmethod
    def user(self, text: str) -> None: ...

    @abc.abstractmethod
    def tool_result(self, tool_call_id: str, text: str, *, is_error: bool) -> None: ...

    @abc.abstractmethod
    def assistant(self, response: ModelResponse) -> None: ...

    def feed(self, messages: Sequence[ModelMessage]) -> None:
        """Hand every part of ``messages`` to this sink, in order.

        Tool results and retry prompts are JSON text; a retry prompt with a
        tool call id answers that call (``is_error=True``), one without is a
        user message.
        """
        for message in messages:
            if not isinstance(message, ModelRequest):
                self.assistant(message)
                continue
            for part in message.parts:
                if isinstance(part, SystemPromptPart):
                    self.system(part.content)
                elif isinstance(part, UserPromptPart):
                    self.user(part.content)
                elif isinstance(part, ToolReturnPart):
                    self.tool_result(part.tool_call_id, dumps(part.content), is_error=False)
                elif isinstance(part, RetryPromptPart):
                    if part.tool_call_id is None:
                        self.user(retry_text(part.content))
                    else:
                        self.tool_result(part.tool_call_id, retry_text(part.content), is_error=True)


class RoleMessages(MessageSink):
    """A sink whose system and user parts are ``{"role": ..., "content": text}`` items."""

    def __init__(self) -> None:
        self.out: list[dict[str, Any]] = []

    def system(self, text: str) -> None:
        self.out.append({"role": "system", "content": text})

    def user(self, text: str) -> None:
        self.out.append({"role": "user", "content": text})

    arguments = staticmethod(arguments_text)


def tool_specs(params: ModelRequestParameters, schema_key: str) -> list[dict[str, Any]]:
    """Each tool as ``{"name", schema_key: its JSON schema, "description"?}``."""
    specs = []
    for tool in params.tools:
        spec: dict[str, Any] = {"name": tool.name, schema_key: tool.parameters_schema}
        if tool.description:
            spec["description"] = tool.description
        specs.append(spec)
    return specs


def token_usage(usage: Any, input_name: str, output_name: str, details_name: str) -> RequestUsage:
    """OpenAI-style usage: input and output counts, cached input under ``details_name``."""
    if usage is None:
        return RequestUsage()
    details = get(usage, details_name)
    return RequestUsage(
        input_tokens=get(usage, input_name, 0),
        output_tokens=get(usage, output_name, 0),
        cache_read_tokens=0 if details is None else get(details, "cached_tokens", 0),
    )


class Finish(enum.Enum):
    """How a turn ended, as the protocol reported it."""

    COMPLETE = "complete"
    TRUNCATED = "truncated"  # the output-token limit
    FILTERED = "content_filter"
    REFUSED = "refusal"
    MISSING = "missing"  # the stream ended before its terminal event


@dataclass
class _Call:
    tool_call_id: str
    tool_name: str
    args: list[str] = field(default_factory=list)


class TurnBuilder:
    """One turn's parts, collected as they arrive; not thread-safe (one per attempt)."""

    def __init__(self, model_name: str) -> None:
        self.model_name = model_name
        self.usage = RequestUsage()
        self._text: list[str] = []
        self._calls: dict[int, _Call] = {}

    def text(self, piece: str | None) -> TextDelta | None:
        """Append text; the delta to stream, or ``None`` for an empty piece."""
        if not piece:
            return None
        self._text.append(piece)
        return TextDelta(content=piece)

    def call(
        self, index: int, tool_call_id: str = "", tool_name: str = "", args: str = ""
    ) -> ToolCallDelta | None:
        """Start or extend tool call ``index``; the delta to stream, if there is news."""
        entry = self._calls.setdefault(index, _Call(tool_call_id, tool_name))
        entry.tool_call_id = entry.tool_call_id or tool_call_id
        entry.tool_name = entry.tool_name or tool_name
        if args:
            entry.args.append(args)
        if not (args or tool_name or tool_call_id):
            return None
        return ToolCallDelta(
            index=index,
            tool_call_id=entry.tool_call_id,
            tool_name=entry.tool_name,
            args_delta=args,
        )

    def partial_text(self) -> str:
        return "".join(self._text)

    def finish(self, finish: Finish, reason: str = "") -> ModelResponse:
        """The response, or :class:`StreamError` for every finish but ``COMPLETE``."""
        if finish is Finish.MISSING:
            raise StreamError(Failure("stream_incomplete", detail="no terminal event"))
        if finish is Finish.TRUNCATED:
            fields = {"partial_text": self.partial_text()}
            raise StreamError(Failure("output_truncated", detail=reason, fields=fields))
        if finish is not Finish.COMPLETE:
            # ``reason`` is the refusal text or stop reason: DEBUG detail only.
            fields = {"reason": finish.value}
            raise StreamError(Failure("content_refused", detail=reason, fields=fields))
        parts: list[ResponsePart] = []
        if self._text:
            parts.append(TextPart(content="".join(self._text)))
        for index in sorted(self._calls):
            entry = self._calls[index]
            parts.append(
                ToolCallPart(
                    tool_name=entry.tool_name,
                    args="".join(entry.args) or "{}",
                    tool_call_id=entry.tool_call_id or f"call_{index}",
                )
            )
        return ModelResponse(parts=tuple(parts), usage=self.usage, model_name=self.model_name)
