"""``openai-responses:MODEL``: the Responses API, through the official ``openai`` SDK.

The whole conversation is sent as ``input`` items each turn (no
``previous_response_id``), so the model stays stateless like every other
provider. Function calls and their outputs are ``function_call`` /
``function_call_output`` items joined by ``call_id``.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator
from typing import Any, ClassVar

from .._agent._models import ModelResponse, ModelStreamEvent, RequestUsage, TextPart
from ._common import Messages, Params, create_kwargs, open_stream, stream_events
from ._convert import Finish, RoleMessages, TurnBuilder, token_usage, tool_specs
from ._failures import StreamError, get
from ._openai_chat import _OpenAIModel

#: ``incomplete_details.reason`` -> how the turn ended.
_INCOMPLETE = {"max_output_tokens": Finish.TRUNCATED, "content_filter": Finish.FILTERED}
#: Stream events that end a response (each carries the final response).
_TERMINAL = ("response.completed", "response.incomplete", "response.failed")


class _ResponsesInput(RoleMessages):
    def tool_result(self, tool_call_id: str, text: str, *, is_error: bool) -> None:
        self.out.append({"type": "function_call_output", "call_id": tool_call_id, "output": text})

    def assistant(self, response: ModelResponse) -> None:
        for part in response.parts:
            if isinstance(part, TextPart):
                self.out.append({"role": "assistant", "content": part.content})
            else:
                self.out.append(
                    {
                        "type": "function_call",
                        "call_id": part.tool_call_id,
                        "name": part.tool_name,
                        "arguments": self.arguments(part.args),
                    }
                )


def responses_input(messages: Messages) -> list[dict[str, Any]]:
    """Our conversation as Responses API input items, in order."""
    sink = _ResponsesInput()
    sink.feed(messages)
    return sink.out


def responses_tools(params: Params) -> list[dict[str, Any]]:
    return [
        {"type": "function", **spec, "strict": False} for spec in tool_specs(params, "parameters")
    ]


def responses_usage(usage: Any) -> RequestUsage:
    return token_usage(usage, "input_tokens", "output_tokens", "input_tokens_details")


class OpenAIResponsesModel(_OpenAIModel):
    """A model behind the Responses API (``openai-responses:MODEL``).

    Key and base URL as for :class:`OpenAIChatModel` (``OPENAI_API_KEY``,
    ``OPENAI_BASE_URL``). ``store`` is sent when given (``False`` keeps
    responses out of OpenAI's storage). ``max_tokens`` is sent as
    ``max_output_tokens``; ``stop``, ``seed``, penalties and ``top_k`` are not
    part of this API. Raises :class:`ContentRefused` on a refusal or when
    the response is cut by the content filter, :class:`OutputTruncated` when
    it is incomplete at ``max_output_tokens``, and
    :class:`ProviderStreamIncomplete` when a stream ends before its
    completed/incomplete/failed event.
    """

    provider: ClassVar[str] = "openai-responses"
    unsupported_settings: ClassVar[frozenset[str]] = frozenset(
        {"stop", "seed", "presence_penalty", "frequency_penalty", "top_k"}
    )

    def __init__(self, model_name: str, *, store: bool | None = None, **options: Any) -> None:
        super().__init__(model_name, **options)
        self.store = store

    def _body(self, messages: Messages, params: Params) -> dict[str, Any]:
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

    async def _request_once(self, client: Any, messages: Messages, params: Params) -> ModelResponse:
        create = client.responses.create
        response = await create(**create_kwargs(create, self._body(messages, params)))
        return self._parse(response)

    def _parse(self, response: Any) -> ModelResponse:
        """Our response from a Responses API response object (streamed or not)."""
        error = get(response, "error")
        if error is not None and get(response, "status") == "failed":
            raise StreamError.from_body(error)
        turn = TurnBuilder(get(response, "model", self.model_name))
        turn.usage = responses_usage(get(response, "usage"))
        refusal = ""
        for index, item in enumerate(get(response, "output", [])):
            kind = get(item, "type")
            if kind == "message":
                for content in get(item, "content", []):
                    if get(content, "type") == "refusal":
                        refusal = get(content, "refusal", "refusal")
                    elif get(content, "type") == "output_text":
                        turn.text(get(content, "text"))
            elif kind == "function_call":
                turn.call(
                    index,
                    get(item, "call_id", ""),
                    get(item, "name", ""),
                    get(item, "arguments", ""),
                )
        if refusal:
            return turn.finish(Finish.REFUSED, refusal)
        reason = get(get(response, "incomplete_details"), "reason")
        if get(response, "status") == "incomplete":
            return turn.finish(_INCOMPLETE.get(reason, Finish.TRUNCATED), reason or "")
        return turn.finish(_INCOMPLETE.get(reason, Finish.COMPLETE), reason or "")

    async def _stream_once(
        self, client: Any, messages: Messages, params: Params
    ) -> AsyncGenerator[ModelStreamEvent, None]:
        stream = await open_stream(client.responses.create, self._body(messages, params))
        final: Any = None
        # Deltas only: the final response object is parsed whole at the end.
        deltas = TurnBuilder(self.model_name)
        async with contextlib.aclosing(stream_events(stream)) as events:
            async for kind, event in events:
                update: ModelStreamEvent | None = None
                if kind == "response.output_text.delta":
                    update = deltas.text(get(event, "delta", ""))
                elif kind == "response.output_item.added":
                    item = get(event, "item")
                    if get(item, "type") == "function_call":
                        index = get(event, "output_index", 0)
                        update = deltas.call(index, get(item, "call_id", ""), get(item, "name", ""))
                elif kind == "response.function_call_arguments.delta":
                    update = deltas.call(
                        get(event, "output_index", 0), args=get(event, "delta", "")
                    )
                elif kind in _TERMINAL:
                    final = get(event, "response")
                if update is not None:
                    yield update
        if final is None:
            yield deltas.finish(Finish.MISSING)
        yield self._parse(final)
