"""The named fault points in real attempt flows: each is reached, and each action has
its documented effect (retried, replayed exactly, lease lost and fenced out)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from actor_helpers import Collector, SupervisorFactory, wait_terminal

from actors import ChildControl, ChildOutcome, ChildRequest
from properties import FaultyStore, Gate
from storage import ManualClock, StaleFence, faults

STORE_POINTS = ("store.before_commit", "store.after_commit", "store.after_commit_before_response")


@pytest.fixture(autouse=True)
def clean_registry() -> Iterator[None]:
    faults.reset_faults()
    yield
    faults.reset_faults()


def gated_runner(gate: Gate, output: str = "done") -> object:
    async def run(request: ChildRequest, control: ChildControl) -> ChildOutcome:
        control.report_child_run_id(f"run-{request.prompt}")
        await gate.wait()
        return ChildOutcome.completed(output)

    return run


@pytest.mark.parametrize("action", ["raise_transient", "lose_response"])
@pytest.mark.parametrize("point", STORE_POINTS)
def test_store_faults_after_acceptance_are_retried_and_the_attempt_ends_once(
    point: str, action: str, faulty: FaultyStore, make_supervisor: SupervisorFactory
) -> None:
    gate = Gate()
    collector = Collector()
    supervisor = make_supervisor(runner=gated_runner(gate), store=faulty, on_complete=collector)
    attempt = supervisor.delegate_sync("research", "p").attempt_id
    assert gate.entered.wait(10)
    faults.arm(point, action, times=3)
    gate.open()
    assert collector.event.wait(10)
    supervisor.shutdown_checked_sync(5)
    assert [r.output for r in collector.for_attempt(attempt)] == ["done"]
    record = faulty.load_attempt(attempt)
    assert (record.execution_status, record.delivery_status) == ("completed", "delivered")
    assert faults.fault_counts()[point] == 3


def test_a_transient_mid_heartbeat_is_retried_and_keeps_ownership(
    faulty: FaultyStore, make_supervisor: SupervisorFactory, clock: ManualClock
) -> None:
    gate = Gate()
    supervisor = make_supervisor(runner=gated_runner(gate), store=faulty)
    attempt = supervisor.delegate_sync("research", "p").attempt_id
    assert gate.entered.wait(10)
    accepted = faulty.load_attempt(attempt).owner_lease.lease_expires_at
    faults.arm("actor.mid_heartbeat", "raise_transient", times=3)
    assert faults.wait_fired("actor.mid_heartbeat", 3, 10)
    clock.advance(10)  # within the lease: the next successful renewal moves it on
    faults.disarm_all()
    renewed = threading.Event()
    original = faulty._invoke

    def spy(op: str, *args: object, **kwargs: object) -> object:
        result = original(op, *args, **kwargs)
        if op == "heartbeat_attempt":
            renewed.set()
        return result

    faulty._invoke = spy  # type: ignore[method-assign]
    assert renewed.wait(10)
    assert faulty.load_attempt(attempt).owner_lease.lease_expires_at > accepted
    gate.open()
    assert supervisor.wait_sync(attempt, 10).status == "completed"


def test_sleeping_past_the_ttl_mid_heartbeat_loses_the_lease_and_fences_the_owner_out(
    faulty: FaultyStore, make_supervisor: SupervisorFactory, clock: ManualClock
) -> None:
    gate = Gate()
    collector = Collector()
    supervisor = make_supervisor(runner=gated_runner(gate), store=faulty, on_complete=collector)
    attempt = supervisor.delegate_sync("research", "p").attempt_id
    assert gate.entered.wait(10)
    lease = faulty.load_attempt(attempt).owner_lease
    faults.configure(sleeper=clock.advance, sleep_seconds=31.0)  # the lease TTL is 30 s
    faults.arm("actor.mid_heartbeat", "sleep_past_ttl")
    assert wait_terminal(supervisor, attempt) == "lost"
    assert faults.fault_counts() == {"actor.mid_heartbeat": 1}
    # The paused owner's renewal is refused: its lease expired at store time.
    with pytest.raises(StaleFence):
        faulty.heartbeat_attempt(
            attempt, lease.host_instance_id, lease.fencing_generation, clock.now() + 30
        )
    taken = faulty.take_over_attempt(
        attempt, "host-b", lease.fencing_generation + 1, clock.now() + 30
    )
    assert taken.owner_lease.host_instance_id == "host-b"
    gate.open()
    supervisor.shutdown_checked_sync(5)
    assert collector.results == []
    assert faulty.load_attempt(attempt).terminal_fingerprint is None


@pytest.mark.parametrize("action", ["raise_transient", "lose_response"])
def test_a_fault_after_the_terminal_commit_is_recovered_by_exact_replay(
    action: str, faulty: FaultyStore, make_supervisor: SupervisorFactory
) -> None:
    gate = Gate()
    collector = Collector()
    supervisor = make_supervisor(runner=gated_runner(gate), store=faulty, on_complete=collector)
    attempt = supervisor.delegate_sync("research", "p").attempt_id
    faults.arm("actor.after_terminal_commit_before_callback", action)
    gate.open()
    assert collector.event.wait(10)
    supervisor.shutdown_checked_sync(5)
    assert [r.output for r in collector.for_attempt(attempt)] == ["done"]
    assert faults.fault_counts() == {"actor.after_terminal_commit_before_callback": 1}
    # The first commit applied; the second was the exact replay the store answered Ok.
    assert faulty.calls["commit_terminal"] == 2
    assert faulty.load_attempt(attempt).delivery_status == "delivered"


def test_a_fault_inside_the_finalizer_becomes_failed_evidence_delivered_once(
    faulty: FaultyStore, make_supervisor: SupervisorFactory
) -> None:
    gate = Gate()
    collector = Collector()
    supervisor = make_supervisor(runner=gated_runner(gate), store=faulty, on_complete=collector)
    attempt = supervisor.delegate_sync("research", "p").attempt_id
    faults.arm("actor.inside_finalizer", "raise_transient")
    gate.open()
    assert collector.event.wait(10)
    supervisor.shutdown_checked_sync(5)
    (result,) = collector.for_attempt(attempt)
    assert (result.status, result.failure_category) == ("failed", "execution_error")
    assert "finalizer raised RetryableStorage" in (result.error or "")
    assert faults.fault_counts() == {"actor.inside_finalizer": 1}
    assert faulty.calls["commit_terminal"] == 1


# The point between claiming results for a durable run and handing them over:
# tests/actors/test_consumer_runs.py (a lost response there is replayed exactly).
