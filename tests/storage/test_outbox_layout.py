"""A data directory written before the store kept events still replays (issue 15).

The store's event tables are the ones the host's event log wrote
(``host_events`` / ``host_meta``: keys, JSON, seals, the ``layout`` marker), so:

- a directory of the previous version (kernel layout 3, events appended by the
  host's own ``BackendEventLog``) opens as it is, every event replayed, the
  sequence and the fencing counter continued by the store;
- a directory from before checksums (kernel layout 2 and an event log without
  its marker, every value plain) is sealed on open, every value exactly once
  whichever opens it first (the store, or the old event log), and replays.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from builders import NS, SESSION, acceptance, drive, plain_run, setup_session, terminal
from postgres_db import scratch_database

from statemachines import RunStatus
from storage import (
    LmdbBackend,
    LmdbSessionStore,
    ManualClock,
    PostgresSessionStore,
    StoreEvent,
    Txn,
)
from storage._identity import MARKER_NAME
from storage._sealed import intact, unseal
from subagents._host._eventlog import TABLES as EVENT_TABLES
from subagents._host._eventlog import LmdbEventLog, PostgresEventLog

KERNEL_TABLES = LmdbSessionStore.TABLES


def _result(store: LmdbSessionStore, clock: ManualClock) -> None:
    record = store.accept_attempt(acceptance(clock))
    store.commit_terminal(terminal(drive(store, record, clock), clock))


def _raw(path: Path) -> dict[str, list[tuple[bytes, bytes]]]:
    backend = LmdbBackend(path, tables=(*KERNEL_TABLES, *EVENT_TABLES))
    try:
        return backend.read(lambda txn: {t: list(txn.scan(t)) for t in backend.tables})
    finally:
        backend.close()


def _unseal_everything(path: Path) -> None:
    """Rewrite a store as the version before checksums held it: kernel layout 2
    (plain values, an 8-byte marker, no identity) and a plain event log without
    its marker."""
    backend = LmdbBackend(path, tables=(*KERNEL_TABLES, *EVENT_TABLES))

    def fn(txn: Txn) -> None:
        for table in backend.tables:
            for k, v in list(txn.scan(table)):
                txn.put(table, k, unseal(table, k, v))
        txn.delete("meta", b"store_identity")
        txn.put("meta", b"schema_version", (2).to_bytes(8, "big"))
        txn.delete("host_meta", b"layout")

    try:
        backend.write(fn)
    finally:
        backend.close()
    (path / MARKER_NAME).unlink()


def _history(path: Path, clock: ManualClock) -> tuple[list[StoreEvent], list[object]]:
    store = LmdbSessionStore(path, clock=clock)
    try:
        setup_session(store, clock)
        _result(store, clock)
        store.append_event(SESSION, "run.steered", "parent-run-1", {"steering_id": "s1"})
        return store.replay_events(SESSION), list(store.list_attempts(NS))
    finally:
        store.close()


def _drop_events(txn: Txn) -> None:
    for table in EVENT_TABLES:
        for k, _ in list(txn.scan(table)):
            txn.delete(table, k)


def _assert_sealed_once(path: Path) -> None:
    for table, rows in _raw(path).items():
        for key, value in rows:
            assert intact(table, key, value), (table, key)
            if table == "host_events":  # one seal: the payload under it is the JSON
                assert unseal(table, key, value).startswith(b"{")


@pytest.mark.parametrize("first", ["store", "old event log"])
def test_a_directory_from_before_checksums_is_sealed_once_and_replays(
    tmp_path: Path, clock: ManualClock, first: str
) -> None:
    events, attempts = _history(tmp_path, clock)
    _unseal_everything(tmp_path)
    raw = _raw(tmp_path)
    assert not any(intact(t, k, v) for t in EVENT_TABLES for k, v in raw[t])  # plain now
    if first == "old event log":  # an older host opened it first: it seals its tables
        old = LmdbEventLog(tmp_path)
        assert [e.seq for e in old.replay(SESSION)] == [e.seq for e in events]
        old.close()
    store = LmdbSessionStore(tmp_path, clock=clock)
    try:
        assert store.replay_events(SESSION) == events
        assert store.list_attempts(NS) == attempts
        store.admit_run(plain_run(clock, "after-upgrade"))
        assert store.replay_events(SESSION, len(events))[0].seq == len(events) + 1
    finally:
        store.close()
    _assert_sealed_once(tmp_path)
    again = LmdbSessionStore(tmp_path, clock=clock)  # sealed already: opens as it is
    try:
        assert [e.kind for e in again.replay_events(SESSION, len(events))] == ["run.admitted"]
    finally:
        again.close()
    _assert_sealed_once(tmp_path)


def test_a_directory_of_the_previous_version_replays_and_continues_its_sequence(
    tmp_path: Path, clock: ManualClock
) -> None:
    # The previous version: the kernel's tables (unchanged) and an event log the
    # host wrote itself, in transactions of its own (BackendEventLog).
    store = LmdbSessionStore(tmp_path, clock=clock)
    setup_session(store, clock)

    store.raw_backend.write(_drop_events)  # the previous kernel wrote no event
    store.close()
    old = LmdbEventLog(tmp_path)
    old.append(SESSION, "session.created", 1.0, None, {"profile": "default"})
    old.append(SESSION, "run.admitted", 2.0, "parent-run-1", {"trigger_type": "rpc"})
    old.append(SESSION, "run.completed", 3.0, "parent-run-1", {"output": "done"})
    assert [old.next_generation() for _ in range(2)] == [1, 2]
    old.close()

    store = LmdbSessionStore(tmp_path, clock=clock)
    try:
        replayed = store.replay_events(SESSION)
        assert [(e.seq, e.kind, e.at, e.data) for e in replayed] == [
            (1, "session.created", 1.0, {"profile": "default"}),
            (2, "run.admitted", 2.0, {"trigger_type": "rpc"}),
            (3, "run.completed", 3.0, {"output": "done"}),
        ]
        store.admit_run(plain_run(clock, "r2"))
        store.transition_run(SESSION, "r2", RunStatus.RUNNING, admission_id="adm-r2")
        assert [e.seq for e in store.replay_events(SESSION)] == [1, 2, 3, 4, 5]
        assert store.next_fencing_generation() == 3  # the one counter, continued
    finally:
        store.close()
    _assert_sealed_once(tmp_path)
    old = LmdbEventLog(tmp_path)  # and an older reader still reads the store's events
    try:
        assert [e.kind for e in old.replay(SESSION)][3:] == ["run.admitted", "run.started"]
    finally:
        old.close()


def test_a_postgresql_database_of_the_previous_version_replays(clock: ManualClock) -> None:
    with scratch_database("outbox_layout") as url:
        store = PostgresSessionStore(url, clock=clock, pool_size=1)
        setup_session(store, clock)
        store.raw_backend.write(_drop_events)  # the previous kernel wrote no event
        store.close()
        old = PostgresEventLog(url)  # the previous host's own log, its own transactions
        old.append(SESSION, "session.created", 1.0, None, {"profile": "default"})
        old.append(SESSION, "run.completed", 2.0, "parent-run-1", {"output": "done"})
        generation = old.next_generation()
        old.close()
        store = PostgresSessionStore(url, clock=clock, pool_size=1)
        try:
            assert [(e.seq, e.kind) for e in store.replay_events(SESSION)] == [
                (1, "session.created"),
                (2, "run.completed"),
            ]
            store.admit_run(plain_run(clock, "r2"))
            assert [e.kind for e in store.replay_events(SESSION, 2)] == ["run.admitted"]
            assert store.next_fencing_generation() == generation + 1
        finally:
            store.close()
