"""The delivery engine admits a continuation run for a result: one store transaction
claims the result and admits the run; a lost response is replayed exactly, so the
run is admitted once."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from actor_helpers import SupervisorFactory, wait_terminal

from actors import ChildControl, ChildOutcome, ChildRequest, Deliverer
from properties import Fault, FaultyStore
from statemachines import RunStatus
from storage import (
    ASYNC_SUBAGENT_RESULT,
    AdmissionLease,
    AttemptRecord,
    Delivered,
    DeliveryClaimed,
    InputPart,
    ManualClock,
    RetryableStorage,
    RunRecord,
    SeededIds,
)


async def done(request: ChildRequest, control: ChildControl) -> ChildOutcome:
    return ChildOutcome.completed(f"out:{request.prompt}")


def _run_for(record: AttemptRecord) -> Callable[[tuple[InputPart, ...], float], RunRecord]:
    """What a host would build: the run consuming ``record``'s result."""

    def make(parts: tuple[InputPart, ...], now: float) -> RunRecord:
        return RunRecord(
            session_id=record.parent_session_id,
            run_id="run_continuation",
            created_at=now,
            updated_at=now,
            input=parts,
            trigger_type=ASYNC_SUBAGENT_RESULT,
            parent_run_id=record.parent_run_id,
            profile=record.profile,
            metadata={
                "async_subagent.attempt_id": record.attempt_id,
                "async_subagent.agent_id": record.agent_id,
                "async_subagent.parent_run_id": record.parent_run_id,
            },
            admission_lease=AdmissionLease(
                admission_id="adm_1",
                host_instance_id="host-a",
                fencing_generation=1,
                lease_expires_at=now + 30,
            ),
        )

    return make


def _terminal(make_supervisor: SupervisorFactory, store: FaultyStore) -> AttemptRecord:
    supervisor = make_supervisor(runner=done, store=store)
    attempt_id = supervisor.delegate_sync("research", "p").attempt_id
    assert wait_terminal(supervisor, attempt_id) == "terminal"
    supervisor.shutdown_checked_sync(5)
    return store.load_attempt(attempt_id)


def test_a_lost_admission_response_is_replayed_and_admits_the_run_once(
    faulty: FaultyStore, make_supervisor: SupervisorFactory, clock: ManualClock
) -> None:
    record = _terminal(make_supervisor, faulty)
    deliverer = Deliverer(store=faulty, ids=SeededIds(3), namespace_id=record.namespace_id)
    faulty.plan("acquire_continuation", Fault(1, error=lambda: RetryableStorage("x"), mode="lost"))
    receipt = deliverer.admit_continuation(record, _run_for(record), clock.now())
    assert receipt.idempotent_replay  # the first try applied; its answer was lost
    assert receipt.run.run_id == "run_continuation"
    assert [part.text for part in receipt.run.input if "out:p" in (part.text or "")]
    stored = faulty.load_attempt(record.attempt_id)
    assert stored.continuation_run_id == "run_continuation"
    # Claimed for the run, not yet consumed: no second continuation meanwhile.
    assert stored.delivery_status == "claimed"
    with pytest.raises(DeliveryClaimed):
        deliverer.admit_continuation(stored, _run_for(stored), clock.now())
    # The run's completion is the acknowledgement; then nothing consumes it again.
    for status in (RunStatus.RUNNING, RunStatus.COMPLETED):
        faulty.transition_run(
            record.parent_session_id, "run_continuation", status, admission_id="adm_1"
        )
    stored = faulty.load_attempt(record.attempt_id)
    assert (stored.delivery_status, stored.delivered_to_run_id) == ("delivered", "run_continuation")
    with pytest.raises(Delivered):
        deliverer.admit_continuation(stored, _run_for(stored), clock.now())


def test_transient_failures_beyond_the_replays_surface_and_admit_nothing(
    faulty: FaultyStore, make_supervisor: SupervisorFactory, clock: ManualClock
) -> None:
    record = _terminal(make_supervisor, faulty)
    deliverer = Deliverer(store=faulty, ids=SeededIds(3), namespace_id=record.namespace_id)
    faulty.plan("acquire_continuation", Fault(4, error=lambda: RetryableStorage("x")))
    with pytest.raises(RetryableStorage):
        deliverer.admit_continuation(record, _run_for(record), clock.now())
    assert faulty.load_attempt(record.attempt_id).delivery_status == "undelivered"
