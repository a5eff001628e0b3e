"""Store factories: how a property machine gets a fresh store under test.

A factory is called once per Hypothesis example with the example's
:class:`~storage.ManualClock` and returns a :class:`StoreHandle`: the store,
a ``reopen`` hook (close and open the same durable state again) and a
cleanup. The built-in factories are ``memory``, ``lmdb`` (a temporary
directory), ``lmdb-reopen`` (closes and reopens the LMDB environment after
every step, so every step's result must have been persisted) and
``lmdb-journal`` (the same, on the store's redo journal: ``journal=True``). ``postgres`` (and
``postgres-reopen``) run on PostgreSQL (``$SUBAGENTS_PG_ADMIN_DSN``, default the local server) in a
database this process creates and drops at exit; they are not part of ``all``
because they need a server. Users plug in
their own with ``python -m properties --store module:factory``: the callable
takes a ManualClock and returns a :class:`StoreHandle` or a bare
:class:`~storage.SessionStore` (then reopening is a no-op).
"""

from __future__ import annotations

import atexit
import importlib
import os
import secrets
import shutil
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from storage import LmdbSessionStore, ManualClock, MemorySessionStore, SessionStore

from ._profiles import current_profile


@dataclass
class StoreHandle:
    """One store under test, with its persistence hooks.

    ``open_again`` closes nothing itself: :meth:`reopen` closes the current
    store first, then calls it. ``cleanup`` runs once, after the last close.
    """

    store: SessionStore
    open_again: Callable[[], SessionStore] | None = None
    cleanup: Callable[[], None] | None = None
    reopen_between_steps: bool = False
    path: str | None = None
    """Where a durable store keeps its files (removed by ``cleanup``), if anywhere."""
    reopens: int = field(default=0)
    _closed: bool = field(default=False, repr=False)

    def reopen(self) -> SessionStore:
        """Close the store and open the same durable state again (no-op without a hook)."""
        if self.open_again is None:
            return self.store
        self.store.close()
        self.store = self.open_again()
        self.reopens += 1
        return self.store

    def step_boundary(self) -> SessionStore:
        """Called between steps: reopens when this handle tests persistence."""
        if self.reopen_between_steps:
            return self.reopen()
        return self.store

    def close(self) -> None:
        """Close the store and remove temporary state. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            self.store.close()
        finally:
            if self.cleanup is not None:
                self.cleanup()


@runtime_checkable
class StoreFactory(Protocol):
    """Makes a fresh store for one example. ``name`` labels it in reports."""

    @property
    def name(self) -> str: ...

    def __call__(self, clock: ManualClock) -> StoreHandle: ...


@dataclass(frozen=True)
class NamedFactory:
    """A :class:`StoreFactory` from a name and a function."""

    name: str
    make: Callable[[ManualClock], StoreHandle | SessionStore]

    def __call__(self, clock: ManualClock) -> StoreHandle:
        made = self.make(clock)
        if isinstance(made, StoreHandle):
            return made
        return StoreHandle(store=made)


def _memory(clock: ManualClock) -> StoreHandle:
    return StoreHandle(store=MemorySessionStore(clock=clock))


def _lmdb_handle(
    clock: ManualClock, *, reopen_between_steps: bool, sync: bool, journal: bool = False
) -> StoreHandle:
    path = tempfile.mkdtemp(prefix="subagents-properties-")

    def open_store() -> SessionStore:
        return LmdbSessionStore(path, clock=clock, sync=sync, journal=journal)

    try:
        store = open_store()
    except BaseException:
        shutil.rmtree(path, ignore_errors=True)
        raise
    return StoreHandle(
        store=store,
        open_again=open_store,
        cleanup=lambda: shutil.rmtree(path, ignore_errors=True),
        reopen_between_steps=reopen_between_steps,
        path=path,
    )


def lmdb_factory(
    *, reopen_between_steps: bool = False, sync: bool | None = None, journal: bool = False
) -> NamedFactory:
    """An LMDB factory in a fresh temporary directory per example.

    ``sync=None`` follows the active profile (off in ``ci``/``dev``, on in ``deep``);
    ``journal=True`` makes commits durable through the store's redo journal
    (always synced: the journal is what makes a commit durable).
    """
    name = "lmdb-journal" if journal else "lmdb-reopen" if reopen_between_steps else "lmdb"

    def make(clock: ManualClock) -> StoreHandle:
        durable = journal or (current_profile().lmdb_sync if sync is None else sync)
        return _lmdb_handle(
            clock, reopen_between_steps=reopen_between_steps, sync=durable, journal=journal
        )

    return NamedFactory(name, make)


MEMORY = NamedFactory("memory", _memory)
LMDB = lmdb_factory()
LMDB_REOPEN = lmdb_factory(reopen_between_steps=True)
LMDB_JOURNAL = lmdb_factory(reopen_between_steps=True, journal=True)

BUILTIN_FACTORIES: dict[str, NamedFactory] = {
    f.name: f for f in (MEMORY, LMDB, LMDB_REOPEN, LMDB_JOURNAL)
}


# -- PostgreSQL (needs a server, so not in BUILTIN_FACTORIES / "all") -------------------------

PG_ADMIN_DSN_ENV = "SUBAGENTS_PG_ADMIN_DSN"
_PG_DEFAULT_ADMIN_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
_pg_lock = threading.Lock()
_pg_databases: dict[str, str] = {}


def _pg_database(admin_dsn: str) -> str:
    """This process's scratch database on ``admin_dsn`` (created once, dropped at exit)."""
    from storage._postgres import create_database, drop_database  # noqa: PLC0415 - optional driver

    with _pg_lock:
        if admin_dsn not in _pg_databases:
            name = f"subagents_props_{secrets.token_hex(6)}"
            _pg_databases[admin_dsn] = create_database(admin_dsn, name)
            atexit.register(drop_database, admin_dsn, name)
        return _pg_databases[admin_dsn]


def postgres_factory(
    admin_dsn: str | None = None, *, reopen_between_steps: bool = False
) -> NamedFactory:
    """A PostgreSQL factory: one scratch database per process, emptied after each example."""
    name = "postgres-reopen" if reopen_between_steps else "postgres"

    def make(clock: ManualClock) -> StoreHandle:
        from storage._postgres import PostgresSessionStore, wipe  # noqa: PLC0415 - optional driver

        admin = admin_dsn or os.environ.get(PG_ADMIN_DSN_ENV, _PG_DEFAULT_ADMIN_DSN)
        dsn = _pg_database(admin)

        def open_store() -> SessionStore:
            return PostgresSessionStore(dsn, clock=clock, pool_size=2)

        return StoreHandle(
            store=open_store(),
            open_again=open_store,
            cleanup=lambda: wipe(dsn),
            reopen_between_steps=reopen_between_steps,
        )

    return NamedFactory(name, make)


POSTGRES = postgres_factory()
POSTGRES_REOPEN = postgres_factory(reopen_between_steps=True)
SERVER_FACTORIES: dict[str, NamedFactory] = {f.name: f for f in (POSTGRES, POSTGRES_REOPEN)}


def resolve_factory(spec: str) -> NamedFactory:
    """A built-in factory by name, or ``module:attribute`` for a user's own store."""
    if spec in BUILTIN_FACTORIES:
        return BUILTIN_FACTORIES[spec]
    if spec in SERVER_FACTORIES:
        return SERVER_FACTORIES[spec]
    if ":" not in spec:
        raise ValueError(
            f"unknown store {spec!r}: use one of {sorted(BUILTIN_FACTORIES)} or module:factory"
        )
    module_name, _, attr = spec.partition(":")
    target: object = importlib.import_module(module_name)
    for part in attr.split("."):
        target = getattr(target, part)
    if isinstance(target, NamedFactory):
        return target
    if not callable(target):
        raise ValueError(f"{spec!r} is not callable")
    make = target

    def call(clock: ManualClock) -> StoreHandle | SessionStore:
        made = make(clock)
        if not isinstance(made, StoreHandle | SessionStore):
            raise TypeError(f"{spec} returned {type(made).__name__}, not a store")
        return made

    return NamedFactory(getattr(target, "name", spec), call)
