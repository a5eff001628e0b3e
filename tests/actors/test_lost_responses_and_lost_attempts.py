"""Lost store responses (of a progress write, of a claim, of an acknowledgement)
and lost attempts: the attempt still launches, the wait still delivers, a reconciled
attempt counts toward the undelivered limit. (The supervisor machine in
``properties/_supervisor.py`` found each of these.)"""

from __future__ import annotations

from actor_helpers import SupervisorFactory, wait_terminal

from actors import (
    BackgroundSubagentError,
    ChildControl,
    ChildOutcome,
    ChildRequest,
    SupervisorLimits,
)
from properties import Fault, FaultyStore, Gate
from storage import Failed, ManualClock


async def done(request: ChildRequest, control: ChildControl) -> ChildOutcome:
    return ChildOutcome.completed(f"out:{request.prompt}")


def test_a_lost_response_of_a_progress_write_is_recovered_and_the_attempt_completes(
    faulty: FaultyStore, make_supervisor: SupervisorFactory
) -> None:
    # The child runs until the first heartbeat tick persisted what it reached; that
    # write applies, then an untyped failure: the actor confirms ownership with a
    # fresh load, adopts the stored status and carries on.
    gate = Gate()

    async def held(request: ChildRequest, control: ChildControl) -> ChildOutcome:
        control.report_progress("running")
        await gate.wait()
        return ChildOutcome.completed(f"out:{request.prompt}")

    lost = Fault(1, error=lambda: Failed("gone"), mode="lost")
    faulty.plan("advance_attempt", lost)
    supervisor = make_supervisor(runner=held, store=faulty)
    attempt = supervisor.delegate_sync("research", "p").attempt_id
    assert faulty.when_failed("advance_attempt", 1).wait(10)
    gate.open()
    result = supervisor.wait_sync(attempt, 10)
    assert (result.status, result.result) == ("completed", "out:p")
    assert faulty.failures["advance_attempt"] == 1


def test_a_wait_survives_a_lost_claim_and_a_lost_acknowledgement_response(
    faulty: FaultyStore, make_supervisor: SupervisorFactory
) -> None:
    supervisor = make_supervisor(runner=done, store=faulty)
    attempt = supervisor.delegate_sync("research", "p").attempt_id
    assert wait_terminal(supervisor, attempt) == "terminal"
    faulty.plan("claim_delivery", Fault(1, mode="lost"))
    faulty.plan("acknowledge_delivery", Fault(2, mode="lost"))
    result = supervisor.wait_sync(attempt, 10)
    assert (result.status, result.result, result.owned_elsewhere) == ("completed", "out:p", False)
    assert result.delivery_status == "delivered"
    assert faulty.load_attempt(attempt).delivery_status == "delivered"
    assert supervisor.take_pending_sync() == []


def test_a_lost_and_reconciled_attempt_counts_toward_the_undelivered_limit_and_cancel_sees_it(
    faulty: FaultyStore, make_supervisor: SupervisorFactory, clock: ManualClock
) -> None:
    gate = Gate()

    async def held(request: ChildRequest, control: ChildControl) -> ChildOutcome:
        await gate.wait()
        return ChildOutcome.completed("late")

    limits = SupervisorLimits(
        heartbeat_interval=0.01,
        retry_interval=0.002,
        cancellation_grace=0.05,
        max_undelivered_results=1,
    )
    supervisor = make_supervisor(runner=held, store=faulty, limits=limits)
    attempt = supervisor.delegate_sync("research", "p").attempt_id
    assert gate.entered.wait(10)
    clock.advance(31)  # past the 30 s lease: the owner loss is confirmed
    assert wait_terminal(supervisor, attempt) == "lost"
    faulty.inner.reconcile("default")
    assert faulty.load_attempt(attempt).failure_category == "host_process_lost"
    try:
        supervisor.delegate_sync("research", "again")
    except BackgroundSubagentError.QuotaExceeded as exc:
        assert exc.fields["undelivered"] == 1
    else:
        raise AssertionError("admitted past the undelivered limit")
    cancelled = supervisor.cancel_sync(attempt, "too late")
    assert cancelled.status == "failed"
    gate.open()
