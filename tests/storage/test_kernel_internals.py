"""KernelStore contract logic, exercised on MemorySessionStore.

The cross-store scenarios live in ``test_contract.py``; these tests pin the
kernel's own decisions (indexes, markers, ordering of checks) and that a
failed operation writes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from types import SimpleNamespace

import msgspec
import pytest
from builders import (
    CLAIM_TTL,
    HOST,
    NS,
    RETENTION,
    SESSION,
    acceptance,
    admission_lease,
    artifact_terminal,
    as_layout_1,
    continuation,
    drive,
    fresh_session,
    mixed_attempt_states,
    moved,
    plain_run,
    setup_session,
    tables,
    terminal,
)

import storage
import storage.admin
from statemachines import DeliveryStatus, ExecutionStatus, RunStatus, SessionStatus
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
    IdempotencyConflict,
    IllegalTransition,
    InputPart,
    InvalidRecord,
    KernelStore,
    ManualClock,
    MemorySessionStore,
    NotFound,
    QuotaExceeded,
    Retryable,
    RunConflict,
    StaleFence,
    TerminalCommit,
)
from storage import _codec as codec
from storage._kernel import STORE_SCHEMA_VERSION
from storage._memory import MemoryBackend

replace = msgspec.structs.replace
LIMITS = ArtifactLimits(max_single_bytes=100, max_retained_bytes=150)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(start=1_700_000_000.0)


@pytest.fixture
def store(clock: ManualClock) -> MemorySessionStore:
    s = MemorySessionStore(clock=clock, retention_seconds=3600.0)
    setup_session(s, clock)
    return s


def _tables(store: MemorySessionStore) -> dict[str, list[tuple[bytes, bytes]]]:
    return store.backend.read(lambda txn: {t: list(txn.scan(t)) for t in store.TABLES})


def _terminal_record(store: MemorySessionStore, clock: ManualClock, **kw: str) -> AttemptRecord:
    record = drive(store, store.accept_attempt(acceptance(clock, **kw)), clock)
    return store.commit_terminal(terminal(record, clock))


def _claim(claim_id: str, clock: ManualClock, run_id: str | None = None) -> DeliveryClaim:
    return DeliveryClaim(
        claim_id=claim_id, deadline=clock.now() + CLAIM_TTL, continuation_run_id=run_id
    )


# -- acceptance -------------------------------------------------------------------------------


def test_accept_is_idempotent_for_the_same_record(
    store: MemorySessionStore, clock: ManualClock
) -> None:
    first = store.accept_attempt(acceptance(clock))
    assert store.accept_attempt(acceptance(clock)) == first
    with pytest.raises(AlreadyExists):
        store.accept_attempt(acceptance(clock, generation=2))


def test_a_second_active_attempt_on_one_agent_conflicts_until_the_first_is_terminal(
    store: MemorySessionStore, clock: ManualClock
) -> None:
    store.accept_attempt(acceptance(clock))
    with pytest.raises(Conflict):
        store.accept_attempt(acceptance(clock, attempt_id="subattempt_2"))
    _terminal_record(store, clock, attempt_id="subattempt_3", agent_id="other-bg-1")
    with pytest.raises(Conflict):
        store.accept_attempt(acceptance(clock, attempt_id="subattempt_2"))
    store.reconcile(NS)
    clock.advance(31)
    store.reconcile(NS)
    assert store.accept_attempt(acceptance(clock, attempt_id="subattempt_2")).attempt_id


def test_an_acceptance_whose_lease_already_expired_is_refused(
    store: MemorySessionStore, clock: ManualClock
) -> None:
    record = acceptance(clock)
    clock.advance(30)
    before = _tables(store)
    with pytest.raises(Conflict):
        store.accept_attempt(record)
    assert _tables(store) == before


def test_acceptance_needs_an_active_unfenced_session(
    store: MemorySessionStore, clock: ManualClock
) -> None:
    with pytest.raises(Conflict):
        store.accept_attempt(acceptance(clock, session_id="missing"))
    store.update_session_status(SESSION, SessionStatus.INACTIVE)
    with pytest.raises(Conflict):
        store.accept_attempt(acceptance(clock))
    store.fence_session_deletion(SESSION)
    with pytest.raises(Conflict):
        store.accept_attempt(acceptance(clock))


@pytest.mark.parametrize(
    "changes",
    [
        {"execution_status": ExecutionStatus.RUNNING},
        {"delivery_status": DeliveryStatus.CLAIMED},
        {"terminal_at": 1.0},
        {"attempt_id": "bad\x00id"},
        {"updated_at": 1.0},
    ],
)
def test_a_non_canonical_acceptance_is_an_invalid_record(
    store: MemorySessionStore, clock: ManualClock, changes: dict[str, object]
) -> None:
    with pytest.raises(InvalidRecord):
        store.accept_attempt(replace(acceptance(clock), **changes))


# -- fencing ----------------------------------------------------------------------------------


def test_an_expired_owner_cannot_update_heartbeat_or_commit_and_nothing_changes(
    store: MemorySessionStore, clock: ManualClock
) -> None:
    record = drive(store, store.accept_attempt(acceptance(clock)), clock, ("starting",))
    clock.advance(30)
    before = _tables(store)
    with pytest.raises(StaleFence):
        store.update_attempt_execution(moved(record, "running", clock))
    with pytest.raises(StaleFence):
        store.heartbeat_attempt(record.attempt_id, HOST, 1, clock.now() + 30)
    record = store.load_attempt(record.attempt_id)
    with pytest.raises(StaleFence):
        store.commit_terminal(terminal(drive_local(record, clock), clock))
    assert _tables(store) == before


def drive_local(record: AttemptRecord, clock: ManualClock) -> AttemptRecord:
    return moved(record, "running", clock)


def test_a_takeover_fences_out_the_previous_owner(
    store: MemorySessionStore, clock: ManualClock
) -> None:
    record = store.accept_attempt(acceptance(clock))
    with pytest.raises(StaleFence):
        store.take_over_attempt(record.attempt_id, "host-b", 2, clock.now() + 60)
    clock.advance(31)
    with pytest.raises(StaleFence):
        store.take_over_attempt(record.attempt_id, "host-b", 1, clock.now() + 60)
    taken = store.take_over_attempt(record.attempt_id, "host-b", 2, clock.now() + 60)
    assert taken.owner_lease.host_instance_id == "host-b"
    with pytest.raises(StaleFence):
        store.heartbeat_attempt(record.attempt_id, HOST, 1, clock.now() + 30)
    with pytest.raises(StaleFence):
        store.update_attempt_execution(moved(record, "starting", clock))
    new = store.update_attempt_execution(moved(taken, "starting", clock))
    assert new.execution_status == ExecutionStatus.STARTING


def test_heartbeat_extends_the_lease_and_refuses_a_past_expiry(
    store: MemorySessionStore, clock: ManualClock
) -> None:
    record = store.accept_attempt(acceptance(clock))
    clock.advance(10)
    beat = store.heartbeat_attempt(record.attempt_id, HOST, 1, clock.now() + 30)
    assert beat.owner_lease.heartbeat_at == clock.now()
    assert beat.owner_lease.lease_expires_at == clock.now() + 30
    with pytest.raises(Conflict):
        store.heartbeat_attempt(record.attempt_id, HOST, 1, clock.now())
    with pytest.raises(StaleFence):
        store.heartbeat_attempt(record.attempt_id, HOST, 2, clock.now() + 30)


def test_update_allows_only_table_moves_and_only_status_and_child_run(
    store: MemorySessionStore, clock: ManualClock
) -> None:
    record = store.accept_attempt(acceptance(clock))
    with pytest.raises(IllegalTransition) as info:
        store.update_attempt_execution(moved(record, "running", clock))
    assert (info.value.source, info.value.dest) == ("accepted", "running")
    with pytest.raises(InvalidRecord):
        store.update_attempt_execution(moved(record, "starting", clock, profile="other"))
    with pytest.raises(InvalidRecord):
        store.update_attempt_execution(moved(record, "completed", clock))
    started = store.update_attempt_execution(moved(record, "starting", clock))
    assert store.update_attempt_execution(moved(started, "starting", clock)) == started


# -- terminal commit and replay ---------------------------------------------------------------


def test_exact_replay_is_ok_after_lease_and_retention_expiry_and_forgeries_conflict(
    store: MemorySessionStore, clock: ManualClock
) -> None:
    record = drive(store, store.accept_attempt(acceptance(clock)), clock)
    commit = terminal(record, clock, retention=60.0)
    committed = store.commit_terminal(commit)
    assert committed.terminal_fingerprint == storage.terminal_fingerprint(commit)
    assert store.list_active_attempts(NS) == []
    clock.advance(31)
    assert store.commit_terminal(commit) == committed
    clock.advance(60)
    assert [r.attempt_id for r in store.expire_retention(NS)] == [record.attempt_id]
    assert store.commit_terminal(commit).retention_status == "expired"
    forged = replace(commit.record, result_ref=replace(commit.record.result_ref, content="x"))
    with pytest.raises(Conflict):
        store.commit_terminal(TerminalCommit(record=forged))
    bumped = replace(
        commit.record, owner_lease=replace(commit.record.owner_lease, fencing_generation=2)
    )
    with pytest.raises(Conflict):
        store.commit_terminal(TerminalCommit(record=bumped))


def test_a_terminal_commit_with_a_wrong_digest_is_refused(
    store: MemorySessionStore, clock: ManualClock
) -> None:
    record = drive(store, store.accept_attempt(acceptance(clock)), clock)
    commit = terminal(record, clock)
    ref = replace(commit.record.result_ref, digest=storage.result_digest("other"))
    with pytest.raises(InvalidRecord):
        store.commit_terminal(TerminalCommit(record=replace(commit.record, result_ref=ref)))
    assert store.load_attempt(record.attempt_id).execution_status == ExecutionStatus.RUNNING


def test_terminal_commit_indexes_the_result_as_pending_and_frees_the_agent(
    store: MemorySessionStore, clock: ManualClock
) -> None:
    committed = _terminal_record(store, clock)
    assert committed.retention_expires_at is not None
    # No agent entry left: one retained entry, flagged undelivered.
    assert _tables(store)["index"] == [
        (
            codec.retain_key(NS, SESSION, committed.retention_expires_at, committed.attempt_id),
            codec.UNDELIVERED,
        )
    ]
    assert not [k for k, _ in _tables(store)["attempts"] if k[:1] == codec.INDEX]
    assert [r.attempt_id for r in store.list_pending_attempts(NS, SESSION)] == [
        committed.attempt_id
    ]


# -- artifacts --------------------------------------------------------------------------------


def _artifact_commit(
    store: MemorySessionStore, clock: ManualClock, n: int, size: int, **kw: object
) -> TerminalCommit:
    record = drive(
        store,
        store.accept_attempt(acceptance(clock, attempt_id=f"subattempt_a{n}", agent_id=f"ag-{n}")),
        clock,
    )
    return artifact_terminal(record, clock, artifact_ref=f"art-{n}", content="x" * size, **kw)  # type: ignore[arg-type]


def test_artifacts_need_limits_and_respect_single_and_aggregate_quotas(
    store: MemorySessionStore, clock: ManualClock
) -> None:
    with pytest.raises(Conflict):
        store.commit_terminal(_artifact_commit(store, clock, 1, 10))
    with pytest.raises(QuotaExceeded):
        store.commit_terminal(_artifact_commit(store, clock, 2, 101, limits=LIMITS))
    store.commit_terminal(_artifact_commit(store, clock, 3, 100, limits=LIMITS))
    with pytest.raises(QuotaExceeded):
        store.commit_terminal(_artifact_commit(store, clock, 4, 51, limits=LIMITS))
    ok = store.commit_terminal(_artifact_commit(store, clock, 5, 50, limits=LIMITS))
    assert store.load_artifact("art-5").size_bytes == 50
    assert ok.retention_status == "artifact"


def test_the_aggregate_quota_counts_only_unexpired_artifacts(
    store: MemorySessionStore, clock: ManualClock
) -> None:
    store.commit_terminal(_artifact_commit(store, clock, 1, 100, limits=LIMITS, retention=10.0))
    late = _artifact_commit(store, clock, 2, 100, limits=LIMITS, retention=100.0)
    with pytest.raises(QuotaExceeded):
        store.commit_terminal(late)
    clock.advance(10)  # art-1 expired by time, not yet by expire_retention
    late = replace(
        late,
        record=replace(late.record, terminal_at=clock.now(), updated_at=clock.now()),
    )
    assert store.commit_terminal(late).retention_status == "artifact"


def test_retention_expiry_deletes_content_keeps_evidence_and_is_idempotent(
    store: MemorySessionStore, clock: ManualClock
) -> None:
    commit = _artifact_commit(store, clock, 1, 20, limits=LIMITS, retention=60.0)
    committed = store.commit_terminal(commit)
    clock.advance(59)
    assert store.expire_retention(NS) == []
    clock.advance(1)
    with pytest.raises(NotFound):
        store.load_artifact("art-1")
    (expired,) = store.expire_retention(NS)
    assert expired.retention_status == "expired"
    assert expired.result_ref == storage.ResultRef(
        digest=committed.result_ref.digest,
        size_bytes=20,  # type: ignore[union-attr]
    )
    assert expired.terminal_fingerprint == committed.terminal_fingerprint
    assert store.expire_retention(NS) == []
    assert store.commit_terminal(commit) == expired
    tables = _tables(store)
    assert tables["artifacts"] == []
    # Only the pending entry of the undelivered (expired) result is left, beside its
    # agent entry (the session's ranges keep reaching an expired attempt).
    aid = committed.attempt_id
    assert tables["index"] == [
        (codec.agent_attempt_key(NS, SESSION, committed.agent_id, aid), b"researcher"),
        (codec.pending_key(NS, SESSION, aid), b""),
    ]
    assert [r.attempt_id for r in store.list_pending_attempts(NS)] == [committed.attempt_id]


def test_retention_expiry_honours_its_limit_in_deadline_order(
    store: MemorySessionStore, clock: ManualClock
) -> None:
    ids = []
    for n, retention in enumerate((30.0, 10.0, 20.0)):
        record = drive(
            store, store.accept_attempt(acceptance(clock, f"subattempt_{n}", f"ag-{n}")), clock
        )
        ids.append(store.commit_terminal(terminal(record, clock, retention=retention)).attempt_id)
    clock.advance(100)
    assert [r.attempt_id for r in store.expire_retention(NS, limit=2)] == [ids[1], ids[2]]
    assert [r.attempt_id for r in store.expire_retention(NS, limit=2)] == [ids[0]]


def test_retention_expiry_takes_the_earliest_deadlines_across_the_sessions(
    store: MemorySessionStore, clock: ManualClock
) -> None:
    setup_session(store, clock, "session-2", "parent-run-2")
    ids = []
    for n, (session, retention) in enumerate(
        (("session-2", 30.0), (SESSION, 10.0), ("session-2", 20.0), (SESSION, 40.0))
    ):
        record = drive(
            store,
            store.accept_attempt(
                acceptance(
                    clock,
                    f"subattempt_{n}",
                    f"ag-{n}",
                    session_id=session,
                    parent_run_id="parent-run-2" if session == "session-2" else "parent-run-1",
                )
            ),
            clock,
        )
        ids.append(store.commit_terminal(terminal(record, clock, retention=retention)).attempt_id)
    clock.advance(35)
    assert [r.attempt_id for r in store.expire_retention(NS, limit=2)] == [ids[1], ids[2]]
    assert [r.attempt_id for r in store.expire_retention(NS)] == [ids[0]]
    assert store.expire_retention(NS) == []
    clock.advance(5)
    assert [r.attempt_id for r in store.expire_retention(NS)] == [ids[3]]


def test_an_expired_undelivered_result_stays_pending_and_can_still_be_delivered(
    store: MemorySessionStore, clock: ManualClock
) -> None:
    record = drive(store, store.accept_attempt(acceptance(clock)), clock)
    aid = store.commit_terminal(terminal(record, clock, retention=10.0)).attempt_id
    clock.advance(10)
    (expired,) = store.expire_retention(NS)
    assert expired.delivery_status == "undelivered"
    assert [r.attempt_id for r in store.list_pending_attempts(NS)] == [aid]
    assert [r.attempt_id for r in store.list_pending_attempts(NS, SESSION)] == [aid]
    store.claim_delivery(aid, _claim("c1", clock))
    assert [r.attempt_id for r in store.list_pending_attempts(NS, SESSION)] == [aid]
    store.acknowledge_delivery(aid, "c1")
    assert store.list_pending_attempts(NS) == []
    assert _tables(store)["index"] == [
        (codec.agent_attempt_key(NS, SESSION, expired.agent_id, aid), b"researcher")
    ]


def test_delivered_results_are_not_pending_while_they_are_retained(
    store: MemorySessionStore, clock: ManualClock
) -> None:
    first = _terminal_record(store, clock).attempt_id
    record = drive(store, store.accept_attempt(acceptance(clock, "subattempt_2", "ag-2")), clock)
    second = store.commit_terminal(terminal(record, clock)).attempt_id
    store.claim_delivery(first, _claim("c1", clock))
    store.acknowledge_delivery(first, "c1")
    assert [r.attempt_id for r in store.list_pending_attempts(NS)] == [second]
    assert [r.attempt_id for r in store.list_pending_attempts(NS, SESSION)] == [second]


# -- schema -----------------------------------------------------------------------------------


def test_a_layout_1_store_is_migrated_when_opened_and_keeps_every_index(
    store: MemorySessionStore, clock: ManualClock
) -> None:
    mixed_attempt_states(store, clock)
    expected = tables(store)
    assert any(k.startswith(codec.TRACK) for k, _ in expected["index"])
    assert any(k.startswith(codec.live_prefix(NS, SESSION)) for k, _ in expected["index"])
    assert any(k.startswith(codec.claim_prefix(NS)) for k, _ in expected["index"])
    as_layout_1(store.backend)
    assert tables(store)["index"] == []
    # Layout 1 kept live attempts and claims under their session's T prefix.
    old = [k for k, _ in tables(store)["attempts"] if k.startswith(codec.track_prefix(NS, SESSION))]
    assert {k[len(codec.track_prefix(NS, SESSION))] for k in old} == {ord("G"), ord("C"), ord("P")}
    migrated = KernelStore(store.backend, clock=clock)
    assert tables(migrated) == expected
    assert expected["meta"][0] == (b"schema_version", STORE_SCHEMA_VERSION.to_bytes(8, "big"))
    assert [k for k, _ in expected["meta"]] == [b"schema_version", b"store_identity"]
    assert KernelStore(store.backend, clock=clock) is not None  # opening again is a no-op
    assert tables(migrated) == expected


@pytest.mark.parametrize("version", [0, 5])
def test_a_store_of_another_layout_is_refused_naming_the_versions(
    store: MemorySessionStore, clock: ManualClock, version: int
) -> None:
    store.backend.write(lambda txn: txn.put("meta", b"schema_version", version.to_bytes(8, "big")))
    with pytest.raises(CorruptRecord) as info:
        KernelStore(store.backend, clock=clock)
    assert info.value.schema_version == version
    assert info.value.expected_schema_version == STORE_SCHEMA_VERSION == 4


# -- delivery ---------------------------------------------------------------------------------


def test_claims_conflict_release_and_acknowledge(
    store: MemorySessionStore, clock: ManualClock
) -> None:
    record = _terminal_record(store, clock)
    aid = record.attempt_id
    store.claim_delivery(aid, _claim("c1", clock))
    assert store.claim_delivery(aid, store.load_attempt(aid).delivery_claim).delivery_status == (  # type: ignore[arg-type]
        "claimed"
    )
    with pytest.raises(DeliveryClaimed):
        store.claim_delivery(aid, _claim("c2", clock))
    assert store.release_delivery(aid, "c1", Retryable()).delivery_status == "undelivered"
    assert store.release_delivery(aid, "c1", Retryable()).delivery_status == "undelivered"
    with pytest.raises(Conflict):
        store.release_delivery(aid, "c1", ConsumerTerminated(run_id="r"))
    store.claim_delivery(aid, _claim("c2", clock))
    delivered = store.acknowledge_delivery(aid, "c2")
    assert delivered.delivered_claim_id == "c2"
    assert store.acknowledge_delivery(aid, "c2") == delivered
    with pytest.raises(Delivered):
        store.acknowledge_delivery(aid, "c1")
    with pytest.raises(Delivered):
        store.claim_delivery(aid, _claim("c3", clock))
    assert store.list_pending_attempts(NS) == []
    # Delivered: only its retained entry is left, flagged delivered, until expiry.
    assert [v for k, v in _tables(store)["index"] if k.startswith(codec.TRACK)] == [codec.DELIVERED]
    clock.advance(RETENTION)
    assert [r.attempt_id for r in store.expire_retention(NS)] == [aid]
    assert _tables(store)["index"] == [
        (codec.agent_attempt_key(NS, SESSION, delivered.agent_id, aid), b"researcher")
    ]


def test_claiming_a_non_terminal_attempt_or_with_a_past_deadline_conflicts(
    store: MemorySessionStore, clock: ManualClock
) -> None:
    record = store.accept_attempt(acceptance(clock))
    with pytest.raises(Conflict):
        store.claim_delivery(record.attempt_id, _claim("c", clock))
    done = _terminal_record(store, clock, attempt_id="subattempt_2", agent_id="b")
    with pytest.raises(Conflict):
        store.claim_delivery(done.attempt_id, DeliveryClaim(claim_id="c", deadline=clock.now()))


def _consumer(store: MemorySessionStore, clock: ManualClock, run_id: str) -> None:
    store.admit_run(plain_run(clock, run_id, ttl=CLAIM_TTL + 30))
    store.transition_run(SESSION, run_id, RunStatus.RUNNING, admission_id=f"adm-{run_id}")


def test_an_expired_claim_of_a_live_consumer_survives_then_a_cancelled_consumer_suppresses(
    store: MemorySessionStore, clock: ManualClock
) -> None:
    aid = _terminal_record(store, clock).attempt_id
    _consumer(store, clock, "consumer")
    store.claim_delivery(aid, _claim("c1", clock, "consumer"))
    clock.advance(CLAIM_TTL + 1)
    store.renew_run_admission(SESSION, "consumer", "adm-consumer", clock.now() + 60)
    assert store.reconcile(NS) == []
    with pytest.raises(DeliveryClaimed):
        store.claim_delivery(aid, _claim("c2", clock), automatic=True)
    store.transition_run(SESSION, "consumer", RunStatus.CANCELLED, admission_id="adm-consumer")
    with pytest.raises(Conflict):
        store.claim_delivery(aid, _claim("c2", clock), automatic=True)
    released = store.load_attempt(aid)  # the release stayed committed
    assert released.delivery_status == "undelivered"
    assert released.automatic_continuation_suppressed_by_run_id == "consumer"
    store.claim_delivery(aid, _claim("c3", clock))
    delivered = store.acknowledge_delivery(aid, "c3")
    assert delivered.automatic_continuation_suppressed_by_run_id is None


def test_a_completed_consumers_old_claim_is_acknowledged_and_delivered_raised(
    store: MemorySessionStore, clock: ManualClock
) -> None:
    aid = _terminal_record(store, clock).attempt_id
    _consumer(store, clock, "consumer")
    store.claim_delivery(aid, _claim("c1", clock, "consumer"))
    store.transition_run(SESSION, "consumer", RunStatus.COMPLETED, admission_id="adm-consumer")
    clock.advance(CLAIM_TTL + 1)
    with pytest.raises(Delivered):
        store.claim_delivery(aid, _claim("c2", clock))
    assert store.load_attempt(aid).delivered_claim_id == "c1"


def test_reconcile_releases_a_lost_consumers_claim_without_suppression(
    store: MemorySessionStore, clock: ManualClock
) -> None:
    aid = _terminal_record(store, clock).attempt_id
    with pytest.raises(Conflict):  # a consumer run must be live to claim
        store.claim_delivery(aid, _claim("c0", clock, "never-admitted"))
    _consumer(store, clock, "consumer")
    store.claim_delivery(aid, _claim("c1", clock, "consumer"))
    lease = store.load_run(SESSION, "consumer").admission_lease
    assert lease is not None
    clock.advance(max(CLAIM_TTL, lease.lease_expires_at - clock.now()))  # its host died
    (changed,) = store.reconcile(NS)
    assert changed.delivery_status == "undelivered"
    assert changed.automatic_continuation_suppressed_by_run_id is None


def test_consumer_terminated_release_records_the_suppression(
    store: MemorySessionStore, clock: ManualClock
) -> None:
    aid = _terminal_record(store, clock).attempt_id
    _consumer(store, clock, "consumer")
    store.claim_delivery(aid, _claim("c1", clock, "consumer"))
    with pytest.raises(Conflict):
        store.release_delivery(aid, "c1", ConsumerTerminated(run_id="other"))
    released = store.release_delivery(aid, "c1", ConsumerTerminated(run_id="consumer"))
    assert released.automatic_continuation_suppressed_by_run_id == "consumer"
    with pytest.raises(Conflict):
        store.claim_delivery(aid, _claim("c2", clock), automatic=True)


# -- continuation -----------------------------------------------------------------------------


def test_continuation_admits_exactly_one_run_and_replays_its_receipt(
    store: MemorySessionStore, clock: ManualClock
) -> None:
    record = _terminal_record(store, clock)
    request = continuation(record, clock, expected_head_run_id="parent-run-1")
    receipt = store.acquire_continuation(request)
    assert not receipt.idempotent_replay
    assert receipt.record.delivery_status == "claimed"
    assert receipt.record.continuation_run_id == receipt.run.run_id
    assert receipt.run.trigger_type == storage.ASYNC_SUBAGENT_RESULT
    assert receipt.cause == request.cause
    assert store.acquire_continuation(request) == replace(receipt, idempotent_replay=True)
    with pytest.raises(Conflict):  # claimed for the live continuation run
        store.acquire_continuation(continuation(record, clock, run_id="another"))
    runs = store.list_runs(SESSION)
    assert [r.trigger_type for r in runs].count(storage.ASYNC_SUBAGENT_RESULT) == 1
    assert store.commit_terminal(terminal(drive_done(record), clock)) is not None


def drive_done(record: AttemptRecord) -> AttemptRecord:
    # The terminal commit that produced ``record``, rebuilt from it (same times).
    return replace(
        record,
        execution_status=ExecutionStatus.RUNNING,
        result_ref=None,
        retention_expires_at=None,
        terminal_at=None,
        terminal_fingerprint=None,
        delivery_status=DeliveryStatus.UNDELIVERED,
        delivered_claim_id=None,
        continuation_run_id=None,
    )


@pytest.mark.parametrize("forgery", ["input", "empty", "cause", "head", "trigger"])
def test_a_forged_continuation_conflicts_and_writes_nothing(
    store: MemorySessionStore, clock: ManualClock, forgery: str
) -> None:
    record = _terminal_record(store, clock)
    request = continuation(record, clock)
    if forgery == "input":
        request = continuation(record, clock, parts=(InputPart(text="forged"),))
    elif forgery == "empty":
        request = continuation(record, clock, parts=())
    elif forgery == "cause":
        request = replace(request, cause=replace(request.cause, result_size_bytes=1))
    elif forgery == "head":
        request = continuation(record, clock, expected_head_run_id="stale")
    else:
        request = replace(request, run=replace(request.run, trigger_type="user"))
    before = _tables(store)
    with pytest.raises(Conflict):
        store.acquire_continuation(request)
    assert _tables(store) == before


def test_continuation_is_refused_while_another_run_is_live(
    store: MemorySessionStore, clock: ManualClock
) -> None:
    record = _terminal_record(store, clock)
    store.admit_run(plain_run(clock, "busy"))
    with pytest.raises(RunConflict):
        store.acquire_continuation(continuation(record, clock, restore_from_run_id="busy"))


def test_continuation_after_retention_expiry_carries_the_expiry_summary(
    store: MemorySessionStore, clock: ManualClock
) -> None:
    commit = _artifact_commit(store, clock, 1, 20, limits=LIMITS, retention=60.0)
    committed = store.commit_terminal(commit)
    full = store.acquire_continuation
    with pytest.raises(Conflict):  # the preview is not the complete artifact content
        full(continuation(committed, clock))
    clock.advance(60)
    (expired,) = store.expire_retention(NS)
    receipt = store.acquire_continuation(continuation(expired, clock))
    assert "expired" in receipt.run.input[0].text


def test_continuation_with_an_artifact_needs_its_full_content(
    store: MemorySessionStore, clock: ManualClock
) -> None:
    committed = store.commit_terminal(_artifact_commit(store, clock, 1, 20, limits=LIMITS))
    receipt = store.acquire_continuation(continuation(committed, clock, artifact_content="x" * 20))
    assert receipt.run.input[0].text.endswith("x" * 20)


# -- reconcile, fence, runs -------------------------------------------------------------------


def test_reconcile_fails_lost_attempts_with_a_fingerprint_and_keeps_live_ones(
    store: MemorySessionStore, clock: ManualClock
) -> None:
    lost = store.accept_attempt(acceptance(clock))
    clock.advance(20)
    live = store.accept_attempt(acceptance(clock, "subattempt_2", "other", host="host-b"))
    clock.advance(10)
    (changed,) = store.reconcile(NS)
    assert changed.attempt_id == lost.attempt_id
    assert changed.execution_status == "failed"
    assert changed.failure_category == "host_process_lost"
    assert changed.result_ref == storage.ResultRef(
        error="host process lost",
        digest=storage.result_digest(None, "host process lost"),
        size_bytes=len("host process lost"),
    )
    assert changed.retention_expires_at == clock.now() + 3600.0
    assert changed.terminal_at == changed.updated_at == clock.now()
    unfingerprinted = replace(changed, terminal_fingerprint=None)
    assert changed.terminal_fingerprint == storage.terminal_fingerprint(
        TerminalCommit(record=unfingerprinted)
    )
    assert store.commit_terminal(TerminalCommit(record=unfingerprinted)) == changed
    assert [r.attempt_id for r in store.list_active_attempts(NS)] == [live.attempt_id]
    with pytest.raises(StaleFence):
        store.heartbeat_attempt(lost.attempt_id, HOST, 1, clock.now() + 30)
    assert store.reconcile(NS) == []


def test_a_deletion_fence_waits_for_live_leases_and_then_fails_writes_closed(
    store: MemorySessionStore, clock: ManualClock
) -> None:
    record = store.accept_attempt(acceptance(clock))
    before = _tables(store)
    with pytest.raises(Conflict):
        store.fence_session_deletion(SESSION)
    assert _tables(store) == before
    clock.advance(30)
    fenced = store.fence_session_deletion(SESSION)
    assert fenced.status == "deleting"
    assert store.fence_session_deletion(SESSION) == fenced
    with pytest.raises(Conflict):
        store.take_over_attempt(record.attempt_id, "host-b", 2, clock.now() + 30)
    with pytest.raises(Conflict):
        store.admit_run(plain_run(clock, "late"))
    with pytest.raises(IllegalTransition):
        store.update_session_status(SESSION, SessionStatus.ACTIVE)


def test_run_admission_is_idempotent_by_key_and_single_live_per_session(
    store: MemorySessionStore, clock: ManualClock
) -> None:
    request = plain_run(clock, "r1")
    first = store.admit_run(request, idempotency_key="k1")
    assert first.run.sequence_no == 2 and not first.idempotent_replay
    clock.advance(1)
    replay = store.admit_run(request, idempotency_key="k1")
    assert replay == replace(first, idempotent_replay=True)
    with pytest.raises(IdempotencyConflict):
        store.admit_run(plain_run(clock, "r1", text="other"), idempotency_key="k1")
    with pytest.raises(RunConflict):
        store.admit_run(plain_run(clock, "r2"))
    with pytest.raises(StaleFence):
        store.transition_run(SESSION, "r1", RunStatus.RUNNING, admission_id="wrong")
    clock.advance(30)
    with pytest.raises(StaleFence):
        store.transition_run(SESSION, "r1", RunStatus.RUNNING, admission_id="adm-r1")
    assert store.admit_run(plain_run(clock, "r2")).run.sequence_no == 3
    assert [r.run_id for r in store.list_runs(SESSION)] == ["parent-run-1", "r1", "r2"]


def test_admit_run_refuses_continuation_triggers(
    store: MemorySessionStore, clock: ManualClock
) -> None:
    run = replace(plain_run(clock, "r1"), trigger_type=storage.ASYNC_SUBAGENT_RESULT)
    with pytest.raises(Conflict):
        store.admit_run(run)


def test_sessions_are_idempotent_and_listed_by_namespace(clock: ManualClock) -> None:
    store = MemorySessionStore(clock=clock)
    created = store.create_session(fresh_session(clock, "s2"))
    store.create_session(fresh_session(clock, "s1"))
    store.create_session(fresh_session(clock, "other", namespace_id="ns-2"))
    assert store.create_session(fresh_session(clock, "s2")) == created
    with pytest.raises(AlreadyExists):
        store.create_session(replace(fresh_session(clock, "s2"), profile="x"))
    assert [s.session_id for s in store.list_sessions(NS)] == ["s1", "s2"]
    with pytest.raises(NotFound):
        store.load_session("nope")
    assert admission_lease(clock, "a").admission_id == "a"


# -- corruption -------------------------------------------------------------------------------


def test_corrupted_bytes_fail_closed_and_lose_nothing_else(
    store: MemorySessionStore, clock: ManualClock
) -> None:
    good = store.accept_attempt(acceptance(clock))
    bad = store.accept_attempt(acceptance(clock, "subattempt_2", "other"))
    store.backend.write(
        lambda txn: txn.put("attempts", codec.attempt_key(bad.attempt_id), b"\xc1garbage")
    )
    with pytest.raises(CorruptRecord) as info:
        store.load_attempt(bad.attempt_id)
    assert info.value.table == "attempts"
    with pytest.raises(CorruptRecord):
        store.heartbeat_attempt(bad.attempt_id, HOST, 1, clock.now() + 30)
    assert store.load_attempt(good.attempt_id) == good
    newer = replace(good, schema_version=storage.SCHEMA_VERSION + 1)
    store.backend.write(
        lambda txn: txn.put(
            "attempts", codec.attempt_key(good.attempt_id), codec.ATTEMPT.encode(newer)
        )
    )
    with pytest.raises(CorruptRecord):
        store.load_attempt(good.attempt_id)


def test_a_closed_store_fails_and_drain_returns(clock: ManualClock) -> None:
    store = MemorySessionStore(clock=clock)
    store.drain()
    store.close()
    with pytest.raises(storage.Failed):
        store.load_session("s")


# -- bad input --------------------------------------------------------------------------------


@pytest.mark.parametrize("expiry", [float("nan"), float("inf"), float("-inf"), "soon", None, True])
def test_a_non_finite_or_ill_typed_lease_expiry_is_an_invalid_record(
    store: MemorySessionStore, clock: ManualClock, expiry: object
) -> None:
    record = store.accept_attempt(acceptance(clock))
    with pytest.raises(InvalidRecord):
        store.heartbeat_attempt(record.attempt_id, HOST, 1, expiry)  # type: ignore[arg-type]
    lease = replace(record.owner_lease, lease_expires_at=expiry)
    with pytest.raises(InvalidRecord):
        store.accept_attempt(replace(acceptance(clock, "subattempt_2", "b"), owner_lease=lease))
    assert store.load_attempt(record.attempt_id) == record


@pytest.mark.parametrize(
    "changes",
    [{"owner_lease": None}, {"attempt_id": 7}, {"trace_context": {"a": 1}}, {"profile": b"x"}],
)
def test_an_ill_typed_record_is_an_invalid_record_not_a_crash(
    store: MemorySessionStore, clock: ManualClock, changes: dict[str, object]
) -> None:
    with pytest.raises(InvalidRecord):
        store.accept_attempt(replace(acceptance(clock), **changes))
    record = drive(store, store.accept_attempt(acceptance(clock)), clock)
    commit = terminal(record, clock)
    with pytest.raises(InvalidRecord):
        store.commit_terminal(replace(commit, record=replace(commit.record, **changes)))
    assert store.load_attempt(record.attempt_id) == record


def test_a_submitted_record_with_string_statuses_is_normalized(
    store: MemorySessionStore, clock: ManualClock
) -> None:
    record = store.accept_attempt(replace(acceptance(clock), execution_status="accepted"))  # type: ignore[arg-type]
    assert record.execution_status is ExecutionStatus.ACCEPTED


# -- index walks --------------------------------------------------------------------------------


def test_listings_and_reconcile_walk_every_session_of_the_namespace(
    store: MemorySessionStore, clock: ManualClock
) -> None:
    setup_session(store, clock, "session-0", "parent-0")
    setup_session(store, clock, "session-2", "parent-2")
    live = store.accept_attempt(acceptance(clock, "subattempt_l", "ag-l", session_id="session-2"))
    lost = store.accept_attempt(acceptance(clock, "subattempt_x", "ag-x", ttl=5.0))
    done = drive(
        store,
        store.accept_attempt(
            acceptance(
                clock, "subattempt_d", "ag-d", session_id="session-0", parent_run_id="parent-0"
            )
        ),
        clock,
    )
    done = store.commit_terminal(terminal(done, clock))
    store.claim_delivery(done.attempt_id, DeliveryClaim(claim_id="c", deadline=clock.now() + 1))
    other_ns = store.create_session(fresh_session(clock, "elsewhere", namespace_id="ns-other"))
    store.accept_attempt(
        acceptance(
            clock, "subattempt_o", "ag-o", session_id=other_ns.session_id, namespace_id="ns-other"
        )
    )

    assert sorted(r.attempt_id for r in store.list_active_attempts(NS)) == [
        "subattempt_l",
        "subattempt_x",
    ]
    assert [r.attempt_id for r in store.list_pending_attempts(NS)] == ["subattempt_d"]
    assert store.list_pending_attempts(NS, SESSION) == []
    clock.advance(5)
    changed = {r.attempt_id: r for r in store.reconcile(NS)}
    assert changed["subattempt_x"].failure_category == "host_process_lost"
    assert changed["subattempt_d"].delivery_status == "undelivered"
    assert set(changed) == {"subattempt_x", "subattempt_d"}
    assert [r.attempt_id for r in store.list_active_attempts(NS)] == [live.attempt_id]
    assert sorted(r.attempt_id for r in store.list_pending_attempts(NS)) == [
        "subattempt_d",
        lost.attempt_id,
    ]
    assert [r.attempt_id for r in store.list_active_attempts("ns-other")] == ["subattempt_o"]


class _IndexReads:
    """A memory backend recording every ``index`` key its scans yield."""

    def __init__(self) -> None:
        self.inner = MemoryBackend(KernelStore.TABLES)
        self.tables = self.inner.tables
        self.seen: list[bytes] = []

    def _scan(self, txn: storage.Txn) -> Callable[..., Iterator[tuple[bytes, bytes]]]:
        def scan(
            table: str, prefix: bytes = b"", start: bytes | None = None
        ) -> Iterator[tuple[bytes, bytes]]:
            for k, value in txn.scan(table, prefix, start):
                if table == "index":
                    self.seen.append(k)
                yield k, value

        return scan

    def _recorded(self, fn: Callable[[storage.Txn], object]) -> Callable[[storage.Txn], object]:
        def run(txn: storage.Txn) -> object:
            view = SimpleNamespace(
                get=txn.get, put=txn.put, delete=txn.delete, scan=self._scan(txn)
            )
            return fn(view)  # type: ignore[arg-type]

        return run

    def read(self, fn: Callable[[storage.Txn], object]) -> object:
        return self.inner.read(self._recorded(fn))

    def write(self, fn: Callable[[storage.Txn], object]) -> object:
        return self.inner.write(self._recorded(fn))

    def drain(self) -> None:
        self.inner.drain()

    def close(self) -> None:
        self.inner.close()


def test_reconcile_and_active_listing_read_only_live_attempts_and_claims(
    clock: ManualClock,
) -> None:
    backend = _IndexReads()
    store = KernelStore(backend, clock=clock, retention_seconds=3600.0)  # type: ignore[arg-type]
    # History spread over many sessions: each holds only retained results.
    for n in range(6):
        setup_session(store, clock, f"session-h{n}", f"parent-h{n}")
        for m in range(2):
            record = store.accept_attempt(
                acceptance(
                    clock,
                    f"subattempt_h{n}_{m}",
                    f"ag-h{m}",
                    session_id=f"session-h{n}",
                    parent_run_id=f"parent-h{n}",
                )
            )
            store.commit_terminal(terminal(drive(store, record, clock), clock))
    setup_session(store, clock)
    live = store.accept_attempt(acceptance(clock, "subattempt_live", "ag-live"))
    claimed = _terminal_record(store, clock, attempt_id="subattempt_c", agent_id="ag-c")
    store.claim_delivery(claimed.attempt_id, _claim("c", clock))
    backend.seen.clear()

    assert [r.attempt_id for r in store.list_active_attempts(NS)] == [live.attempt_id]
    assert store.reconcile(NS) == []
    assert backend.seen
    assert all(k.startswith((codec.live_prefix(NS), codec.claim_prefix(NS))) for k in backend.seen)
    assert backend.seen.count(codec.claim_key(NS, SESSION, claimed.attempt_id)) == 1


def test_reconcile_with_nothing_due_runs_no_write_transaction(clock: ManualClock) -> None:
    # A host reconciles every tick: on a serializable store a write transaction
    # that only read would still lock the ranges it read, so an idle pass reads only.
    backend = _IndexReads()
    writes: list[object] = []
    write = backend.write

    def counted(fn: Callable[[storage.Txn], object]) -> object:
        writes.append(fn)
        return write(fn)

    backend.write = counted  # type: ignore[method-assign]
    store = KernelStore(backend, clock=clock, retention_seconds=3600.0)  # type: ignore[arg-type]
    setup_session(store, clock)
    live = store.accept_attempt(acceptance(clock))
    claimed = _terminal_record(store, clock, attempt_id="subattempt_c", agent_id="ag-c")
    store.claim_delivery(claimed.attempt_id, _claim("c", clock))
    writes.clear()
    assert store.reconcile(NS) == []
    assert writes == []
    clock.advance(31)  # the live attempt's owner lease lapsed (and the claim's deadline)
    assert live.attempt_id in [r.attempt_id for r in store.reconcile(NS)]
    assert len(writes) == 1


def test_reconcile_never_reads_delivered_history(
    store: MemorySessionStore, clock: ManualClock
) -> None:
    old = _terminal_record(store, clock, attempt_id="subattempt_old", agent_id="ag-old")
    store.claim_delivery(old.attempt_id, _claim("c", clock))
    store.acknowledge_delivery(old.attempt_id, "c")
    # Unreadable history: a reconcile that touched it would raise CorruptRecord.
    store.backend.write(lambda txn: txn.put("attempts", codec.attempt_key(old.attempt_id), b"\xc1"))
    store.accept_attempt(acceptance(clock))
    clock.advance(31)
    assert [r.attempt_id for r in store.reconcile(NS)] == ["subattempt_1"]


# -- stores written before consumer-linked claims were indexed ---------------------------------


def test_a_run_linked_claim_without_its_link_entry_is_settled_at_its_deadline(
    store: MemorySessionStore, clock: ManualClock
) -> None:
    # A store written before the ``L`` index: the run's completion cannot find the
    # claim, the reconciler acknowledges it at its deadline, and check/repair adds it.
    aid = _terminal_record(store, clock).attempt_id
    _consumer(store, clock, "consumer")
    store.claim_delivery(aid, _claim("c1", clock, "consumer"))
    link = codec.link_key(SESSION, "consumer", aid)
    store.backend.write(lambda txn: txn.delete("index", link))
    report = storage.admin.check(store)
    assert [(f.key, f.problem) for f in report.findings] == [(link, "missing index entry")]
    assert storage.admin.check(store, repair=True).ok
    store.backend.write(lambda txn: txn.delete("index", link))
    store.transition_run(SESSION, "consumer", RunStatus.COMPLETED, admission_id="adm-consumer")
    assert store.load_attempt(aid).delivery_status == "claimed"
    clock.advance(CLAIM_TTL)
    (settled,) = store.reconcile(NS)
    assert settled.delivery_status == "delivered"
    assert settled.delivered_to_run_id == "consumer"
    assert storage.admin.check(store).ok


@pytest.mark.parametrize("status", [RunStatus.FAILED, RunStatus.CANCELLED])
def test_a_link_less_claim_of_a_failed_consumer_is_released_with_suppression(
    store: MemorySessionStore, clock: ManualClock, status: RunStatus
) -> None:
    # The same older store, its consumer failed or cancelled: the reconciler releases
    # the claim at its deadline and records the suppression, as the run's own
    # terminal commit does where the L entry exists (the mutation run's K33).
    aid = _terminal_record(store, clock).attempt_id
    _consumer(store, clock, "consumer")
    store.claim_delivery(aid, _claim("c1", clock, "consumer"))
    store.backend.write(lambda txn: txn.delete("index", codec.link_key(SESSION, "consumer", aid)))
    store.transition_run(SESSION, "consumer", status, admission_id="adm-consumer")
    clock.advance(CLAIM_TTL)
    (settled,) = store.reconcile(NS)
    assert settled.delivery_status == "undelivered"
    assert settled.automatic_continuation_suppressed_by_run_id == "consumer"


def test_an_exact_continuation_retry_replays_a_receipt_written_before_issue_15(
    store: MemorySessionStore, clock: ManualClock
) -> None:
    # Older receipts hold the delivered record (claim cleared, delivered_claim_id set).
    record = _terminal_record(store, clock)
    request = continuation(record, clock)
    receipt = store.acquire_continuation(request)
    old = replace(
        receipt,
        record=replace(
            receipt.record,
            delivery_status=DeliveryStatus.DELIVERED,
            delivery_claim=None,
            delivered_claim_id=request.claim_id,
        ),
    )
    key = codec.key(record.attempt_id)
    store.backend.write(
        lambda txn: txn.put("continuations", key, codec.CONTINUATION_RECEIPT.encode(old))
    )
    assert store.acquire_continuation(request) == replace(old, idempotent_replay=True)
