"""The scripted parent of the crash runs: it delegates, may wait once, then carries on."""

from __future__ import annotations

from properties.reliability._crash_host import WAIT_EVERY, WAIT_SECONDS, _wait, planner
from properties.reliability._scripted import scripted_planner
from subagents import (
    ModelRequest,
    ModelRequestParameters,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

PARAMS = ModelRequestParameters()


def _returns(*parts: ToolReturnPart, prompt: str) -> list[ModelRequest]:
    return [
        ModelRequest(parts=(UserPromptPart(content=prompt),)),
        ModelRequest(parts=parts),
    ]


def _delegated(attempt_id: str, call: str = "call-0") -> ToolReturnPart:
    return ToolReturnPart(
        tool_name="delegate",
        content={"status": "accepted", "attempt_id": attempt_id},
        tool_call_id=call,
    )


def _only(response: ModelResponse) -> object:
    assert len(response.parts) == 1
    return response.parts[0]


def test_a_waiting_parent_waits_once_on_its_first_accepted_attempt() -> None:
    parent = scripted_planner(wait=lambda prompt: 0.5 if prompt == "wait please" else None)
    call = _only(
        parent(
            _returns(_delegated("a-1"), _delegated("a-2", "call-1"), prompt="wait please"), PARAMS
        )
    )
    assert isinstance(call, ToolCallPart)
    assert call.tool_name == "wait_subagent"
    assert call.args == {"attempt_id": "a-1", "timeout_seconds": 0.5}
    # Once the wait returned, it carries on (one wait, never a polling loop).
    waited = ToolReturnPart(
        tool_name="wait_subagent", content={"status": "completed"}, tool_call_id="call-wait"
    )
    answer = _only(parent(_returns(waited, prompt="wait please"), PARAMS))
    assert isinstance(answer, TextPart) and answer.content == "delegated; carrying on"


def test_a_parent_that_does_not_wait_carries_on_at_once() -> None:
    parent = scripted_planner(wait=lambda prompt: None)
    answer = _only(parent(_returns(_delegated("a-1"), prompt="plan x k=1"), PARAMS))
    assert isinstance(answer, TextPart)
    # Without wait at all (the host tests' parent): the same.
    answer = _only(scripted_planner()(_returns(_delegated("a-1"), prompt="p"), PARAMS))
    assert isinstance(answer, TextPart)


def test_nothing_accepted_means_nothing_to_wait_for() -> None:
    parent = scripted_planner(wait=lambda prompt: 0.5)
    refused = ToolReturnPart(tool_name="delegate", content="refused", tool_call_id="call-0")
    answer = _only(parent(_returns(refused, prompt="p"), PARAMS))
    assert isinstance(answer, TextPart)


def test_one_crash_run_in_wait_every_waits() -> None:
    keys = [f"k{n}" for n in range(400)]
    waiting = [key for key in keys if _wait(f"plan {key} k=2") is not None]
    assert {_wait(f"plan {key} k=2") for key in waiting} == {WAIT_SECONDS}
    assert len(keys) / WAIT_EVERY / 2 < len(waiting) < 2 * len(keys) / WAIT_EVERY
    assert _wait("collect facts") is None
    call = _only(planner(_returns(_delegated("a-1"), prompt=f"plan {waiting[0]} k=2"), PARAMS))
    assert isinstance(call, ToolCallPart) and call.tool_name == "wait_subagent"
