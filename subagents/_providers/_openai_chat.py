"""``openai-chat:MODEL``: the Chat Completions API, through the official ``openai`` SDK.

Works with OpenAI and with any server speaking the same protocol (vLLM,
Ollama, llama.cpp, SGLang, LM Studio): point ``base_url`` (or
``OPENAI_BASE_URL``) at it. Tool calls, parallel tool calls, streaming (text
and tool-call argument fragments) and usage (``prompt_tokens``,
``completion_tokens``, ``prompt_tokens_details.cached_tokens``) are mapped
to the SDK records.

Wire rules that keep every one of those servers happy (each has a test
citing the server issue it comes from): an assistant turn's ``content`` is
a string, ``""`` on a tool-call turn, never ``null``; a replayed call's
``arguments`` is always a JSON object's text.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any, ClassVar

from .._agent._models import (
    ModelRequest,
    ModelResponse,
    ModelStreamEvent,
    RequestUsage,
    RetryPromptPart,
    ToolReturnPart,
)
from .._errors import AgentConfigError
from ._common import Messages, Params, ProviderModel, create_kwargs, open_stream
from ._convert import Finish, RoleMessages, TurnBuilder, token_usage, tool_specs
from ._failures import StreamError, get

#: ``finish_reason`` -> how the turn ended; an unknown reason (a server's own) is complete.
_FINISH = {"length": Finish.TRUNCATED, "content_filter": Finish.FILTERED}

#: The ``tool_choice`` modes sent as they are; any other value names a tool.
_TOOL_CHOICE_MODES = frozenset({"auto", "none", "required"})


class _ChatMessages(RoleMessages):
    def tool_result(self, tool_call_id: str, text: str, *, is_error: bool) -> None:
        self.out.append({"role": "tool", "tool_call_id": tool_call_id, "content": text})

    def assistant(self, response: ModelResponse) -> None:
        assistant: dict[str, Any] = {"role": "assistant", "content": response.text()}
        calls = response.tool_calls()
        if calls:
            assistant["tool_calls"] = [
                {
                    "id": call.tool_call_id,
                    "type": "function",
                    "function": {"name": call.tool_name, "arguments": self.arguments(call.args)},
                }
                for call in calls
            ]
        self.out.append(assistant)


def chat_messages(messages: Messages) -> list[dict[str, Any]]:
    """Our conversation as Chat Completions messages, in order."""
    sink = _ChatMessages()
    sink.feed(messages)
    return sink.out


def chat_tools(params: Params) -> list[dict[str, Any]]:
    return [{"type": "function", "function": spec} for spec in tool_specs(params, "parameters")]


def chat_usage(usage: Any) -> RequestUsage:
    return token_usage(usage, "prompt_tokens", "completion_tokens", "prompt_tokens_details")


def _used_tools(messages: Messages) -> bool:
    """Whether the conversation already holds a tool result (or a tool retry prompt)."""
    return any(
        isinstance(part, (ToolReturnPart, RetryPromptPart))
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
    )


def chat_tool_choice(
    choice: str | None, tools: list[dict[str, Any]], *, reset: bool, messages: Messages
) -> Any:
    """The ``tool_choice`` to send, or ``None`` to send none.

    A mode (``auto``, ``none``, ``required``) is sent as is; a tool name
    becomes ``{"type": "function", "function": {"name": NAME}}`` on requests
    that offer that tool, and nothing on the others. With ``reset`` the
    choice is dropped once the conversation holds a tool result, so a forced
    call cannot repeat forever (the same rule as the OpenAI Agents SDK's
    ``reset_tool_choice``).
    """
    if choice is None or not tools or (reset and _used_tools(messages)):
        return None
    if choice in _TOOL_CHOICE_MODES:
        return choice
    if all(tool["function"]["name"] != choice for tool in tools):
        return None
    return {"type": "function", "function": {"name": choice}}


def required_arguments_only(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``tools`` with each schema cut to its required top-level properties.

    Every call the cut schema admits is still a valid call (the optional
    arguments are optional), and a server that builds a grammar from the
    schema (llama.cpp's, for a forced ``tool_choice``) no longer lets a small
    model fill optional fields it does not understand.
    """
    cut: list[dict[str, Any]] = []
    for tool in tools:
        function = dict(tool["function"])
        schema = dict(function.get("parameters") or {})
        properties = schema.get("properties")
        if isinstance(properties, dict):
            required = [name for name in schema.get("required", []) if name in properties]
            schema["properties"] = {name: properties[name] for name in required}
            schema["additionalProperties"] = False
            function["parameters"] = schema
        cut.append({**tool, "function": function})
    return cut


def _finish(refusal: str, finish_reason: str | None, *, streamed: bool) -> tuple[Finish, str]:
    if refusal:
        return Finish.REFUSED, refusal
    if finish_reason is None:
        # Only a stream has a terminal chunk to miss; a whole answer without a
        # reason (some compatible servers) is complete.
        return (Finish.MISSING if streamed else Finish.COMPLETE), ""
    return _FINISH.get(finish_reason, Finish.COMPLETE), finish_reason


class _OpenAIModel(ProviderModel):
    """What both OpenAI protocols share: the key and URL variables and the SDK."""

    env_var: ClassVar[str] = "OPENAI_API_KEY"
    base_url_env_var: ClassVar[str | None] = "OPENAI_BASE_URL"
    sdk_module: ClassVar[str] = "openai"
    sdk_client: ClassVar[str] = "AsyncOpenAI"
    extra: ClassVar[str] = "openai"


class OpenAIChatModel(_OpenAIModel):
    """A model behind the Chat Completions API (``openai-chat:MODEL``).

    Key: ``api_key`` or ``OPENAI_API_KEY`` (a local server that ignores keys
    still needs a non-empty value). Base URL: ``base_url``, else
    ``OPENAI_BASE_URL``, else OpenAI's. ``stream_usage=False`` stops asking
    for usage in streams (``stream_options``) for servers that reject it.
    ``max_tokens`` is sent as ``max_tokens`` (what compatible servers read)
    unless ``max_tokens_param="max_completion_tokens"`` (what OpenAI's
    reasoning models require).
    Raises :class:`ContentRefused` when the model refuses or the content
    filter stops it, :class:`OutputTruncated` on ``finish_reason: "length"``
    and :class:`ProviderStreamIncomplete` when a stream ends without a
    ``finish_reason``. ``top_k`` is not part of this API (pass it in
    ``extra_body`` for servers that accept it).

    ``tool_choice`` is ``"auto"``, ``"none"``, ``"required"`` or a tool's
    name (that tool is forced on every request that offers it: what small
    local models need, since llama.cpp's server turns a named choice into a
    grammar built from the tool's schema). It is sent only with tools, and
    with ``reset_tool_choice`` (the default) only until the conversation
    holds a tool result, so the model can answer after its forced call.
    ``tool_arguments="required"`` advertises only each tool's required
    arguments (:func:`required_arguments_only`), for the same servers.
    """

    provider: ClassVar[str] = "openai-chat"
    unsupported_settings: ClassVar[frozenset[str]] = frozenset({"top_k"})

    def __init__(
        self,
        model_name: str,
        *,
        stream_usage: bool = True,
        max_tokens_param: str = "max_tokens",
        tool_choice: str | None = None,
        reset_tool_choice: bool = True,
        tool_arguments: str = "all",
        **options: Any,
    ) -> None:
        super().__init__(model_name, **options)
        if max_tokens_param not in ("max_tokens", "max_completion_tokens"):
            raise AgentConfigError(
                "max_tokens_param must be 'max_tokens' or 'max_completion_tokens', "
                f"got {max_tokens_param!r}",
                provider=self.provider,
            )
        if tool_choice is not None and (not isinstance(tool_choice, str) or not tool_choice):
            raise AgentConfigError(
                "tool_choice must be 'auto', 'none', 'required' or a tool name, "
                f"got {tool_choice!r}",
                provider=self.provider,
            )
        if not isinstance(reset_tool_choice, bool):
            raise AgentConfigError(
                f"reset_tool_choice must be true or false, got {reset_tool_choice!r}",
                provider=self.provider,
            )
        if tool_arguments not in ("all", "required"):
            raise AgentConfigError(
                f"tool_arguments must be 'all' or 'required', got {tool_arguments!r}",
                provider=self.provider,
            )
        self.stream_usage = stream_usage
        self.max_tokens_param = max_tokens_param
        self.tool_choice = tool_choice
        self.reset_tool_choice = reset_tool_choice
        self.tool_arguments = tool_arguments

    def _body(self, messages: Messages, params: Params) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model_name, "messages": chat_messages(messages)}
        tools = chat_tools(params)
        sampling = self._sampling({"max_tokens": self.max_tokens_param})
        if tools:
            body["tools"] = (
                required_arguments_only(tools) if self.tool_arguments == "required" else tools
            )
            choice = chat_tool_choice(
                self.tool_choice, tools, reset=self.reset_tool_choice, messages=messages
            )
            if choice is not None:
                body["tool_choice"] = choice
        else:
            sampling.pop("parallel_tool_calls", None)
        body.update(sampling)
        return body

    async def _request_once(self, client: Any, messages: Messages, params: Params) -> ModelResponse:
        create = client.chat.completions.create
        completion = await create(**create_kwargs(create, self._body(messages, params)))
        choices = get(completion, "choices", [])
        if not choices:
            raise StreamError.from_body({"message": "the answer has no choices"})
        choice = choices[0]
        message = get(choice, "message")
        turn = TurnBuilder(get(completion, "model", self.model_name))
        turn.usage = chat_usage(get(completion, "usage"))
        turn.text(get(message, "content"))
        for index, call in enumerate(get(message, "tool_calls", [])):
            function = get(call, "function")
            turn.call(
                index,
                get(call, "id", ""),
                get(function, "name", ""),
                get(function, "arguments", ""),
            )
        refusal = get(message, "refusal", "")
        return turn.finish(*_finish(refusal, get(choice, "finish_reason"), streamed=False))

    async def _stream_once(
        self, client: Any, messages: Messages, params: Params
    ) -> AsyncGenerator[ModelStreamEvent, None]:
        body = self._body(messages, params)
        if self.stream_usage:
            body["stream_options"] = {"include_usage": True}
        stream = await open_stream(client.chat.completions.create, body)
        turn = TurnBuilder(self.model_name)
        refusal: list[str] = []
        finish_reason: str | None = None
        try:
            async for chunk in stream:
                turn.model_name = get(chunk, "model", turn.model_name)
                if get(chunk, "usage") is not None:
                    turn.usage = chat_usage(get(chunk, "usage"))
                for choice in get(chunk, "choices", []):
                    if get(choice, "index", 0) != 0:
                        continue
                    finish_reason = get(choice, "finish_reason", finish_reason)
                    delta = get(choice, "delta")
                    if delta is None:
                        continue
                    refusal.append(get(delta, "refusal", ""))
                    for event in _deltas(turn, delta):
                        yield event
        finally:
            await stream.close()
        yield turn.finish(*_finish("".join(refusal), finish_reason, streamed=True))


def _deltas(turn: TurnBuilder, delta: Any) -> list[ModelStreamEvent]:
    """The stream events of one chunk's ``delta``: its text, then its call fragments."""
    events: list[ModelStreamEvent] = []
    text = turn.text(get(delta, "content"))
    if text is not None:
        events.append(text)
    for position, call in enumerate(get(delta, "tool_calls", [])):
        function = get(call, "function")
        update = turn.call(
            get(call, "index", position),
            get(call, "id", ""),
            get(function, "name", "") if function is not None else "",
            get(function, "arguments", "") if function is not None else "",
        )
        if update is not None:
            events.append(update)
    return events
