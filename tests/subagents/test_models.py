"""The Model protocol, message records, TestModel and FunctionModel."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import msgspec
import pytest

from subagents import (
    AgentBuilder,
    FunctionModel,
    ModelError,
    ModelMessage,
    ModelRequest,
    ModelRequestParameters,
    ModelResponse,
    RequestUsage,
    RetryPromptPart,
    TestModel,
    TextDelta,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

PARAMS = ModelRequestParameters()


def _prompt(text: str) -> list[ModelMessage]:
    return [ModelRequest(parts=(UserPromptPart(content=text),))]


async def test_a_scripted_test_model_counts_turns_from_the_latest_prompt() -> None:
    model = TestModel([TestModel.tool_call("t", {}), "done"])
    first = await model.request(_prompt("a"), PARAMS)
    history: list[ModelMessage] = [*_prompt("a"), first]

    second = await model.request(history, PARAMS)
    again = await model.request([*history, second, *_prompt("b")], PARAMS)

    assert first.tool_calls()[0].tool_call_id == "call_0_0"
    assert second.text() == "done"
    assert again == first


async def test_one_test_model_serves_concurrent_runs() -> None:
    model = TestModel.with_tool_calls([("echo", {"v": 1})], then="ok")
    agent = AgentBuilder(model).build()

    results = await asyncio.gather(*(agent.run(str(i)) for i in range(5)))

    assert [r.output for r in results] == ["ok"] * 5


async def test_the_test_model_reports_deterministic_usage() -> None:
    response = await TestModel.with_text("three little words").request(_prompt("x"), PARAMS)

    assert response.usage == RequestUsage(input_tokens=10, output_tokens=3)
    assert response.model_name == "test"


async def test_the_default_stream_yields_the_text_then_the_response() -> None:
    model = TestModel.with_text("hi")

    events = [e async for e in model.request_stream(_prompt("x"), PARAMS)]

    assert events[0] == TextDelta(content="hi")
    assert isinstance(events[1], ModelResponse)


async def test_an_exhausted_script_raises_model_error() -> None:
    model = TestModel(["only"])

    with pytest.raises(ModelError, match="exhausted"):
        await model.request([*_prompt("x"), await model.request(_prompt("x"), PARAMS)], PARAMS)


async def test_a_function_model_accepts_sync_and_async_functions() -> None:
    async def later(messages: Sequence[ModelMessage], params: ModelRequestParameters) -> str:
        return "async"

    sync = FunctionModel(lambda messages, params: "sync")

    assert (await sync.request(_prompt("x"), PARAMS)).text() == "sync"
    assert (await FunctionModel(later).request(_prompt("x"), PARAMS)).text() == "async"


async def test_a_function_model_returning_garbage_raises_model_error() -> None:
    model = FunctionModel(lambda messages, params: 42, name="odd")  # type: ignore[arg-type,return-value]

    with pytest.raises(ModelError, match="expected ModelResponse or str"):
        await model.request(_prompt("x"), PARAMS)


def test_messages_round_trip_through_values_as_a_tagged_union() -> None:
    messages: list[ModelMessage] = [
        ModelRequest(parts=(UserPromptPart(content="hi"),)),
        ModelResponse(
            parts=(TextPart(content="t"), ToolCallPart(tool_name="x", args="{}", tool_call_id="1")),
            usage=RequestUsage(input_tokens=1, output_tokens=2),
        ),
        ModelRequest(
            parts=(
                ToolReturnPart(tool_name="x", content={"a": 1}, tool_call_id="1"),
                RetryPromptPart(content="again"),
            )
        ),
    ]

    values = [m.to_value() for m in messages]
    decoded = msgspec.convert(values, list[ModelRequest | ModelResponse])

    assert decoded == messages
    assert values[0]["message_kind"] == "request"
    assert values[1]["parts"][1]["part_kind"] == "tool_call"


def test_message_records_are_frozen() -> None:
    part = TextPart(content="x")

    with pytest.raises(AttributeError):
        part.content = "y"  # type: ignore[misc]
