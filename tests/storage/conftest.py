"""Store fixtures: every contract test runs against each store.

``store`` is parametrized over ``memory``, ``lmdb``, ``lmdb-reopen`` and
``lmdb-journal`` (LMDB with the redo journal, ``journal=True``), each built
with the test's :class:`~storage.ManualClock` as ``clock=``. A test calls
``store = reopen(store)`` at the point where persistence matters: for
``lmdb-reopen`` and ``lmdb-journal`` the environment is closed and a new store
is opened on the same path (same clock); for the other kinds the same store
comes back.
Whatever store is current at the end is closed in teardown.

``postgres`` runs the same tests on :class:`~storage._postgres.PostgresSessionStore`
in a database this test session creates and drops (``pg_database``; the server
is ``$SUBAGENTS_PG_ADMIN_DSN``, default the local one). Each test gets a fresh
store and the tables are emptied after it. In CI (``$CI`` set) it never
skips: an unreachable server fails the test (``.ci/pg`` makes sure one
answers). Elsewhere, on a machine with only Python and pip, the PostgreSQL
tests are skipped with the reason, so the README's test command still works.
"""

from __future__ import annotations

import secrets
import sys
from collections.abc import Generator, Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "host"))

import pytest
from builders import Reopen
from postgres_db import PG_ADMIN_DSN, require_postgres

from storage import LmdbSessionStore, ManualClock, MemorySessionStore, SessionStore

STORE_KINDS = ("memory", "lmdb", "lmdb-reopen", "lmdb-journal", "postgres")
REOPENED_KINDS = ("lmdb-reopen", "lmdb-journal")
_PASSED = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.when == "call":
        item.stash[_PASSED] = report.passed
    return report


class Stores:
    """Opens the store of one kind and reopens it on demand."""

    def __init__(
        self, kind: str, path: Path, clock: ManualClock, pg_dsn: str | None = None
    ) -> None:
        self.kind = kind
        self.path = path
        self.pg_dsn = pg_dsn
        self.clock = clock
        self.reopened = 0
        self.reopen_requested = False
        self.current = self._open()

    def _open(self) -> SessionStore:
        if self.kind == "memory":
            return MemorySessionStore(clock=self.clock)
        if self.kind == "postgres":
            from storage._postgres import PostgresSessionStore

            assert self.pg_dsn is not None
            return PostgresSessionStore(self.pg_dsn, clock=self.clock, pool_size=2)
        return LmdbSessionStore(
            str(self.path), clock=self.clock, journal=self.kind == "lmdb-journal"
        )

    def reopen(self, store: SessionStore) -> SessionStore:
        assert store is self.current, "reopen the current store: store = reopen(store)"
        if self.kind not in REOPENED_KINDS:
            return store
        store.close()
        self.current = self._open()
        self.reopened += 1
        return self.current

    def close(self) -> None:
        self.current.close()
        if self.pg_dsn is not None:
            from storage._postgres import wipe

            wipe(self.pg_dsn)

    def check_reopened(self) -> None:
        # A passing test that asks for ``reopen`` must use it, or lmdb-reopen
        # silently degrades to plain lmdb.
        if self.kind in REOPENED_KINDS and self.reopen_requested:
            assert self.reopened > 0, "the test requested reopen but never reopened"


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(start=1_700_000_000.0)


# -- PostgreSQL: one database per test session, created and dropped here -----------------


@pytest.fixture(scope="session")
def pg_database() -> Iterator[str]:
    """A DSN for a fresh database ``subagents_test_<random>``, dropped at the end."""
    from storage._postgres import create_database, drop_database

    name = f"subagents_test_{secrets.token_hex(6)}"
    require_postgres()
    dsn = create_database(PG_ADMIN_DSN, name)
    try:
        yield dsn
    finally:
        drop_database(PG_ADMIN_DSN, name)


@pytest.fixture(params=STORE_KINDS)
def stores(request: pytest.FixtureRequest, tmp_path: Path, clock: ManualClock) -> Iterator[Stores]:
    pg_dsn = request.getfixturevalue("pg_database") if request.param == "postgres" else None
    handle = Stores(request.param, tmp_path / "store", clock, pg_dsn)
    try:
        yield handle
    finally:
        handle.close()
    if request.node.stash.get(_PASSED, False):
        handle.check_reopened()


@pytest.fixture
def store(stores: Stores) -> SessionStore:
    return stores.current


@pytest.fixture
def reopen(stores: Stores) -> Reopen:
    stores.reopen_requested = True
    return stores.reopen
