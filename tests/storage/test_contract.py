"""The SessionStore contract, scenario by scenario, against every store.

Written from the contract docstrings (``storage/_contract.py``) and DESIGN §5,
not from any implementation. Each test runs against the memory store, the LMDB
store and an LMDB store reopened mid-test (see ``conftest.py``). Time only
moves through the shared :class:`~storage.ManualClock`.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
from builders import (
    CLAIM_TTL,
    HOST,
    LEASE_TTL,
    NS,
    PARENT_RUN,
    SESSION,
    Reopen,
    acceptance,
    artifact_terminal,
    continuation,
    drive,
    fresh_session,
    moved,
    plain_run,
    replace,
    setup_session,
    terminal,
)

import storage
from statemachines import (
    EXECUTION,
    DeliveryStatus,
    ExecutionStatus,
    RetentionStatus,
    RunStatus,
    SessionStatus,
)
from storage import (
    AlreadyExists,
    ArtifactLimits,
    AttemptRecord,
    Conflict,
    ConsumerTerminated,
    CorruptRecord,
    Delivered,
    DeliveryClaim,
    DeliveryClaimed,
    IllegalTransition,
    InputPart,
    KernelStore,
    LmdbSessionStore,
    ManualClock,
    NotFound,
    QuotaExceeded,
    Retryable,
    RunConflict,
    SessionRecord,
    SessionStore,
    StaleFence,
    StorageFull,
    TerminalCommit,
)

ATTEMPT = "subattempt_1"
AGENT = "researcher-bg-0000aaaa"


def committed(
    store: SessionStore,
    clock: ManualClock,
    attempt_id: str = ATTEMPT,
    agent_id: str = AGENT,
    *,
    content: str = "durable result",
) -> tuple[AttemptRecord, TerminalCommit]:
    """Accept, start and run an attempt, then commit it completed (inline)."""
    running = drive(store, store.accept_attempt(acceptance(clock, attempt_id, agent_id)), clock)
    commit = terminal(running, clock, content=content)
    return store.commit_terminal(commit), commit


def claim(clock: ManualClock, claim_id: str, ttl: float = CLAIM_TTL, **kw: Any) -> DeliveryClaim:
    return DeliveryClaim(claim_id=claim_id, deadline=clock.now() + ttl, **kw)


def continuation_runs(store: SessionStore, session_id: str = SESSION) -> list[str]:
    return [
        r.run_id
        for r in store.list_runs(session_id)
        if r.trigger_type == storage.ASYNC_SUBAGENT_RESULT
    ]


# -- acceptance ----------------------------------------------------------------------------


def test_acceptance_retry_is_idempotent(
    store: SessionStore, clock: ManualClock, reopen: Reopen
) -> None:
    setup_session(store, clock)
    record = acceptance(clock)
    stored = store.accept_attempt(record)
    assert stored == record
    store = reopen(store)
    clock.advance(1)
    assert store.accept_attempt(record) == stored
    assert store.load_attempt(ATTEMPT) == stored
    assert [a.attempt_id for a in store.list_active_attempts(NS)] == [ATTEMPT]


def test_a_different_record_under_an_accepted_attempt_id_is_already_exists(
    store: SessionStore, clock: ManualClock
) -> None:
    setup_session(store, clock)
    stored = store.accept_attempt(acceptance(clock))
    with pytest.raises(AlreadyExists):
        store.accept_attempt(replace(stored, subagent_name="someone-else"))
    assert store.load_attempt(ATTEMPT) == stored


def test_a_competing_attempt_on_the_same_agent_id_is_conflict(
    store: SessionStore, clock: ManualClock, reopen: Reopen
) -> None:
    setup_session(store, clock)
    first = store.accept_attempt(acceptance(clock))
    competing = acceptance(clock, "subattempt_2", AGENT, host="host-b")
    store = reopen(store)
    with pytest.raises(Conflict):
        store.accept_attempt(competing)
    with pytest.raises(NotFound):
        store.load_attempt("subattempt_2")
    assert store.list_active_attempts(NS) == [first]


def test_the_same_agent_id_is_free_in_another_session_and_after_the_first_is_terminal(
    store: SessionStore, clock: ManualClock
) -> None:
    setup_session(store, clock)
    setup_session(store, clock, "session-2", "parent-run-2")
    store.accept_attempt(acceptance(clock))
    other = acceptance(
        clock, "subattempt_2", AGENT, session_id="session-2", parent_run_id="parent-run-2"
    )
    assert store.accept_attempt(other) == other
    running = drive(store, store.load_attempt(ATTEMPT), clock)
    store.commit_terminal(terminal(running, clock))
    again = acceptance(clock, "subattempt_3", AGENT)
    assert store.accept_attempt(again) == again


def test_an_already_expired_acceptance_is_rejected(store: SessionStore, clock: ManualClock) -> None:
    setup_session(store, clock)
    record = acceptance(clock, ttl=LEASE_TTL)
    clock.advance(LEASE_TTL)  # lease_expires_at == now: expired
    with pytest.raises(Conflict):
        store.accept_attempt(record)
    with pytest.raises(NotFound):
        store.load_attempt(ATTEMPT)
    assert store.list_active_attempts(NS) == []


def test_acceptance_needs_an_existing_active_session(
    store: SessionStore, clock: ManualClock
) -> None:
    with pytest.raises(Conflict):
        store.accept_attempt(acceptance(clock))
    setup_session(store, clock)
    store.update_session_status(SESSION, SessionStatus.INACTIVE)
    with pytest.raises(Conflict):
        store.accept_attempt(acceptance(clock))
    with pytest.raises(NotFound):
        store.load_attempt(ATTEMPT)


@pytest.mark.parametrize(
    "change",
    [
        {"execution_status": ExecutionStatus.STARTING},
        {"delivery_status": DeliveryStatus.CLAIMED},
        {"retention_status": RetentionStatus.ARTIFACT},
        {"result_ref": storage.ResultRef(content="early")},
        {"terminal_at": 1.0},
        {"updated_at": 1.0},
        {"delivered_to_run_id": "run-that-never-consumed-it"},
    ],
    ids=lambda c: next(iter(c)),
)
def test_a_non_canonical_acceptance_is_refused(
    store: SessionStore, clock: ManualClock, change: dict[str, Any]
) -> None:
    setup_session(store, clock)
    with pytest.raises(storage.InvalidRecord):
        store.accept_attempt(replace(acceptance(clock), **change))
    with pytest.raises(NotFound):
        store.load_attempt(ATTEMPT)


def test_a_deletion_fence_is_refused_while_a_lease_is_live_and_leaves_no_partial_fence(
    store: SessionStore, clock: ManualClock, reopen: Reopen
) -> None:
    setup_session(store, clock)
    accepted = store.accept_attempt(acceptance(clock))
    session_before = store.load_session(SESSION)
    with pytest.raises(Conflict):
        store.fence_session_deletion(SESSION)
    store = reopen(store)
    assert store.load_session(SESSION) == session_before
    assert store.load_session(SESSION).status == SessionStatus.ACTIVE
    assert store.load_attempt(ATTEMPT) == accepted
    assert store.list_active_attempts(NS) == [accepted]
    # The attempt keeps working normally after the refused fence.
    beat = store.heartbeat_attempt(ATTEMPT, HOST, 1, clock.now() + LEASE_TTL)
    assert beat.owner_lease.lease_expires_at == clock.now() + LEASE_TTL


def test_a_deletion_fence_succeeds_once_no_lease_is_live_and_is_idempotent(
    store: SessionStore, clock: ManualClock, reopen: Reopen
) -> None:
    setup_session(store, clock)
    store.accept_attempt(acceptance(clock))
    clock.advance(LEASE_TTL)
    fenced = store.fence_session_deletion(SESSION)
    assert fenced.status == SessionStatus.DELETING
    store = reopen(store)
    assert store.fence_session_deletion(SESSION).status == SessionStatus.DELETING
    assert store.load_session(SESSION).status == SessionStatus.DELETING
    with pytest.raises(Conflict):
        store.accept_attempt(acceptance(clock, "subattempt_2", "other-bg-0000bbbb"))


# -- terminal commit and replay ------------------------------------------------------------


def test_exact_inline_terminal_replay_is_ok(
    store: SessionStore, clock: ManualClock, reopen: Reopen
) -> None:
    setup_session(store, clock)
    first, commit = committed(store, clock)
    fingerprint = storage.terminal_fingerprint(commit)
    assert first == replace(commit.record, terminal_fingerprint=fingerprint)
    assert store.list_active_attempts(NS) == []
    assert store.list_pending_attempts(NS) == [first]
    store = reopen(store)
    clock.advance(1)
    assert store.commit_terminal(commit) == first
    assert store.load_attempt(ATTEMPT) == first


def _forge_content(c: TerminalCommit) -> TerminalCommit:
    ref = c.record.result_ref
    assert ref is not None
    return replace(c, record=replace(c.record, result_ref=replace(ref, content="forged-result!")))


def _forge_generation(c: TerminalCommit) -> TerminalCommit:
    lease = c.record.owner_lease
    bumped = replace(lease, fencing_generation=lease.fencing_generation + 1)
    return replace(c, record=replace(c.record, owner_lease=bumped))


def _forge_status(c: TerminalCommit) -> TerminalCommit:
    return replace(c, record=replace(c.record, execution_status=ExecutionStatus.FAILED))


def _forge_terminal_at(c: TerminalCommit) -> TerminalCommit:
    at = (c.record.terminal_at or 0.0) + 1
    return replace(c, record=replace(c.record, terminal_at=at, updated_at=at))


@pytest.mark.parametrize(
    "forge",
    [_forge_content, _forge_generation, _forge_status, _forge_terminal_at],
    ids=["content", "fencing-generation", "status", "terminal-at"],
)
def test_a_forged_terminal_replay_is_conflict(
    store: SessionStore,
    clock: ManualClock,
    reopen: Reopen,
    forge: Callable[[TerminalCommit], TerminalCommit],
) -> None:
    setup_session(store, clock)
    first, commit = committed(store, clock)
    store = reopen(store)
    with pytest.raises(Conflict):
        store.commit_terminal(forge(commit))
    assert store.load_attempt(ATTEMPT) == first


def test_an_expired_owner_cannot_update_heartbeat_or_make_the_first_terminal_commit(
    store: SessionStore, clock: ManualClock, reopen: Reopen
) -> None:
    setup_session(store, clock)
    starting = drive(store, store.accept_attempt(acceptance(clock)), clock, ["starting"])
    clock.advance(LEASE_TTL)  # lease_expires_at == now: expired
    store = reopen(store)
    with pytest.raises(StaleFence):
        store.update_attempt_execution(moved(starting, "running", clock, child_run_id="c"))
    with pytest.raises(StaleFence):
        store.heartbeat_attempt(ATTEMPT, HOST, 1, clock.now() + LEASE_TTL)
    with pytest.raises(StaleFence):
        store.commit_terminal(terminal(starting, clock, ExecutionStatus.FAILED))
    assert issubclass(StaleFence, Conflict)
    assert store.load_attempt(ATTEMPT) == starting
    assert store.list_active_attempts(NS) == [starting]


def test_a_terminal_committed_before_expiry_replays_after_it(
    store: SessionStore, clock: ManualClock, reopen: Reopen
) -> None:
    setup_session(store, clock)
    first, commit = committed(store, clock)
    clock.advance(LEASE_TTL + 1)
    store = reopen(store)
    assert store.commit_terminal(commit) == first
    assert store.reconcile(NS) == []
    assert store.load_attempt(ATTEMPT) == first


def test_a_first_terminal_commit_by_another_host_is_stale_fence(
    store: SessionStore, clock: ManualClock
) -> None:
    setup_session(store, clock)
    running = drive(store, store.accept_attempt(acceptance(clock)), clock)
    foreign = replace(running, owner_lease=replace(running.owner_lease, host_instance_id="host-x"))
    with pytest.raises(StaleFence):
        store.commit_terminal(terminal(foreign, clock))
    assert store.load_attempt(ATTEMPT) == running


# -- claims --------------------------------------------------------------------------------


def test_a_second_claim_while_the_first_is_live_is_delivery_claimed(
    store: SessionStore, clock: ManualClock, reopen: Reopen
) -> None:
    setup_session(store, clock)
    committed(store, clock)
    first = claim(clock, "claim-1")
    claimed = store.claim_delivery(ATTEMPT, first)
    assert claimed.delivery_status == DeliveryStatus.CLAIMED
    assert claimed.delivery_claim == first
    store = reopen(store)
    assert store.claim_delivery(ATTEMPT, first) == claimed
    with pytest.raises(DeliveryClaimed):
        store.claim_delivery(ATTEMPT, claim(clock, "claim-2"))
    assert store.load_attempt(ATTEMPT) == claimed


def test_claiming_an_active_attempt_or_with_a_past_deadline_is_conflict(
    store: SessionStore, clock: ManualClock
) -> None:
    setup_session(store, clock)
    running = drive(store, store.accept_attempt(acceptance(clock)), clock)
    with pytest.raises(Conflict):
        store.claim_delivery(ATTEMPT, claim(clock, "claim-1"))
    assert store.load_attempt(ATTEMPT) == running
    first = store.commit_terminal(terminal(running, clock))
    with pytest.raises(Conflict):
        store.claim_delivery(ATTEMPT, claim(clock, "claim-1", ttl=0))
    assert store.load_attempt(ATTEMPT) == first


def test_a_retryable_release_is_ok_and_can_be_repeated(
    store: SessionStore, clock: ManualClock, reopen: Reopen
) -> None:
    setup_session(store, clock)
    committed(store, clock)
    store.claim_delivery(ATTEMPT, claim(clock, "claim-1"))
    released = store.release_delivery(ATTEMPT, "claim-1", Retryable())
    assert released.delivery_status == DeliveryStatus.UNDELIVERED
    assert released.delivery_claim is None
    assert released.automatic_continuation_suppressed_by_run_id is None
    store = reopen(store)
    assert store.release_delivery(ATTEMPT, "claim-1", Retryable()) == released
    second = claim(clock, "claim-2")
    assert store.claim_delivery(ATTEMPT, second).delivery_claim == second


def test_consumer_terminated_on_an_undelivered_record_is_rejected(
    store: SessionStore, clock: ManualClock
) -> None:
    setup_session(store, clock)
    first, _ = committed(store, clock)
    with pytest.raises(Conflict):
        store.release_delivery(ATTEMPT, "claim-1", ConsumerTerminated(run_id="consumer-run"))
    after = store.load_attempt(ATTEMPT)
    assert after == first
    assert after.automatic_continuation_suppressed_by_run_id is None


def test_acknowledge_delivers_once_and_a_later_claim_is_delivered(
    store: SessionStore, clock: ManualClock, reopen: Reopen
) -> None:
    setup_session(store, clock)
    committed(store, clock)
    store.claim_delivery(ATTEMPT, claim(clock, "claim-1"))
    delivered = store.acknowledge_delivery(ATTEMPT, "claim-1")
    assert delivered.delivery_status == DeliveryStatus.DELIVERED
    assert delivered.delivered_claim_id == "claim-1"
    store = reopen(store)
    assert store.acknowledge_delivery(ATTEMPT, "claim-1") == delivered
    with pytest.raises(Delivered):
        store.claim_delivery(ATTEMPT, claim(clock, "claim-2"))
    with pytest.raises(Conflict):
        store.acknowledge_delivery(ATTEMPT, "claim-2")
    assert store.load_attempt(ATTEMPT) == delivered
    assert store.list_pending_attempts(NS) == []


# -- continuation --------------------------------------------------------------------------


def test_a_continuation_with_a_stale_head_is_conflict(
    store: SessionStore, clock: ManualClock
) -> None:
    setup_session(store, clock)
    first, _ = committed(store, clock)
    # A later run makes the parent run a stale head.
    store.admit_run(plain_run(clock, "run-2"))
    store.transition_run(SESSION, "run-2", RunStatus.CANCELLED, admission_id="adm-run-2")
    with pytest.raises(Conflict):
        store.acquire_continuation(continuation(first, clock, expected_head_run_id=PARENT_RUN))
    assert store.load_attempt(ATTEMPT) == first
    assert continuation_runs(store) == []


def _forged_cause(r: AttemptRecord, clock: ManualClock) -> storage.AcquireContinuation:
    good = continuation(r, clock)
    return replace(good, cause=replace(good.cause, agent_id="forged-agent"))


def _forged_digest(r: AttemptRecord, clock: ManualClock) -> storage.AcquireContinuation:
    good = continuation(r, clock)
    return replace(good, cause=replace(good.cause, result_digest=storage.result_digest("x")))


def _forged_input(r: AttemptRecord, clock: ManualClock) -> storage.AcquireContinuation:
    return continuation(r, clock, parts=(InputPart(text="unrelated input"),))


def _empty_input(r: AttemptRecord, clock: ManualClock) -> storage.AcquireContinuation:
    return continuation(r, clock, parts=())


def _forged_run(**changes: Any) -> Callable[[AttemptRecord, ManualClock], Any]:
    def forge(r: AttemptRecord, clock: ManualClock) -> storage.AcquireContinuation:
        good = continuation(r, clock)
        return replace(good, run=replace(good.run, **changes))

    return forge


FORGERIES = {
    "forged-cause": _forged_cause,
    "forged-result-digest": _forged_digest,
    "forged-input": _forged_input,
    "empty-input": _empty_input,
    "wrong-trigger-type": _forged_run(trigger_type=None),
    "wrong-parent-run": _forged_run(parent_run_id="another-run"),
    "wrong-profile": _forged_run(profile="elsewhere"),
    "wrong-attempt-metadata": _forged_run(metadata={"async_subagent.attempt_id": "subattempt_9"}),
    "wrong-trace": _forged_run(trace_context={"traceparent": "forged"}),
}


@pytest.mark.parametrize("forge", FORGERIES.values(), ids=FORGERIES.keys())
def test_a_forged_continuation_is_conflict_and_admits_nothing(
    store: SessionStore,
    clock: ManualClock,
    forge: Callable[[AttemptRecord, ManualClock], storage.AcquireContinuation],
) -> None:
    setup_session(store, clock)
    first, _ = committed(store, clock)
    with pytest.raises(Conflict):
        store.acquire_continuation(forge(first, clock))
    assert store.load_attempt(ATTEMPT) == first
    assert continuation_runs(store) == []


def test_a_continuation_admits_exactly_one_run_and_leaves_the_record_claimed_for_it(
    store: SessionStore, clock: ManualClock, reopen: Reopen
) -> None:
    setup_session(store, clock)
    first, commit = committed(store, clock)
    request = continuation(first, clock, expected_head_run_id=PARENT_RUN)
    receipt = store.acquire_continuation(request)
    assert receipt.idempotent_replay is False
    assert receipt.cause == request.cause
    assert receipt.run.run_id == request.run.run_id
    assert receipt.run.trigger_type == storage.ASYNC_SUBAGENT_RESULT
    assert receipt.run.status == RunStatus.ADMITTED
    assert receipt.run.input == request.run.input
    # Delivered means consumed: the result is claimed for the run until it completes.
    assert receipt.record.delivery_status == DeliveryStatus.CLAIMED
    assert receipt.record.delivery_claim == storage.DeliveryClaim(
        claim_id=request.claim_id,
        deadline=request.claim_deadline,
        continuation_run_id=request.run.run_id,
    )
    assert receipt.record.continuation_run_id == request.run.run_id
    assert receipt.record.delivered_claim_id is None
    assert receipt.record.terminal_fingerprint == first.terminal_fingerprint

    store = reopen(store)
    assert store.load_attempt(ATTEMPT) == receipt.record
    assert store.load_run(SESSION, request.run.run_id) == receipt.run
    assert continuation_runs(store) == [request.run.run_id]
    assert [r.attempt_id for r in store.list_pending_attempts(NS)] == [ATTEMPT]

    # Exact replay: the same receipt, marked as a replay, and still one run.
    replay = store.acquire_continuation(request)
    assert replay == replace(receipt, idempotent_replay=True)
    assert continuation_runs(store) == [request.run.run_id]

    # Terminal replay while claimed is Ok and does not undo the claim.
    assert store.commit_terminal(commit) == receipt.record


def test_a_second_different_continuation_for_the_same_attempt_is_delivered(
    store: SessionStore, clock: ManualClock, reopen: Reopen
) -> None:
    setup_session(store, clock)
    first, _ = committed(store, clock)
    request = continuation(first, clock)
    receipt = store.acquire_continuation(request)
    run_id, admission = request.run.run_id, f"adm-{request.run.run_id}"
    store.transition_run(SESSION, run_id, RunStatus.RUNNING, admission_id=admission)
    store.transition_run(SESSION, run_id, RunStatus.COMPLETED, admission_id=admission)
    store = reopen(store)
    delivered = store.load_attempt(ATTEMPT)
    assert delivered.delivery_status == DeliveryStatus.DELIVERED
    assert delivered.delivered_to_run_id == run_id
    second = continuation(
        first, clock, run_id="continuation-run-2", claim_id="claim-2", restore_from_run_id=run_id
    )
    with pytest.raises(Delivered):
        store.acquire_continuation(second)
    forged_replay = continuation(first, clock, parts=(InputPart(text="forged replay input"),))
    with pytest.raises(Conflict):
        store.acquire_continuation(forged_replay)
    assert store.load_attempt(ATTEMPT) == delivered
    assert continuation_runs(store) == [run_id]
    assert receipt.record.delivery_status == DeliveryStatus.CLAIMED


def test_a_continuation_while_another_run_is_live_is_run_conflict(
    store: SessionStore, clock: ManualClock
) -> None:
    setup_session(store, clock)
    first, _ = committed(store, clock)
    store.admit_run(plain_run(clock, "live-run"))
    with pytest.raises(RunConflict):
        store.acquire_continuation(continuation(first, clock, restore_from_run_id="live-run"))
    assert store.load_attempt(ATTEMPT) == first
    assert continuation_runs(store) == []


def test_a_continuation_run_cannot_be_admitted_directly(
    store: SessionStore, clock: ManualClock
) -> None:
    setup_session(store, clock)
    first, _ = committed(store, clock)
    with pytest.raises(Conflict):
        store.admit_run(continuation(first, clock).run)
    assert continuation_runs(store) == []


def test_a_continuation_of_an_artifact_result_needs_the_full_artifact_content(
    store: SessionStore, clock: ManualClock
) -> None:
    setup_session(store, clock)
    running = drive(store, store.accept_attempt(acceptance(clock)), clock)
    content = "oversized-result-" * 64
    commit = artifact_terminal(
        running, clock, artifact_ref="artifact:1", content=content, limits=LIMITS
    )
    first = store.commit_terminal(commit)
    with pytest.raises(Conflict):  # derived from the preview only
        store.acquire_continuation(continuation(first, clock))
    receipt = store.acquire_continuation(continuation(first, clock, artifact_content=content))
    assert content in receipt.run.input[0].text
    assert receipt.record.delivery_status == DeliveryStatus.CLAIMED


def test_a_continuation_of_an_expired_result_carries_the_expiry_summary(
    store: SessionStore, clock: ManualClock
) -> None:
    setup_session(store, clock)
    committed(store, clock, content="secret durable result")
    clock.advance(86_400)
    [expired] = store.expire_retention(NS)
    assert expired.retention_status == RetentionStatus.EXPIRED
    receipt = store.acquire_continuation(continuation(expired, clock))
    text = receipt.run.input[0].text
    assert "secret durable result" not in text
    assert storage.result_digest("secret durable result") in text


def test_a_continuation_past_the_retention_deadline_carries_the_summary_before_expiry_runs(
    store: SessionStore, clock: ManualClock
) -> None:
    # Content whose deadline has passed is never delivered, even if the batched
    # expiry has not removed it yet: the store derives the expiry summary.
    setup_session(store, clock)
    record, _ = committed(store, clock, content="stale durable result")
    clock.advance(86_400)
    with pytest.raises(Conflict):
        store.acquire_continuation(continuation(record, clock))
    summary = storage.continuation_input(storage.retained_view(record, clock.now()), None)
    receipt = store.acquire_continuation(continuation(record, clock, parts=summary))
    text = receipt.run.input[0].text
    assert "stale durable result" not in text
    assert storage.result_digest("stale durable result") in text


def test_an_artifact_continuation_past_its_deadline_carries_the_summary_not_the_content(
    store: SessionStore, clock: ManualClock
) -> None:
    setup_session(store, clock)
    running = drive(store, store.accept_attempt(acceptance(clock)), clock)
    content = "oversized-result-" * 64
    first = store.commit_terminal(
        artifact_terminal(running, clock, artifact_ref="artifact:1", content=content, limits=LIMITS)
    )
    clock.advance(86_400)
    with pytest.raises(Conflict):
        store.acquire_continuation(continuation(first, clock, artifact_content=content))
    summary = storage.continuation_input(storage.retained_view(first, clock.now()), None)
    receipt = store.acquire_continuation(continuation(first, clock, parts=summary))
    assert content not in receipt.run.input[0].text


# -- expired claims, live consumers and suppression ----------------------------------------


def test_an_expired_claim_held_by_a_live_consumer_survives_until_the_consumer_is_cancelled(
    store: SessionStore, clock: ManualClock, reopen: Reopen
) -> None:
    setup_session(store, clock)
    first, _ = committed(store, clock)
    consumer = "consumer-run"
    store.admit_run(plain_run(clock, consumer, ttl=600))
    held = claim(clock, "claim-1", ttl=10, continuation_run_id=consumer)
    store.claim_delivery(ATTEMPT, held)
    clock.advance(20)  # the claim deadline passed; the consumer's admission is live

    with pytest.raises(DeliveryClaimed):
        store.claim_delivery(ATTEMPT, claim(clock, "steal"))
    store.reconcile(NS)
    store = reopen(store)
    kept = store.load_attempt(ATTEMPT)
    assert kept.delivery_status == DeliveryStatus.CLAIMED
    assert kept.delivery_claim == held

    # The consumer is cancelled: its terminal commit releases the claim and
    # suppresses automatic continuation, so an automatic claim is refused.
    store.transition_run(SESSION, consumer, RunStatus.CANCELLED, admission_id=f"adm-{consumer}")
    store = reopen(store)
    suppressed = store.load_attempt(ATTEMPT)
    assert suppressed.delivery_status == DeliveryStatus.UNDELIVERED
    assert suppressed.delivery_claim is None
    assert suppressed.automatic_continuation_suppressed_by_run_id == consumer
    with pytest.raises(Conflict):
        store.claim_delivery(ATTEMPT, claim(clock, "automatic"), automatic=True)
    with pytest.raises(Conflict):
        store.acquire_continuation(continuation(first, clock, restore_from_run_id=consumer))
    assert continuation_runs(store) == []

    # An explicit later claim (no durable run) and acknowledge delivers and clears it.
    explicit = claim(clock, "explicit")
    assert store.claim_delivery(ATTEMPT, explicit).delivery_claim == explicit
    delivered = store.acknowledge_delivery(ATTEMPT, "explicit")
    assert delivered.delivery_status == DeliveryStatus.DELIVERED
    assert delivered.delivered_claim_id == "explicit"
    assert delivered.delivered_to_run_id is None
    assert delivered.automatic_continuation_suppressed_by_run_id is None


def test_a_failed_consumers_terminal_commit_releases_and_suppresses_its_claim(
    store: SessionStore, clock: ManualClock
) -> None:
    setup_session(store, clock)
    committed(store, clock)
    consumer = "consumer-run"
    store.admit_run(plain_run(clock, consumer, ttl=600))
    store.claim_delivery(ATTEMPT, claim(clock, "claim-1", ttl=10, continuation_run_id=consumer))
    store.transition_run(SESSION, consumer, RunStatus.FAILED, admission_id=f"adm-{consumer}")
    released = store.load_attempt(ATTEMPT)
    assert released.delivery_status == DeliveryStatus.UNDELIVERED
    assert released.automatic_continuation_suppressed_by_run_id == consumer
    clock.advance(20)
    assert store.reconcile(NS) == []  # nothing left to settle


def test_a_claim_whose_consumer_completed_is_acknowledged_instead_of_stolen(
    store: SessionStore, clock: ManualClock
) -> None:
    setup_session(store, clock)
    committed(store, clock)
    consumer = "consumer-run"
    admission = f"adm-{consumer}"
    store.admit_run(plain_run(clock, consumer, ttl=600))
    store.claim_delivery(ATTEMPT, claim(clock, "claim-1", ttl=10, continuation_run_id=consumer))
    store.transition_run(SESSION, consumer, RunStatus.RUNNING, admission_id=admission)
    store.transition_run(SESSION, consumer, RunStatus.COMPLETED, admission_id=admission)
    clock.advance(20)
    with pytest.raises(Delivered):
        store.claim_delivery(ATTEMPT, claim(clock, "steal"))
    delivered = store.load_attempt(ATTEMPT)
    assert delivered.delivery_status == DeliveryStatus.DELIVERED
    assert delivered.delivered_claim_id == "claim-1"
    assert delivered.delivered_to_run_id == consumer


def test_an_expired_claim_without_a_consumer_run_is_released_by_reconcile(
    store: SessionStore, clock: ManualClock
) -> None:
    setup_session(store, clock)
    committed(store, clock)
    store.claim_delivery(ATTEMPT, claim(clock, "claim-1", ttl=10))
    clock.advance(10)
    assert [r.attempt_id for r in store.reconcile(NS)] == [ATTEMPT]
    released = store.load_attempt(ATTEMPT)
    assert released.delivery_status == DeliveryStatus.UNDELIVERED
    assert released.automatic_continuation_suppressed_by_run_id is None
    assert store.reconcile(NS) == []


# -- artifacts and retention ---------------------------------------------------------------

CONTENT = "oversized-result-" * 64
SIZE = len(CONTENT.encode())
LIMITS = ArtifactLimits(max_single_bytes=1_000_000, max_retained_bytes=10_000_000)


def _running(store: SessionStore, clock: ManualClock, n: int) -> AttemptRecord:
    record = acceptance(clock, f"subattempt_{n}", f"researcher-bg-{n:08x}")
    return drive(store, store.accept_attempt(record), clock)


def test_an_artifact_commit_without_limits_is_conflict(
    store: SessionStore, clock: ManualClock
) -> None:
    setup_session(store, clock)
    running = _running(store, clock, 1)
    commit = artifact_terminal(running, clock, artifact_ref="artifact:1", content=CONTENT)
    with pytest.raises(Conflict):
        store.commit_terminal(commit)
    assert store.load_attempt(running.attempt_id) == running
    with pytest.raises(NotFound):
        store.load_artifact("artifact:1")


def test_an_artifact_over_the_single_limit_is_quota_exceeded(
    store: SessionStore, clock: ManualClock
) -> None:
    setup_session(store, clock)
    running = _running(store, clock, 1)
    tight = ArtifactLimits(max_single_bytes=SIZE - 1, max_retained_bytes=SIZE)
    commit = artifact_terminal(
        running, clock, artifact_ref="artifact:1", content=CONTENT, limits=tight
    )
    with pytest.raises(QuotaExceeded):
        store.commit_terminal(commit)
    assert store.load_attempt(running.attempt_id) == running
    with pytest.raises(NotFound):
        store.load_artifact("artifact:1")


def test_an_artifact_over_the_aggregate_limit_is_quota_exceeded(
    store: SessionStore, clock: ManualClock, reopen: Reopen
) -> None:
    setup_session(store, clock)
    aggregate = ArtifactLimits(max_single_bytes=SIZE, max_retained_bytes=2 * SIZE - 1)
    one = _running(store, clock, 1)
    two = _running(store, clock, 2)
    store.commit_terminal(
        artifact_terminal(one, clock, artifact_ref="artifact:1", content=CONTENT, limits=aggregate)
    )
    store = reopen(store)
    over = artifact_terminal(
        two, clock, artifact_ref="artifact:2", content=CONTENT, limits=aggregate
    )
    with pytest.raises(QuotaExceeded):
        store.commit_terminal(over)
    assert store.load_attempt(two.attempt_id) == two
    with pytest.raises(NotFound):
        store.load_artifact("artifact:2")


def test_expired_artifacts_do_not_count_against_the_aggregate_limit(
    store: SessionStore, clock: ManualClock
) -> None:
    setup_session(store, clock)
    aggregate = ArtifactLimits(max_single_bytes=SIZE, max_retained_bytes=2 * SIZE - 1)
    one = _running(store, clock, 1)
    store.commit_terminal(
        artifact_terminal(
            one, clock, artifact_ref="artifact:1", content=CONTENT, limits=aggregate, retention=10
        )
    )
    clock.advance(10)  # artifact:1 expired at store time, even before expire_retention
    two = _running(store, clock, 2)
    committed_two = store.commit_terminal(
        artifact_terminal(two, clock, artifact_ref="artifact:2", content=CONTENT, limits=aggregate)
    )
    assert committed_two.retention_status == RetentionStatus.ARTIFACT
    assert store.load_artifact("artifact:2").content == CONTENT


def test_an_artifact_replay_with_changed_bytes_under_the_same_ref_is_conflict(
    store: SessionStore, clock: ManualClock, reopen: Reopen
) -> None:
    setup_session(store, clock)
    running = _running(store, clock, 1)
    commit = artifact_terminal(
        running, clock, artifact_ref="artifact:1", content=CONTENT, limits=LIMITS
    )
    first = store.commit_terminal(commit)
    assert commit.artifact is not None
    assert store.load_artifact("artifact:1") == commit.artifact
    store = reopen(store)
    assert store.commit_terminal(commit) == first
    changed = replace(commit, artifact=replace(commit.artifact, content="x" * SIZE))
    with pytest.raises(Conflict):
        store.commit_terminal(changed)
    assert store.load_artifact("artifact:1") == commit.artifact
    assert store.load_attempt(running.attempt_id) == first


def test_retention_expiry_waits_for_the_deadline_then_expires_once(
    store: SessionStore, clock: ManualClock, reopen: Reopen
) -> None:
    setup_session(store, clock)
    running = _running(store, clock, 1)
    commit = artifact_terminal(
        running, clock, artifact_ref="artifact:1", content=CONTENT, limits=LIMITS, retention=60
    )
    first = store.commit_terminal(commit)

    clock.advance(59)
    assert store.expire_retention(NS) == []
    assert store.load_attempt(running.attempt_id) == first
    assert store.load_artifact("artifact:1").content == CONTENT

    clock.advance(2)
    store = reopen(store)
    [expired] = store.expire_retention(NS)
    assert expired.attempt_id == running.attempt_id
    assert expired.retention_status == RetentionStatus.EXPIRED
    assert expired.execution_status == ExecutionStatus.COMPLETED
    assert expired.delivery_status == DeliveryStatus.UNDELIVERED
    assert expired.terminal_fingerprint == first.terminal_fingerprint
    assert expired.terminal_at == first.terminal_at
    assert expired.result_ref is not None and first.result_ref is not None
    assert expired.result_ref.content is None
    assert expired.result_ref.digest == first.result_ref.digest
    assert expired.result_ref.size_bytes == SIZE
    assert store.load_attempt(running.attempt_id) == expired
    with pytest.raises(NotFound):
        store.load_artifact("artifact:1")

    assert store.commit_terminal(commit) == expired
    assert store.expire_retention(NS) == []
    assert store.load_attempt(running.attempt_id) == expired


def test_retention_expiry_honours_its_batch_limit(store: SessionStore, clock: ManualClock) -> None:
    setup_session(store, clock)
    for n in range(3):
        running = _running(store, clock, n)
        store.commit_terminal(terminal(running, clock, retention=10))
    clock.advance(10)
    assert len(store.expire_retention(NS, limit=2)) == 2
    assert len(store.expire_retention(NS, limit=2)) == 1
    assert store.expire_retention(NS, limit=2) == []


# -- reconcile -----------------------------------------------------------------------------


def test_reconcile_keeps_a_live_foreign_owner_and_fails_it_after_expiry(
    store: SessionStore, clock: ManualClock, reopen: Reopen
) -> None:
    setup_session(store, clock)
    owner = "foreign-host"
    accepted = store.accept_attempt(acceptance(clock, host=owner, generation=7, ttl=60))
    assert store.reconcile(NS) == []
    assert store.load_attempt(ATTEMPT) == accepted

    with pytest.raises(StaleFence):
        store.heartbeat_attempt(ATTEMPT, "stale-host", 7, clock.now() + 120)
    with pytest.raises(StaleFence):
        store.heartbeat_attempt(ATTEMPT, owner, 6, clock.now() + 120)
    assert store.load_attempt(ATTEMPT) == accepted
    beat = store.heartbeat_attempt(ATTEMPT, owner, 7, clock.now() + 120)
    assert beat.owner_lease.heartbeat_at == clock.now()

    clock.advance(120)
    store = reopen(store)
    with pytest.raises(StaleFence):  # an expired owner never revives
        store.heartbeat_attempt(ATTEMPT, owner, 7, clock.now() + 120)
    [lost] = store.reconcile(NS)
    assert lost.attempt_id == ATTEMPT
    assert lost.execution_status == ExecutionStatus.FAILED
    assert lost.failure_category == "host_process_lost"
    assert lost.result_ref is not None and lost.result_ref.error
    assert lost.result_ref.digest == storage.result_digest(None, lost.result_ref.error)
    assert lost.retention_expires_at is not None and lost.retention_expires_at > clock.now()
    assert lost.terminal_at is not None
    assert lost.terminal_fingerprint == storage.terminal_fingerprint(TerminalCommit(record=lost))
    assert store.load_attempt(ATTEMPT) == lost
    assert store.list_active_attempts(NS) == []
    assert store.list_pending_attempts(NS) == [lost]
    assert store.reconcile(NS) == []
    # The synthesized terminal replays exactly, and only exactly.
    assert store.commit_terminal(TerminalCommit(record=lost)) == lost
    forged = replace(lost, result_ref=replace(lost.result_ref, error="forged restart failure"))
    with pytest.raises(Conflict):
        store.commit_terminal(TerminalCommit(record=forged))


def test_heartbeat_extends_the_lease_only_forward_of_now(
    store: SessionStore, clock: ManualClock
) -> None:
    setup_session(store, clock)
    accepted = store.accept_attempt(acceptance(clock))
    with pytest.raises(Conflict):
        store.heartbeat_attempt(ATTEMPT, HOST, 1, clock.now())
    assert store.load_attempt(ATTEMPT) == accepted
    clock.advance(10)
    beat = store.heartbeat_attempt(ATTEMPT, HOST, 1, clock.now() + LEASE_TTL)
    assert beat.owner_lease == replace(
        accepted.owner_lease, heartbeat_at=clock.now(), lease_expires_at=clock.now() + LEASE_TTL
    )
    clock.advance(LEASE_TTL - 1)
    assert store.reconcile(NS) == []  # the heartbeat moved the expiry


def test_heartbeat_of_a_terminal_attempt_is_conflict(
    store: SessionStore, clock: ManualClock
) -> None:
    setup_session(store, clock)
    first, _ = committed(store, clock)
    with pytest.raises(Conflict):
        store.heartbeat_attempt(ATTEMPT, HOST, 1, clock.now() + LEASE_TTL)
    assert store.load_attempt(ATTEMPT) == first


# -- deletion fence ------------------------------------------------------------------------

_encode = msgspec.msgpack.Encoder(order="deterministic").encode


def _kernel(store: SessionStore) -> KernelStore:
    assert isinstance(store, KernelStore)
    return store


def _locate(
    store: SessionStore, kind: type[Any], match: Callable[[Any], bool]
) -> tuple[str, bytes]:
    """The one ``(table, key)`` whose stored value decodes to a matching ``kind``."""
    kernel = _kernel(store)
    decoder = msgspec.msgpack.Decoder(kind)

    def scan(txn: storage.Txn) -> list[tuple[str, bytes]]:
        hits = []
        for table in kernel.TABLES:
            for key, value in txn.scan(table):
                try:
                    decoded = decoder.decode(value)
                except (msgspec.DecodeError, msgspec.ValidationError):
                    continue
                if match(decoded):
                    hits.append((table, key))
        return hits

    hits = kernel._backend.read(scan)
    assert len(hits) == 1, hits
    return hits[0]


def _force_deleting(store: SessionStore, session_id: str) -> None:
    """Put a session into ``deleting`` below the contract, as a crashed deleter
    might have left it, so the fence can be checked against a live lease."""
    session = store.load_session(session_id)
    table, key = _locate(store, SessionRecord, lambda s: s == session)
    fenced = _encode(replace(session, status=SessionStatus.DELETING))
    _kernel(store)._backend.write(lambda t: t.put(table, key, fenced))
    assert store.load_session(session_id).status == SessionStatus.DELETING


def test_a_session_being_deleted_makes_heartbeat_update_and_terminal_fail_closed(
    store: SessionStore, clock: ManualClock, reopen: Reopen
) -> None:
    setup_session(store, clock)
    done, commit = committed(store, clock, "subattempt_done", "done-bg-0000dddd")
    running = drive(store, store.accept_attempt(acceptance(clock)), clock)
    _force_deleting(store, SESSION)
    store = reopen(store)

    with pytest.raises(Conflict):
        store.heartbeat_attempt(ATTEMPT, HOST, 1, clock.now() + LEASE_TTL)
    with pytest.raises(Conflict):
        store.update_attempt_execution(moved(running, "waiting", clock))
    with pytest.raises(Conflict):
        store.commit_terminal(terminal(running, clock))
    with pytest.raises(Conflict):
        store.accept_attempt(acceptance(clock, "subattempt_new", "new-bg-0000eeee"))
    with pytest.raises(Conflict):
        store.claim_delivery("subattempt_done", claim(clock, "auto"), automatic=True)
    with pytest.raises(Conflict):
        store.acquire_continuation(continuation(done, clock))
    assert store.load_attempt(ATTEMPT) == running
    assert store.load_attempt("subattempt_done") == done
    assert continuation_runs(store) == []
    # Exact terminal replay stays Ok.
    assert store.commit_terminal(commit) == done


# -- takeover ------------------------------------------------------------------------------


def test_takeover_by_a_newer_generation_after_expiry_fences_the_old_owner(
    store: SessionStore, clock: ManualClock, reopen: Reopen
) -> None:
    setup_session(store, clock)
    old = drive(store, store.accept_attempt(acceptance(clock)), clock)
    with pytest.raises(StaleFence):  # the lease is still live
        store.take_over_attempt(ATTEMPT, "host-b", 2, clock.now() + LEASE_TTL)
    clock.advance(LEASE_TTL)
    with pytest.raises(StaleFence):  # not a newer generation
        store.take_over_attempt(ATTEMPT, "host-b", 1, clock.now() + LEASE_TTL)
    assert store.load_attempt(ATTEMPT) == old

    new = store.take_over_attempt(ATTEMPT, "host-b", 2, clock.now() + LEASE_TTL)
    assert new.owner_lease.host_instance_id == "host-b"
    assert new.owner_lease.fencing_generation == 2
    assert new.owner_lease.lease_expires_at == clock.now() + LEASE_TTL
    assert new.execution_status == ExecutionStatus.RUNNING
    store = reopen(store)

    with pytest.raises(StaleFence):
        store.heartbeat_attempt(ATTEMPT, HOST, 1, clock.now() + LEASE_TTL)
    with pytest.raises(StaleFence):
        store.update_attempt_execution(moved(old, "waiting", clock))
    with pytest.raises(StaleFence):
        store.commit_terminal(terminal(old, clock))
    assert store.load_attempt(ATTEMPT) == new

    waiting = store.update_attempt_execution(moved(new, "waiting", clock))
    assert waiting.execution_status == ExecutionStatus.WAITING
    done = store.commit_terminal(terminal(waiting, clock))
    assert done.owner_lease.fencing_generation == 2


# -- illegal transitions -------------------------------------------------------------------

ILLEGAL = [
    (source, dest)
    for source in EXECUTION.states
    for dest in EXECUTION.states
    if source != dest and not EXECUTION.allows(source, dest)
]


def _reach(store: SessionStore, clock: ManualClock, state: str) -> AttemptRecord:
    record = store.accept_attempt(acceptance(clock))
    paths = {
        "accepted": [],
        "starting": ["starting"],
        "running": ["starting", "running"],
        "waiting": ["starting", "running", "waiting"],
        "completed": ["starting", "running"],
        "failed": [],
        "cancelled": [],
    }
    record = drive(store, record, clock, paths[state])
    if EXECUTION.is_terminal(state):
        record = store.commit_terminal(terminal(record, clock, state))
    assert record.execution_status == state
    return record


@pytest.mark.parametrize(("source", "dest"), ILLEGAL, ids=[f"{s}->{d}" for s, d in ILLEGAL])
def test_an_illegal_execution_transition_is_refused_and_changes_nothing(
    store: SessionStore, clock: ManualClock, source: str, dest: str
) -> None:
    setup_session(store, clock)
    before = _reach(store, clock, source)
    clock.advance(1)
    expected: type[Exception] = Conflict if EXECUTION.is_terminal(source) else IllegalTransition
    with pytest.raises(expected):
        if EXECUTION.is_terminal(dest):
            store.commit_terminal(terminal(before, clock, dest))
        else:
            store.update_attempt_execution(moved(before, dest, clock))
    assert store.load_attempt(ATTEMPT) == before


def test_an_update_may_change_nothing_but_status_child_run_and_time(
    store: SessionStore, clock: ManualClock
) -> None:
    setup_session(store, clock)
    accepted = store.accept_attempt(acceptance(clock))
    with pytest.raises(Conflict):
        store.update_attempt_execution(moved(accepted, "starting", clock, profile="other"))
    assert store.load_attempt(ATTEMPT) == accepted
    again = store.update_attempt_execution(moved(accepted, "starting", clock))
    assert store.update_attempt_execution(moved(again, "starting", clock)) == again


# -- bad bytes and a full map --------------------------------------------------------------


def test_corrupted_record_bytes_give_corrupt_record_and_lose_nothing_committed(
    store: SessionStore, clock: ManualClock, reopen: Reopen
) -> None:
    setup_session(store, clock)
    other, _ = committed(store, clock, "subattempt_other", "other-bg-0000ffff")
    victim, _ = committed(store, clock)
    table, key = _locate(store, AttemptRecord, lambda a: a == victim)
    _kernel(store)._backend.write(lambda t: t.put(table, key, b"\xc1garbage"))
    store = reopen(store)

    with pytest.raises(CorruptRecord) as info:
        store.load_attempt(ATTEMPT)
    assert info.value.fields.get("table") == table
    with pytest.raises(CorruptRecord):
        store.claim_delivery(ATTEMPT, claim(clock, "claim-1"))
    with pytest.raises(CorruptRecord):
        store.commit_terminal(terminal(victim, clock))
    # Failing closed means leaving the bad bytes alone, not repairing them.
    raw = _kernel(store)._backend.read(lambda t: t.get(table, key))
    assert raw == b"\xc1garbage"
    # Everything else committed is still there and still works.
    assert store.load_attempt("subattempt_other") == other
    assert store.load_session(SESSION).status == SessionStatus.ACTIVE
    assert store.claim_delivery("subattempt_other", claim(clock, "claim-2")).delivery_claim
    fresh = acceptance(clock, "subattempt_fresh", "fresh-bg-00001111")
    assert store.accept_attempt(fresh) == fresh


def test_a_full_lmdb_map_gives_storage_full_and_loses_nothing(
    tmp_path: Path, clock: ManualClock
) -> None:
    path = str(tmp_path / "tiny")
    store: SessionStore = LmdbSessionStore(path, clock=clock, map_size=256 * 1024)
    blob = "x" * 16_384
    created: list[SessionRecord] = []
    try:
        with pytest.raises(StorageFull):
            for n in range(1_000):
                session = replace(fresh_session(clock, f"session-{n:04d}"), metadata={"blob": blob})
                created.append(store.create_session(session))
        assert created, "the map filled before anything was committed"
        failed_id = f"session-{len(created):04d}"
        with pytest.raises(NotFound):
            store.load_session(failed_id)
        for session in created:
            assert store.load_session(session.session_id) == session
        store.close()
        store = LmdbSessionStore(path, clock=clock, map_size=256 * 1024)
        for session in created:
            assert store.load_session(session.session_id) == session
    finally:
        store.close()


# -- sessions ------------------------------------------------------------------------------


def test_creating_a_session_is_idempotent_and_a_different_one_is_already_exists(
    store: SessionStore, clock: ManualClock, reopen: Reopen
) -> None:
    session = fresh_session(clock)
    stored = store.create_session(session)
    assert stored == session
    store = reopen(store)
    assert store.create_session(session) == stored
    with pytest.raises(AlreadyExists):
        store.create_session(replace(session, profile="other"))
    assert store.load_session(SESSION) == stored
    with pytest.raises(NotFound):
        store.load_session("missing")


def test_sessions_are_listed_per_namespace_in_id_order(
    store: SessionStore, clock: ManualClock
) -> None:
    for sid in ("s-b", "s-a", "s-c"):
        store.create_session(fresh_session(clock, sid))
    store.create_session(fresh_session(clock, "s-0", namespace_id="elsewhere"))
    assert [s.session_id for s in store.list_sessions(NS)] == ["s-a", "s-b", "s-c"]
    assert [s.session_id for s in store.list_sessions("elsewhere")] == ["s-0"]


def test_session_status_moves_along_the_table_but_never_into_deleting(
    store: SessionStore, clock: ManualClock
) -> None:
    store.create_session(fresh_session(clock))
    assert store.update_session_status(SESSION, SessionStatus.INACTIVE).status == "inactive"
    assert store.update_session_status(SESSION, SessionStatus.INACTIVE).status == "inactive"
    assert store.update_session_status(SESSION, SessionStatus.ACTIVE).status == "active"
    with pytest.raises(Conflict):
        store.update_session_status(SESSION, SessionStatus.DELETING)
    assert store.load_session(SESSION).status == SessionStatus.ACTIVE
    with pytest.raises(NotFound):
        store.fence_session_deletion("missing")


# -- runs ----------------------------------------------------------------------------------


def test_admitting_runs_allocates_sequence_numbers_and_stamps_store_time(
    store: SessionStore, clock: ManualClock, reopen: Reopen
) -> None:
    setup_session(store, clock)
    clock.advance(5)
    receipt = store.admit_run(replace(plain_run(clock, "run-2"), created_at=1.0, updated_at=1.0))
    assert receipt.idempotent_replay is False
    assert receipt.run.status == RunStatus.ADMITTED
    assert receipt.run.created_at == receipt.run.updated_at == clock.now()
    store = reopen(store)
    runs = store.list_runs(SESSION)
    assert [r.run_id for r in runs] == [PARENT_RUN, "run-2"]
    assert runs[0].sequence_no < runs[1].sequence_no
    assert store.load_run(SESSION, "run-2") == receipt.run
    with pytest.raises(NotFound):
        store.load_run(SESSION, "missing")


def test_the_head_run_is_the_latest_admitted_run_of_the_session(
    store: SessionStore, clock: ManualClock, reopen: Reopen
) -> None:
    assert store.head_run_id(SESSION) is None
    setup_session(store, clock)
    assert store.head_run_id(SESSION) == PARENT_RUN
    clock.advance(LEASE_TTL)
    store.admit_run(plain_run(clock, "run-2"))
    store = reopen(store)
    assert store.head_run_id(SESSION) == "run-2" == store.list_runs(SESSION)[-1].run_id
    assert store.head_run_id("no-such-session") is None


def test_a_second_live_run_is_run_conflict_until_the_first_lease_expires(
    store: SessionStore, clock: ManualClock
) -> None:
    setup_session(store, clock)
    store.admit_run(plain_run(clock, "run-2"))
    with pytest.raises(RunConflict):
        store.admit_run(plain_run(clock, "run-3"))
    with pytest.raises(NotFound):
        store.load_run(SESSION, "run-3")
    clock.advance(LEASE_TTL)
    assert store.admit_run(plain_run(clock, "run-3")).run.run_id == "run-3"


def test_an_idempotency_key_replays_the_same_request_and_refuses_another(
    store: SessionStore, clock: ManualClock, reopen: Reopen
) -> None:
    setup_session(store, clock)
    run = plain_run(clock, "run-2")
    first = store.admit_run(run, idempotency_key="key-1")
    store = reopen(store)
    clock.advance(1)
    replay = store.admit_run(run, idempotency_key="key-1")
    assert replay == replace(first, idempotent_replay=True)
    with pytest.raises(storage.IdempotencyConflict):
        store.admit_run(plain_run(clock, "run-3", text="other"), idempotency_key="key-1")
    assert [r.run_id for r in store.list_runs(SESSION)] == [PARENT_RUN, "run-2"]


def test_a_run_cannot_be_admitted_into_an_inactive_session(
    store: SessionStore, clock: ManualClock
) -> None:
    setup_session(store, clock)
    store.update_session_status(SESSION, SessionStatus.INACTIVE)
    with pytest.raises(Conflict):
        store.admit_run(plain_run(clock, "run-2"))
    with pytest.raises(NotFound):
        store.load_run(SESSION, "run-2")


def test_run_transitions_are_fenced_by_the_admission_and_follow_the_table(
    store: SessionStore, clock: ManualClock
) -> None:
    setup_session(store, clock)
    store.admit_run(plain_run(clock, "run-2"))
    with pytest.raises(StaleFence):
        store.transition_run(SESSION, "run-2", RunStatus.RUNNING, admission_id="adm-other")
    running = store.transition_run(SESSION, "run-2", RunStatus.RUNNING, admission_id="adm-run-2")
    assert running.status == RunStatus.RUNNING
    again = store.transition_run(SESSION, "run-2", RunStatus.RUNNING, admission_id="adm-run-2")
    assert again == running
    done = store.transition_run(
        SESSION, "run-2", RunStatus.COMPLETED, admission_id="adm-run-2", output_preview="ok"
    )
    assert (done.status, done.output_preview) == (RunStatus.COMPLETED, "ok")
    with pytest.raises(IllegalTransition):
        store.transition_run(SESSION, "run-2", RunStatus.RUNNING, admission_id="adm-run-2")
    assert store.load_run(SESSION, "run-2") == done


def test_an_expired_admission_cannot_start_its_run(store: SessionStore, clock: ManualClock) -> None:
    setup_session(store, clock)
    store.admit_run(plain_run(clock, "run-2"))
    clock.advance(LEASE_TTL)
    with pytest.raises(StaleFence):
        store.transition_run(SESSION, "run-2", RunStatus.RUNNING, admission_id="adm-run-2")
    assert store.load_run(SESSION, "run-2").status == RunStatus.ADMITTED


def test_renewing_an_admission_needs_the_live_matching_lease(
    store: SessionStore, clock: ManualClock
) -> None:
    setup_session(store, clock)
    store.admit_run(plain_run(clock, "run-2"))
    with pytest.raises(StaleFence):
        store.renew_run_admission(SESSION, "run-2", "adm-other", clock.now() + 60)
    with pytest.raises(Conflict):
        store.renew_run_admission(SESSION, "run-2", "adm-run-2", clock.now())
    renewed = store.renew_run_admission(SESSION, "run-2", "adm-run-2", clock.now() + 60)
    assert renewed.admission_lease is not None
    assert renewed.admission_lease.lease_expires_at == clock.now() + 60
    clock.advance(60)
    with pytest.raises(StaleFence):
        store.renew_run_admission(SESSION, "run-2", "adm-run-2", clock.now() + 60)
    with pytest.raises(Conflict):
        store.renew_run_admission(SESSION, PARENT_RUN, f"adm-{PARENT_RUN}", clock.now() + 60)


# -- listing, drain and close --------------------------------------------------------------


def test_attempts_are_listed_by_acceptance_time_then_id_and_filtered_by_session(
    store: SessionStore, clock: ManualClock
) -> None:
    setup_session(store, clock)
    setup_session(store, clock, "session-2", "parent-run-2")
    store.accept_attempt(acceptance(clock, "subattempt_b", "b-bg-0000000b"))
    store.accept_attempt(acceptance(clock, "subattempt_a", "a-bg-0000000a"))
    clock.advance(1)
    store.accept_attempt(
        acceptance(
            clock,
            "subattempt_0",
            "c-bg-0000000c",
            session_id="session-2",
            parent_run_id="parent-run-2",
        )
    )
    ids = [a.attempt_id for a in store.list_attempts(NS)]
    assert ids == ["subattempt_a", "subattempt_b", "subattempt_0"]
    assert [a.attempt_id for a in store.list_attempts(NS, "session-2")] == ["subattempt_0"]
    assert store.list_attempts("elsewhere") == []
    running = drive(store, store.load_attempt("subattempt_a"), clock)
    store.commit_terminal(terminal(running, clock))
    assert [a.attempt_id for a in store.list_pending_attempts(NS)] == ["subattempt_a"]
    assert store.list_pending_attempts(NS, "session-2") == []
    active = {a.attempt_id for a in store.list_active_attempts(NS)}
    assert active == {"subattempt_b", "subattempt_0"}


def test_every_store_says_how_it_drains_and_the_default_fails_closed(
    store: SessionStore, clock: ManualClock
) -> None:
    setup_session(store, clock)
    store.drain()
    with pytest.raises(storage.Failed):
        SessionStore.drain(store)


def test_closing_is_idempotent_and_later_calls_get_a_typed_error(
    store: SessionStore, clock: ManualClock
) -> None:
    setup_session(store, clock)
    store.close()
    store.close()
    with pytest.raises(storage.StoreError):
        store.load_session(SESSION)


# -- bad input -----------------------------------------------------------------------------

NAN = float("nan")
INF = float("inf")


def _bad_calls(clock: ManualClock) -> dict[str, Callable[[SessionStore], object]]:
    good = acceptance(clock, "subattempt_bad", "bad-bg-0000bad0")
    lease = good.owner_lease
    return {
        "empty-attempt-id": lambda s: s.accept_attempt(replace(good, attempt_id="")),
        "nul-in-attempt-id": lambda s: s.accept_attempt(replace(good, attempt_id="a\x00b")),
        "nul-in-agent-id": lambda s: s.accept_attempt(replace(good, agent_id="a\x00b")),
        "nan-lease": lambda s: s.accept_attempt(
            replace(good, owner_lease=replace(lease, lease_expires_at=NAN))
        ),
        "infinite-lease": lambda s: s.accept_attempt(
            replace(good, owner_lease=replace(lease, lease_expires_at=INF))
        ),
        "zero-generation": lambda s: s.accept_attempt(
            replace(good, owner_lease=replace(lease, fencing_generation=0))
        ),
        "nan-heartbeat": lambda s: s.heartbeat_attempt(ATTEMPT, HOST, 1, NAN),
        "nan-claim-deadline": lambda s: s.claim_delivery(
            ATTEMPT, DeliveryClaim(claim_id="c", deadline=NAN)
        ),
        "empty-claim-id": lambda s: s.claim_delivery(ATTEMPT, claim(clock, "")),
        "unknown-attempt": lambda s: s.load_attempt("subattempt_missing"),
        "nul-in-session-id": lambda s: s.load_session("s\x00"),
        "commit-of-unknown-attempt": lambda s: s.commit_terminal(terminal(good, clock)),
        "artifact-with-wrong-digest": lambda s: s.commit_terminal(
            _wrong_digest(
                artifact_terminal(
                    moved(s.load_attempt(ATTEMPT), "completed", clock),
                    clock,
                    artifact_ref="artifact:bad",
                    content=CONTENT,
                    limits=LIMITS,
                )
            )
        ),
    }


def _wrong_digest(commit: TerminalCommit) -> TerminalCommit:
    assert commit.artifact is not None
    return replace(commit, artifact=replace(commit.artifact, digest=storage.result_digest("x")))


BAD_CALLS = sorted(_bad_calls(ManualClock()))


@pytest.mark.parametrize("name", BAD_CALLS)
def test_bad_input_gets_a_typed_error_and_loses_nothing(
    store: SessionStore, clock: ManualClock, name: str
) -> None:
    setup_session(store, clock)
    running = drive(store, store.accept_attempt(acceptance(clock)), clock)
    session = store.load_session(SESSION)
    with pytest.raises(storage.StoreError):
        _bad_calls(clock)[name](store)
    assert store.load_attempt(ATTEMPT) == running
    assert store.load_session(SESSION) == session
    assert store.list_active_attempts(NS) == [running]


# -- concurrency ---------------------------------------------------------------------------


def _race(calls: list[Callable[[], object]]) -> list[object]:
    """Run ``calls`` on as many threads released together; results or exceptions."""
    barrier = threading.Barrier(len(calls))
    results: list[object] = [None] * len(calls)

    def run(i: int) -> None:
        barrier.wait()
        try:
            results[i] = calls[i]()
        except Exception as exc:  # collected and asserted on by the caller
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def test_racing_acceptances_of_one_agent_admit_exactly_one(
    store: SessionStore, clock: ManualClock
) -> None:
    setup_session(store, clock)
    records = [acceptance(clock, f"subattempt_{n}", AGENT, host=f"host-{n}") for n in range(8)]
    results = _race([functools.partial(store.accept_attempt, r) for r in records])
    winners = [r for r in results if isinstance(r, AttemptRecord)]
    assert len(winners) == 1
    assert all(isinstance(r, Conflict) for r in results if r not in winners)
    assert store.list_active_attempts(NS) == winners


def test_racing_continuations_of_one_attempt_admit_exactly_one_run(
    store: SessionStore, clock: ManualClock
) -> None:
    setup_session(store, clock)
    first, _ = committed(store, clock)
    requests = [
        continuation(first, clock, run_id=f"continuation-{n}", claim_id=f"claim-{n}")
        for n in range(8)
    ]
    results = _race([functools.partial(store.acquire_continuation, q) for q in requests])
    receipts = [r for r in results if isinstance(r, storage.ContinuationReceipt)]
    assert len(receipts) == 1
    assert all(isinstance(r, Conflict) for r in results if r not in receipts)
    assert continuation_runs(store) == [receipts[0].run.run_id]
    assert store.load_attempt(ATTEMPT) == receipts[0].record


def test_racing_exact_continuation_retries_return_one_receipt(
    store: SessionStore, clock: ManualClock
) -> None:
    setup_session(store, clock)
    first, _ = committed(store, clock)
    request = continuation(first, clock)
    results = _race([lambda: store.acquire_continuation(request) for _ in range(8)])
    assert all(isinstance(r, storage.ContinuationReceipt) for r in results), results
    receipts = [r for r in results if isinstance(r, storage.ContinuationReceipt)]
    originals = [r for r in receipts if not r.idempotent_replay]
    assert len(originals) == 1
    assert all(
        r == replace(originals[0], idempotent_replay=True) for r in receipts if r.idempotent_replay
    )
    assert continuation_runs(store) == [request.run.run_id]
