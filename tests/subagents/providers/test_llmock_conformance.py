"""Every provider against llmock, a mock of the OpenAI and Anthropic APIs nobody here wrote.

The server runs as a subprocess on a free loopback port (``conftest.llmock``)
and is scripted per test through its ``/_llmock`` API: replies with text and
tool calls, HTTP errors with ``Retry-After``, delays past the client
timeout, and streams that are disconnected or cut short. Retry sleeps are
injected and recorded, never waited.
"""

from __future__ import annotations

import json
import socket
from typing import Any

import pytest
from llmock_server import LLMock
from provider_cases import CASES, ProviderCase, RecordingSleep

from subagents import (
    AgentBuilder,
    FunctionTool,
    OutputTruncated,
    ProviderAuthenticationError,
    ProviderConnectionError,
    ProviderError,
    ProviderRateLimited,
    ProviderServerError,
    ProviderStreamIncomplete,
    ProviderTimeout,
    RetryPolicy,
    ToolContext,
)
from subagents._providers import ProviderModel

API_KEY = "llmock-key-0123456789"
WEATHER = {"Paris": "sunny", "London": "rainy"}


def _model(case: ProviderCase, llmock: LLMock, **options: Any) -> ProviderModel:
    options.setdefault("sleep", RecordingSleep())
    options.setdefault("retry", RetryPolicy(jitter=0.0))
    return case.model_class(
        "gpt-4o", api_key=API_KEY, base_url=llmock.base_url(case.provider), **options
    )


def _weather(calls: list[dict[str, Any]]) -> FunctionTool:
    def get_weather(_: ToolContext, args: dict[str, Any]) -> str:
        calls.append(args)
        return WEATHER[args["city"]]

    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    return FunctionTool("get_weather", "Weather in a city.", schema, get_weather)


def _calls(*cities: str) -> dict[str, Any]:
    return {
        "type": "reply",
        "tool_calls": [{"name": "get_weather", "arguments": {"city": c}} for c in cities],
    }


def _served(llmock: LLMock) -> list[dict[str, Any]]:
    """The model requests llmock served (the admin API's are not journaled)."""
    return llmock.requests()


async def test_a_text_answer_with_its_usage(case: ProviderCase, llmock: LLMock) -> None:
    llmock.queue({"type": "reply", "text": "Paris is the capital of France."})

    result = await AgentBuilder(_model(case, llmock)).build().run("Capital of France?")

    assert result.output == "Paris is the capital of France."
    assert result.usage.requests == 1
    assert result.usage.output_tokens > 0


async def test_a_streamed_answer_adds_up_and_reports_usage(
    case: ProviderCase, llmock: LLMock
) -> None:
    llmock.queue({"type": "reply", "text": "Paris is the capital of France."})
    stream = AgentBuilder(_model(case, llmock)).build().run_stream("Capital of France?")

    records = [record async for record in stream]

    deltas = [r.payload for r in records if r.kind == "text_delta"]
    assert len(deltas) > 1
    assert stream.result.output == "Paris is the capital of France."
    assert stream.result.usage.output_tokens > 0
    [served] = _served(llmock)
    assert served["stream"] is True


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("cities", [("Paris",), ("Paris", "London")], ids=["single", "parallel"])
async def test_tool_calls_run_and_their_results_go_back(
    case: ProviderCase, llmock: LLMock, cities: tuple[str, ...], streamed: bool
) -> None:
    llmock.queue(_calls(*cities), {"type": "reply", "text": "Done."})
    calls: list[dict[str, Any]] = []
    agent = AgentBuilder(_model(case, llmock)).tool(_weather(calls)).build()

    if streamed:
        stream = agent.run_stream("Weather?")
        _ = [record async for record in stream]
        result = stream.result
    else:
        result = await agent.run("Weather?")

    assert result.output == "Done."
    assert calls == [{"city": c} for c in cities]
    first, second = (r["body"] for r in _served(llmock))
    assert case.tool_names(first) == ["get_weather"]
    assert [text for _, text in case.tool_results(second)] == [WEATHER[c] for c in cities]
    if case.provider == "openai-chat":
        [assistant] = [m for m in second["messages"] if m["role"] == "assistant"]
        assert assistant["content"] == ""


async def test_multiple_tool_turns_in_one_run(case: ProviderCase, llmock: LLMock) -> None:
    llmock.queue(_calls("Paris"), _calls("London"), {"type": "reply", "text": "Both done."})
    calls: list[dict[str, Any]] = []
    agent = AgentBuilder(_model(case, llmock)).tool(_weather(calls)).build()

    result = await agent.run("Weather in Paris, then London?")

    assert result.output == "Both done."
    assert calls == [{"city": "Paris"}, {"city": "London"}]
    assert result.usage.requests == 3


@pytest.mark.parametrize(
    ("status", "error"), [(429, ProviderRateLimited), (503, ProviderServerError)]
)
async def test_a_retryable_status_waits_for_its_retry_after(
    case: ProviderCase, llmock: LLMock, status: int, error: type[ProviderError]
) -> None:
    sleep = RecordingSleep()
    llmock.queue({"type": "fail", "status": status, "retry_after": 2, "times": 1})
    llmock.queue({"type": "reply", "text": "Recovered."})

    result = await AgentBuilder(_model(case, llmock, sleep=sleep)).build().run("hi")

    assert result.output == "Recovered."
    assert sleep.delays == [2.0]
    assert [r["status"] for r in _served(llmock)] == [status, 200]
    # Past the bound, the typed error keeps the status.
    llmock.queue({"type": "fail", "status": status, "retry_after": 1, "times": 2})
    policy = RetryPolicy(max_retries=1, jitter=0.0)
    with pytest.raises(error) as raised:
        await AgentBuilder(_model(case, llmock, retry=policy)).build().run("hi")
    assert raised.value.status == status


@pytest.mark.parametrize(
    ("status", "error", "category"),
    [(401, ProviderAuthenticationError, "authentication"), (400, ProviderError, "invalid_request")],
)
async def test_a_deterministic_status_is_not_retried(
    case: ProviderCase, llmock: LLMock, status: int, error: type[ProviderError], category: str
) -> None:
    sleep = RecordingSleep()
    llmock.queue({"type": "fail", "status": status, "times": 3})

    with pytest.raises(error) as raised:
        await AgentBuilder(_model(case, llmock, sleep=sleep)).build().run("hi")

    assert (raised.value.category, raised.value.status) == (category, status)
    assert len(_served(llmock)) == 1
    assert sleep.delays == []


async def test_an_answer_slower_than_the_timeout_is_retried_then_a_timeout(
    case: ProviderCase, llmock: LLMock
) -> None:
    sleep = RecordingSleep()
    llmock.queue({"type": "delay", "seconds": 2.0, "times": 2})
    model = _model(case, llmock, sleep=sleep, timeout=0.2, retry=RetryPolicy(max_retries=1))

    with pytest.raises(ProviderTimeout) as raised:
        await AgentBuilder(model).build().run("hi")

    assert raised.value.category == "timeout"
    assert len(sleep.delays) == 1


async def test_a_disconnect_before_any_output_is_retried(
    case: ProviderCase, llmock: LLMock
) -> None:
    sleep = RecordingSleep()
    llmock.queue({"type": "stream_fault", "kind": "disconnect", "after_chunks": 1})
    llmock.queue({"type": "reply", "text": "Paris is the capital of France.", "times": 2})
    stream = AgentBuilder(_model(case, llmock, sleep=sleep)).build().run_stream("hi")

    _ = [record async for record in stream]

    assert stream.result.output == "Paris is the capital of France."
    assert len(sleep.delays) == 1


@pytest.mark.parametrize(
    ("fault", "error", "category"),
    [
        ("disconnect", ProviderConnectionError, "connection"),
        # A clean but early end, with no finish reason nor terminator.
        ("truncate", ProviderStreamIncomplete, "stream_incomplete"),
    ],
)
async def test_a_stream_broken_mid_answer_fails_the_turn_never_a_short_answer(
    case: ProviderCase, llmock: LLMock, fault: str, error: type[ProviderError], category: str
) -> None:
    llmock.queue({"type": "stream_fault", "kind": fault, "after_chunks": 5})
    llmock.queue({"type": "reply", "text": "Paris is the capital city of France, on the Seine."})
    kinds: list[str] = []

    with pytest.raises(error) as raised:
        async for record in AgentBuilder(_model(case, llmock)).build().run_stream("hi"):
            kinds.append(record.kind)

    assert "text_delta" in kinds  # part of the answer was seen: no silent retry
    assert raised.value.category == category
    assert len(_served(llmock)) == 1


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
async def test_a_length_finish_is_output_truncated_and_no_tool_runs(
    case: ProviderCase, llmock: LLMock, streamed: bool
) -> None:
    truncated = _calls("Paris") | {"finish_reason": "length"}
    llmock.queue(truncated)
    calls: list[dict[str, Any]] = []
    agent = AgentBuilder(_model(case, llmock)).tool(_weather(calls)).build()

    with pytest.raises(OutputTruncated) as raised:
        if streamed:
            async for _ in agent.run_stream("Weather?"):
                pass
        else:
            await agent.run("Weather?")

    assert calls == []
    assert raised.value.category == "output_truncated"


async def test_malformed_tool_arguments_never_reach_the_tool(
    case: ProviderCase, llmock: LLMock
) -> None:
    llmock.queue({"type": "tool_fault", "kind": "malformed_arguments"})
    calls: list[dict[str, Any]] = []
    agent = AgentBuilder(_model(case, llmock)).tool(_weather(calls)).build()

    result = await agent.run("Weather?")

    assert calls == []
    assert result.usage.requests == 2
    assert "Fix the errors and try again" in json.dumps(_served(llmock)[1]["body"])


async def test_an_error_echoing_a_header_secret_leaks_it_into_no_safe_text(
    case: ProviderCase, llmock: LLMock
) -> None:
    secret = "proxy-token-llmock-5d8e1f"
    llmock.queue({"type": "fail", "status": 400, "message": f"bad header X-Proxy-Token={secret}"})
    model = _model(case, llmock, headers={"X-Proxy-Token": secret})

    with pytest.raises(ProviderError) as raised:
        await AgentBuilder(model).build().run("hi")

    for text in (str(raised.value), repr(raised.value), repr(raised.value.fields)):
        assert secret not in text
    assert raised.value.category == "invalid_request"


@pytest.mark.parametrize("case", [c for c in CASES if c.provider != "openai-responses"], ids=str)
async def test_one_pooled_connection_serves_every_request(
    case: ProviderCase, llmock: LLMock, monkeypatch: pytest.MonkeyPatch
) -> None:
    llmock.queue({"type": "reply", "text": "ok", "times": 4})
    connects: list[Any] = []
    real_connect = socket.socket.connect

    def counting_connect(self: socket.socket, address: Any) -> None:
        if address[1] == llmock.port:
            connects.append(address)
        real_connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", counting_connect)
    model = _model(case, llmock)
    agent = AgentBuilder(model).build()

    for _ in range(3):
        assert (await agent.run("hi")).output == "ok"

    assert len(connects) == 1
    await model.aclose()
    await model.aclose()  # idempotent
    model.close()
    assert (await agent.run("hi")).output == "ok"  # a closed model opens a new client
    await model.aclose()
    assert len(connects) == 2
