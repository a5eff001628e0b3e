"""What a wait answers (unknown, zero-timeout, delivered with its context delta,
cancelled with what the child consumed) and the profile delegate records. Each test
failed before its fix."""

from __future__ import annotations

import asyncio
import time

import pytest
from actor_helpers import SupervisorFactory, wait_terminal

from actors import (
    BackgroundSubagentSupervisor,
    ChildControl,
    ChildOutcome,
    ChildRequest,
    SupervisorLimits,
    WaitResult,
)
from storage import SessionStore


async def quick_runner(request: ChildRequest, control: ChildControl) -> ChildOutcome:
    return ChildOutcome.completed(
        f"out:{request.prompt}", context_delta={"history": [request.prompt]}, usage={"tokens": 3}
    )


def test_wait_on_an_unknown_attempt_answers_not_found_at_once(
    make_supervisor: SupervisorFactory,
) -> None:
    supervisor = make_supervisor(runner=quick_runner)
    start = time.monotonic()
    waited = supervisor.wait_sync("subattempt_nope", 30)
    assert waited.status == "not_found"
    assert waited.attempt_id == "subattempt_nope"
    assert waited.known_attempt_ids == []
    assert time.monotonic() - start < 5.0  # not the 30 s timeout

    async def main() -> None:
        begun = time.monotonic()
        result = await supervisor.wait("subattempt_nope", 30)
        assert result.status == "not_found"
        assert time.monotonic() - begun < 5.0

    asyncio.run(main())


def _two_ended_attempts(supervisor: BackgroundSubagentSupervisor) -> tuple[str, str]:
    first = supervisor.delegate_sync("research", "a").attempt_id
    second = supervisor.delegate_sync("research", "b").attempt_id
    assert wait_terminal(supervisor, first) == "terminal"
    assert wait_terminal(supervisor, second) == "terminal"
    return first, second


def _zero_waits_complete(
    supervisor: BackgroundSubagentSupervisor, first: str, second: str
) -> WaitResult:
    """A zero wait, sync on ``first`` and async on ``second``, each completed, not timed out."""
    waited = supervisor.wait_sync(first, 0)
    assert (waited.status, waited.timed_out, waited.result) == ("completed", False, "out:a")

    async def main() -> None:
        result = await supervisor.wait(second, 0)
        assert (result.status, result.timed_out, result.result) == ("completed", False, "out:b")

    asyncio.run(main())
    return waited


def test_a_zero_wait_on_an_ended_attempt_returns_its_terminal_result(
    make_supervisor: SupervisorFactory,
) -> None:
    supervisor = make_supervisor(runner=quick_runner)
    first, second = _two_ended_attempts(supervisor)
    assert _zero_waits_complete(supervisor, first, second).delivery_status == "delivered"


def test_a_zero_wait_that_learns_of_the_end_from_the_supervisor_actor_is_not_timed_out(
    make_supervisor: SupervisorFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The end announced between the fast view check and the watch (forced here: no
    view, so the supervisor actor answers)."""
    supervisor = make_supervisor(runner=quick_runner)
    first, second = _two_ended_attempts(supervisor)
    # On the class: the supervisor is slotted (no instance attribute to shadow it).
    monkeypatch.setattr(type(supervisor), "_view", lambda self, attempt_id: None)
    _zero_waits_complete(supervisor, first, second)


def test_a_result_delivered_by_wait_carries_its_context_delta_outside_the_tool_value(
    make_supervisor: SupervisorFactory,
) -> None:
    supervisor = make_supervisor(runner=quick_runner)
    first = supervisor.delegate_sync("research", "a").attempt_id
    second = supervisor.delegate_sync("research", "b").attempt_id

    waited = supervisor.wait_sync(first, 10)
    assert (waited.status, waited.delivery_status) == ("completed", "delivered")
    assert waited.context_delta == {"history": ["a"]}
    value = waited.to_value()
    assert "context_delta" not in value
    assert value["result"] == "out:a"
    assert WaitResult.from_value(value).context_delta is None

    # Delivered once: a second wait sees it owned elsewhere, without the delta.
    again = supervisor.wait_sync(first, 0)
    assert again.owned_elsewhere and again.context_delta is None

    async def main() -> None:
        result = await supervisor.wait(second, 10)
        assert result.status == "completed"
        assert result.context_delta == {"history": ["b"]}
        assert "context_delta" not in result.to_value()

    asyncio.run(main())


def test_a_cancelled_attempt_keeps_the_delta_and_usage_its_child_returned(
    make_supervisor: SupervisorFactory,
) -> None:
    async def cooperative(request: ChildRequest, control: ChildControl) -> ChildOutcome:
        control.report_child_run_id(f"child-{request.prompt}")
        await control.wait_cancelled()
        return ChildOutcome.completed(
            "partial",
            context_delta={"history": [request.prompt, "stopped"]},
            usage={"tokens": 5},
            child_run_id=f"child-{request.prompt}",
        )

    supervisor = make_supervisor(
        runner=cooperative, limits=SupervisorLimits(heartbeat_interval=0.01, cancellation_grace=30)
    )
    first = supervisor.delegate_sync("research", "a").attempt_id
    second = supervisor.delegate_sync("research", "b").attempt_id
    for attempt_id in (first, second):
        assert supervisor.cancel_sync(attempt_id, "enough").status == "cancellation_requested"

    waited = supervisor.wait_sync(first, 10)
    assert (waited.status, waited.cancellation_reason) == ("cancelled", "enough")
    assert waited.context_delta == {"history": ["a", "stopped"]}

    assert wait_terminal(supervisor, second) == "terminal"
    [result] = supervisor.take_pending_sync()
    assert (result.status, result.cancellation_reason) == ("cancelled", "enough")
    assert result.output is None
    assert result.context_delta == {"history": ["b", "stopped"]}
    assert result.usage == {"tokens": 5}
    assert result.child_run_id == "child-b"


def test_delegate_writes_its_profile_into_the_durable_attempt_record(
    store: SessionStore, make_supervisor: SupervisorFactory
) -> None:
    # ``store`` first: the supervisors shut down before the store closes.
    supervisor = make_supervisor(runner=quick_runner, store=store)
    with_profile = supervisor.delegate_sync("research", "a", profile="analyst")
    without = supervisor.delegate_sync("research", "b")

    async def main() -> str:
        accepted = await supervisor.delegate(
            "research", "c", agent_id=with_profile.agent_id, profile="analyst-2"
        )
        return accepted.attempt_id

    assert wait_terminal(supervisor, with_profile.attempt_id) == "terminal"
    continued = asyncio.run(main())
    assert store.load_attempt(with_profile.attempt_id).profile == "analyst"
    assert store.load_attempt(without.attempt_id).profile == ""
    assert store.load_attempt(continued).profile == "analyst-2"
    assert "profile" not in with_profile.to_value()
