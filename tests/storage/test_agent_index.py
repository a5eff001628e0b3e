"""A session's attempts and agents are read from the session's own index ranges.

Before layout 4, ``list_attempts(ns, session)`` decoded every attempt record of
the store (every namespace, every session, all history) to keep one session's,
and a supervisor looked up a forgotten agent that way: after hibernation, each
continuation cost a read of the whole store on a shared actor thread.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import pytest
from builders import (
    NS,
    SESSION,
    PassTxn,
    acceptance,
    drive,
    fresh_session,
    mixed_attempt_states,
    setup_session,
    tables,
    terminal,
)

import storage.admin
from storage import (
    Backend,
    KernelStore,
    LmdbSessionStore,
    ManualClock,
    MemorySessionStore,
    SessionStore,
    Txn,
)
from storage import _codec as codec
from storage._memory import MemoryBackend
from storage._sealed import seal

T = TypeVar("T")

OTHER_SESSION = "session-2"
OTHER_NS = "ns-other"


def _done(
    store: SessionStore, clock: ManualClock, n: int, *, session: str = SESSION, ns: str = NS
) -> str:
    """A completed attempt ``subattempt_<session>_<n>`` of agent ``ag-<session>-<n>``."""
    record = acceptance(
        clock, f"subattempt_{session}_{n}", f"ag-{session}-{n}", session_id=session, namespace_id=ns
    )
    record = drive(store, store.accept_attempt(record), clock)
    return store.commit_terminal(terminal(record, clock, retention=10.0)).attempt_id


def _other_history(store: SessionStore, clock: ManualClock, count: int) -> set[str]:
    """``count`` expired results in another session, one in another namespace."""
    setup_session(store, clock, OTHER_SESSION)
    ids = {_done(store, clock, n, session=OTHER_SESSION) for n in range(count)}
    store.create_session(fresh_session(clock, "session-x", OTHER_NS))
    _done(store, clock, 0, session="session-x", ns=OTHER_NS)
    clock.advance(10.0)
    store.expire_retention(NS)
    store.expire_retention(OTHER_NS)
    return ids


def test_list_attempts_and_find_agent_answer_every_state(
    store: SessionStore, clock: ManualClock
) -> None:
    setup_session(store, clock)
    mixed_attempt_states(store, clock)
    other = _other_history(store, clock, 3)
    # A live attempt of another subagent, and an agent continued after its expiry.
    writer = msgspec.structs.replace(
        acceptance(clock, "subattempt_w", "ag-writer"), subagent_name="writer"
    )
    store.accept_attempt(writer)
    again = store.accept_attempt(acceptance(clock, "subattempt_m4b", "ag-m4"))

    everything = store.list_attempts(NS)
    session = store.list_attempts(NS, SESSION)
    assert {r.attempt_id for r in everything} == {r.attempt_id for r in session} | other
    assert {r.parent_session_id for r in session} == {SESSION}
    assert len(session) == 9
    assert session == sorted(session, key=lambda r: (r.accepted_at, r.attempt_id))
    assert [r.attempt_id for r in store.list_attempts(OTHER_NS)] == ["subattempt_session-x_0"]
    assert store.list_attempts("ns-none") == []

    find = store.find_agent
    assert find(NS, SESSION, "ag-writer") == "writer"  # active
    assert find(NS, SESSION, "ag-m1") == "researcher"  # retained, undelivered
    assert find(NS, SESSION, "ag-m3") == "researcher"  # retained, delivered
    assert find(NS, SESSION, "ag-m4") == "researcher"  # expired, and active again
    store.commit_terminal(terminal(drive(store, again, clock), clock))
    assert find(NS, SESSION, "ag-m4") == "researcher"
    assert find(NS, SESSION, "ag-m5") == "researcher"  # expired, delivered
    assert find(NS, SESSION, "ag-live") == "researcher"
    assert find(NS, SESSION, "ag-unknown") is None
    assert find(NS, SESSION, f"ag-{OTHER_SESSION}-0") is None  # another session's agent
    assert find(NS, OTHER_SESSION, f"ag-{OTHER_SESSION}-0") == "researcher"
    assert find(OTHER_NS, OTHER_SESSION, f"ag-{OTHER_SESSION}-0") is None


# -- what a lookup reads -----------------------------------------------------------------------


class _Counted(PassTxn):
    """A transaction that notes every ``attempts`` record it hands out."""

    def __init__(self, raw: Txn, seen: list[bytes]) -> None:
        super().__init__(raw)
        self.seen = seen

    def get(self, table: str, key: bytes) -> bytes | None:
        value = self.raw.get(table, key)
        if table == "attempts" and value is not None:
            self.seen.append(key)
        return value

    def scan(
        self, table: str, prefix: bytes = b"", start: bytes | None = None
    ) -> Iterator[tuple[bytes, bytes]]:
        for key, value in self.raw.scan(table, prefix, start):
            if table == "attempts":
                self.seen.append(key)
            yield key, value


class _CountingBackend:
    """A memory backend whose reads note the attempt records they touch."""

    def __init__(self, tables: Sequence[str]) -> None:
        self.raw: Backend = MemoryBackend(tables)
        self.tables = self.raw.tables
        self.seen: list[bytes] = []

    def read(self, fn: Callable[[Txn], T]) -> T:
        return self.raw.read(lambda txn: fn(_Counted(txn, self.seen)))

    def write(self, fn: Callable[[Txn], T]) -> T:
        return self.raw.write(fn)

    def drain(self) -> None:
        self.raw.drain()

    def close(self) -> None:
        self.raw.close()


def _reads(backend: _CountingBackend, call: Callable[[], Any]) -> set[bytes]:
    backend.seen.clear()
    call()
    return set(backend.seen)


def test_a_session_lookup_reads_only_that_sessions_records() -> None:
    clock = ManualClock(start=1_700_000_000.0)
    backend = _CountingBackend(KernelStore.TABLES + KernelStore.EVENT_TABLES)
    store = KernelStore(backend, clock=clock)
    setup_session(store, clock)
    expired = _done(store, clock, 0)
    clock.advance(5.0)
    _other_history(store, clock, 40)  # expires this session's first result too
    fresh = _done(store, clock, 1)
    live = store.accept_attempt(acceptance(clock, "subattempt_live", "ag-live")).attempt_id
    mine = {codec.attempt_key(a) for a in (expired, fresh, live)}

    listed = _reads(backend, lambda: store.list_attempts(NS, SESSION))
    assert listed == mine  # before: every record of the store (44)
    after_expiry = _reads(backend, lambda: store.find_agent(NS, SESSION, f"ag-{SESSION}-0"))
    assert after_expiry == set()  # its ``A`` entry names the subagent
    active = _reads(backend, lambda: store.find_agent(NS, SESSION, "ag-live"))
    assert active == {codec.attempt_key(live)}
    in_retention = _reads(backend, lambda: store.find_agent(NS, SESSION, f"ag-{SESSION}-1"))
    assert in_retention == {codec.attempt_key(fresh)}
    assert _reads(backend, lambda: store.find_agent(NS, SESSION, "ag-unknown")) <= mine
    store.close()


# -- migration and check -----------------------------------------------------------------------


def _as_layout_3(store: KernelStore) -> None:
    """Drop every ``A`` entry and stamp the (sealed) marker of layout 3."""

    def fn(txn: Txn) -> None:
        for key, _value in list(txn.scan("index", codec.AGENT)):
            txn.delete("index", key)
        marker = (3).to_bytes(8, "big")
        txn.put("meta", b"schema_version", seal("meta", b"schema_version", marker))

    store.raw_backend.write(fn)


@pytest.mark.parametrize("kind", ["memory", "lmdb"])
def test_opening_a_layout_3_store_writes_the_agent_entries_its_records_call_for(
    kind: str, tmp_path: Path, clock: ManualClock
) -> None:
    path = str(tmp_path / "store")
    first: KernelStore = (
        MemorySessionStore(clock=clock) if kind == "memory" else LmdbSessionStore(path, clock=clock)
    )
    setup_session(first, clock)
    mixed_attempt_states(first, clock)
    expected = tables(first)
    agents = [k for k, _ in expected["index"] if k.startswith(codec.AGENT)]
    assert len(agents) == 2  # the two expired results
    _as_layout_3(first)
    assert not [k for k, _ in tables(first)["index"] if k.startswith(codec.AGENT)]
    if kind == "memory":
        migrated = KernelStore(first.raw_backend, clock=clock)
    else:
        first.close()
        migrated = LmdbSessionStore(path, clock=clock)
    assert tables(migrated) == expected
    assert storage.admin.check(migrated).ok
    assert migrated.find_agent(NS, SESSION, "ag-m5") == "researcher"
    migrated.close()


def test_the_check_reports_and_repair_restores_a_missing_agent_entry(
    store: SessionStore, clock: ManualClock
) -> None:
    assert isinstance(store, KernelStore)  # every store kind of the fixture is one
    setup_session(store, clock)
    mixed_attempt_states(store, clock)
    agent = codec.agent_attempt_key(NS, SESSION, "ag-m5", "subattempt_m5")
    assert store.raw_backend.write(lambda txn: txn.delete("index", agent))
    report = storage.admin.check(store)
    assert [(f.key, f.problem) for f in report.findings] == [(agent, "missing index entry")]
    assert storage.admin.check(store, repair=True).ok
    assert store.find_agent(NS, SESSION, "ag-m5") == "researcher"


def test_an_unreadable_record_does_not_stop_the_migration(clock: ManualClock) -> None:
    """The store still opens; the check names the record, as it would at any time."""
    first = MemorySessionStore(clock=clock)
    setup_session(first, clock)
    mixed_attempt_states(first, clock)
    _as_layout_3(first)
    bad = codec.attempt_key("subattempt_m1")
    first.raw_backend.write(lambda txn: txn.put("attempts", bad, b"\xffnot a sealed record"))
    migrated = KernelStore(first.raw_backend, clock=clock)
    assert migrated.find_agent(NS, SESSION, "ag-m5") == "researcher"
    report = storage.admin.check(migrated)
    assert ("attempts", bad) in {(f.table, f.key) for f in report.findings}
