"""``openai-chat:MODEL``: the Chat Completions API, through the official ``openai`` SDK.

Works with OpenAI and with any server speaking the same protocol (vLLM,
Ollama, llama.cpp, LM Studio): point ``base_url`` (or ``OPENAI_BASE_URL``)
at it. Tool calls, parallel tool calls, streaming (text and tool-call
argument fragments) and usage (``prompt_tokens``, ``completion_tokens``,
``prompt_tokens_details.cached_tokens``) are mapped to the SDK records.
"""

from __future__ import annotations

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
from .._errors import AgentConfigError, ContentRefused, ProviderError
from ._common import (
    ProviderModel,
    closing_client,
    create_kwargs,
    dumps,
    get,
    http_client,
    retry_text,
)


def chat_messages(messages: Sequence[ModelMessage]) -> list[dict[str, Any]]:
    """Our conversation as Chat Completions messages, in order."""
    out: list[dict[str, Any]] = []
    for message in messages:
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, SystemPromptPart):
                    out.append({"role": "system", "content": part.content})
                elif isinstance(part, UserPromptPart):
                    out.append({"role": "user", "content": part.content})
                elif isinstance(part, ToolReturnPart):
                    out.append(
                        {
                            "role": "tool",
                            "tool_call_id": part.tool_call_id,
                            "content": dumps(part.content),
                        }
                    )
                elif isinstance(part, RetryPromptPart):
                    if part.tool_call_id is None:
                        out.append({"role": "user", "content": retry_text(part.content)})
                    else:
                        out.append(
                            {
                                "role": "tool",
                                "tool_call_id": part.tool_call_id,
                                "content": retry_text(part.content),
                            }
                        )
            continue
        text = message.text()
        assistant: dict[str, Any] = {"role": "assistant", "content": text or None}
        calls = message.tool_calls()
        if calls:
            assistant["tool_calls"] = [
                {
                    "id": call.tool_call_id,
                    "type": "function",
                    "function": {"name": call.tool_name, "arguments": dumps(call.args)},
                }
                for call in calls
            ]
        out.append(assistant)
    return out


def chat_tools(params: ModelRequestParameters) -> list[dict[str, Any]]:
    tools = []
    for tool in params.tools:
        function: dict[str, Any] = {"name": tool.name, "parameters": tool.parameters_schema}
        if tool.description:
            function["description"] = tool.description
        tools.append({"type": "function", "function": function})
    return tools


def chat_usage(usage: Any) -> RequestUsage:
    if usage is None:
        return RequestUsage()
    details = get(usage, "prompt_tokens_details")
    return RequestUsage(
        input_tokens=get(usage, "prompt_tokens", 0),
        output_tokens=get(usage, "completion_tokens", 0),
        cache_read_tokens=0 if details is None else get(details, "cached_tokens", 0),
    )


class OpenAIChatModel(ProviderModel):
    """A model behind the Chat Completions API (``openai-chat:MODEL``).

    Key: ``api_key`` or ``OPENAI_API_KEY`` (a local server that ignores keys
    still needs a non-empty value). Base URL: ``base_url``, else
    ``OPENAI_BASE_URL``, else OpenAI's. ``stream_usage=False`` stops asking
    for usage in streams (``stream_options``) for servers that reject it.
    ``max_tokens`` is sent as ``max_tokens`` (what compatible servers read)
    unless ``max_tokens_param="max_completion_tokens"`` (what OpenAI's
    reasoning models require).
    Raises :class:`ContentRefused` when the model refuses or the content
    filter stops it. ``top_k`` is not part of this API (pass it in
    ``extra_body`` for servers that accept it).
    """

    provider: ClassVar[str] = "openai-chat"
    env_var: ClassVar[str] = "OPENAI_API_KEY"
    base_url_env_var: ClassVar[str | None] = "OPENAI_BASE_URL"
    sdk_module: ClassVar[str] = "openai"
    extra: ClassVar[str] = "openai"
    unsupported_settings: ClassVar[frozenset[str]] = frozenset({"top_k"})

    def __init__(
        self,
        model_name: str,
        *,
        stream_usage: bool = True,
        max_tokens_param: str = "max_tokens",
        **options: Any,
    ) -> None:
        super().__init__(model_name, **options)
        if max_tokens_param not in ("max_tokens", "max_completion_tokens"):
            raise AgentConfigError(
                "max_tokens_param must be 'max_tokens' or 'max_completion_tokens', "
                f"got {max_tokens_param!r}",
                provider=self.provider,
            )
        self.stream_usage = stream_usage
        self.max_tokens_param = max_tokens_param

    def _client(self, api_key: str) -> Any:
        return closing_client(
            self._sdk.AsyncOpenAI(
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
        body: dict[str, Any] = {"model": self.model_name, "messages": chat_messages(messages)}
        tools = chat_tools(params)
        sampling = self._sampling({"max_tokens": self.max_tokens_param})
        if tools:
            body["tools"] = tools
        else:
            sampling.pop("parallel_tool_calls", None)
        body.update(sampling)
        return body

    async def _request_once(
        self, client: Any, messages: Sequence[ModelMessage], params: ModelRequestParameters
    ) -> ModelResponse:
        completion = await client.chat.completions.create(
            **create_kwargs(client.chat.completions.create, self._body(messages, params))
        )
        choices = get(completion, "choices", [])
        if not choices:
            raise ProviderError(
                f"{self.name} answered without choices",
                provider=self.provider,
                model=self.model_name,
            )
        choice = choices[0]
        message = get(choice, "message")
        self._check_refusal(get(message, "refusal"), get(choice, "finish_reason"))
        parts: list[ResponsePart] = []
        content = get(message, "content")
        if content:
            parts.append(TextPart(content=content))
        for index, call in enumerate(get(message, "tool_calls", [])):
            function = get(call, "function")
            parts.append(
                ToolCallPart(
                    tool_name=get(function, "name", ""),
                    args=get(function, "arguments", "") or "{}",
                    tool_call_id=get(call, "id", "") or f"call_{index}",
                )
            )
        return ModelResponse(
            parts=tuple(parts),
            usage=chat_usage(get(completion, "usage")),
            model_name=get(completion, "model", self.model_name),
        )

    async def _stream_once(
        self, client: Any, messages: Sequence[ModelMessage], params: ModelRequestParameters
    ) -> AsyncGenerator[ModelStreamEvent, None]:
        body = self._body(messages, params)
        body["stream"] = True
        if self.stream_usage:
            body["stream_options"] = {"include_usage": True}
        create = client.chat.completions.create
        stream = await create(**create_kwargs(create, body))
        text: list[str] = []
        refusal: list[str] = []
        calls: dict[int, dict[str, Any]] = {}
        usage: Any = None
        finish_reason: str | None = None
        model_name = self.model_name
        try:
            async for chunk in stream:
                model_name = get(chunk, "model", model_name)
                if get(chunk, "usage") is not None:
                    usage = get(chunk, "usage")
                for choice in get(chunk, "choices", []):
                    if get(choice, "index", 0) != 0:
                        continue
                    finish_reason = get(choice, "finish_reason", finish_reason)
                    delta = get(choice, "delta")
                    if delta is None:
                        continue
                    if get(delta, "refusal"):
                        refusal.append(get(delta, "refusal"))
                    content = get(delta, "content")
                    if content:
                        text.append(content)
                        yield TextDelta(content=content)
                    for position, call in enumerate(get(delta, "tool_calls", [])):
                        index = get(call, "index", position)
                        entry = calls.setdefault(index, {"id": "", "name": "", "args": []})
                        entry["id"] = entry["id"] or get(call, "id", "")
                        function = get(call, "function")
                        name = get(function, "name", "") if function is not None else ""
                        entry["name"] = entry["name"] or name
                        fragment = get(function, "arguments", "") if function is not None else ""
                        if fragment:
                            entry["args"].append(fragment)
                        if fragment or name:
                            yield ToolCallDelta(
                                index=index,
                                tool_call_id=entry["id"],
                                tool_name=entry["name"],
                                args_delta=fragment,
                            )
        finally:
            await stream.close()
        self._check_refusal("".join(refusal) or None, finish_reason)
        parts: list[ResponsePart] = []
        if text:
            parts.append(TextPart(content="".join(text)))
        for index in sorted(calls):
            entry = calls[index]
            parts.append(
                ToolCallPart(
                    tool_name=entry["name"],
                    args="".join(entry["args"]) or "{}",
                    tool_call_id=entry["id"] or f"call_{index}",
                )
            )
        yield ModelResponse(parts=tuple(parts), usage=chat_usage(usage), model_name=model_name)

    def _check_refusal(self, refusal: str | None, finish_reason: str | None) -> None:
        if refusal or finish_reason == "content_filter":
            reason = refusal or "content_filter"
            raise ContentRefused(
                f"{self.name} refused the request: {reason}",
                provider=self.provider,
                model=self.model_name,
                reason=reason,
            )
