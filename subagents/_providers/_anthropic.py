"""``anthropic:MODEL``: the Messages API, through the official ``anthropic`` SDK.

System prompts go to the top-level ``system`` field; tool calls are
``tool_use`` blocks and their results ``tool_result`` blocks in the next
user message (parallel results share one message). Anthropic counts cached
input apart from ``input_tokens``; our ``input_tokens`` is the total (plain +
cache writes + cache reads) so usage means the same on every provider.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Sequence
from typing import Any, ClassVar

from .._agent._models import (
    ModelMessage,
    ModelRequest,
    ModelRequestParameters,
    ModelResponse,
    ModelStreamEvent,
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
from .._errors import ContentRefused
from ._common import (
    ProviderModel,
    closing_client,
    create_kwargs,
    dumps,
    get,
    http_client,
    retry_text,
)

DEFAULT_MAX_TOKENS = 4096


def _tool_input(args: dict[str, Any] | str) -> dict[str, Any]:
    """Anthropic wants tool inputs as objects; JSON text that is not an object becomes ``{}``."""
    if isinstance(args, dict):
        return args
    try:
        value = json.loads(args) if args else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def anthropic_messages(
    messages: Sequence[ModelMessage],
) -> tuple[str | None, list[dict[str, Any]]]:
    """``(system, messages)`` for the Messages API; consecutive same-role turns are merged."""
    system: list[str] = []
    out: list[dict[str, Any]] = []

    def add(role: str, block: dict[str, Any]) -> None:
        if out and out[-1]["role"] == role:
            out[-1]["content"].append(block)
        else:
            out.append({"role": role, "content": [block]})

    for message in messages:
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, SystemPromptPart):
                    system.append(part.content)
                elif isinstance(part, UserPromptPart):
                    add("user", {"type": "text", "text": part.content})
                elif isinstance(part, ToolReturnPart):
                    add(
                        "user",
                        {
                            "type": "tool_result",
                            "tool_use_id": part.tool_call_id,
                            "content": dumps(part.content),
                        },
                    )
                elif isinstance(part, RetryPromptPart):
                    if part.tool_call_id is None:
                        add("user", {"type": "text", "text": retry_text(part.content)})
                    else:
                        add(
                            "user",
                            {
                                "type": "tool_result",
                                "tool_use_id": part.tool_call_id,
                                "content": retry_text(part.content),
                                "is_error": True,
                            },
                        )
            continue
        for response_part in message.parts:
            if isinstance(response_part, TextPart):
                if response_part.content:
                    add("assistant", {"type": "text", "text": response_part.content})
            else:
                add(
                    "assistant",
                    {
                        "type": "tool_use",
                        "id": response_part.tool_call_id,
                        "name": response_part.tool_name,
                        "input": _tool_input(response_part.args),
                    },
                )
    return ("\n\n".join(system) if system else None), out


def anthropic_tools(params: ModelRequestParameters) -> list[dict[str, Any]]:
    tools = []
    for tool in params.tools:
        spec: dict[str, Any] = {"name": tool.name, "input_schema": tool.parameters_schema}
        if tool.description:
            spec["description"] = tool.description
        tools.append(spec)
    return tools


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


class AnthropicModel(ProviderModel):
    """A Claude model behind the Messages API (``anthropic:MODEL``).

    Key: ``api_key`` or ``ANTHROPIC_API_KEY``; base URL: ``base_url``, else
    ``ANTHROPIC_BASE_URL``, else Anthropic's. ``max_tokens`` defaults to
    4096 (the API requires one); ``stop`` is sent as ``stop_sequences``;
    ``parallel_tool_calls=False`` sets ``disable_parallel_tool_use``.
    ``seed`` and the penalties are not part of this API. Raises
    :class:`ContentRefused` when the stop reason is ``refusal``.
    """

    provider: ClassVar[str] = "anthropic"
    env_var: ClassVar[str] = "ANTHROPIC_API_KEY"
    base_url_env_var: ClassVar[str | None] = "ANTHROPIC_BASE_URL"
    sdk_module: ClassVar[str] = "anthropic"
    extra: ClassVar[str] = "anthropic"
    unsupported_settings: ClassVar[frozenset[str]] = frozenset(
        {"seed", "presence_penalty", "frequency_penalty"}
    )

    def _client(self, api_key: str) -> Any:
        return closing_client(
            self._sdk.AsyncAnthropic(
                api_key=api_key,
                base_url=self._resolve_base_url(),
                timeout=self.timeout,
                max_retries=0,
                default_headers=self._headers or None,
                http_client=http_client(self._sdk),
            )
        )

    def _body(
        self, messages: Sequence[ModelMessage], params: ModelRequestParameters
    ) -> dict[str, Any]:
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

    async def _request_once(
        self, client: Any, messages: Sequence[ModelMessage], params: ModelRequestParameters
    ) -> ModelResponse:
        message = await client.messages.create(
            **create_kwargs(client.messages.create, self._body(messages, params))
        )
        self._check_refusal(get(message, "stop_reason"))
        parts: list[ResponsePart] = []
        for block in get(message, "content", []):
            kind = get(block, "type")
            if kind == "text" and get(block, "text"):
                parts.append(TextPart(content=get(block, "text")))
            elif kind == "tool_use":
                parts.append(
                    ToolCallPart(
                        tool_name=get(block, "name", ""),
                        args=dict(get(block, "input", {})),
                        tool_call_id=get(block, "id", ""),
                    )
                )
        return ModelResponse(
            parts=tuple(parts),
            usage=anthropic_usage(get(message, "usage")),
            model_name=get(message, "model", self.model_name),
        )

    async def _stream_once(
        self, client: Any, messages: Sequence[ModelMessage], params: ModelRequestParameters
    ) -> AsyncGenerator[ModelStreamEvent, None]:
        body = self._body(messages, params)
        body["stream"] = True
        create = client.messages.create
        stream = await create(**create_kwargs(create, body))
        blocks: dict[int, dict[str, Any]] = {}
        usage: dict[str, int] = {}
        stop_reason: str | None = None
        model_name = self.model_name
        try:
            async for event in stream:
                kind = get(event, "type")
                if kind == "message_start":
                    message = get(event, "message")
                    model_name = get(message, "model", model_name)
                    _merge_usage(usage, get(message, "usage"))
                elif kind == "content_block_start":
                    index = get(event, "index", len(blocks))
                    block = get(event, "content_block")
                    blocks[index] = {
                        "type": get(block, "type"),
                        "id": get(block, "id", ""),
                        "name": get(block, "name", ""),
                        "text": [],
                    }
                    if blocks[index]["type"] == "tool_use":
                        yield ToolCallDelta(
                            index=index,
                            tool_call_id=blocks[index]["id"],
                            tool_name=blocks[index]["name"],
                        )
                elif kind == "content_block_delta":
                    index = get(event, "index", 0)
                    delta = get(event, "delta")
                    entry = blocks.setdefault(
                        index, {"type": "text", "id": "", "name": "", "text": []}
                    )
                    if get(delta, "type") == "text_delta" and get(delta, "text"):
                        entry["text"].append(get(delta, "text"))
                        yield TextDelta(content=get(delta, "text"))
                    elif get(delta, "type") == "input_json_delta":
                        fragment = get(delta, "partial_json", "")
                        entry["text"].append(fragment)
                        if fragment:
                            yield ToolCallDelta(
                                index=index,
                                tool_call_id=entry["id"],
                                tool_name=entry["name"],
                                args_delta=fragment,
                            )
                elif kind == "message_delta":
                    stop_reason = get(get(event, "delta"), "stop_reason", stop_reason)
                    _merge_usage(usage, get(event, "usage"))
        finally:
            await stream.close()
        self._check_refusal(stop_reason)
        parts: list[ResponsePart] = []
        for index in sorted(blocks):
            entry = blocks[index]
            content = "".join(entry["text"])
            if entry["type"] == "text" and content:
                parts.append(TextPart(content=content))
            elif entry["type"] == "tool_use":
                parts.append(
                    ToolCallPart(
                        tool_name=entry["name"],
                        args=content or "{}",
                        tool_call_id=entry["id"] or f"call_{index}",
                    )
                )
        yield ModelResponse(parts=tuple(parts), usage=anthropic_usage(usage), model_name=model_name)

    def _check_refusal(self, stop_reason: str | None) -> None:
        if stop_reason == "refusal":
            raise ContentRefused(
                f"{self.name} refused the request (stop_reason 'refusal')",
                provider=self.provider,
                model=self.model_name,
                reason="refusal",
            )


def _merge_usage(total: dict[str, int], usage: Any) -> None:
    """Stream usage: ``message_delta`` counts are cumulative, so later values replace earlier."""
    if usage is None:
        return
    for name in (
        "input_tokens",
        "output_tokens",
        "cache_creation_input_tokens",
        "cache_read_input_tokens",
    ):
        value = get(usage, name)
        if value is not None:
            total[name] = value
