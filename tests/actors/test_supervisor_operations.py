"""The supervisor: admission, ids, isolation, steering, cancellation, wait and info."""

from __future__ import annotations

import asyncio
import re
import threading
from typing import Any

import pytest
from actor_helpers import (
    FAST,
    Collector,
    SupervisorFactory,
    our_actors,
    our_threads,
    wait_terminal,
)

from actors import (
    BackgroundSubagentError,
    BackgroundSubagentSupervisor,
    ChildControl,
    ChildOutcome,
    ChildRequest,
    SupervisorLimits,
)
from actors._supervisor import clamp_wait
from properties import Gate
from statemachines import SubagentsError


def echo_runner(gates: dict[str, Gate] | None = None) -> Any:
    async def run(request: ChildRequest, control: ChildControl) -> ChildOutcome:
        control.report_progress("running")
        if gates is not None and request.prompt in gates:
            await gates[request.prompt].wait()
        return ChildOutcome.completed(
            f"{request.subagent_name}:{request.prompt}",
            context_delta={"prompt": request.prompt},
            usage={"requests": 1},
        )

    return run


def test_generated_ids_follow_the_spec_formats(make_supervisor: SupervisorFactory) -> None:
    supervisor = make_supervisor(runner=echo_runner())
    accepted = supervisor.delegate_sync("research", "collect facts")
    assert accepted.status == "accepted"
    assert re.fullmatch(r"research-bg-[0-9a-f]{8}", accepted.agent_id)
    assert re.fullmatch(
        r"subattempt_[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}",
        accepted.attempt_id,
    )
    assert "Do not poll" in accepted.message
    assert accepted.to_value()["attempt_id"] == accepted.attempt_id


def test_attempts_are_isolated_and_an_active_agent_id_conflicts(
    make_supervisor: SupervisorFactory,
) -> None:
    gates = {"slow": Gate()}
    supervisor = make_supervisor(runner=echo_runner(gates))
    slow = supervisor.delegate_sync("research", "slow")
    fast = supervisor.delegate_sync("research", "fast")
    assert slow.attempt_id != fast.attempt_id and slow.agent_id != fast.agent_id

    done = supervisor.wait_sync(fast.attempt_id, 10)
    assert (done.status, done.result) == ("completed", "research:fast")
    assert supervisor.wait_sync(slow.attempt_id, 0).timed_out

    with pytest.raises(BackgroundSubagentError.ActiveConversation):
        supervisor.delegate_sync("research", "again", agent_id=slow.agent_id)
    with pytest.raises(BackgroundSubagentError.NotFound):
        supervisor.delegate_sync("research", "x", agent_id="research-bg-00000000")
    with pytest.raises(BackgroundSubagentError.NotFound):
        supervisor.delegate_sync("writer", "x", agent_id=fast.agent_id)

    continued = supervisor.delegate_sync("research", "later", agent_id=fast.agent_id)
    assert continued.status == "continued"
    assert continued.agent_id == fast.agent_id
    assert continued.attempt_id not in (fast.attempt_id, slow.attempt_id)

    gates["slow"].open()
    assert supervisor.wait_sync(slow.attempt_id, 10).result == "research:slow"
    assert supervisor.wait_sync(continued.attempt_id, 10).result == "research:later"


def test_the_child_receives_its_request(make_supervisor: SupervisorFactory) -> None:
    seen: list[ChildRequest] = []

    async def run(request: ChildRequest, control: ChildControl) -> ChildOutcome:
        seen.append(request)
        return ChildOutcome.completed("ok")

    supervisor = make_supervisor(runner=run)
    accepted = supervisor.delegate_sync(
        "research", "p", linked_task_id="task-1", metadata={"k": "v"}
    )
    supervisor.wait_sync(accepted.attempt_id, 10)
    (request,) = seen
    assert (request.attempt_id, request.agent_id) == (accepted.attempt_id, accepted.agent_id)
    assert (request.linked_task_id, request.metadata, request.continued) == (
        "task-1",
        {"k": "v"},
        False,
    )


def test_admission_limits_refuse_large_prompts_and_too_many_active_attempts(
    make_supervisor: SupervisorFactory,
) -> None:
    gate = Gate()
    limits = SupervisorLimits(
        heartbeat_interval=0.01, retry_interval=0.002, max_active_attempts=2, max_prompt_bytes=8
    )
    supervisor = make_supervisor(runner=echo_runner({"a": gate, "b": gate}), limits=limits)
    with pytest.raises(BackgroundSubagentError.PromptTooLarge) as too_large:
        supervisor.delegate_sync("research", "é" * 5)
    assert too_large.value.size_bytes == 10
    first = supervisor.delegate_sync("research", "a")
    supervisor.delegate_sync("research", "b")
    with pytest.raises(BackgroundSubagentError.QuotaExceeded):
        supervisor.delegate_sync("research", "c")
    gate.open()
    supervisor.wait_sync(first.attempt_id, 10)
    assert supervisor.delegate_sync("research", "c").status == "accepted"


def test_undelivered_results_apply_backpressure_until_delivered(
    make_supervisor: SupervisorFactory,
) -> None:
    limits = SupervisorLimits(
        heartbeat_interval=0.01, retry_interval=0.002, max_undelivered_results=2
    )
    collector = Collector()
    supervisor = make_supervisor(runner=echo_runner(), limits=limits)
    ids = [supervisor.delegate_sync("research", p).attempt_id for p in ("a", "b")]
    for attempt_id in ids:
        # Not claiming: a zero wait on a terminal attempt would deliver it, so watch info.
        wait_terminal(supervisor, attempt_id)
    with pytest.raises(BackgroundSubagentError.QuotaExceeded) as refused:
        supervisor.delegate_sync("research", "c")
    assert refused.value.undelivered == 2
    delivered = supervisor.take_pending_sync()
    assert sorted(r.output or "" for r in delivered) == ["research:a", "research:b"]
    assert collector.results == []
    assert supervisor.delegate_sync("research", "c").status == "accepted"


def test_steering_is_idempotent_and_bounded(make_supervisor: SupervisorFactory) -> None:
    gate = Gate()
    drained: list[list[str]] = []

    async def run(request: ChildRequest, control: ChildControl) -> ChildOutcome:
        await gate.wait()
        drained.append(control.steering())
        drained.append(control.steering())
        return ChildOutcome.completed("ok")

    limits = SupervisorLimits(
        heartbeat_interval=0.01,
        retry_interval=0.002,
        max_queued_steering=2,
        max_steering_bytes=16,
    )
    supervisor = make_supervisor(runner=run, limits=limits)
    attempt = supervisor.delegate_sync("research", "p").attempt_id

    first = supervisor.steer_sync(attempt, "focus", steering_id="s1")
    assert first.status == "queued"
    assert supervisor.steer_sync(attempt, "focus", steering_id="s1") == first
    with pytest.raises(BackgroundSubagentError.IdempotencyConflict):
        supervisor.steer_sync(attempt, "other", steering_id="s1")
    with pytest.raises(BackgroundSubagentError.SteeringTooLarge):
        supervisor.steer_sync(attempt, "x" * 17)
    second = supervisor.steer_sync(attempt, "more")
    assert second.steering_id != first.steering_id
    with pytest.raises(BackgroundSubagentError.SteeringQueueFull):
        supervisor.steer_sync(attempt, "overflow")
    with pytest.raises(BackgroundSubagentError.NotFound):
        supervisor.steer_sync("subattempt_unknown", "x")

    gate.open()
    assert supervisor.wait_sync(attempt, 10).status == "completed"
    assert drained == [["focus", "more"], []]
    with pytest.raises(BackgroundSubagentError.Terminal):
        supervisor.steer_sync(attempt, "late")


def test_cancellation_is_idempotent_and_keeps_the_first_reason(
    make_supervisor: SupervisorFactory,
) -> None:
    async def run(request: ChildRequest, control: ChildControl) -> ChildOutcome:
        await control.wait_cancelled()
        return ChildOutcome.completed("ignored: cancellation wins")

    supervisor = make_supervisor(runner=run)
    attempt = supervisor.delegate_sync("research", "p").attempt_id
    first = supervisor.cancel_sync(attempt, "not needed", cancellation_id="c1")
    assert (first.status, first.reason) == ("cancellation_requested", "not needed")
    again = supervisor.cancel_sync(attempt, "not needed", cancellation_id="c1")
    assert again.cancellation_id == "c1" and again.reason == "not needed"
    with pytest.raises(BackgroundSubagentError.IdempotencyConflict):
        supervisor.cancel_sync(attempt, "changed my mind", cancellation_id="c1")
    with pytest.raises(BackgroundSubagentError.CancellationReasonTooLarge):
        supervisor.cancel_sync(attempt, "x" * 5000)

    waited = supervisor.wait_sync(attempt, 10)
    assert (waited.status, waited.failure_category, waited.cancellation_reason) == (
        "cancelled",
        "cancelled",
        "not needed",
    )
    late = supervisor.cancel_sync(attempt, "another reason", cancellation_id="c2")
    assert (late.status, late.reason) == ("cancelled", "not needed")
    with pytest.raises(BackgroundSubagentError.IdempotencyConflict):
        supervisor.cancel_sync(attempt, "changed my mind", cancellation_id="c1")
    assert supervisor.cancel_sync(attempt, "not needed", cancellation_id="c1").status == (
        "cancelled"
    )


def test_a_cancel_after_the_child_finished_observes_the_terminal_status(
    make_supervisor: SupervisorFactory,
) -> None:
    collector = Collector()
    supervisor = make_supervisor(runner=echo_runner(), on_complete=collector)
    attempt = supervisor.delegate_sync("research", "p").attempt_id
    assert collector.event.wait(10)
    result = supervisor.cancel_sync(attempt, "too late")
    assert (result.status, result.reason) == ("completed", None)


def test_a_child_that_ignores_cancellation_is_aborted_after_the_grace(
    make_supervisor: SupervisorFactory,
) -> None:
    aborted = threading.Event()
    started = threading.Event()

    async def stubborn(request: ChildRequest, control: ChildControl) -> ChildOutcome:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            aborted.set()
            raise
        raise AssertionError("unreachable")

    supervisor = make_supervisor(runner=stubborn)
    attempt = supervisor.delegate_sync("research", "p").attempt_id
    assert started.wait(10)
    supervisor.cancel_sync(attempt, "stop")
    waited = supervisor.wait_sync(attempt, 10)
    assert aborted.is_set()
    assert (waited.status, waited.cancellation_reason) == ("cancelled", "stop")


def test_a_raising_child_and_an_invalid_outcome_become_failed_evidence(
    make_supervisor: SupervisorFactory,
) -> None:
    async def raising(request: ChildRequest, control: ChildControl) -> ChildOutcome:
        raise ValueError("secret internals")

    async def invalid(request: ChildRequest, control: ChildControl) -> Any:
        return 42

    supervisor = make_supervisor(runner=raising)
    failed = supervisor.wait_sync(supervisor.delegate_sync("research", "p").attempt_id, 10)
    assert (failed.status, failed.failure_category) == ("failed", "execution_error")
    assert failed.error == "Background subagent raised ValueError"
    bad = supervisor.delegate_sync("research", "p", runner=invalid)
    failed = supervisor.wait_sync(bad.attempt_id, 10)
    assert failed.status == "failed" and "invalid outcome" in (failed.error or "")


def test_a_failed_outcome_keeps_its_public_error(make_supervisor: SupervisorFactory) -> None:
    async def run(request: ChildRequest, control: ChildControl) -> ChildOutcome:
        return ChildOutcome.failed("model unavailable")

    supervisor = make_supervisor(runner=run)
    waited = supervisor.wait_sync(supervisor.delegate_sync("r", "p").attempt_id, 10)
    assert (waited.status, waited.error, waited.result) == ("failed", "model unavailable", None)


def test_wait_clamps_its_timeout_and_reports_unknown_and_running_attempts(
    make_supervisor: SupervisorFactory,
) -> None:
    assert [clamp_wait(v) for v in (-1, 0, 12.5, 301, float("nan"), float("inf"), None)] == [
        0.0,
        0.0,
        12.5,
        300.0,
        300.0,
        300.0,
        300.0,
    ]
    gate = Gate()
    supervisor = make_supervisor(runner=echo_runner({"p": gate}))
    attempt = supervisor.delegate_sync("research", "p").attempt_id
    missing = supervisor.wait_sync("subattempt_nope", 0)
    assert (missing.status, missing.known_attempt_ids) == ("not_found", [attempt])
    running = supervisor.wait_sync(attempt, -5)
    assert running.timed_out and running.status in ("accepted", "starting", "running")
    gate.open()
    assert supervisor.wait_sync(attempt, float("nan")).status == "completed"


def test_wait_without_an_attempt_summarizes_all(make_supervisor: SupervisorFactory) -> None:
    gate = Gate()
    supervisor = make_supervisor(runner=echo_runner({"slow": gate}))
    slow = supervisor.delegate_sync("research", "slow").attempt_id
    fast = supervisor.delegate_sync("research", "fast").attempt_id
    summary = supervisor.wait_sync(None, 10)
    assert summary.status == "summary"
    by_id = {a.attempt_id: a for a in summary.attempts or []}
    assert by_id[fast].execution_status == "completed"
    assert by_id[fast].phase == "terminal"
    assert by_id[slow].phase in ("accepted", "running")
    gate.open()


def test_info_lists_active_attempts_and_retained_results(
    make_supervisor: SupervisorFactory,
) -> None:
    gate = Gate()
    supervisor = make_supervisor(runner=echo_runner({"slow": gate}))
    slow = supervisor.delegate_sync("research", "slow").attempt_id
    fast = supervisor.delegate_sync("research", "fast").attempt_id
    wait_terminal(supervisor, fast)
    info = supervisor.info_sync()
    assert [a.attempt_id for a in info.active] == [slow]
    assert [a.attempt_id for a in info.retained] == [fast]
    assert info.to_value()["retained"][0]["delivery_status"] == "undelivered"
    gate.open()
    supervisor.wait_sync(slow, 10)
    supervisor.take_pending_sync()
    assert supervisor.info_sync().to_value() == {"active": [], "retained": []}


def test_an_oversized_output_is_committed_as_an_artifact_with_a_bounded_preview(
    make_supervisor: SupervisorFactory,
) -> None:
    big = "ü" * 100  # 200 bytes

    async def run(request: ChildRequest, control: ChildControl) -> ChildOutcome:
        return ChildOutcome.completed(big)

    limits = SupervisorLimits(
        heartbeat_interval=0.01, retry_interval=0.002, inline_preview_bytes=33
    )
    supervisor = make_supervisor(runner=run, limits=limits)
    attempt = supervisor.delegate_sync("research", "p").attempt_id
    wait_terminal(supervisor, attempt)
    record = supervisor.store.load_attempt(attempt)
    ref = record.result_ref
    assert ref is not None and record.retention_status == "artifact"
    assert ref.content == "ü" * 16 and ref.size_bytes == 200
    assert supervisor.store.load_artifact(ref.artifact_ref or "").content == big
    assert supervisor.wait_sync(attempt, 1).result == big


def test_errors_are_variants_reachable_from_the_base() -> None:
    for name in (
        "Closing",
        "QuotaExceeded",
        "ActiveConversation",
        "NotFound",
        "Terminal",
        "PromptTooLarge",
        "SteeringTooLarge",
        "SteeringQueueFull",
        "CancellationReasonTooLarge",
        "IdempotencyConflict",
        "DeliveryClaimed",
        "Delivered",
        "Durability",
        "ShutdownDeadline",
    ):
        variant = getattr(BackgroundSubagentError, name)
        assert issubclass(variant, BackgroundSubagentError)
        assert issubclass(variant, SubagentsError)
        assert variant.__qualname__ == f"BackgroundSubagentError.{name}"
        error = variant("m", attempt_id="a")
        assert error.attempt_id == "a"


def test_the_spec_async_example_runs_as_written() -> None:
    async def main() -> None:
        supervisor = BackgroundSubagentSupervisor()
        assert BackgroundSubagentSupervisor.new() is not supervisor
        await supervisor.shutdown_checked(1.0)

    asyncio.run(main())
    assert our_actors() == [] and our_threads() == []


async def test_the_async_api_delegates_steers_and_waits_without_blocking_the_loop(
    make_supervisor: SupervisorFactory,
) -> None:
    gate = Gate()
    steered: list[str] = []

    async def run(request: ChildRequest, control: ChildControl) -> ChildOutcome:
        await gate.wait()
        steered.extend(control.steering())
        return ChildOutcome.completed("done")

    supervisor = make_supervisor(runner=run, limits=FAST)
    accepted = await supervisor.delegate("research", "p")
    receipt = await supervisor.steer(accepted.attempt_id, "hint")
    assert receipt.status == "queued"
    running = await supervisor.wait(accepted.attempt_id, 0)
    assert running.timed_out
    gate.open()
    waited = await supervisor.wait(accepted.attempt_id, 10)
    assert (waited.status, waited.result, steered) == ("completed", "done", ["hint"])
    assert (await supervisor.cancel(accepted.attempt_id)).status == "completed"
    assert (await supervisor.info()).active == []
    assert await supervisor.take_pending() == []
    await supervisor.shutdown_checked(5.0)


def test_children_run_on_a_host_loop_that_shutdown_leaves_running(
    make_supervisor: SupervisorFactory,
) -> None:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="host-loop")
    thread.start()
    try:
        ran_on: list[asyncio.AbstractEventLoop] = []

        async def run(request: ChildRequest, control: ChildControl) -> ChildOutcome:
            ran_on.append(asyncio.get_running_loop())
            return ChildOutcome.completed("ok")

        supervisor = make_supervisor(runner=run, loop=loop)
        supervisor.wait_sync(supervisor.delegate_sync("research", "p").attempt_id, 10)
        supervisor.shutdown_checked_sync(5)
        assert ran_on == [loop]
        assert loop.is_running()
        assert our_threads() == []
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


def test_a_summary_wait_with_nothing_active_returns_at_once(
    make_supervisor: SupervisorFactory,
) -> None:
    supervisor = make_supervisor(runner=echo_runner())
    summary = supervisor.wait_sync(None, 300)
    assert (summary.status, summary.timed_out, summary.attempts) == ("summary", False, [])
