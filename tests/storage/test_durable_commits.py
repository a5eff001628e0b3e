"""The store side of the fsync budget (docs/durability.md), on every store.

A terminal commit carries the execution statuses the attempt passed through since
the stored one (``TerminalCommit.via``), every step checked against ``EXECUTION``
in the same transaction; ``claim_and_acknowledge`` delivers to a consumer without
a durable run in one transaction, and a terminal commit with ``deliver_claim_id``
does so in the terminal's own transaction; ``counters()`` counts what the backend did.
"""

from __future__ import annotations

import msgspec
import pytest
from builders import CLAIM_TTL, acceptance, drive, moved, setup_session, terminal

from statemachines import ExecutionStatus
from storage import (
    Conflict,
    Delivered,
    DeliveryClaim,
    DeliveryClaimed,
    IllegalTransition,
    InvalidRecord,
    ManualClock,
    MemorySessionStore,
    SessionStore,
    StaleFence,
    StoreCounters,
    TerminalCommit,
)

S = ExecutionStatus


def _accepted(store: SessionStore, clock: ManualClock, attempt_id: str = "subattempt_1") -> None:
    setup_session(store, clock)
    store.accept_attempt(acceptance(clock, attempt_id))


def _with_via(commit: TerminalCommit, *via: ExecutionStatus) -> TerminalCommit:
    return msgspec.structs.replace(commit, via=via)


def test_a_terminal_commit_persists_the_path_it_carries_in_one_transaction(
    store: SessionStore, clock: ManualClock
) -> None:
    _accepted(store, clock)
    accepted = store.load_attempt("subattempt_1")
    with pytest.raises(IllegalTransition):  # accepted -> completed is no edge
        store.commit_terminal(terminal(accepted, clock))
    commit = _with_via(terminal(accepted, clock), S.STARTING, S.RUNNING, S.WAITING, S.RUNNING)
    stored = store.commit_terminal(commit)
    assert stored.execution_status == "completed"
    # An exact replay is recognized whatever path it names (via is no terminal evidence).
    assert store.commit_terminal(_with_via(commit)) == stored


@pytest.mark.parametrize(
    "via",
    [
        (S.RUNNING,),  # accepted -> running skips starting
        (S.STARTING, S.WAITING),  # starting -> waiting is no edge
        (S.STARTING, S.FAILED, S.RUNNING),  # through a terminal status
        (S.STARTING, S.RUNNING, S.COMPLETED),  # ends terminal: completed -> completed
    ],
)
def test_a_path_with_a_step_the_table_refuses_commits_nothing(
    store: SessionStore, clock: ManualClock, via: tuple[ExecutionStatus, ...]
) -> None:
    _accepted(store, clock)
    accepted = store.load_attempt("subattempt_1")
    with pytest.raises(IllegalTransition):
        store.commit_terminal(_with_via(terminal(accepted, clock), *via))
    assert store.load_attempt("subattempt_1") == accepted


def test_a_path_starts_at_the_stored_status(store: SessionStore, clock: ManualClock) -> None:
    _accepted(store, clock)
    running = drive(store, store.load_attempt("subattempt_1"), clock)
    with pytest.raises(IllegalTransition):  # running -> starting is no edge
        store.commit_terminal(_with_via(terminal(running, clock), S.STARTING))
    failed = store.commit_terminal(_with_via(terminal(running, clock, "failed"), S.WAITING))
    assert failed.execution_status == "failed"


def test_a_path_the_owner_persisted_part_of_already_goes_on_from_there(
    store: SessionStore, clock: ManualClock
) -> None:
    # The commit was built while the record said accepted; a lease renewal then
    # carried starting and running: the walk starts at the stored running.
    _accepted(store, clock)
    accepted = store.load_attempt("subattempt_1")
    commit = _with_via(terminal(accepted, clock), S.STARTING, S.RUNNING)
    store.advance_attempt(moved(accepted, S.RUNNING, clock), via=(S.STARTING,))
    assert store.commit_terminal(commit).execution_status == "completed"


def _terminal_attempt(store: SessionStore, clock: ManualClock) -> None:
    _accepted(store, clock)
    running = drive(store, store.load_attempt("subattempt_1"), clock)
    store.commit_terminal(terminal(running, clock))


def _claim(clock: ManualClock, claim_id: str = "wait_1") -> DeliveryClaim:
    return DeliveryClaim(claim_id=claim_id, deadline=clock.now() + CLAIM_TTL)


def test_claim_and_acknowledge_delivers_once_in_one_call(
    store: SessionStore, clock: ManualClock
) -> None:
    _terminal_attempt(store, clock)
    delivered = store.claim_and_acknowledge("subattempt_1", _claim(clock))
    assert (delivered.delivery_status, delivered.delivered_claim_id) == ("delivered", "wait_1")
    assert delivered.delivery_claim is None
    # An exact repeat (a lost response) is Ok; another consumer is told it was delivered.
    assert store.claim_and_acknowledge("subattempt_1", _claim(clock)) == delivered
    with pytest.raises(Delivered):
        store.claim_and_acknowledge("subattempt_1", _claim(clock, "turn_2"))
    assert store.list_pending_attempts(delivered.namespace_id, delivered.parent_session_id) == []


def test_claim_and_acknowledge_refuses_what_a_claim_refuses(
    store: SessionStore, clock: ManualClock
) -> None:
    _accepted(store, clock)
    with pytest.raises(Conflict):  # not terminal
        store.claim_and_acknowledge("subattempt_1", _claim(clock))
    running = drive(store, store.load_attempt("subattempt_1"), clock)
    store.commit_terminal(terminal(running, clock))
    with pytest.raises(Conflict):  # a run-linked claim is the run's to acknowledge
        store.claim_and_acknowledge(
            "subattempt_1", dc_copy(_claim(clock), continuation_run_id="run-x")
        )
    held = store.claim_delivery("subattempt_1", _claim(clock, "callback_1"))
    with pytest.raises(DeliveryClaimed):  # another consumer holds a live claim
        store.claim_and_acknowledge("subattempt_1", _claim(clock))
    assert store.load_attempt("subattempt_1") == held
    clock.advance(CLAIM_TTL + 1)  # that claim expired: released, then delivered here
    delivered = store.claim_and_acknowledge("subattempt_1", _claim(clock))
    assert (delivered.delivery_status, delivered.delivered_claim_id) == ("delivered", "wait_1")


def dc_copy(claim: DeliveryClaim, **changes: object) -> DeliveryClaim:
    return msgspec.structs.replace(claim, **changes)


def test_the_contract_default_claims_then_acknowledges(clock: ManualClock) -> None:
    """A store without its own ``claim_and_acknowledge`` makes the two calls."""

    inner = MemorySessionStore(clock=clock)
    _terminal_attempt(inner, clock)
    calls: list[str] = []

    class Recording:
        def claim_delivery(self, attempt_id: str, claim: DeliveryClaim) -> object:
            calls.append("claim")
            return inner.claim_delivery(attempt_id, claim)

        def acknowledge_delivery(self, attempt_id: str, claim_id: str) -> object:
            calls.append("acknowledge")
            return inner.acknowledge_delivery(attempt_id, claim_id)

        def load_attempt(self, attempt_id: str) -> object:
            return inner.load_attempt(attempt_id)

    default = SessionStore.claim_and_acknowledge
    delivered = default(Recording(), "subattempt_1", _claim(clock))  # type: ignore[arg-type]
    assert calls == ["claim", "acknowledge"]
    assert delivered.delivered_claim_id == "wait_1"  # type: ignore[attr-defined]
    # A repeat after both applied (a lost response) is Ok.
    assert default(Recording(), "subattempt_1", _claim(clock)) == delivered  # type: ignore[arg-type]


def test_counters_count_writes_commits_and_fsyncs(store: SessionStore, clock: ManualClock) -> None:
    _terminal_attempt(store, clock)
    before = store.counters()
    assert before.counted and before.writes >= before.commits > 0
    store.load_attempt("subattempt_1")
    assert store.counters() == before  # a read is no write
    store.claim_and_acknowledge("subattempt_1", _claim(clock))
    moved = store.counters() - before
    durable = type(store).__name__ != "MemorySessionStore"
    assert moved == StoreCounters(writes=1, commits=1, fsyncs=1 if durable else 0)
    with pytest.raises(Delivered):
        store.claim_and_acknowledge("subattempt_1", _claim(clock, "turn_2"))
    refused = store.counters() - before - moved
    assert (refused.writes, refused.fsyncs) == (1, 0)  # asked for; nothing made durable


def test_a_store_without_counters_says_so() -> None:
    assert SessionStore.counters(None) == StoreCounters(counted=False)  # type: ignore[arg-type]


def test_advance_attempt_persists_a_path_and_renews_the_lease_in_one_commit(
    store: SessionStore, clock: ManualClock
) -> None:
    _accepted(store, clock)
    accepted = store.load_attempt("subattempt_1")
    clock.advance(5)
    before = store.counters()
    expiry = clock.now() + 30
    progressed = moved(accepted, S.RUNNING, clock, child_run_id="child-1")
    advanced = store.advance_attempt(progressed, via=(S.STARTING,), lease_expires_at=expiry)
    assert (advanced.execution_status, advanced.child_run_id) == ("running", "child-1")
    lease = advanced.owner_lease
    assert (lease.heartbeat_at, lease.lease_expires_at) == (clock.now(), expiry)
    moved_by = store.counters() - before
    assert (moved_by.writes, moved_by.commits) == (1, 1)
    # Each step is checked: running -> starting is no edge; a renewal into the past is refused.
    with pytest.raises(IllegalTransition):
        store.advance_attempt(moved(advanced, S.RUNNING, clock), via=(S.STARTING,))
    with pytest.raises(Conflict):
        store.advance_attempt(moved(advanced, S.WAITING, clock), lease_expires_at=clock.now())
    assert store.load_attempt("subattempt_1") == advanced


def test_advance_attempt_is_fenced_like_a_heartbeat(
    store: SessionStore, clock: ManualClock
) -> None:
    _accepted(store, clock)
    accepted = store.load_attempt("subattempt_1")
    stale = msgspec.structs.replace(
        accepted, owner_lease=msgspec.structs.replace(accepted.owner_lease, fencing_generation=9)
    )
    with pytest.raises(StaleFence):
        store.advance_attempt(moved(stale, S.STARTING, clock), lease_expires_at=clock.now() + 30)
    clock.advance(31)  # the lease expired: the owner cannot revive it by advancing
    with pytest.raises(StaleFence):
        store.advance_attempt(moved(accepted, S.STARTING, clock), lease_expires_at=clock.now() + 30)
    assert store.load_attempt("subattempt_1") == accepted


def test_progress_carried_by_a_renewal_commits_attempt_started_once(
    store: SessionStore, clock: ManualClock
) -> None:
    _accepted(store, clock)
    accepted = store.load_attempt("subattempt_1")
    clock.advance(5)
    expiry = clock.now() + 30
    progressed = moved(accepted, S.RUNNING, clock, child_run_id="child-1")
    advanced = store.advance_attempt(progressed, via=(S.STARTING,), lease_expires_at=expiry)
    store.advance_attempt(moved(advanced, S.WAITING, clock), lease_expires_at=expiry + 1)
    session = accepted.parent_session_id
    started = [e for e in store.replay_events(session) if e.kind == "attempt.started"]
    assert [(e.data["attempt_id"], e.at) for e in started] == [("subattempt_1", clock.now())]


def _handed_to(commit: TerminalCommit, claim_id: str | None = "wait_1") -> TerminalCommit:
    return msgspec.structs.replace(commit, deliver_claim_id=claim_id)


def test_a_terminal_commit_hands_the_result_to_a_waiting_consumer_in_the_same_commit(
    store: SessionStore, clock: ManualClock
) -> None:
    _accepted(store, clock)
    running = drive(store, store.load_attempt("subattempt_1"), clock)
    before = store.counters()
    commit = _handed_to(terminal(running, clock))
    delivered = store.commit_terminal(commit)
    assert (delivered.execution_status, delivered.delivery_status) == ("completed", "delivered")
    assert (delivered.delivered_claim_id, delivered.delivery_claim) == ("wait_1", None)
    assert store.load_attempt("subattempt_1") == delivered
    moved_by = store.counters() - before
    assert (moved_by.writes, moved_by.commits) == (1, 1)
    session = delivered.parent_session_id
    assert store.list_pending_attempts(delivered.namespace_id, session) == []
    kinds = [e.kind for e in store.replay_events(session) if e.data.get("attempt_id")]
    assert kinds[-2:] == ["attempt.terminal", "attempt.delivered"]
    # An exact replay (a lost response) returns the delivered record; nobody else gets it.
    assert store.commit_terminal(commit) == delivered
    assert store.commit_terminal(_handed_to(commit, None)) == delivered
    with pytest.raises(Delivered):
        store.claim_and_acknowledge("subattempt_1", _claim(clock, "turn_2"))


def test_a_refused_terminal_commit_hands_nothing_over(
    store: SessionStore, clock: ManualClock
) -> None:
    _accepted(store, clock)
    running = drive(store, store.load_attempt("subattempt_1"), clock)
    stale = msgspec.structs.replace(
        running, owner_lease=msgspec.structs.replace(running.owner_lease, fencing_generation=9)
    )
    with pytest.raises(StaleFence):
        store.commit_terminal(_handed_to(terminal(stale, clock)))
    for bad in ("", "wait\x00one"):
        with pytest.raises(InvalidRecord):
            store.commit_terminal(_handed_to(terminal(running, clock), bad))
    assert store.load_attempt("subattempt_1") == running
    # Committed without a consumer, the result waits for one as before.
    stored = store.commit_terminal(terminal(running, clock))
    assert (stored.delivery_status, stored.delivered_claim_id) == ("undelivered", None)
