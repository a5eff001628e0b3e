"""Message shapes that OpenAI, llama.cpp's server, vLLM, Ollama and SGLang all accept.

Each rule names the server issue it comes from.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from fake_provider_server import FakeProviderServer
from provider_cases import CASES, ProviderCase

from subagents import (
    AgentBuilder,
    FunctionTool,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolContext,
    ToolReturnPart,
    UserPromptPart,
)
from subagents._providers._anthropic import anthropic_messages
from subagents._providers._openai_chat import chat_messages
from subagents._providers._openai_responses import responses_input

[CHAT] = [c for c in CASES if c.provider == "openai-chat"]


def _tool() -> FunctionTool:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    return FunctionTool("get_weather", "Weather.", schema, lambda _c, _a: "sunny")


def _history(args: dict[str, Any] | str) -> list[Any]:
    return [
        ModelRequest(parts=(SystemPromptPart(content="Be brief."), UserPromptPart(content="hi"))),
        ModelResponse(
            parts=(ToolCallPart(tool_name="get_weather", args=args, tool_call_id="call_1"),)
        ),
        ModelRequest(
            parts=(ToolReturnPart(tool_name="get_weather", content=None, tool_call_id="call_1"),)
        ),
    ]


async def test_an_assistant_tool_call_turn_is_sent_with_empty_string_content(
    server: FakeProviderServer,
) -> None:
    """``"content": null`` on a tool-call turn is rejected by llama.cpp's server
    (ggml-org/llama.cpp#13471: "Expected 'content' to be a string or an array"),
    a missing one by llama-cpp-python's server (abetlen/llama-cpp-python#1805),
    by Ollama (pydantic/pydantic-ai#5206: "invalid message content type: <nil>")
    and by LM Studio (lmstudio-ai/lmstudio-bug-tracker#261); chat templates that
    concatenate ``message.content`` (as vLLM and SGLang render them) fail on a
    missing one (huggingface/speech-to-speech#425). ``""`` works everywhere.
    """
    server.script(CHAT.reply("tool_call"), CHAT.reply("after_tool"))
    agent = AgentBuilder(CHAT.model(server)).tool(_tool()).build()

    await agent.run("Weather in Paris?")

    [assistant] = [m for m in server.bodies()[1]["messages"] if m["role"] == "assistant"]
    assert assistant["content"] == ""
    assert assistant["tool_calls"][0]["type"] == "function"


def test_every_chat_content_is_a_string() -> None:
    """Ollama's OpenAI API decodes ``content`` into a Go string: an array or null
    fails the request (BerriAI/litellm#11273: "cannot unmarshal array into Go
    struct field ChatRequest.messages.content of type string").
    """
    messages = chat_messages(_history({"city": "Paris"}))

    assert [type(m["content"]) for m in messages] == [str, str, str, str]


def test_replayed_arguments_are_always_a_json_object() -> None:
    """vLLM re-parses the arguments of every replayed call: malformed ones fail
    every later turn (vllm-project/vllm#43995, and #48922 for arguments cut by
    ``max_tokens``), non-object ones give HTTP 500 (vllm-project/vllm#50861) and
    empty ones a JSON error (vllm-project/vllm#19419). So what is sent back is
    always an object's text, ``"{}"`` when the model's was not one.
    """
    for args, sent in [
        ('{"city": "Paris"}', '{"city": "Paris"}'),
        ({"city": "Paris"}, '{"city":"Paris"}'),
        ("", "{}"),
        ('{"city": "Par', "{}"),
        ("[1, 2]", "{}"),
    ]:
        chat = chat_messages(_history(args))
        items = responses_input(_history(args))
        _, anthropic = anthropic_messages(_history(args))

        assert chat[2]["tool_calls"][0]["function"]["arguments"] == sent
        assert [i["arguments"] for i in items if i.get("type") == "function_call"] == [sent]
        assert anthropic[1]["content"][0]["input"] == json.loads(sent)


def test_a_retry_prompt_for_a_call_answers_that_call_on_every_protocol() -> None:
    history = [
        *_history({"city": "Paris"})[:2],
        ModelRequest(
            parts=(
                RetryPromptPart(content="city is required", tool_call_id="call_1"),
                RetryPromptPart(content="answer in French"),
            )
        ),
        ModelResponse(parts=(TextPart(content="Soleil."),)),
    ]

    chat = chat_messages(history)
    items = responses_input(history)
    _, anthropic = anthropic_messages(history)

    assert chat[3]["role"] == "tool" and chat[3]["tool_call_id"] == "call_1"
    assert chat[4]["role"] == "user" and "answer in French" in chat[4]["content"]
    assert items[3]["type"] == "function_call_output" and items[3]["call_id"] == "call_1"
    assert anthropic[2]["content"][0]["is_error"] is True
    assert anthropic[2]["content"][1]["type"] == "text"


def _weather_tool(calls: list[Any]) -> FunctionTool:
    def get_weather(_: ToolContext, args: dict[str, Any]) -> str:
        calls.append(args)
        return "sunny"

    return FunctionTool("get_weather", "Weather.", {"type": "object"}, get_weather)


@pytest.mark.parametrize("case", [c for c in CASES if c.provider != "anthropic"], ids=str)
async def test_unparsable_arguments_never_reach_the_tool(
    case: ProviderCase, server: FakeProviderServer
) -> None:
    reply = case.reply("tool_call")
    broken = json.loads(json.dumps(reply.body).replace('{\\"city\\": \\"Paris\\"}', '{\\"city'))
    server.script(type(reply)(body=broken), case.reply("after_tool"))
    calls: list[Any] = []
    agent = AgentBuilder(case.model(server)).tool(_weather_tool(calls)).build()

    await agent.run("Weather in Paris?")

    assert calls == []
    assert "not valid JSON" in json.dumps(server.bodies()[1])
