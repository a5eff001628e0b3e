"""Every provider passes the same conversations against its fake server.

Plain text, one tool call, parallel tool calls, streaming (text and tool
calls), and a blocking delegation to a subagent on another provider, with
usage adding up across both.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from fake_provider_server import FakeProviderServer, Reply, ServerFactory
from provider_cases import ProviderCase, RecordingSleep, other_case

from subagents import (
    AgentBuilder,
    AgentContext,
    AgentStreamRecord,
    FunctionTool,
    ProviderTimeout,
    SubagentConfig,
    ToolContext,
)

WEATHER = {"Paris": "sunny", "London": "rainy"}
USAGE_PER_REQUEST = {"input_tokens": 20, "output_tokens": 8, "cache_read_tokens": 4}


def _weather_tool() -> FunctionTool:
    def get_weather(_: ToolContext, args: dict[str, Any]) -> str:
        return WEATHER[args["city"]]

    return FunctionTool(
        "get_weather",
        "Current weather in a city.",
        {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
            "additionalProperties": False,
        },
        get_weather,
    )


def _usage(requests: int, tool_calls: int) -> dict[str, int]:
    return {
        "requests": requests,
        "input_tokens": 20 * requests,
        "output_tokens": 8 * requests,
        "tool_calls": tool_calls,
        "cache_read_tokens": 4 * requests,
    }


async def test_a_plain_text_answer_comes_back_with_its_usage(
    case: ProviderCase, server: FakeProviderServer
) -> None:
    server.script(case.reply("text"))
    agent = AgentBuilder(case.model(server)).instructions("Be brief.").build()

    result = await agent.run("What is the capital of France?")

    assert result.output == "Paris is the capital of France."
    assert result.usage.to_value() == _usage(requests=1, tool_calls=0)
    [request] = server.requests
    assert request.path == case.path
    assert request.body["model"] == "test-model"
    assert "Be brief." in json.dumps(request.body)
    assert "What is the capital of France?" in json.dumps(request.body)


async def test_one_tool_call_is_run_and_its_result_sent_back(
    case: ProviderCase, server: FakeProviderServer
) -> None:
    server.script(case.reply("tool_call"), case.reply("after_tool"))
    agent = AgentBuilder(case.model(server)).tool(_weather_tool()).build()

    result = await agent.run("Weather in Paris?")

    assert result.output == "It is sunny in Paris."
    first, second = server.bodies()
    assert case.tool_names(first) == ["get_weather"]
    assert "additionalProperties" in json.dumps(first["tools"])
    [call] = result.messages[1].tool_calls()  # type: ignore[union-attr]
    assert call.tool_name == "get_weather"
    assert case.tool_results(second) == [(call.tool_call_id, "sunny")]
    assert result.usage.to_value() == _usage(requests=2, tool_calls=1)


async def test_parallel_tool_calls_all_run_and_return_in_call_order(
    case: ProviderCase, server: FakeProviderServer
) -> None:
    server.script(case.reply("parallel_tool_calls"), case.reply("after_parallel"))
    agent = AgentBuilder(case.model(server)).tool(_weather_tool()).build()

    result = await agent.run("Weather in Paris and London?")

    assert result.output == "Sunny in Paris, rainy in London."
    calls = result.messages[1].tool_calls()  # type: ignore[union-attr]
    assert [json.loads(c.args) if isinstance(c.args, str) else c.args for c in calls] == [
        {"city": "Paris"},
        {"city": "London"},
    ]
    assert len({c.tool_call_id for c in calls}) == 2
    assert case.tool_results(server.bodies()[1]) == [
        (calls[0].tool_call_id, "sunny"),
        (calls[1].tool_call_id, "rainy"),
    ]
    assert result.usage.to_value() == _usage(requests=2, tool_calls=2)


async def _stream(agent_run: Any) -> tuple[list[AgentStreamRecord], Any]:
    records = [record async for record in agent_run]
    return records, agent_run.result


async def test_streamed_text_arrives_in_deltas_that_add_up_to_the_output(
    case: ProviderCase, server: FakeProviderServer
) -> None:
    server.script(case.reply_stream("text"))
    agent = AgentBuilder(case.model(server)).build()

    records, result = await _stream(agent.run_stream("What is the capital of France?"))

    deltas = [r.payload["content"] for r in records if r.kind == "text_delta"]
    assert len(deltas) == 3
    assert "".join(deltas) == result.output == "Paris is the capital of France."
    assert records[-1].kind == "run_completed"
    assert records[-1].payload["usage"] == _usage(requests=1, tool_calls=0)
    assert server.bodies()[0]["stream"] is True


async def test_streamed_parallel_tool_calls_arrive_as_argument_fragments(
    case: ProviderCase, server: FakeProviderServer
) -> None:
    server.script(case.reply_stream("parallel_tool_calls"), case.reply_stream("after_parallel"))
    agent = AgentBuilder(case.model(server)).tool(_weather_tool()).build()

    records, result = await _stream(agent.run_stream("Weather in Paris and London?"))

    fragments: dict[int, str] = {}
    for record in records:
        if record.kind == "tool_call_delta":
            fragments[record.payload["index"]] = (
                fragments.get(record.payload["index"], "") + record.payload["args_delta"]
            )
    assert [json.loads(text) for _, text in sorted(fragments.items())] == [
        {"city": "Paris"},
        {"city": "London"},
    ]
    returns = [r.payload["content"] for r in records if r.kind == "tool_return"]
    assert returns == ["sunny", "rainy"]
    assert result.output == "Sunny in Paris, rainy in London."
    assert result.usage.to_value() == _usage(requests=2, tool_calls=2)


async def test_a_streamed_single_tool_call_is_run(
    case: ProviderCase, server: FakeProviderServer
) -> None:
    server.script(case.reply_stream("tool_call"), case.reply_stream("after_tool"))
    agent = AgentBuilder(case.model(server)).tool(_weather_tool()).build()

    records, result = await _stream(agent.run_stream("Weather in Paris?"))

    [call] = [r.payload for r in records if r.kind == "tool_call"]
    assert call["tool_name"] == "get_weather"
    assert json.loads(call["args"]) == {"city": "Paris"}
    assert result.output == "It is sunny in Paris."


async def test_a_parent_delegates_to_a_child_on_another_provider_and_usage_adds_up(
    case: ProviderCase, new_server: ServerFactory
) -> None:
    child_case = other_case(case)
    parent_server, child_server = new_server(), new_server()
    parent_server.script(case.reply("delegate"), case.reply("after_delegate"))
    child_server.script(child_case.reply("child_text"))
    child = AgentBuilder(child_case.model(child_server)).name("researcher").build()
    app = (
        AgentBuilder(case.model(parent_server))
        .subagent(SubagentConfig("research", child, "Collects facts."))
        .build_app()
    )
    context = AgentContext()

    result = await app.run("Ask the researcher for the capital of France.", context)

    assert result.output == "The researcher says: Paris."
    [delegation] = result.messages[1].tool_calls()  # type: ignore[union-attr]
    [(call_id, content)] = case.tool_results(parent_server.bodies()[1])
    assert call_id == delegation.tool_call_id
    assert json.loads(content)["output"] == "Research done: Paris."
    assert "Find the capital of France." in json.dumps(child_server.bodies()[0])
    # Two parent requests plus one child request, each 20 in / 8 out / 4 cached.
    assert context.usage.to_value() == _usage(requests=3, tool_calls=1)
    assert result.usage.to_value() == _usage(requests=3, tool_calls=1)


async def test_a_streamed_delegation_carries_the_childs_deltas_attributed_to_it(
    case: ProviderCase, new_server: ServerFactory
) -> None:
    child_case = other_case(case)
    parent_server, child_server = new_server(), new_server()
    parent_server.script(case.reply_stream("delegate"), case.reply_stream("after_delegate"))
    child_server.script(child_case.reply_stream("child_text"))
    child = AgentBuilder(child_case.model(child_server)).name("researcher").build()
    app = (
        AgentBuilder(case.model(parent_server))
        .subagent(SubagentConfig("research", child))
        .build_app()
    )

    records, result = await _stream(app.run_stream("Ask the researcher."))

    child_deltas = [
        r.payload["content"] for r in records if r.kind == "text_delta" and r.source is not None
    ]
    parent_deltas = [
        r.payload["content"] for r in records if r.kind == "text_delta" and r.source is None
    ]
    assert "".join(child_deltas) == "Research done: Paris."
    assert "".join(parent_deltas) == result.output == "The researcher says: Paris."
    assert {r.source.agent_name for r in records if r.source is not None} == {"research"}
    assert result.usage.to_value() == _usage(requests=3, tool_calls=1)


async def test_closing_a_stream_mid_answer_cancels_the_run_and_closes_the_connection(
    case: ProviderCase, server: FakeProviderServer
) -> None:
    # The recorded stream up to its first text delta, then a connection that stays open.
    events = case.reply_stream("text").sse.split("\n\n")  # type: ignore[union-attr]
    first_delta = next(i for i, event in enumerate(events) if "Paris is " in event)
    server.script(Reply(sse="\n\n".join(events[: first_delta + 1]) + "\n\n", hang_after=True))
    stream = AgentBuilder(case.model(server, timeout=10.0)).build().run_stream("hi")

    kinds = []
    async for record in stream:
        kinds.append(record.kind)
        if record.kind == "text_delta":
            break
    await stream.aclose()

    assert kinds == ["run_started", "text_delta"]
    with pytest.raises(RuntimeError, match="not finished"):
        _ = stream.result


async def test_a_stream_that_stalls_mid_answer_is_a_timeout(
    case: ProviderCase, server: FakeProviderServer
) -> None:
    events = case.reply_stream("text").sse.split("\n\n")  # type: ignore[union-attr]
    first_delta = next(i for i, event in enumerate(events) if "Paris is " in event)
    server.script(Reply(sse="\n\n".join(events[: first_delta + 1]) + "\n\n", hang_after=True))
    sleep = RecordingSleep()
    agent = AgentBuilder(case.model(server, timeout=0.2, sleep=sleep)).build()

    with pytest.raises(ProviderTimeout, match="timeout"):
        async for _ in agent.run_stream("hi"):
            pass

    assert sleep.delays == []
