"""Durable mode on the memory and LMDB stores: persist first, retry transient failures,
replay lost commits, and abandon an attempt only after owner loss is confirmed."""

from __future__ import annotations

import asyncio
import threading

import pytest
from actor_helpers import Collector, SupervisorFactory, wait_terminal

from actors import (
    BackgroundSubagentError,
    ChildControl,
    ChildOutcome,
    ChildRequest,
    OwnerIdentity,
    SupervisorLimits,
)
from properties import Fault, FaultyStore, Gate
from storage import ManualClock, RetryableStorage, SessionStore, StaleFence


async def reporting_runner(request: ChildRequest, control: ChildControl) -> ChildOutcome:
    control.report_child_run_id(f"run-{request.prompt}")
    control.report_progress("running")
    control.report_progress("waiting")
    control.report_progress("running")
    return ChildOutcome.completed(f"out:{request.prompt}")


def test_an_attempt_commits_acceptance_and_terminal_its_steps_riding_the_terminal_commit(
    faulty: FaultyStore, make_supervisor: SupervisorFactory
) -> None:
    # No heartbeat tick falls inside the attempt: what the child reached (starting,
    # its run id, running, waiting, running) is persisted by the terminal commit.
    slow_beat = SupervisorLimits(heartbeat_interval=5.0, retry_interval=0.002)
    supervisor = make_supervisor(runner=reporting_runner, store=faulty, limits=slow_beat)
    attempt = supervisor.delegate_sync("research", "p").attempt_id
    assert wait_terminal(supervisor, attempt) == "terminal"
    record = faulty.load_attempt(attempt)
    assert record.execution_status == "completed"
    assert record.owner_lease.host_instance_id == "host-a"
    assert record.child_run_id == "run-p"
    assert record.terminal_fingerprint is not None
    assert faulty.calls["update_attempt_execution"] == 0
    assert faulty.calls["heartbeat_attempt"] == 0
    assert faulty.calls["accept_attempt"] == 1
    assert faulty.calls["commit_terminal"] == 1


def test_progress_is_persisted_at_the_next_heartbeat_tick(
    faulty: FaultyStore, make_supervisor: SupervisorFactory
) -> None:
    gate = Gate()

    async def run(request: ChildRequest, control: ChildControl) -> ChildOutcome:
        control.report_child_run_id("run-held")
        control.report_progress("running")
        await gate.wait()
        return ChildOutcome.completed("ok")

    persisted = threading.Event()
    original = faulty._invoke

    def spy(op: str, *args: object, **kwargs: object) -> object:
        result = original(op, *args, **kwargs)
        if op == "advance_attempt" and getattr(result, "execution_status", "") == "running":
            persisted.set()
        return result

    faulty._invoke = spy  # type: ignore[method-assign]
    supervisor = make_supervisor(runner=run, store=faulty)
    attempt = supervisor.delegate_sync("research", "p").attempt_id
    assert persisted.wait(10)
    record = faulty.load_attempt(attempt)
    assert (record.execution_status, record.child_run_id) == ("running", "run-held")
    # accepted -> starting -> running rides the lease renewal: one store call (one
    # transaction), every edge of the path checked by the store.
    assert faulty.calls["advance_attempt"] == 1
    assert faulty.calls["update_attempt_execution"] == 0
    gate.open()
    assert supervisor.wait_sync(attempt, 10).status == "completed"


def test_heartbeats_extend_the_lease_while_the_child_runs(
    faulty: FaultyStore, make_supervisor: SupervisorFactory, clock: ManualClock
) -> None:
    gate = Gate()

    async def run(request: ChildRequest, control: ChildControl) -> ChildOutcome:
        await gate.wait()
        return ChildOutcome.completed("ok")

    beats = threading.Event()
    original = faulty._invoke

    def spy(op: str, *args: object, **kwargs: object) -> object:
        result = original(op, *args, **kwargs)
        if op == "heartbeat_attempt" and clock.now() > 1_700_000_010:
            beats.set()
        return result

    faulty._invoke = spy  # type: ignore[method-assign]
    supervisor = make_supervisor(runner=run, store=faulty)
    attempt = supervisor.delegate_sync("research", "p").attempt_id
    accepted = faulty.load_attempt(attempt).owner_lease.lease_expires_at
    clock.advance(20)  # within the 30 s lease: a heartbeat moves it on
    assert beats.wait(10)
    assert faulty.load_attempt(attempt).owner_lease.lease_expires_at > accepted
    gate.open()
    assert supervisor.wait_sync(attempt, 10).status == "completed"


def test_a_raising_child_is_retried_through_commit_and_heartbeat_failures_and_fails_once(
    faulty: FaultyStore, make_supervisor: SupervisorFactory
) -> None:
    gate = Gate()

    async def raising(request: ChildRequest, control: ChildControl) -> ChildOutcome:
        await gate.wait()
        raise RuntimeError("boom")

    faulty.plan("heartbeat_attempt", Fault(8))
    faulty.plan("commit_terminal", Fault(5))
    collector = Collector()
    supervisor = make_supervisor(runner=raising, store=faulty, on_complete=collector)
    attempt = supervisor.delegate_sync("research", "p").attempt_id
    assert faulty.when_failed("heartbeat_attempt", 8).wait(10)
    gate.open()
    assert collector.event.wait(10)
    supervisor.shutdown_checked_sync(5)
    (result,) = collector.results
    assert (result.attempt_id, result.status, result.failure_category) == (
        attempt,
        "failed",
        "execution_error",
    )
    assert faulty.failures["commit_terminal"] == 5
    assert faulty.calls["commit_terminal"] == 6
    record = faulty.load_attempt(attempt)
    assert (record.execution_status, record.delivery_status) == ("failed", "delivered")


def test_a_lost_terminal_commit_response_is_recovered_by_exact_replay(
    faulty: FaultyStore, make_supervisor: SupervisorFactory
) -> None:
    faulty.plan("commit_terminal", Fault(1, error=lambda: ConnectionError("reset"), mode="lost"))
    collector = Collector()
    supervisor = make_supervisor(runner=reporting_runner, store=faulty, on_complete=collector)
    attempt = supervisor.delegate_sync("research", "p").attempt_id
    assert collector.event.wait(10)
    supervisor.shutdown_checked_sync(5)
    assert [r.output for r in collector.results] == ["out:p"]
    record = faulty.load_attempt(attempt)
    assert record.execution_status == "completed"
    assert faulty.failures["commit_terminal"] == 1


def test_a_stale_fence_is_checked_against_the_store_before_anything_is_abandoned(
    faulty: FaultyStore, make_supervisor: SupervisorFactory
) -> None:
    gate = Gate()

    async def run(request: ChildRequest, control: ChildControl) -> ChildOutcome:
        await gate.wait()
        return ChildOutcome.completed("still mine")

    faulty.plan("heartbeat_attempt", Fault(3, error=lambda: StaleFence("injected")))
    faulty.plan("update_attempt_execution", Fault(1, error=lambda: StaleFence("injected")))
    supervisor = make_supervisor(runner=run, store=faulty)
    attempt = supervisor.delegate_sync("research", "p").attempt_id
    assert faulty.when_failed("heartbeat_attempt", 3).wait(10)
    gate.open()
    waited = supervisor.wait_sync(attempt, 10)
    assert (waited.status, waited.result) == ("completed", "still mine")


def test_a_confirmed_owner_loss_abandons_local_state_without_a_callback(
    faulty: FaultyStore, make_supervisor: SupervisorFactory, clock: ManualClock
) -> None:
    cancelled = threading.Event()
    started = threading.Event()

    async def run(request: ChildRequest, control: ChildControl) -> ChildOutcome:
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.set()  # aborted: the new owner runs the attempt now
        raise AssertionError("unreachable")

    collector = Collector()
    supervisor = make_supervisor(runner=run, store=faulty, on_complete=collector)
    attempt = supervisor.delegate_sync("research", "p").attempt_id
    assert started.wait(10)
    # Keep our heartbeats failing transiently so the lease can expire, then hand over.
    faulty.fail_always("heartbeat_attempt", lambda: RetryableStorage("x"))
    clock.advance(31)
    faulty.inner.take_over_attempt(attempt, "host-b", 2, clock.now() + 30)
    faulty.fail_always("heartbeat_attempt", None)
    assert wait_terminal(supervisor, attempt) == "lost"
    assert cancelled.wait(10)
    waited = supervisor.wait_sync(attempt, 0)
    assert waited.owned_elsewhere and waited.status in ("accepted", "starting", "running")
    assert supervisor.info_sync().active == []
    with pytest.raises(BackgroundSubagentError.ActiveConversation):
        supervisor.delegate_sync("research", "again", agent_id=record_agent(faulty, attempt))
    record = faulty.load_attempt(attempt)
    assert record.owner_lease.host_instance_id == "host-b"
    assert record.execution_status != "cancelled"
    supervisor.shutdown_checked_sync(5)
    assert collector.results == []


def record_agent(store: FaultyStore, attempt_id: str) -> str:
    return store.load_attempt(attempt_id).agent_id


def test_a_slow_heartbeat_never_starves_completion(
    faulty: FaultyStore, make_supervisor: SupervisorFactory
) -> None:
    gate = Gate()

    async def run(request: ChildRequest, control: ChildControl) -> ChildOutcome:
        await gate.wait()
        return ChildOutcome.completed("done")

    stuck = faulty.plan("heartbeat_attempt", Fault(1, mode="block"))
    supervisor = make_supervisor(runner=run, store=faulty)
    attempt = supervisor.delegate_sync("research", "p").attempt_id
    assert stuck.entered.wait(10)
    gate.open()
    assert supervisor.wait_sync(attempt, 10).status == "completed"
    stuck.release.set()


def test_transient_progress_failures_keep_ownership_and_the_attempt_completes(
    faulty: FaultyStore, make_supervisor: SupervisorFactory
) -> None:
    gate = Gate()

    async def run(request: ChildRequest, control: ChildControl) -> ChildOutcome:
        control.report_progress("running")
        await gate.wait()
        return ChildOutcome.completed("ok")

    faulty.plan("advance_attempt", Fault(4))
    supervisor = make_supervisor(runner=run, store=faulty)
    attempt = supervisor.delegate_sync("research", "p").attempt_id
    assert faulty.when_failed("advance_attempt", 4).wait(10)
    gate.open()
    assert supervisor.wait_sync(attempt, 10).status == "completed"
    assert faulty.failures["advance_attempt"] == 4


def test_outputs_beyond_the_artifact_limits_fail_their_attempts(
    faulty: FaultyStore, make_supervisor: SupervisorFactory
) -> None:
    async def run(request: ChildRequest, control: ChildControl) -> ChildOutcome:
        return ChildOutcome.completed(request.prompt * int(request.metadata["n"]))

    limits = SupervisorLimits(
        heartbeat_interval=0.01,
        retry_interval=0.002,
        inline_preview_bytes=8,
        max_artifact_bytes=32,
        max_namespace_artifact_bytes=48,
    )
    supervisor = make_supervisor(runner=run, store=faulty, limits=limits)

    def outcome(prompt: str, n: int) -> tuple[str, str | None, str]:
        attempt = supervisor.delegate_sync("research", prompt, metadata={"n": n}).attempt_id
        supervisor.wait_sync(attempt, 10)
        record = faulty.load_attempt(attempt)
        return (str(record.execution_status), record.failure_category, str(record.retention_status))

    assert outcome("a", 30) == ("completed", None, "artifact")
    assert outcome("b", 30) == ("failed", "execution_error", "inline")  # namespace quota
    assert outcome("c", 33) == ("failed", "execution_error", "inline")  # per-artifact limit
    assert outcome("d", 8) == ("completed", None, "inline")


def test_acceptance_failures_surface_as_durability_errors(
    faulty: FaultyStore, make_supervisor: SupervisorFactory
) -> None:
    faulty.plan("accept_attempt", Fault(1))
    supervisor = make_supervisor(runner=reporting_runner, store=faulty)
    with pytest.raises(BackgroundSubagentError.Durability):
        supervisor.delegate_sync("research", "p")
    attempt = supervisor.delegate_sync("research", "p").attempt_id
    assert supervisor.wait_sync(attempt, 10).status == "completed"


def test_a_raising_finalizer_is_retried_through_store_failures_and_fails_once(
    faulty: FaultyStore, make_supervisor: SupervisorFactory
) -> None:
    gate = Gate()

    async def run(request: ChildRequest, control: ChildControl) -> ChildOutcome:
        await gate.wait()
        # A malformed outcome: turning its usage into a dict raises inside the actor.
        return ChildOutcome.Completed(output="x", usage=5)  # type: ignore[arg-type]

    faulty.plan("heartbeat_attempt", Fault(8))
    faulty.plan("commit_terminal", Fault(5))
    collector = Collector()
    supervisor = make_supervisor(runner=run, store=faulty, on_complete=collector)
    attempt = supervisor.delegate_sync("research", "p").attempt_id
    assert faulty.when_failed("heartbeat_attempt", 8).wait(10)
    gate.open()
    assert collector.event.wait(10)
    supervisor.shutdown_checked_sync(5)
    (result,) = collector.results
    assert (result.attempt_id, result.status) == (attempt, "failed")
    assert result.error == "background attempt finalizer raised TypeError"
    assert faulty.calls["commit_terminal"] == 6


def test_a_restarted_supervisor_continues_known_agents_and_delivers_old_results_once(
    store: SessionStore, make_supervisor: SupervisorFactory
) -> None:
    first = make_supervisor(runner=reporting_runner, store=store)
    accepted = first.delegate_sync("research", "p")
    assert wait_terminal(first, accepted.attempt_id) == "terminal"
    first.shutdown_checked_sync(5)

    second = make_supervisor(
        runner=reporting_runner,
        store=store,
        owner=OwnerIdentity(host_instance_id="host-a", fencing_generation=2),
    )
    (old,) = second.take_pending_sync()
    assert (old.attempt_id, old.output, old.context_delta) == (accepted.attempt_id, "out:p", None)
    assert second.take_pending_sync() == []
    continued = second.delegate_sync("research", "q", agent_id=accepted.agent_id)
    assert continued.status == "continued"
    assert second.wait_sync(continued.attempt_id, 10).result == "out:q"
    assert second.wait_sync(accepted.attempt_id, 0).status == "not_found"


def test_a_store_refusing_progress_cannot_hold_back_the_outcome(
    faulty: FaultyStore, make_supervisor: SupervisorFactory
) -> None:
    started = threading.Event()

    async def run(request: ChildRequest, control: ChildControl) -> ChildOutcome:
        started.set()
        control.report_progress("running")
        await control.wait_cancelled()
        return ChildOutcome.completed("ignored")

    supervisor = make_supervisor(runner=run, store=faulty)
    attempt = supervisor.delegate_sync("research", "p").attempt_id
    assert started.wait(10)
    faulty.fail_always("update_attempt_execution", lambda: RetryableStorage("slow disk"))
    supervisor.cancel_sync(attempt, "stop")
    waited = supervisor.wait_sync(attempt, 10)
    assert (waited.status, waited.cancellation_reason) == ("cancelled", "stop")
    faulty.fail_always("update_attempt_execution", None)
