"""Delivered means consumed (issue 15), on every store (memory, LMDB, PostgreSQL).

A result claimed for a consumer run is settled by that run: its completion is
the acknowledgement, its failure or cancellation releases the result with
suppression, the loss of its admission lease (its host died) releases it
without. An explicit run takes what is waiting; audit evidence survives.
"""

from __future__ import annotations

import pytest
from builders import (
    CLAIM_TTL,
    NS,
    PARENT_RUN,
    SESSION,
    Reopen,
    acceptance,
    continuation,
    drive,
    plain_run,
    setup_session,
    terminal,
)

from statemachines import DeliveryStatus, RunStatus
from storage import (
    AttemptRecord,
    Conflict,
    Delivered,
    DeliveryClaim,
    DeliveryClaimed,
    ManualClock,
    NotFound,
    SessionStore,
    StaleFence,
)

CONSUMER = "consumer-run"
RUN_TTL = 600.0


def _result(store: SessionStore, clock: ManualClock, n: int = 1) -> AttemptRecord:
    record = store.accept_attempt(acceptance(clock, f"subattempt_{n}", f"agent-bg-{n:08x}"))
    running = drive(store, record, clock)
    return store.commit_terminal(terminal(running, clock, content=f"durable result {n}"))


def _consumer(store: SessionStore, clock: ManualClock, run_id: str = CONSUMER) -> str:
    store.admit_run(plain_run(clock, run_id, ttl=RUN_TTL))
    store.transition_run(SESSION, run_id, RunStatus.RUNNING, admission_id=f"adm-{run_id}")
    return run_id


def _end(store: SessionStore, run_id: str, status: RunStatus) -> None:
    store.transition_run(SESSION, run_id, status, admission_id=f"adm-{run_id}")


def _linked(clock: ManualClock, claim_id: str, run_id: str = CONSUMER) -> DeliveryClaim:
    return DeliveryClaim(
        claim_id=claim_id, deadline=clock.now() + CLAIM_TTL, continuation_run_id=run_id
    )


def test_a_run_linked_claim_is_acknowledged_only_by_the_runs_completion(
    store: SessionStore, clock: ManualClock, reopen: Reopen
) -> None:
    setup_session(store, clock)
    aid = _result(store, clock).attempt_id
    _consumer(store, clock)
    store.claim_delivery(aid, _linked(clock, "c1"))
    with pytest.raises(Conflict):  # the run has not completed: no acknowledgement yet
        store.acknowledge_delivery(aid, "c1")
    store = reopen(store)
    assert store.load_attempt(aid).delivery_status == DeliveryStatus.CLAIMED
    _end(store, CONSUMER, RunStatus.COMPLETED)
    store = reopen(store)
    delivered = store.load_attempt(aid)
    assert delivered.delivery_status == DeliveryStatus.DELIVERED
    assert delivered.delivered_claim_id == "c1"  # the audit evidence survives
    assert delivered.delivered_to_run_id == CONSUMER
    assert store.list_pending_attempts(NS) == []
    assert store.acknowledge_delivery(aid, "c1") == delivered  # a repeat is Ok


@pytest.mark.parametrize("status", [RunStatus.FAILED, RunStatus.CANCELLED])
def test_a_failed_or_cancelled_consumer_releases_with_suppression(
    store: SessionStore, clock: ManualClock, reopen: Reopen, status: RunStatus
) -> None:
    setup_session(store, clock)
    aid = _result(store, clock).attempt_id
    _consumer(store, clock)
    store.claim_delivery(aid, _linked(clock, "c1"))
    _end(store, CONSUMER, status)
    store = reopen(store)
    released = store.load_attempt(aid)
    assert released.delivery_status == DeliveryStatus.UNDELIVERED
    assert released.delivery_claim is None
    assert released.automatic_continuation_suppressed_by_run_id == CONSUMER
    assert [r.attempt_id for r in store.list_pending_attempts(NS)] == [aid]
    with pytest.raises(Conflict):  # no automatic replacement at once
        store.claim_delivery(
            aid, DeliveryClaim(claim_id="auto", deadline=clock.now() + 10), automatic=True
        )


def test_a_consumer_that_dies_with_its_host_is_released_without_suppression(
    store: SessionStore, clock: ManualClock, reopen: Reopen
) -> None:
    setup_session(store, clock)
    aid = _result(store, clock).attempt_id
    _consumer(store, clock)
    store.claim_delivery(aid, _linked(clock, "c1"))
    clock.advance(CLAIM_TTL + 1)  # past the claim deadline, the run's lease still live
    assert store.reconcile(NS) == []
    assert store.load_attempt(aid).delivery_status == DeliveryStatus.CLAIMED
    clock.advance(RUN_TTL)  # the host died: nobody renews the admission lease
    store = reopen(store)
    (released,) = store.reconcile(NS)
    assert released.attempt_id == aid
    assert released.delivery_status == DeliveryStatus.UNDELIVERED
    assert released.automatic_continuation_suppressed_by_run_id is None
    store.claim_delivery(  # automatic continuation may take it again
        aid, DeliveryClaim(claim_id="auto", deadline=clock.now() + 10), automatic=True
    )


def test_a_dead_hosts_run_failed_by_the_reconciler_releases_without_suppression(
    store: SessionStore, clock: ManualClock
) -> None:
    """A run failed after its lease lapsed is a consumer lost with its host, whoever
    records it first (the run's terminal commit or the store's reconcile): its claims go
    back unsuppressed, so automatic continuation consumes the result."""
    setup_session(store, clock)
    aid = _result(store, clock).attempt_id
    _consumer(store, clock)
    store.claim_delivery(
        aid,
        DeliveryClaim(
            claim_id="c1", deadline=clock.now() + 2 * RUN_TTL, continuation_run_id=CONSUMER
        ),
    )
    clock.advance(RUN_TTL)  # the lease lapsed; the claim's deadline has not
    _end(store, CONSUMER, RunStatus.FAILED)
    released = store.load_attempt(aid)
    assert released.delivery_status == DeliveryStatus.UNDELIVERED
    assert released.automatic_continuation_suppressed_by_run_id is None


def test_a_claim_needs_a_live_consumer_run(store: SessionStore, clock: ManualClock) -> None:
    setup_session(store, clock)
    aid = _result(store, clock).attempt_id
    with pytest.raises(Conflict):
        store.claim_delivery(aid, _linked(clock, "c1", "no-such-run"))
    with pytest.raises(Conflict):  # the parent run completed long ago
        store.claim_delivery(aid, _linked(clock, "c1", PARENT_RUN))
    assert store.load_attempt(aid).delivery_status == DeliveryStatus.UNDELIVERED


def test_an_explicit_run_consumes_a_suppressed_result_exactly_once(
    store: SessionStore, clock: ManualClock, reopen: Reopen
) -> None:
    setup_session(store, clock)
    first = _result(store, clock, 1).attempt_id
    clock.advance(1)
    second = _result(store, clock, 2).attempt_id
    _consumer(store, clock)
    store.claim_delivery(first, _linked(clock, "c1"))
    _end(store, CONSUMER, RunStatus.FAILED)  # first is suppressed now

    explicit = _consumer(store, clock, "explicit-run")
    deadline = clock.now() + CLAIM_TTL
    taken = store.claim_pending_for_run(SESSION, explicit, deadline)
    assert [r.attempt_id for r in taken] == [first, second]  # terminal time order
    claim = DeliveryClaim(
        claim_id=f"run:{explicit}", deadline=deadline, continuation_run_id=explicit
    )
    assert all(r.delivery_claim == claim for r in taken)
    store = reopen(store)
    assert store.claim_pending_for_run(SESSION, explicit, deadline + 5) == taken  # idempotent
    with pytest.raises(DeliveryClaimed):  # nobody else takes them meanwhile
        store.claim_delivery(first, DeliveryClaim(claim_id="x", deadline=clock.now() + 5))
    _end(store, explicit, RunStatus.COMPLETED)
    store = reopen(store)
    for aid in (first, second):
        record = store.load_attempt(aid)
        assert record.delivery_status == DeliveryStatus.DELIVERED
        assert record.delivered_to_run_id == explicit
        assert record.delivered_claim_id == f"run:{explicit}"
        assert record.automatic_continuation_suppressed_by_run_id is None
    later = _consumer(store, clock, "later-run")
    assert store.claim_pending_for_run(SESSION, later, clock.now() + CLAIM_TTL) == []


def test_claim_pending_for_run_refuses_a_run_that_is_not_live(
    store: SessionStore, clock: ManualClock
) -> None:
    setup_session(store, clock)
    _result(store, clock)
    with pytest.raises(NotFound):
        store.claim_pending_for_run(SESSION, "no-such-run", clock.now() + 10)
    with pytest.raises(Conflict):
        store.claim_pending_for_run(SESSION, PARENT_RUN, clock.now() + 10)
    run = _consumer(store, clock)
    with pytest.raises(Conflict):
        store.claim_pending_for_run(SESSION, run, clock.now())
    assert store.load_attempt("subattempt_1").delivery_status == DeliveryStatus.UNDELIVERED


def test_a_continuation_is_claimed_for_its_run_and_restores_from_the_session_head(
    store: SessionStore, clock: ManualClock, reopen: Reopen
) -> None:
    setup_session(store, clock)
    record = _result(store, clock)
    other = _consumer(store, clock, "turn-2")  # the head moves past the causal parent
    _end(store, other, RunStatus.COMPLETED)
    with pytest.raises(Conflict):  # restoring from the causal parent is refused
        store.acquire_continuation(continuation(record, clock, restore_from_run_id=PARENT_RUN))
    request = continuation(record, clock, restore_from_run_id=other)
    receipt = store.acquire_continuation(request)
    assert receipt.run.restore_from_run_id == other
    run_id = request.run.run_id
    assert receipt.record.delivery_status == DeliveryStatus.CLAIMED
    assert receipt.record.delivery_claim == DeliveryClaim(
        claim_id=request.claim_id, deadline=request.claim_deadline, continuation_run_id=run_id
    )
    with pytest.raises(Conflict):  # its completion is the acknowledgement
        store.acknowledge_delivery(record.attempt_id, request.claim_id)
    store = reopen(store)
    assert store.acquire_continuation(request).idempotent_replay
    _end(store, run_id, RunStatus.RUNNING)
    _end(store, run_id, RunStatus.COMPLETED)
    delivered = store.load_attempt(record.attempt_id)
    assert delivered.delivery_status == DeliveryStatus.DELIVERED
    assert delivered.delivered_to_run_id == run_id
    assert delivered.continuation_run_id == run_id
    assert delivered.delivered_claim_id == request.claim_id
    with pytest.raises(Delivered):
        store.acquire_continuation(
            continuation(record, clock, run_id="again", claim_id="c9", restore_from_run_id=run_id)
        )


def test_a_lease_lost_continuation_is_released_and_may_be_replaced(
    store: SessionStore, clock: ManualClock, reopen: Reopen
) -> None:
    setup_session(store, clock)
    record = _result(store, clock)
    first = continuation(record, clock)
    store.acquire_continuation(first)
    clock.advance(RUN_TTL)  # the host died mid continuation run
    (released,) = store.reconcile(NS)
    assert released.delivery_status == DeliveryStatus.UNDELIVERED
    assert released.automatic_continuation_suppressed_by_run_id is None
    store = reopen(store)
    second = continuation(
        released,
        clock,
        run_id="continuation-run-2",
        claim_id="continuation-claim-2",
        restore_from_run_id=first.run.run_id,
    )
    receipt = store.acquire_continuation(second)
    run_id = second.run.run_id
    _end(store, run_id, RunStatus.RUNNING)
    _end(store, run_id, RunStatus.COMPLETED)
    delivered = store.load_attempt(record.attempt_id)
    assert delivered.delivered_to_run_id == run_id == receipt.run.run_id
    runs = [r.run_id for r in store.list_runs(SESSION) if r.trigger_type == "async_subagent_result"]
    assert runs == [first.run.run_id, run_id]


def test_a_continuation_whose_lease_lapsed_cannot_complete_after_its_replacement(
    store: SessionStore, clock: ManualClock
) -> None:
    """A frozen host comes back after the reconciler released its run's claim and a
    replacement continuation took the result: its late completion is refused
    (StaleFence), so one run consumed the result, not two. Failing it stays allowed."""
    setup_session(store, clock)
    record = _result(store, clock)
    first = continuation(record, clock)
    store.acquire_continuation(first)
    _end(store, first.run.run_id, RunStatus.RUNNING)
    clock.advance(RUN_TTL)
    (released,) = store.reconcile(NS)
    second = continuation(
        released,
        clock,
        run_id="continuation-run-2",
        claim_id="continuation-claim-2",
        restore_from_run_id=first.run.run_id,
    )
    store.acquire_continuation(second)
    with pytest.raises(StaleFence):
        _end(store, first.run.run_id, RunStatus.COMPLETED)
    _end(store, second.run.run_id, RunStatus.RUNNING)
    _end(store, second.run.run_id, RunStatus.COMPLETED)
    _end(store, first.run.run_id, RunStatus.FAILED)
    delivered = store.load_attempt(record.attempt_id)
    assert delivered.delivery_status == DeliveryStatus.DELIVERED
    assert delivered.delivered_to_run_id == second.run.run_id
    assert store.load_run(SESSION, first.run.run_id).status == RunStatus.FAILED


@pytest.mark.parametrize("status", [RunStatus.FAILED, RunStatus.CANCELLED])
def test_a_failed_continuation_suppresses_and_an_explicit_run_consumes_it(
    store: SessionStore, clock: ManualClock, status: RunStatus
) -> None:
    setup_session(store, clock)
    record = _result(store, clock)
    request = continuation(record, clock)
    store.acquire_continuation(request)
    _end(store, request.run.run_id, status)
    released = store.load_attempt(record.attempt_id)
    assert released.automatic_continuation_suppressed_by_run_id == request.run.run_id
    with pytest.raises(Conflict):  # no automatic continuation at once
        store.acquire_continuation(
            continuation(
                released, clock, run_id="c2", claim_id="k2", restore_from_run_id=request.run.run_id
            )
        )
    explicit = _consumer(store, clock, "explicit-run")
    (taken,) = store.claim_pending_for_run(SESSION, explicit, clock.now() + CLAIM_TTL)
    assert taken.attempt_id == record.attempt_id
    _end(store, explicit, RunStatus.COMPLETED)
    assert store.load_attempt(record.attempt_id).delivered_to_run_id == explicit
    assert store.load_attempt(record.attempt_id).delivery_status == DeliveryStatus.DELIVERED
