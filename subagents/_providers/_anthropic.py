"""``anthropic:MODEL``: the Messages API, through the official ``anthropic`` SDK.

System prompts go to the top-level ``system`` field; tool calls are
``tool_use`` blocks and their results ``tool_result`` blocks in the next
user message (parallel results share one message). Anthropic counts cached
input apart from ``input_tokens``; our ``input_tokens`` is the total (plain +
cache writes + cache reads) so usage means the same on every provider.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator
from typing import Any, ClassVar

from .._agent._models import ModelResponse, ModelStreamEvent, RequestUsage, TextPart
from ._common import Messages, Params, ProviderModel, create_kwargs, open_stream, stream_events
from ._convert import Finish, MessageSink, TurnBuilder, arguments_object, dumps, tool_specs
from ._failures import get

DEFAULT_MAX_TOKENS = 4096

#: ``stop_reason`` -> how the turn ended; every other reason is complete.
_STOP = {
    "max_tokens": Finish.TRUNCATED,
    "model_context_window_exceeded": Finish.TRUNCATED,
    "refusal": Finish.REFUSED,
}
_USAGE_FIELDS = (
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
)


class _AnthropicMessages(MessageSink):
    """Consecutive same-role blocks are merged into one message, as the API requires."""

    def __init__(self) -> None:
        self.system_parts: list[str] = []
        self.out: list[dict[str, Any]] = []

    def _add(self, role: str, block: dict[str, Any]) -> None:
        if self.out and self.out[-1]["role"] == role:
            self.out[-1]["content"].append(block)
        else:
            self.out.append({"role": role, "content": [block]})

    def system(self, text: str) -> None:
        self.system_parts.append(text)

    def user(self, text: str) -> None:
        self._add("user", {"type": "text", "text": text})

    def tool_result(self, tool_call_id: str, text: str, *, is_error: bool) -> None:
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": tool_call_id}
        block["content"] = text
        if is_error:
            block["is_error"] = True
        self._add("user", block)

    def assistant(self, response: ModelResponse) -> None:
        for part in response.parts:
            if isinstance(part, TextPart):
                if part.content:
                    self._add("assistant", {"type": "text", "text": part.content})
                continue
            self._add(
                "assistant",
                {
                    "type": "tool_use",
                    "id": part.tool_call_id,
                    "name": part.tool_name,
                    # Inputs are objects; JSON text that is not one becomes ``{}``.
                    "input": arguments_object(part.args) or {},
                },
            )


def anthropic_messages(
    messages: Messages,
) -> tuple[str | None, list[dict[str, Any]]]:
    """``(system, messages)`` for the Messages API; consecutive same-role turns are merged."""
    sink = _AnthropicMessages()
    sink.feed(messages)
    system = "\n\n".join(sink.system_parts) if sink.system_parts else None
    return system, sink.out


def anthropic_tools(params: Params) -> list[dict[str, Any]]:
    return tool_specs(params, "input_schema")


def anthropic_usage(usage: Any) -> RequestUsage:
    if usage is None:
        return RequestUsage()
    cache_read = get(usage, "cache_read_input_tokens", 0)
    return RequestUsage(
        input_tokens=get(usage, "input_tokens", 0)
        + get(usage, "cache_creation_input_tokens", 0)
        + cache_read,
        output_tokens=get(usage, "output_tokens", 0),
        cache_read_tokens=cache_read,
    )


def _merge_usage(total: dict[str, int], usage: Any) -> None:
    """Stream usage: ``message_delta`` counts are cumulative, so later values replace earlier."""
    if usage is None:
        return
    for name in _USAGE_FIELDS:
        value = get(usage, name)
        if value is not None:
            total[name] = value


class AnthropicModel(ProviderModel):
    """A Claude model behind the Messages API (``anthropic:MODEL``).

    Key: ``api_key`` or ``ANTHROPIC_API_KEY``; base URL: ``base_url``, else
    ``ANTHROPIC_BASE_URL``, else Anthropic's. ``max_tokens`` defaults to
    4096 (the API requires one); ``stop`` is sent as ``stop_sequences``;
    ``parallel_tool_calls=False`` sets ``disable_parallel_tool_use``.
    ``seed`` and the penalties are not part of this API. Raises
    :class:`ContentRefused` when the stop reason is ``refusal``,
    :class:`OutputTruncated` when it is ``max_tokens``, and
    :class:`ProviderStreamIncomplete` when a stream ends without
    ``message_stop``.
    """

    provider: ClassVar[str] = "anthropic"
    env_var: ClassVar[str] = "ANTHROPIC_API_KEY"
    base_url_env_var: ClassVar[str | None] = "ANTHROPIC_BASE_URL"
    sdk_module: ClassVar[str] = "anthropic"
    sdk_client: ClassVar[str] = "AsyncAnthropic"
    extra: ClassVar[str] = "anthropic"
    unsupported_settings: ClassVar[frozenset[str]] = frozenset(
        {"seed", "presence_penalty", "frequency_penalty"}
    )

    def _body(self, messages: Messages, params: Params) -> dict[str, Any]:
        system, chat = anthropic_messages(messages)
        body: dict[str, Any] = {"model": self.model_name, "messages": chat}
        if system is not None:
            body["system"] = system
        sampling = self._sampling({"stop": "stop_sequences"})
        body["max_tokens"] = sampling.pop("max_tokens", DEFAULT_MAX_TOKENS)
        parallel = sampling.pop("parallel_tool_calls", None)
        tools = anthropic_tools(params)
        if tools:
            body["tools"] = tools
            if parallel is False:
                body["tool_choice"] = {"type": "auto", "disable_parallel_tool_use": True}
        body.update(sampling)
        return body

    async def _request_once(self, client: Any, messages: Messages, params: Params) -> ModelResponse:
        create = client.messages.create
        message = await create(**create_kwargs(create, self._body(messages, params)))
        turn = TurnBuilder(get(message, "model", self.model_name))
        turn.usage = anthropic_usage(get(message, "usage"))
        for index, block in enumerate(get(message, "content", [])):
            kind = get(block, "type")
            if kind == "text":
                turn.text(get(block, "text"))
            elif kind == "tool_use":
                args = dumps(dict(get(block, "input", {})))
                turn.call(index, get(block, "id", ""), get(block, "name", ""), args)
        stop_reason = get(message, "stop_reason", "")
        return turn.finish(_STOP.get(stop_reason, Finish.COMPLETE), stop_reason)

    async def _stream_once(
        self, client: Any, messages: Messages, params: Params
    ) -> AsyncGenerator[ModelStreamEvent, None]:
        stream = await open_stream(client.messages.create, self._body(messages, params))
        turn = TurnBuilder(self.model_name)
        usage: dict[str, int] = {}
        stop_reason = ""
        stopped = False
        async with contextlib.aclosing(stream_events(stream)) as events:
            async for kind, event in events:
                update: ModelStreamEvent | None = None
                if kind == "message_start":
                    message = get(event, "message")
                    turn.model_name = get(message, "model", turn.model_name)
                    _merge_usage(usage, get(message, "usage"))
                elif kind == "content_block_start":
                    update = _block_start(turn, event)
                elif kind == "content_block_delta":
                    update = _block_delta(turn, event)
                elif kind == "message_delta":
                    stop_reason = get(get(event, "delta"), "stop_reason", stop_reason)
                    _merge_usage(usage, get(event, "usage"))
                elif kind == "message_stop":
                    stopped = True
                if update is not None:
                    yield update
        turn.usage = anthropic_usage(usage)
        finish = _STOP.get(stop_reason, Finish.COMPLETE) if stopped else Finish.MISSING
        yield turn.finish(finish, stop_reason)


def _block_start(turn: TurnBuilder, event: Any) -> ModelStreamEvent | None:
    block = get(event, "content_block")
    if get(block, "type") != "tool_use":
        return turn.text(get(block, "text"))
    return turn.call(get(event, "index", 0), get(block, "id", ""), get(block, "name", ""))


def _block_delta(turn: TurnBuilder, event: Any) -> ModelStreamEvent | None:
    delta = get(event, "delta")
    kind = get(delta, "type")
    if kind == "text_delta":
        return turn.text(get(delta, "text"))
    if kind == "input_json_delta":
        return turn.call(get(event, "index", 0), args=get(delta, "partial_json", ""))
    return None
