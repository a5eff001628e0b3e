"""Run steering reaches the model at the next turn boundary and stays in the history."""

from __future__ import annotations

from collections.abc import Sequence

from subagents import (
    FunctionModel,
    ModelMessage,
    ModelRequest,
    ModelRequestParameters,
    ToolReturnPart,
    UserPromptPart,
)
from subagents._host._steering import STEERING_PREFIX, SteeredModel


def user_texts(message: ModelMessage) -> list[str]:
    assert isinstance(message, ModelRequest)
    return [p.content for p in message.parts if isinstance(p, UserPromptPart)]


async def test_steering_joins_the_latest_request_and_stays() -> None:
    seen: list[list[ModelMessage]] = []

    def record(messages: Sequence[ModelMessage], params: ModelRequestParameters) -> str:
        seen.append(list(messages))
        return "ok"

    queue: list[str] = []
    delivered: list[int] = []

    def drain() -> list[str]:
        out = list(queue)
        queue.clear()
        return out

    model = SteeredModel(FunctionModel(record, name="inner"), drain, delivered.append)
    assert model.name == "inner"
    params = ModelRequestParameters()
    first = [ModelRequest(parts=(UserPromptPart(content="plan"),))]
    await model.request(first, params)
    assert user_texts(seen[0][0]) == ["plan"]  # nothing queued: unchanged
    queue.append("focus on tests")
    second = [
        *first,
        ModelRequest(parts=(ToolReturnPart(tool_name="t", tool_call_id="c1", content="r"),)),
    ]
    await model.request(second, params)
    assert user_texts(seen[1][1]) == [STEERING_PREFIX + "focus on tests"]
    assert isinstance(seen[1][1].parts[0], ToolReturnPart)  # tool returns come first
    assert delivered == [1]
    third = [*second, ModelRequest(parts=(UserPromptPart(content="next"),))]
    await model.request(third, params)
    assert user_texts(seen[2][1]) == [STEERING_PREFIX + "focus on tests"]  # still there
    assert user_texts(seen[2][2]) == ["next"]
    assert delivered == [1]  # delivered once
    assert second[1].parts == (ToolReturnPart(tool_name="t", tool_call_id="c1", content="r"),)
