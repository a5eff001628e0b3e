"""Delivered means consumed: results handed to a durable consumer run.

A ``wait`` or the next turn of a durable run claims the result *for that run*
and never acknowledges it; the run's terminal transition in the store does
(completed), or releases it (failed, cancelled: suppressed for automatic
continuation). A later run's ``take_pending`` (the host's ``run.start``) then
consumes a suppressed result exactly once. A caller with no durable run keeps
claim-and-acknowledge in one go.
"""

from __future__ import annotations

import pytest
from actor_helpers import SupervisorFactory, wait_terminal

from actors import BackgroundSubagentSupervisor, ChildControl, ChildOutcome, ChildRequest
from actors._delivery import RUN_CLAIM_SECONDS, replayed
from properties import Fault, FaultyStore
from statemachines import RunStatus
from storage import (
    AdmissionLease,
    InputPart,
    ManualClock,
    RetryableStorage,
    RunRecord,
    SessionStore,
)


async def done(request: ChildRequest, control: ChildControl) -> ChildOutcome:
    return ChildOutcome.completed(f"out:{request.prompt}")


def admit(store: SessionStore, session_id: str, run_id: str) -> RunRecord:
    """A live durable run of ``session_id`` (an explicit run, admitted and running)."""
    now = store.clock.now()
    store.admit_run(
        RunRecord(
            session_id=session_id,
            run_id=run_id,
            created_at=now,
            updated_at=now,
            input=(InputPart(text="go"),),
            trigger_type="rpc",
            profile="default",
            admission_lease=AdmissionLease(
                admission_id=f"adm-{run_id}",
                host_instance_id="host-a",
                fencing_generation=1,
                lease_expires_at=now + 30,
            ),
        )
    )
    return store.transition_run(session_id, run_id, RunStatus.RUNNING, admission_id=f"adm-{run_id}")


def end(store: SessionStore, run: RunRecord, status: RunStatus) -> None:
    store.transition_run(run.session_id, run.run_id, status, admission_id=f"adm-{run.run_id}")


def terminal(supervisor: BackgroundSubagentSupervisor, prompt: str = "p") -> str:
    attempt_id = supervisor.delegate_sync("research", prompt).attempt_id
    assert wait_terminal(supervisor, attempt_id) == "terminal"
    return attempt_id


def test_a_wait_inside_a_durable_run_is_acknowledged_by_the_run_completing(
    store: SessionStore, make_supervisor: SupervisorFactory
) -> None:
    supervisor = make_supervisor(runner=done, store=store)
    attempt = terminal(supervisor)
    run = admit(store, supervisor.session_id, "run-b")
    waited = supervisor.wait_sync(attempt, 5, "run-b")
    assert (waited.status, waited.result, waited.delivery_status) == (
        "completed",
        "out:p",
        "delivered",
    )
    record = store.load_attempt(attempt)
    assert record.delivery_status == "claimed"  # handed over, not yet consumed
    assert record.delivery_claim is not None
    assert record.delivery_claim.continuation_run_id == "run-b"
    again = supervisor.wait_sync(attempt, 5, "run-c")
    assert again.owned_elsewhere  # one consumer at a time
    end(store, run, RunStatus.COMPLETED)
    record = store.load_attempt(attempt)
    assert (record.delivery_status, record.delivered_to_run_id) == ("delivered", "run-b")
    assert supervisor.take_pending_sync() == []


@pytest.mark.parametrize("death", [RunStatus.FAILED, RunStatus.CANCELLED])
def test_a_consumer_that_fails_gives_the_result_back_to_one_explicit_run(
    death: RunStatus, store: SessionStore, make_supervisor: SupervisorFactory
) -> None:
    supervisor = make_supervisor(runner=done, store=store)
    attempt = terminal(supervisor)
    first = admit(store, supervisor.session_id, "run-b")
    assert supervisor.wait_sync(attempt, 5, "run-b").result == "out:p"
    end(store, first, death)
    record = store.load_attempt(attempt)
    assert record.delivery_status == "undelivered"
    assert record.automatic_continuation_suppressed_by_run_id == "run-b"
    explicit = admit(store, supervisor.session_id, "run-c")
    (result,) = supervisor.take_pending_sync("run-c")
    assert (result.attempt_id, result.output) == (attempt, "out:p")
    # A repeat for the same run is an exact replay: the same claimed set.
    assert [r.attempt_id for r in supervisor.take_pending_sync("run-c")] == [attempt]
    end(store, explicit, RunStatus.COMPLETED)
    record = store.load_attempt(attempt)
    assert (record.delivery_status, record.delivered_to_run_id) == ("delivered", "run-c")
    later = admit(store, supervisor.session_id, "run-d")
    assert supervisor.take_pending_sync("run-d") == []
    end(store, later, RunStatus.COMPLETED)


def test_a_lost_response_of_the_run_claim_is_replayed_and_takes_each_result_once(
    faulty: FaultyStore, make_supervisor: SupervisorFactory
) -> None:
    supervisor = make_supervisor(runner=done, store=faulty)
    attempts = {terminal(supervisor, "a"), terminal(supervisor, "b")}
    run = admit(faulty, supervisor.session_id, "run-c")
    faulty.plan("claim_pending_for_run", Fault(1, error=lambda: RetryableStorage("x"), mode="lost"))
    taken = supervisor.take_pending_sync("run-c")
    assert faulty.failures["claim_pending_for_run"] == 1  # applied, its answer lost
    assert {r.attempt_id for r in taken} == attempts
    end(faulty, run, RunStatus.COMPLETED)
    assert {faulty.load_attempt(a).delivered_to_run_id for a in attempts} == {"run-c"}


def test_a_caller_without_a_durable_run_acknowledges_at_once(
    store: SessionStore, make_supervisor: SupervisorFactory
) -> None:
    supervisor = make_supervisor(runner=done, store=store)
    attempt = terminal(supervisor)
    assert supervisor.wait_sync(attempt, 5).delivery_status == "delivered"
    record = store.load_attempt(attempt)
    assert (record.delivery_status, record.delivered_to_run_id) == ("delivered", None)


def test_a_run_claim_outlives_its_deadline_while_the_run_is_live(
    store: SessionStore, make_supervisor: SupervisorFactory, clock: ManualClock
) -> None:
    supervisor = make_supervisor(runner=done, store=store)
    attempt = terminal(supervisor)
    run = admit(store, supervisor.session_id, "run-b")
    assert supervisor.wait_sync(attempt, 5, "run-b").result == "out:p"
    clock.advance(RUN_CLAIM_SECONDS * 3)  # past the claim's deadline, inside the lease
    store.reconcile(supervisor.namespace_id)
    assert store.load_attempt(attempt).delivery_status == "claimed"
    end(store, run, RunStatus.COMPLETED)
    assert store.load_attempt(attempt).delivered_to_run_id == "run-b"


def test_replays_pause_on_the_injected_sleep() -> None:
    pauses: list[float] = []
    tries = iter([RetryableStorage("x"), RetryableStorage("y"), None])

    def call() -> str:
        error = next(tries)
        if error is not None:
            raise error
        return "ok"

    assert replayed(call, tries=3, pause=0.5, transient=lambda e: True, sleep=pauses.append) == "ok"
    assert pauses == [0.5, 0.5]
