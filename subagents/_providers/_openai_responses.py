"""``openai-responses:MODEL``: the Responses API, through the official ``openai`` SDK.

The whole conversation is sent as ``input`` items each turn (no
``previous_response_id``), so the model stays stateless like every other
provider. Function calls and their outputs are ``function_call`` /
``function_call_output`` items joined by ``call_id``.
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
from .._errors import ContentRefused, ProviderError
from ._common import (
    ProviderModel,
    StreamError,
    closing_client,
    create_kwargs,
    dumps,
    get,
    http_client,
    retry_text,
)


def responses_input(messages: Sequence[ModelMessage]) -> list[dict[str, Any]]:
    """Our conversation as Responses API input items, in order."""
    items: list[dict[str, Any]] = []
    for message in messages:
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, SystemPromptPart):
                    items.append({"role": "system", "content": part.content})
                elif isinstance(part, UserPromptPart):
                    items.append({"role": "user", "content": part.content})
                elif isinstance(part, ToolReturnPart):
                    items.append(
                        {
                            "type": "function_call_output",
                            "call_id": part.tool_call_id,
                            "output": dumps(part.content),
                        }
                    )
                elif isinstance(part, RetryPromptPart):
                    if part.tool_call_id is None:
                        items.append({"role": "user", "content": retry_text(part.content)})
                    else:
                        items.append(
                            {
                                "type": "function_call_output",
                                "call_id": part.tool_call_id,
                                "output": retry_text(part.content),
                            }
                        )
            continue
        for response_part in message.parts:
            if isinstance(response_part, TextPart):
                items.append({"role": "assistant", "content": response_part.content})
            else:
                items.append(
                    {
                        "type": "function_call",
                        "call_id": response_part.tool_call_id,
                        "name": response_part.tool_name,
                        "arguments": dumps(response_part.args),
                    }
                )
    return items


def responses_tools(params: ModelRequestParameters) -> list[dict[str, Any]]:
    tools = []
    for tool in params.tools:
        spec: dict[str, Any] = {
            "type": "function",
            "name": tool.name,
            "parameters": tool.parameters_schema,
            "strict": False,
        }
        if tool.description:
            spec["description"] = tool.description
        tools.append(spec)
    return tools


def responses_usage(usage: Any) -> RequestUsage:
    if usage is None:
        return RequestUsage()
    details = get(usage, "input_tokens_details")
    return RequestUsage(
        input_tokens=get(usage, "input_tokens", 0),
        output_tokens=get(usage, "output_tokens", 0),
        cache_read_tokens=0 if details is None else get(details, "cached_tokens", 0),
    )


class OpenAIResponsesModel(ProviderModel):
    """A model behind the Responses API (``openai-responses:MODEL``).

    Key and base URL as for :class:`OpenAIChatModel` (``OPENAI_API_KEY``,
    ``OPENAI_BASE_URL``). ``store`` is sent when given (``False`` keeps
    responses out of OpenAI's storage). ``max_tokens`` is sent as
    ``max_output_tokens``; ``stop``, ``seed``, penalties and ``top_k`` are not
    part of this API. Raises :class:`ContentRefused` on a refusal or when
    the response is cut by the content filter.
    """

    provider: ClassVar[str] = "openai-responses"
    env_var: ClassVar[str] = "OPENAI_API_KEY"
    base_url_env_var: ClassVar[str | None] = "OPENAI_BASE_URL"
    sdk_module: ClassVar[str] = "openai"
    extra: ClassVar[str] = "openai"
    unsupported_settings: ClassVar[frozenset[str]] = frozenset(
        {"stop", "seed", "presence_penalty", "frequency_penalty", "top_k"}
    )

    def __init__(self, model_name: str, *, store: bool | None = None, **options: Any) -> None:
        super().__init__(model_name, **options)
        self.store = store

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
        body: dict[str, Any] = {"model": self.model_name, "input": responses_input(messages)}
        tools = responses_tools(params)
        sampling = self._sampling({"max_tokens": "max_output_tokens"})
        if tools:
            body["tools"] = tools
        else:
            sampling.pop("parallel_tool_calls", None)
        if self.store is not None:
            body["store"] = self.store
        body.update(sampling)
        return body

    async def _request_once(
        self, client: Any, messages: Sequence[ModelMessage], params: ModelRequestParameters
    ) -> ModelResponse:
        response = await client.responses.create(
            **create_kwargs(client.responses.create, self._body(messages, params))
        )
        return self._parse(response)

    def _parse(self, response: Any) -> ModelResponse:
        """Our response from a Responses API response object (streamed or not)."""
        error = get(response, "error")
        if error is not None and get(response, "status") == "failed":
            raise StreamError(error)
        details = get(response, "incomplete_details")
        if details is not None and get(details, "reason") == "content_filter":
            self._refuse("content_filter")
        parts: list[ResponsePart] = []
        for index, item in enumerate(get(response, "output", [])):
            kind = get(item, "type")
            if kind == "message":
                for content in get(item, "content", []):
                    if get(content, "type") == "refusal":
                        self._refuse(get(content, "refusal", "refusal"))
                    if get(content, "type") == "output_text" and get(content, "text"):
                        parts.append(TextPart(content=get(content, "text")))
            elif kind == "function_call":
                parts.append(
                    ToolCallPart(
                        tool_name=get(item, "name", ""),
                        args=get(item, "arguments", "") or "{}",
                        tool_call_id=get(item, "call_id", "") or f"call_{index}",
                    )
                )
        return ModelResponse(
            parts=tuple(parts),
            usage=responses_usage(get(response, "usage")),
            model_name=get(response, "model", self.model_name),
        )

    async def _stream_once(
        self, client: Any, messages: Sequence[ModelMessage], params: ModelRequestParameters
    ) -> AsyncGenerator[ModelStreamEvent, None]:
        body = self._body(messages, params)
        body["stream"] = True
        create = client.responses.create
        stream = await create(**create_kwargs(create, body))
        final: Any = None
        calls: dict[int, dict[str, str]] = {}
        try:
            async for event in stream:
                kind = get(event, "type")
                if kind == "response.output_text.delta":
                    delta = get(event, "delta", "")
                    if delta:
                        yield TextDelta(content=delta)
                elif kind == "response.output_item.added":
                    item = get(event, "item")
                    if get(item, "type") == "function_call":
                        index = get(event, "output_index", len(calls))
                        calls[index] = {
                            "id": get(item, "call_id", ""),
                            "name": get(item, "name", ""),
                        }
                        yield ToolCallDelta(
                            index=index,
                            tool_call_id=calls[index]["id"],
                            tool_name=calls[index]["name"],
                        )
                elif kind == "response.function_call_arguments.delta":
                    index = get(event, "output_index", 0)
                    call = calls.get(index, {"id": "", "name": ""})
                    yield ToolCallDelta(
                        index=index,
                        tool_call_id=call["id"],
                        tool_name=call["name"],
                        args_delta=get(event, "delta", ""),
                    )
                elif kind in ("response.completed", "response.incomplete", "response.failed"):
                    final = get(event, "response")
                elif kind == "error":
                    raise StreamError(event)
        finally:
            await stream.close()
        if final is None:
            raise ProviderError(
                f"{self.name} stream ended without a completed response",
                provider=self.provider,
                model=self.model_name,
            )
        yield self._parse(final)

    def _refuse(self, reason: str) -> None:
        raise ContentRefused(
            f"{self.name} refused the request: {reason}",
            provider=self.provider,
            model=self.model_name,
            reason=reason,
        )
