"""PostgreSQL-specific behaviour: migrations, database time, serializable retries,
lost connections, error mapping, several store objects (hosts) on one database,
drain and close, the optional driver, and the property machines on PostgreSQL.

The contract itself runs against ``postgres`` in ``test_contract.py`` (the
``store`` fixture); this file covers what only the PostgreSQL backend has to get
right. Every test works in a schema of its own inside the test session's
database (``pg_database`` in ``conftest.py``), so tests never see each other's
rows. Nothing here skips: an unreachable server fails.
"""

from __future__ import annotations

import secrets
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from builders import (
    NS,
    SESSION,
    acceptance,
    as_layout_1,
    drive,
    mixed_attempt_states,
    setup_session,
    tables,
    terminal,
)
from hypothesis import settings

from storage import (
    Conflict,
    Failed,
    ManualClock,
    NotFound,
    RetryableStorage,
    StorageFull,
    Txn,
)
from storage._postgres import (
    APPLICATION_NAME,
    LATEST_VERSION,
    MIGRATIONS_TABLE,
    DriverMissing,
    PostgresBackend,
    PostgresClock,
    PostgresSessionStore,
    map_error,
    migrate,
    schema_version,
)

REPO = Path(__file__).resolve().parents[2]


# -- fixtures ------------------------------------------------------------------------------------


class Pg:
    """A fresh schema in the test session's database, and everything opened on it."""

    def __init__(self, dsn: str, clock: ManualClock) -> None:
        self.dsn = dsn
        self.clock = clock
        self.schema = f"t_{secrets.token_hex(6)}"
        self._closers: list[Callable[[], None]] = []

    def store(self, **options: Any) -> PostgresSessionStore:
        options.setdefault("clock", self.clock)
        options.setdefault("schema", self.schema)
        options.setdefault("pool_size", 4)
        store = PostgresSessionStore(self.dsn, **options)
        self._closers.append(store.close)
        return store

    def backend(self, **options: Any) -> PostgresBackend:
        options.setdefault("schema", self.schema)
        options.setdefault("pool_size", 4)
        backend = PostgresBackend(self.dsn, **options)
        self._closers.append(backend.close)
        return backend

    def sql(self, query: str, params: tuple[Any, ...] = ()) -> list[Any]:
        """Run one statement on a connection of its own (autocommit); return its rows."""
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            cur = conn.execute(query.replace("{schema}", f'"{self.schema}"'), params)
            return cur.fetchall() if cur.description else []

    def close_all(self) -> None:
        for close in reversed(self._closers):
            close()
        self.sql("DROP SCHEMA IF EXISTS {schema} CASCADE")


@pytest.fixture
def pg(pg_database: str, clock: ManualClock) -> Iterator[Pg]:
    handle = Pg(pg_database, clock)
    try:
        yield handle
    finally:
        handle.close_all()


def _terminate(pg: Pg, pid: int) -> None:
    # With a timeout, pg_terminate_backend returns only once the process is gone.
    pg.sql("SELECT pg_terminate_backend(%s, 10000)", (pid,))


# -- migrations ----------------------------------------------------------------------------------

ALL_VERSIONS = list(range(1, LATEST_VERSION + 1))


def test_migrations_apply_once_and_are_recorded(pg: Pg) -> None:
    assert schema_version(pg.dsn, schema=pg.schema) == 0
    assert migrate(pg.dsn, schema=pg.schema) == ALL_VERSIONS
    assert migrate(pg.dsn, schema=pg.schema) == []
    assert schema_version(pg.dsn, schema=pg.schema) == LATEST_VERSION == 4
    rows = pg.sql(f"SELECT version, name FROM {{schema}}.{MIGRATIONS_TABLE} ORDER BY version")
    assert [r[0] for r in rows] == ALL_VERSIONS
    assert "kernel tables" in rows[0][1]
    assert "host tables" in rows[1][1]
    assert "attempt indexes" in rows[2][1]


def test_concurrent_migrations_apply_each_version_exactly_once(pg: Pg) -> None:
    barrier = threading.Barrier(4)
    applied: list[list[int]] = []
    lock = threading.Lock()

    def run() -> None:
        barrier.wait()
        done = migrate(pg.dsn, schema=pg.schema)
        with lock:
            applied.append(done)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(applied) == [[], [], [], ALL_VERSIONS]


def test_opening_a_store_migrates_and_reopening_keeps_the_data(pg: Pg) -> None:
    store = pg.store()
    assert schema_version(pg.dsn, schema=pg.schema) == LATEST_VERSION
    setup_session(store, pg.clock)
    store.close()
    again = pg.store()
    assert again.load_session(SESSION).session_id == SESSION


def test_the_store_exposes_its_postgres_backend_under_the_seals(pg: Pg) -> None:
    """``store.postgres`` (retry counters, schema; ``bench/hosts.py`` reads them) is the
    PostgreSQL backend itself, not the checksummed view the kernel runs on."""
    store = pg.store()
    assert isinstance(store.postgres, PostgresBackend)
    assert store.postgres.retries >= 0


def test_a_database_of_layout_1_is_migrated_when_a_store_opens_it(pg: Pg) -> None:
    store = pg.store()
    setup_session(store, pg.clock)
    mixed_attempt_states(store, pg.clock)
    expected = tables(store)
    as_layout_1(store.backend)
    store.close()
    # What a database migrated by the previous release looks like.
    pg.sql("DROP TABLE {schema}.subagents_index")
    pg.sql(f"DELETE FROM {{schema}}.{MIGRATIONS_TABLE} WHERE version = 3")

    again = pg.store()
    assert schema_version(pg.dsn, schema=pg.schema) == LATEST_VERSION == 4
    assert tables(again) == expected


def test_an_unmigrated_database_is_refused_when_migration_is_off(pg: Pg) -> None:
    with pytest.raises(Failed, match="not migrated"):
        pg.store(migrate=False)


def test_a_database_newer_than_this_code_is_refused(pg: Pg) -> None:
    migrate(pg.dsn, schema=pg.schema)
    pg.sql(f"INSERT INTO {{schema}}.{MIGRATIONS_TABLE} (version, name) VALUES (999, 'future')")
    with pytest.raises(Failed, match="newer than this code") as info:
        pg.store()
    assert info.value.versions == [999]


def test_a_bad_schema_name_is_rejected_before_any_sql(pg: Pg) -> None:
    with pytest.raises(ValueError, match="schema"):
        migrate(pg.dsn, schema='x"; DROP TABLE y; --')


# -- database time -------------------------------------------------------------------------------


def test_store_time_is_the_servers_clock_read_once_per_transaction(pg: Pg) -> None:
    store = pg.store(clock=None)
    assert isinstance(store.clock, PostgresClock)

    def server_time() -> float:
        return float(pg.sql("SELECT extract(epoch FROM clock_timestamp())::float8")[0][0])

    before = server_time()
    first, second = store.backend.write(lambda txn: (store.clock.now(), store.clock.now()))
    after = server_time()
    assert first == second
    assert before <= first <= after
    outside = store.clock.now()
    assert first <= outside <= server_time()


def test_outside_a_transaction_the_clock_advances_the_latest_reading_without_a_query(
    pg: Pg, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The host reads the store clock outside transactions often (every event, every
    # lease): a recent transaction's reading serves it, advanced by the local
    # monotonic clock; a stale one is replaced by asking the server.
    store = pg.store(clock=None)
    backend = store.postgres
    local = [100.0]
    monkeypatch.setattr(backend, "_monotonic", lambda: local[0])
    first = store.backend.write(lambda txn: store.clock.now())

    def no_query(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the clock asked the server")

    with monkeypatch.context() as patched:
        patched.setattr(backend, "_ask_server", no_query)
        local[0] = 100.0 + backend.clock_reuse_seconds / 2
        assert store.clock.now() == first + backend.clock_reuse_seconds / 2

    def server_time() -> float:
        return float(pg.sql("SELECT extract(epoch FROM clock_timestamp())::float8")[0][0])

    local[0] = 100.0 + backend.clock_reuse_seconds + 5.0  # stale: the server answers
    before = server_time()
    asked = store.clock.now()
    assert before <= asked <= server_time()
    assert asked != first + backend.clock_reuse_seconds + 5.0
    assert store.clock.now() == asked  # that answer is the new reading


def test_leases_are_judged_by_database_time_not_the_callers_clock(pg: Pg) -> None:
    # The records come from a caller whose clock is years behind the server:
    # their lease is long expired by database time, so acceptance is refused.
    store = pg.store(clock=None)
    current = ManualClock(start=store.clock.now())
    setup_session(store, current)
    behind = ManualClock(start=1_000_000_000.0)
    with pytest.raises(Conflict, match="expired"):
        store.accept_attempt(acceptance(behind))

    # A record stamped at the server's time is accepted.
    accepted = store.accept_attempt(acceptance(current, ttl=600.0))
    assert store.list_active_attempts(NS) == [accepted]


# -- serializable transactions and retries -------------------------------------------------------


def _increment(backend: PostgresBackend, barrier: threading.Barrier, first: set[int]) -> int:
    """Read a counter, wait until every writer has read it (first try only), write +1."""

    def fn(txn: Txn) -> int:
        raw = txn.get("meta", b"counter")
        value = 0 if raw is None else int(raw)
        me = threading.get_ident()
        if me not in first:
            first.add(me)
            barrier.wait()
        txn.put("meta", b"counter", str(value + 1).encode())
        return value + 1

    return backend.write(fn)


def test_concurrent_writers_of_one_row_are_serialized_by_retries(pg: Pg) -> None:
    writers = 4
    backend = pg.backend()
    barrier = threading.Barrier(writers)
    first: set[int] = set()
    results: list[int] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            results.append(_increment(backend, barrier, first))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    # No lost update: every writer saw a distinct predecessor.
    assert sorted(results) == [1, 2, 3, 4]
    assert backend.read(lambda txn: txn.get("meta", b"counter")) == b"4"
    assert backend.retries >= writers - 1


def test_a_serialization_failure_beyond_the_retry_budget_is_retryable_storage(pg: Pg) -> None:
    backend = pg.backend(max_attempts=1)
    barrier = threading.Barrier(2)
    first: set[int] = set()
    outcomes: list[object] = []

    def run() -> None:
        try:
            outcomes.append(_increment(backend, barrier, first))
        except BaseException as exc:
            outcomes.append(exc)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    failures = [o for o in outcomes if isinstance(o, BaseException)]
    assert [o for o in outcomes if not isinstance(o, BaseException)] == [1]
    assert len(failures) == 1
    assert isinstance(failures[0], RetryableStorage)
    assert failures[0].sqlstate in ("40001", "40P01")
    assert backend.read(lambda txn: txn.get("meta", b"counter")) == b"1"


def test_a_refusal_is_raised_once_and_leaves_nothing(pg: Pg) -> None:
    backend = pg.backend()
    calls = 0

    def fn(txn: Txn) -> None:
        nonlocal calls
        calls += 1
        txn.put("meta", b"half", b"written")
        raise Conflict("refused after a write")

    with pytest.raises(Conflict, match="refused after a write"):
        backend.write(fn)
    assert calls == 1
    assert backend.read(lambda txn: txn.get("meta", b"half")) is None


def test_a_read_cannot_write_and_a_transaction_cannot_start_another(pg: Pg) -> None:
    backend = pg.backend()
    with pytest.raises(Failed, match="read transaction"):
        backend.read(lambda txn: txn.put("meta", b"k", b"v"))
    with pytest.raises(Failed, match="cannot start another"):
        backend.write(lambda txn: backend.read(lambda inner: inner.get("meta", b"k")))


def test_scans_page_through_long_ranges_and_stop_at_the_prefix_end(pg: Pg) -> None:
    backend = pg.backend()
    inside = [b"p\xff" + bytes([i // 256, i % 256]) for i in range(300)]
    outside = [b"p\xfe\xff", b"q", b"p", b"p\xff"[:1] + b"\x00"]

    def fill(txn: Txn) -> None:
        for k in [*inside, *outside]:
            txn.put("meta", k, k)

    backend.write(fill)
    scanned = backend.read(lambda txn: [k for k, _ in txn.scan("meta", b"p\xff")])
    assert scanned == sorted(inside)
    start = inside[123]
    later = backend.read(lambda txn: [k for k, _ in txn.scan("meta", b"p\xff", start)])
    assert later == sorted(inside)[123:]
    assert backend.read(lambda txn: len(list(txn.scan("meta")))) == len(inside) + len(outside)


def test_deletes_report_whether_the_key_existed(pg: Pg) -> None:
    backend = pg.backend()
    backend.write(lambda txn: txn.put("meta", b"k", b"v"))
    assert backend.write(lambda txn: txn.delete("meta", b"k")) is True
    assert backend.write(lambda txn: txn.delete("meta", b"k")) is False


# -- lost connections and error mapping ----------------------------------------------------------


def test_a_connection_lost_before_commit_is_retried_transparently(pg: Pg) -> None:
    backend = pg.backend()
    killed: list[int] = []

    def fn(txn: Txn) -> str:
        txn.put("meta", b"k", b"v")
        if not killed:
            pid: int = txn.backend_pid  # type: ignore[attr-defined]
            killed.append(pid)
            _terminate(pg, pid)
            txn.get("meta", b"k")  # the dead connection fails here
        return "done"

    assert backend.write(fn) == "done"
    assert backend.retries == 1
    assert backend.read(lambda txn: txn.get("meta", b"k")) == b"v"


def test_after_a_server_restart_dead_pooled_connections_are_replaced(pg: Pg) -> None:
    backend = pg.backend(pool_size=4)
    backend.write(lambda txn: txn.put("meta", b"k", b"before"))
    killed = pg.sql(
        "SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity "
        "WHERE datname = current_database() AND application_name = %s",
        (APPLICATION_NAME,),
    )
    assert killed, "the pool held no connection to kill"
    backend.write(lambda txn: txn.put("meta", b"k", b"after"))
    assert backend.retries >= 1
    assert backend.read(lambda txn: txn.get("meta", b"k")) == b"after"


def test_a_connection_lost_on_every_try_is_retryable_storage_and_writes_nothing(pg: Pg) -> None:
    backend = pg.backend()

    def fn(txn: Txn) -> None:
        txn.put("meta", b"k", b"v")
        _terminate(pg, txn.backend_pid)  # type: ignore[attr-defined]
        txn.get("meta", b"k")

    with pytest.raises(RetryableStorage) as info:
        backend.write(fn)
    assert not isinstance(info.value.__cause__, RetryableStorage)
    assert backend.read(lambda txn: txn.get("meta", b"k")) is None


def test_a_connection_lost_during_commit_is_failed_in_doubt_not_retryable(
    pg: Pg, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = pg.backend()
    commit = backend._commit

    def lose_connection_then_commit(conn: Any, statement: str, *, in_doubt: bool) -> None:
        if statement == "COMMIT":
            _terminate(pg, conn.info.backend_pid)
        commit(conn, statement, in_doubt=in_doubt)

    monkeypatch.setattr(backend, "_commit", lose_connection_then_commit)
    with pytest.raises(Failed) as info:
        backend.write(lambda txn: txn.put("meta", b"k", b"v"))
    assert info.value.in_doubt is True
    assert not isinstance(info.value, RetryableStorage)
    assert backend.retries == 0


def test_an_unreachable_server_is_retryable_storage(pg: Pg) -> None:
    with pytest.raises(RetryableStorage):
        PostgresSessionStore(
            "postgresql://postgres@127.0.0.1:1/postgres", connect_timeout=1.0, pool_timeout=1.0
        )


def test_a_missing_table_is_failed_with_its_sqlstate_not_a_driver_error(pg: Pg) -> None:
    store = pg.store()
    pg.sql("DROP TABLE {schema}.subagents_sessions")
    with pytest.raises(Failed) as info:
        store.load_session(SESSION)
    assert info.value.sqlstate == "42P01"
    assert not isinstance(info.value, psycopg.Error)


@pytest.mark.parametrize(
    ("error", "expected", "sqlstate"),
    [
        (psycopg.errors.DiskFull("no space left"), StorageFull, "53100"),
        (psycopg.errors.SerializationFailure("conflict"), RetryableStorage, "40001"),
        (psycopg.errors.DeadlockDetected("deadlock"), RetryableStorage, "40P01"),
        (psycopg.errors.AdminShutdown("terminating"), RetryableStorage, "57P01"),
        (psycopg.errors.TooManyConnections("too many"), RetryableStorage, "53300"),
        (psycopg.OperationalError("connection refused"), RetryableStorage, None),
        (psycopg.errors.UndefinedTable("no table"), Failed, "42P01"),
    ],
)
def test_driver_errors_map_to_storage_errors(
    error: Exception, expected: type[Exception], sqlstate: str | None
) -> None:
    mapped = map_error(error, op="probe", table="t")
    assert type(mapped) is expected
    assert mapped.sqlstate == sqlstate
    assert mapped.table == "t"


# -- several hosts on one database ---------------------------------------------------------------


def test_two_stores_on_one_database_see_each_others_commits(pg: Pg) -> None:
    host_a = pg.store()
    host_b = pg.store()
    setup_session(host_a, pg.clock)
    assert host_b.load_session(SESSION).session_id == SESSION

    running = drive(host_b, host_b.accept_attempt(acceptance(pg.clock)), pg.clock)
    assert host_a.load_attempt(running.attempt_id) == running
    done = host_a.commit_terminal(terminal(host_a.load_attempt(running.attempt_id), pg.clock))
    assert host_b.load_attempt(done.attempt_id) == done
    assert [a.attempt_id for a in host_b.list_pending_attempts(NS)] == [done.attempt_id]


def test_competing_acceptances_from_two_hosts_leave_exactly_one_active_attempt(pg: Pg) -> None:
    hosts = [pg.store(), pg.store()]
    setup_session(hosts[0], pg.clock)
    contenders = 6
    barrier = threading.Barrier(contenders)
    outcomes: list[object] = []
    lock = threading.Lock()

    def run(i: int) -> None:
        record = acceptance(
            pg.clock, f"subattempt_{i}", "researcher-bg-0000aaaa", host=f"host-{i % 2}"
        )
        barrier.wait()
        try:
            result: object = hosts[i % 2].accept_attempt(record)
        except BaseException as exc:
            result = exc
        with lock:
            outcomes.append(result)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(contenders)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    accepted = [o for o in outcomes if not isinstance(o, BaseException)]
    refused = [o for o in outcomes if isinstance(o, BaseException)]
    assert len(accepted) == 1
    assert all(isinstance(e, Conflict) for e in refused), refused
    for host in hosts:
        assert host.list_active_attempts(NS) == accepted


# -- drain, close, the optional driver -----------------------------------------------------------


def test_drain_waits_for_the_operations_in_flight(pg: Pg) -> None:
    backend = pg.backend()
    inside = threading.Event()
    release = threading.Event()

    def slow(txn: Txn) -> None:
        inside.set()
        assert release.wait(30)
        txn.put("meta", b"slow", b"done")

    writer = threading.Thread(target=backend.write, args=(slow,))
    writer.start()
    assert inside.wait(30)
    assert backend.in_flight == 1
    drainer = threading.Thread(target=backend.drain)
    drainer.start()
    drainer.join(0.2)
    assert drainer.is_alive(), "drain returned while a write was in flight"
    release.set()
    drainer.join(30)
    writer.join(30)
    assert not drainer.is_alive()
    assert backend.in_flight == 0
    assert backend.read(lambda txn: txn.get("meta", b"slow")) == b"done"


def test_a_closed_store_fails_every_call_and_closing_twice_is_harmless(pg: Pg) -> None:
    store = pg.store()
    store.close()
    store.close()
    with pytest.raises(Failed, match="closed"):
        store.load_session(SESSION)
    with pytest.raises(NotFound):
        pg.store().load_session(SESSION)


def test_storage_imports_without_the_driver_and_the_store_names_the_extra() -> None:
    code = (
        "import sys\n"
        "sys.modules['psycopg'] = None\n"
        "sys.modules['psycopg_pool'] = None\n"
        "import storage\n"
        "from storage._postgres import DriverMissing, PostgresSessionStore\n"
        "try:\n"
        "    PostgresSessionStore('postgresql://127.0.0.1/x')\n"
        "except DriverMissing as exc:\n"
        "    print('missing', exc.extra)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert out.stdout.strip() == "missing postgres"
    assert issubclass(DriverMissing, Failed)


# -- the property machines on PostgreSQL ---------------------------------------------------------

PROPERTY_BUDGET = settings(
    max_examples=12, stateful_step_count=40, derandomize=True, deadline=None, database=None
)
"""A bounded budget: PostgreSQL round trips make each example ~10x slower than LMDB.
``python -m properties --store postgres`` runs the full ``ci`` profile."""


# pg_database: the server must answer (CI) or the test is skipped (elsewhere).
@pytest.mark.usefixtures("pg_database")
@pytest.mark.parametrize("machine", ["fencing", "replay", "delivery", "retention", "supervisor"])
def test_the_property_machines_pass_on_postgres(machine: str) -> None:
    from properties import run_machine
    from properties._factories import POSTGRES

    result = run_machine(machine, POSTGRES, PROPERTY_BUDGET)
    assert result.ok, result.failure
    assert result.examples >= 12
