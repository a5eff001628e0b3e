"""Events are committed with the state they describe (issue 15), on every store.

Each run and attempt change appends its event in the same transaction (the
outbox): a fault between the change and its event leaves neither, a full
attempt life (accept, start, terminal, claim, release, deliver, expire, lost)
leaves its events in order, and a session's seqs are dense from 1 whatever
wrote them (the store or ``append_event``). Listeners hear exactly what
committed, after the commit, on the committing thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import msgspec
import pytest
from builders import (
    CLAIM_TTL,
    LEASE_TTL,
    NS,
    PARENT_RUN,
    SESSION,
    PassTxn,
    Reopen,
    acceptance,
    continuation,
    drive,
    fresh_session,
    plain_run,
    setup_session,
    terminal,
)

from statemachines import RunStatus
from storage import (
    AlreadyExists,
    AttemptRecord,
    Backend,
    DeliveryClaim,
    Failed,
    KernelStore,
    ManualClock,
    MemorySessionStore,
    Retryable,
    RetryableStorage,
    SessionStore,
    StoreEvent,
    Txn,
)

T = TypeVar("T")


def _kinds(store: SessionStore, session_id: str = SESSION) -> list[str]:
    return [e.kind for e in store.replay_events(session_id)]


def _dense(store: SessionStore, session_id: str = SESSION) -> list[StoreEvent]:
    events = store.replay_events(session_id, 0, 10_000)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert store.last_event_seq(session_id) == len(events)
    return events


def _result(store: SessionStore, clock: ManualClock, n: int = 1) -> AttemptRecord:
    record = store.accept_attempt(acceptance(clock, f"subattempt_{n}", f"agent-bg-{n:08x}"))
    running = drive(store, record, clock)
    return store.commit_terminal(terminal(running, clock, content=f"durable result {n}"))


def test_a_runs_life_is_in_the_log_with_its_data(
    store: SessionStore, clock: ManualClock, reopen: Reopen
) -> None:
    store.create_session(fresh_session(clock))
    assert store.append_event(SESSION, "session.created", None, {"profile": "p"}).seq == 1
    store.admit_run(plain_run(clock, "r1"))
    store.transition_run(SESSION, "r1", RunStatus.RUNNING, admission_id="adm-r1")
    clock.advance(2)
    store.transition_run(
        SESSION,
        "r1",
        RunStatus.FAILED,
        admission_id="adm-r1",
        output_preview="boom",
        event_data={"failure": {"category": "model"}},
    )
    # A no-op transition appends nothing.
    store.transition_run(SESSION, "r1", RunStatus.FAILED, admission_id="adm-r1")
    store = reopen(store)
    events = _dense(store)
    assert [e.kind for e in events] == [
        "session.created",
        "run.admitted",
        "run.started",
        "run.failed",
    ]
    admitted, started, failed = events[1:]
    assert admitted.run_id == started.run_id == failed.run_id == "r1"
    assert admitted.data == {"trigger_type": None}  # a plain run names no trigger
    assert started.data == {"profile": "default"}
    assert failed.data == {"error": "boom", "failure": {"category": "model"}}
    assert failed.at == clock.now()  # the store's clock, read in the transaction
    assert store.replay_events(SESSION, 2, 1) == [started]
    assert store.replay_events("no-such-session") == []


def test_an_attempts_whole_life_is_in_its_parent_sessions_log(
    store: SessionStore, clock: ManualClock, reopen: Reopen
) -> None:
    setup_session(store, clock)
    first = _result(store, clock, 1)
    store.claim_delivery(
        first.attempt_id, DeliveryClaim(claim_id="c1", deadline=clock.now() + CLAIM_TTL)
    )
    store.release_delivery(first.attempt_id, "c1", Retryable())
    store.claim_delivery(
        first.attempt_id, DeliveryClaim(claim_id="c2", deadline=clock.now() + CLAIM_TTL)
    )
    store.acknowledge_delivery(first.attempt_id, "c2")
    second = _result(store, clock, 2)
    receipt = store.acquire_continuation(continuation(second, clock))
    run_id = receipt.run.run_id
    store.transition_run(SESSION, run_id, RunStatus.RUNNING, admission_id=f"adm-{run_id}")
    store.transition_run(SESSION, run_id, RunStatus.COMPLETED, admission_id=f"adm-{run_id}")
    lost = store.accept_attempt(acceptance(clock, "subattempt_lost", "agent-lost"))
    clock.advance(LEASE_TTL + 1)
    store.reconcile(NS)
    clock.advance(86_400.0)
    store.expire_retention(NS)
    store = reopen(store)

    events = _dense(store)
    run_events = ["run.admitted", "run.started", "run.completed"]
    attempt = [(e.kind, e.data.get("attempt_id")) for e in events if e.kind.startswith("attempt.")]
    a1, a2, a3 = first.attempt_id, second.attempt_id, lost.attempt_id
    assert attempt[:6] == [
        ("attempt.accepted", a1),
        ("attempt.started", a1),
        ("attempt.terminal", a1),
        ("attempt.claimed", a1),
        ("attempt.released", a1),
        ("attempt.claimed", a1),
    ]
    assert attempt[6:13] == [
        ("attempt.delivered", a1),
        ("attempt.accepted", a2),
        ("attempt.started", a2),
        ("attempt.terminal", a2),
        ("attempt.claimed", a2),  # by the continuation run, admitted with it
        ("attempt.delivered", a2),  # by the continuation run's completion
        ("attempt.accepted", a3),
    ]
    assert attempt[13] == ("attempt.terminal", a3)  # reconciled: its host was lost
    assert sorted(attempt[14:]) == [("attempt.expired", a) for a in (a1, a2, a3)]
    assert [e.kind for e in events[:3]] == run_events  # setup_session's parent run
    by_kind = {(e.kind, e.data.get("attempt_id"), e.data.get("claim_id")): e for e in events}
    accepted = by_kind["attempt.accepted", a1, None]
    assert accepted.run_id == PARENT_RUN
    assert accepted.data == {
        "attempt_id": a1,
        "agent_id": first.agent_id,
        "fencing_generation": 1,
        "owner": "host-a",
    }
    done = by_kind["attempt.terminal", a1, None].data
    assert done["status"] == "completed"
    assert first.result_ref is not None
    assert done["result_digest"] == first.result_ref.digest
    assert done["result_bytes"] == len(b"durable result 1")
    assert by_kind["attempt.terminal", a3, None].data["error_category"] == "host_process_lost"
    assert by_kind["attempt.released", a1, "c1"].data["suppressed_by_run_id"] is None
    assert by_kind["attempt.claimed", a2, "continuation-claim-1"].data["consumer_run_id"] == run_id
    admitted = [e for e in events if e.kind == "run.admitted" and e.run_id == run_id]
    assert [e.data for e in admitted] == [
        {"trigger_type": "async_subagent_result", "attempt_id": a2}
    ]
    assert by_kind["attempt.delivered", a2, "continuation-claim-1"].data["consumer_run_id"] == (
        run_id
    )


def test_idempotent_replays_append_nothing(store: SessionStore, clock: ManualClock) -> None:
    setup_session(store, clock)
    record = store.accept_attempt(acceptance(clock))
    store.accept_attempt(acceptance(clock))
    commit = terminal(drive(store, record, clock), clock)
    store.commit_terminal(commit)
    before = store.last_event_seq(SESSION)
    store.commit_terminal(commit)
    claim = DeliveryClaim(claim_id="c1", deadline=clock.now() + CLAIM_TTL)
    store.claim_delivery(record.attempt_id, claim)
    store.claim_delivery(record.attempt_id, claim)
    store.acknowledge_delivery(record.attempt_id, "c1")
    store.acknowledge_delivery(record.attempt_id, "c1")
    assert _kinds(store)[before:] == ["attempt.claimed", "attempt.delivered"]
    _dense(store)


# -- atomicity: a fault between the change and its event leaves neither -------------------------


class _FaultyTxn(PassTxn):
    """A transaction whose event append fails after the change was written."""

    def put(self, table: str, key: bytes, value: bytes) -> None:
        if table == "host_events":
            raise RetryableStorage("injected fault between the change and its event")
        self.raw.put(table, key, value)


class _FaultyBackend:
    """``raw`` whose writes fail at the event append while ``armed``."""

    def __init__(self, raw: Backend) -> None:
        self.raw = raw
        self.tables: Sequence[str] = raw.tables
        self.armed = False

    def read(self, fn: Callable[[Txn], T]) -> T:
        return self.raw.read(fn)

    def write(self, fn: Callable[[Txn], T]) -> T:
        if not self.armed:
            return self.raw.write(fn)
        return self.raw.write(lambda txn: fn(_FaultyTxn(txn)))

    def drain(self) -> None:
        self.raw.drain()

    def close(self) -> None:
        pass  # the fixture's store owns the backend


def _snapshot(store: SessionStore) -> dict[str, list[tuple[bytes, bytes]]]:
    kernel = store
    assert isinstance(kernel, KernelStore)
    tables = (*kernel.TABLES, *kernel.EVENT_TABLES)
    return kernel.raw_backend.read(lambda txn: {t: list(txn.scan(t)) for t in tables})


def _each_change(
    store: SessionStore, clock: ManualClock
) -> list[tuple[str, Callable[[SessionStore], Any]]]:
    """One operation of each kind that appends an event, built on ``store``."""
    setup_session(store, clock)
    done = _result(store, clock, 1)
    accepted = store.accept_attempt(acceptance(clock, "subattempt_live", "agent-live"))
    live = drive(store, accepted, clock, ("starting",))  # no event: the next step has one
    claim = DeliveryClaim(claim_id="c1", deadline=clock.now() + CLAIM_TTL)
    return [
        ("admit_run", lambda s: s.admit_run(plain_run(clock, "r-new"))),
        ("accept_attempt", lambda s: s.accept_attempt(acceptance(clock, "subattempt_x", "ag-x"))),
        ("update_attempt_execution", lambda s: drive(s, live, clock, ("running",))),
        ("claim_delivery", lambda s: s.claim_delivery(done.attempt_id, claim)),
        ("acquire_continuation", lambda s: s.acquire_continuation(continuation(done, clock))),
        ("append_event", lambda s: s.append_event(SESSION, "note", None, {})),
    ]


@pytest.mark.parametrize(
    "op",
    [
        "admit_run",
        "accept_attempt",
        "update_attempt_execution",
        "claim_delivery",
        "acquire_continuation",
        "append_event",
    ],
)
def test_a_fault_at_the_event_append_leaves_neither_change_nor_event(
    store: SessionStore, clock: ManualClock, op: str
) -> None:
    assert isinstance(store, KernelStore)
    changes = dict(_each_change(store, clock))
    faulty = _FaultyBackend(store.raw_backend)
    view = KernelStore(faulty, clock=clock)  # the same tables, a faulty write path
    before = _snapshot(store)
    faulty.armed = True
    with pytest.raises(RetryableStorage):
        changes[op](view)
    assert _snapshot(store) == before
    faulty.armed = False
    changes[op](view)  # the same change commits with its event once the fault is gone
    assert _snapshot(store) != before
    _dense(store)


def test_a_fault_at_a_terminal_transition_keeps_the_run_live_and_logs_nothing(
    store: SessionStore, clock: ManualClock
) -> None:
    assert isinstance(store, KernelStore)
    setup_session(store, clock)
    aid = _result(store, clock).attempt_id
    store.admit_run(plain_run(clock, "consumer"))
    store.transition_run(SESSION, "consumer", RunStatus.RUNNING, admission_id="adm-consumer")
    store.claim_delivery(
        aid,
        DeliveryClaim(
            claim_id="c1", deadline=clock.now() + CLAIM_TTL, continuation_run_id="consumer"
        ),
    )
    faulty = _FaultyBackend(store.raw_backend)
    view = KernelStore(faulty, clock=clock)
    before = _snapshot(store)
    faulty.armed = True
    with pytest.raises(RetryableStorage):
        view.transition_run(SESSION, "consumer", RunStatus.COMPLETED, admission_id="adm-consumer")
    assert _snapshot(store) == before
    assert store.load_run(SESSION, "consumer").status == RunStatus.RUNNING
    assert store.load_attempt(aid).delivery_claim is not None  # not delivered either


# -- listeners -----------------------------------------------------------------------------------


def test_listeners_hear_what_committed_after_the_commit_on_the_calling_thread(
    store: SessionStore, clock: ManualClock
) -> None:
    heard: list[tuple[list[int], int, int]] = []

    def listener(events: list[StoreEvent]) -> None:
        # After the commit: the events are already in the log.
        heard.append(
            ([e.seq for e in events], threading.get_ident(), store.last_event_seq(SESSION))
        )

    def broken(events: list[StoreEvent]) -> None:
        raise RuntimeError("a listener that raises is logged and skipped")

    remove_broken = store.add_event_listener(broken)
    remove = store.add_event_listener(listener)
    setup_session(store, clock)  # admit, start, complete: three writes, one event each
    me = threading.get_ident()
    assert heard == [([1], me, 1), ([2], me, 2), ([3], me, 3)]
    store.create_session(fresh_session(clock, "other"))  # no event: no call
    with pytest.raises(AlreadyExists):
        store.admit_run(plain_run(clock, PARENT_RUN))  # refused (exists): nothing heard
    assert len(heard) == 3
    remove()
    remove_broken()
    store.append_event(SESSION, "note", None, {})
    assert len(heard) == 3


def test_a_store_without_event_tables_keeps_no_log(clock: ManualClock) -> None:
    from storage._memory import MemoryBackend

    store = KernelStore(MemoryBackend(KernelStore.TABLES), clock=clock)
    assert not store.has_events
    setup_session(store, clock)
    assert store.replay_events(SESSION) == []
    assert store.last_event_seq(SESSION) == 0
    with pytest.raises(Failed):
        store.append_event(SESSION, "note", None, {})


def test_the_memory_store_counts_fencing_generations(clock: ManualClock) -> None:
    store = MemorySessionStore(clock=clock)
    assert [store.next_fencing_generation() for _ in range(3)] == [1, 2, 3]


# -- a session's counter: read once and put once per transaction ----------------------------------


class _CountingTxn(PassTxn):
    """Counts the reads and puts of the sessions' event counters (``host_meta``)."""

    def __init__(self, raw: Txn, counts: dict[str, int]) -> None:
        super().__init__(raw)
        self.counts = counts

    def get(self, table: str, key: bytes) -> bytes | None:
        if table == "host_meta" and key.startswith(b"seq\0"):
            self.counts["get"] += 1
        return self.raw.get(table, key)

    def put(self, table: str, key: bytes, value: bytes) -> None:
        if table == "host_meta" and key.startswith(b"seq\0"):
            self.counts["put"] += 1
        self.raw.put(table, key, value)


class _CountingBackend(_FaultyBackend):
    """``raw`` whose write transactions count the counters' reads and puts."""

    def __init__(self, raw: Backend) -> None:
        super().__init__(raw)
        self.counts = {"get": 0, "put": 0}

    def write(self, fn: Callable[[Txn], T]) -> T:
        return self.raw.write(lambda txn: fn(_CountingTxn(txn, self.counts)))


def test_a_commit_with_three_events_reads_and_puts_the_sessions_counter_once(
    store: SessionStore, clock: ManualClock
) -> None:
    assert isinstance(store, KernelStore)
    setup_session(store, clock)
    _result(store, clock, 1)
    counting = _CountingBackend(store.raw_backend)
    view = KernelStore(counting, clock=clock)
    accepted = view.accept_attempt(acceptance(clock, "subattempt_w", "agent-bg-w"))
    assert counting.counts == {"get": 1, "put": 1}
    before = len(_kinds(store))
    # Started, terminal and delivered to a waiter: one transaction, three events.
    commit = msgspec.structs.replace(
        terminal(accepted, clock), via=("starting", "running"), deliver_claim_id="waiter-1"
    )
    view.commit_terminal(commit)
    assert _kinds(store)[before:] == ["attempt.started", "attempt.terminal", "attempt.delivered"]
    assert counting.counts == {"get": 2, "put": 2}
    _dense(store)
    assert store.append_event(SESSION, "note", None, {}).seq == before + 4
    _dense(store)
