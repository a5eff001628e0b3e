"""A turn that did not end cleanly is never a clean success (issue 18, first failure).

A stream cut before its terminal event is :class:`ProviderStreamIncomplete`
(retried while nothing was yielded); a ``length``/``max_tokens`` finish is
:class:`OutputTruncated` with the partial text, and tool arguments cut short
by it never reach the tool.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from fake_provider_server import FakeProviderServer, Reply
from provider_cases import ProviderCase, RecordingSleep

from subagents import (
    AgentBuilder,
    FunctionTool,
    OutputTruncated,
    ProviderError,
    ProviderStreamIncomplete,
    ToolContext,
)


def _recording_weather_tool(calls: list[Any]) -> FunctionTool:
    def get_weather(_: ToolContext, args: dict[str, Any]) -> str:
        calls.append(args)
        return "sunny"

    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    return FunctionTool("get_weather", "Weather in a city.", schema, get_weather)


# Per provider: the recorded tool-call turn, stopped at the token limit mid-arguments.
_CUT_ARGS = (' \\"Paris\\"}', ' \\"Par')
_STREAM_LENGTH = {
    "openai-chat": [('"finish_reason":"tool_calls"', '"finish_reason":"length"'), _CUT_ARGS],
    "anthropic": [('"stop_reason":"tool_use"', '"stop_reason":"max_tokens"'), _CUT_ARGS],
    "openai-responses": [
        ("response.completed", "response.incomplete"),
        (
            '"status":"completed","error":null,"incomplete_details":null',
            '"status":"incomplete","error":null,'
            '"incomplete_details":{"reason":"max_output_tokens"}',
        ),
    ],
}


def _truncated_stream(case: ProviderCase, name: str) -> Reply:
    sse = case.reply_stream(name).sse
    assert sse is not None
    for old, new in _STREAM_LENGTH[case.provider]:
        assert old in sse
        sse = sse.replace(old, new)
    return Reply(sse=sse)


def _truncated_json(case: ProviderCase, name: str) -> Reply:
    reply = case.reply(name)
    body = copy.deepcopy(reply.body)
    if case.provider == "openai-chat":
        body["choices"][0]["finish_reason"] = "length"
    elif case.provider == "anthropic":
        body["stop_reason"] = "max_tokens"
    else:
        body["status"] = "incomplete"
        body["incomplete_details"] = {"reason": "max_output_tokens"}
    return Reply(body=body)


async def test_a_stream_cut_after_text_is_incomplete_not_a_short_answer(
    case: ProviderCase, server: FakeProviderServer
) -> None:
    sleep = RecordingSleep()
    server.script(Reply(sse=case.cut_stream("text")), case.reply_stream("text"))
    agent = AgentBuilder(case.model(server, sleep=sleep)).build()
    kinds: list[str] = []

    with pytest.raises(ProviderStreamIncomplete) as raised:
        async for record in agent.run_stream("hi"):
            kinds.append(record.kind)

    assert "text_delta" in kinds  # the consumer saw part of it: no silent retry
    assert raised.value.category == "stream_incomplete"
    assert raised.value.retryable is True
    assert len(server.requests) == 1


async def test_a_stream_cut_before_any_output_is_retried(
    case: ProviderCase, server: FakeProviderServer
) -> None:
    sleep = RecordingSleep()
    head = case.cut_stream("tool_call").split("\n\n")[0] + "\n\n"  # the opening event only
    server.script(Reply(sse=head), case.reply_stream("text"))
    agent = AgentBuilder(case.model(server, sleep=sleep)).build()

    stream = agent.run_stream("hi")
    _ = [record async for record in stream]

    assert stream.result.output == "Paris is the capital of France."
    assert sleep.delays == [0.5]


async def test_a_streamed_length_stop_is_output_truncated_and_no_tool_runs(
    case: ProviderCase, server: FakeProviderServer
) -> None:
    calls: list[Any] = []
    server.script(_truncated_stream(case, "tool_call"))
    agent = AgentBuilder(case.model(server)).tool(_recording_weather_tool(calls)).build()

    with pytest.raises(OutputTruncated) as raised:
        async for _ in agent.run_stream("weather in Paris?"):
            pass

    assert calls == []
    assert raised.value.category == "output_truncated"
    assert len(server.requests) == 1


async def test_a_length_stop_keeps_the_partial_text_out_of_its_safe_text(
    case: ProviderCase, server: FakeProviderServer
) -> None:
    server.script(_truncated_json(case, "text"))

    with pytest.raises(OutputTruncated) as raised:
        await AgentBuilder(case.model(server)).build().run("hi")

    assert raised.value.partial_text == "Paris is the capital of France."
    assert "Paris" not in str(raised.value)
    assert "Paris" not in repr(raised.value)


async def test_a_length_stop_on_a_tool_call_never_reaches_the_tool(
    case: ProviderCase, server: FakeProviderServer
) -> None:
    calls: list[Any] = []
    server.script(_truncated_json(case, "tool_call"))
    agent = AgentBuilder(case.model(server)).tool(_recording_weather_tool(calls)).build()

    with pytest.raises(OutputTruncated):
        await agent.run("weather in Paris?")

    assert calls == []


def test_the_new_outcomes_are_provider_errors() -> None:
    assert issubclass(ProviderStreamIncomplete, ProviderError)
    assert issubclass(OutputTruncated, ProviderError)
