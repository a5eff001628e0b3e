"""The SessionStore contract on PostgreSQL: the kernel's logic over a psycopg 3 backend.

:class:`PostgresBackend` implements the byte-level :class:`~storage.Backend`
over PostgreSQL; :class:`PostgresSessionStore` is the
:class:`~storage.KernelStore` on it, so every contract rule (validation,
lifecycle checks, fencing, delivery, quotas) is the same code the memory and
LMDB stores run. Several processes, on several machines, may open stores on one
database at once: every rule is decided inside one database transaction.

Optional dependency. psycopg 3 and psycopg-pool are the ``postgres`` extra
(``pip install 'subagents[postgres]'``). They are imported on first use, so
``import storage`` works without them; without them every entry point raises
:class:`DriverMissing` (a :class:`~storage.Failed`) naming the extra.

Schema. One table per kernel table (:attr:`KernelStore.TABLES`), named
``subagents_<table>`` in the chosen PostgreSQL schema (default ``public``), each
``(k bytea PRIMARY KEY, v bytea NOT NULL)``. ``bytea`` orders bytewise, like
LMDB, so the kernel's prefix scans are index range scans. The RPC host's
event log and fencing counter live in two more such tables (:data:`HOST_TABLES`,
migration 2), so hosts sharing the database share them too. Migrations are
versioned in ``subagents_schema_migrations``; :func:`migrate` applies the
missing ones under a transaction-scoped advisory lock (concurrent starters
serialize, the second finds nothing to do) and a store applies them when it
opens (``migrate=True``, the default).

One active attempt per (namespace, session, agent_id). The kernel keeps one
``G`` index entry per non-terminal attempt in the ``index`` table, keyed by
exactly that triple and deleted when the attempt becomes terminal. Its primary
key is therefore the partial unique index "one non-terminal attempt per
(namespace, session, agent_id)", enforced by the database: two hosts accepting
competing attempts at once cannot both commit (one is retried, sees the other's
entry and is refused with :class:`~storage.Conflict`).

Transactions. Each contract operation is one transaction. ``write(fn)`` runs at
SERIALIZABLE; on a serialization failure or deadlock (SQLSTATE 40001/40P01) the
whole function is run again in a new transaction, after a short randomized
backoff, up to ``max_attempts`` times, then :class:`~storage.RetryableStorage`.
When ``fn`` raises (a logical refusal such as ``StaleFence``), its writes are
rolled back to a savepoint taken at the start and the read-only remainder is
*committed*: PostgreSQL's serializable validation then confirms that what
``fn`` read was a serializable view. Only if that commit fails with a
serialization failure is ``fn`` run again; a refusal that validated is raised
unchanged and never retried. ``read(fn)`` runs in a REPEATABLE READ READ ONLY
transaction (one consistent snapshot). ``fn`` runs on the caller's thread.

Time. :class:`PostgresClock` (the default clock) reads the database server's
``clock_timestamp()`` taken when the current transaction of this thread began
(read in the same round trip as BEGIN, by the statement that takes the
snapshot; every call in the transaction returns that instant), so
every host sharing the database agrees on lease expiry regardless of their own
clocks. Outside a transaction it is the latest such reading advanced by the
local monotonic clock, while that reading is at most ``clock_reuse_seconds``
(1 s) old, else one query on a pooled connection: a busy store never spends a
round trip on the clock. Tests pass a :class:`~storage.ManualClock` instead.

Statements. Every per-table statement is prepared on a connection the first
time it runs there; later runs send only their (binary) parameters, straight
to libpq. BEGIN (with the clock read) and COMMIT are one simple query each, so
an operation costs its statements plus two round trips.

Errors (never a raw psycopg exception):

- connection refused or lost, pool exhausted, server shutting down, too many
  connections: :class:`~storage.RetryableStorage` (nothing was written). A
  connection lost *before* COMMIT was sent is retried transparently a few
  times first (PostgreSQL rolled the transaction back).
- a connection lost *while* COMMIT was in flight: the outcome is unknown, so
  this is :class:`~storage.Failed` with ``in_doubt=True``, never
  ``RetryableStorage`` (which promises nothing was written).
- serialization failures still failing after ``max_attempts``: RetryableStorage.
- disk full (53100): :class:`~storage.StorageFull`.
- anything else: :class:`~storage.Failed` with the ``sqlstate``.

Durability: ``write`` returns after PostgreSQL acknowledged COMMIT, which is
durable under the server's ``synchronous_commit`` (``on`` by default). Artifact
bytes and the per-namespace byte accounting live in the kernel's tables, so
they are shared by every host like everything else.

``drain()`` waits until no operation of this backend is in flight (they are
counted); ``close()`` refuses new operations, drains, then closes the pool.
The scratch-database helpers (:func:`create_database`, :func:`drop_database`,
:func:`wipe`) are for tests and benchmarks; dropping needs PostgreSQL 13+.
"""

from __future__ import annotations

import importlib
import random
import re
import struct
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeVar

from ._backend import StoreCounters, Txn
from ._clock import Clock, IdSource
from ._errors import Failed, RetryableStorage, StorageFull, StoreError
from ._kernel import KernelStore

if TYPE_CHECKING:
    import psycopg
    import psycopg_pool

T = TypeVar("T")

EXTRA = "postgres"
"""The optional-dependency extra that provides the driver."""

TABLE_PREFIX = "subagents_"
MIGRATIONS_TABLE = "subagents_schema_migrations"

APPLICATION_NAME = "subagents"
"""``application_name`` of the store's connections (visible in ``pg_stat_activity``)."""

DEFAULT_POOL_SIZE = 8
DEFAULT_MAX_ATTEMPTS = 30
"""Serialization retries per write: enough for dozens of writers on one row."""
CONNECTION_ATTEMPTS = 3
"""Transactions tried per write when the connection is lost before COMMIT."""

CLOCK_REUSE_SECONDS = 1.0
"""How long a server clock reading serves :meth:`PostgresBackend.server_now`
(advanced by the local monotonic clock) before the server is asked again."""

_CLOCK_SQL = "SELECT extract(epoch FROM clock_timestamp())::float8"
_IDENT = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_PAGE_FIRST = 16
_PAGE_MAX = 1024

# SQLSTATEs. Class 08 is connection exceptions and 57P01-57P03 server
# shutdown/crash/cannot-connect-now: the connection is gone (retried on a new
# one). 53300 too many connections, 53200 out of memory and 55P03 lock not
# available are transient on the server: RetryableStorage, left to the caller.
_SERIALIZATION = frozenset({"40001", "40P01"})
_DISK_FULL = "53100"
_CONNECTION_LOST = frozenset({"57P01", "57P02", "57P03"})
_TRANSIENT = frozenset({"53300", "53200", "55P03"})
_CONNECTION_LOST_B = frozenset(s.encode() for s in _CONNECTION_LOST)


class DriverMissing(Failed):
    """psycopg 3 / psycopg-pool are not installed: install the ``postgres`` extra."""


def _modules() -> tuple[ModuleType, ModuleType]:
    """Import psycopg and psycopg_pool on first use, or raise :class:`DriverMissing`."""
    try:
        pg = importlib.import_module("psycopg")
        pool = importlib.import_module("psycopg_pool")
    except ImportError as exc:
        raise DriverMissing(
            f"the PostgreSQL store needs the '{EXTRA}' extra: pip install 'subagents[{EXTRA}]'",
            extra=EXTRA,
            missing=getattr(exc, "name", None) or str(exc),
        ) from None
    return pg, pool


def _ident(what: str, value: str) -> str:
    """A validated, quoted SQL identifier (lower-case letters, digits, ``_``)."""
    if not _IDENT.match(value):
        raise ValueError(f"{what} must match {_IDENT.pattern}, got {value!r}")
    return f'"{value}"'


def _prefix_end(prefix: bytes) -> bytes | None:
    """The smallest key greater than every key starting with ``prefix`` (None: no bound)."""
    trimmed = prefix.rstrip(b"\xff")
    if not trimmed:
        return None
    return trimmed[:-1] + bytes([trimmed[-1] + 1])


# -- error mapping ----------------------------------------------------------------------------


def _sqlstate(exc: BaseException) -> str | None:
    state = getattr(exc, "sqlstate", None)
    return state if isinstance(state, str) else None


def _is_serialization(exc: BaseException) -> bool:
    return _sqlstate(exc) in _SERIALIZATION


def _is_connection(exc: BaseException, conn: Any = None) -> bool:
    """Whether ``exc`` means the connection (not the statement) failed."""
    if conn is not None and getattr(conn, "broken", False):
        return True
    state = _sqlstate(exc)
    if state is None:
        pg = importlib.import_module("psycopg")
        return isinstance(exc, pg.OperationalError | pg.InterfaceError)
    return state.startswith("08") or state in _CONNECTION_LOST


def map_error(exc: BaseException, *, op: str, **fields: Any) -> StoreError:
    """Map a psycopg / psycopg-pool error to the storage error tree.

    Connection failures and pool timeouts are :class:`RetryableStorage`,
    serialization failures too (when they escape the retry loop), disk full is
    :class:`StorageFull`, everything else :class:`Failed`. ``op`` and
    ``fields`` become structured fields; ``sqlstate`` and ``cause`` are added.
    """
    if isinstance(exc, StoreError):
        return exc
    state = _sqlstate(exc)
    detail = f"{type(exc).__name__}: {exc}".strip()
    name = type(exc).__name__
    if state == _DISK_FULL:
        return StorageFull(
            f"PostgreSQL {op}: the server is out of disk space; nothing was written",
            op=op,
            sqlstate=state,
            cause=detail,
            **fields,
        )
    if state in _SERIALIZATION:
        return RetryableStorage(
            f"PostgreSQL {op}: serialization conflicts persisted; nothing was written",
            op=op,
            sqlstate=state,
            cause=detail,
            **fields,
        )
    if name in ("PoolTimeout", "TooManyRequests") or state in _TRANSIENT or _is_connection(exc):
        return RetryableStorage(
            f"PostgreSQL {op}: connection unavailable or lost; nothing was written",
            op=op,
            sqlstate=state,
            cause=detail,
            **fields,
        )
    if name == "PoolClosed":
        return Failed(f"PostgreSQL {op}: the store is closed", op=op, cause=detail, **fields)
    return Failed(f"PostgreSQL {op} failed", op=op, sqlstate=state, cause=detail, **fields)


class _Abort(Exception):
    """Internal: the transaction failed in the database; ``cause`` says why."""

    def __init__(self, cause: BaseException, *, at_commit: bool = False) -> None:
        super().__init__(str(cause))
        self.cause = cause
        self.at_commit = at_commit


def _result_error(conn: psycopg.Connection[Any], res: Any) -> BaseException:
    """The psycopg error of a failed libpq result: the server's (with its SQLSTATE),
    or :class:`psycopg.OperationalError` when the connection itself is gone."""
    pg = importlib.import_module("psycopg")
    if conn.pgconn.status == pg.pq.ConnStatus.BAD:
        message = res.error_message.decode(errors="replace").strip() or "connection lost"
        state = res.error_field(pg.pq.DiagnosticField.SQLSTATE)
        if state is None or not (state.startswith(b"08") or state in _CONNECTION_LOST_B):
            lost: BaseException = pg.OperationalError(message)
            return lost
    exc: BaseException = pg.errors.error_from_result(res, encoding=conn.info.encoding)
    return exc


def _simple(conn: psycopg.Connection[Any], statement: str) -> Any:
    """Run ``statement`` (maybe several, text results) as one simple query on libpq;
    the last statement's result. A failed one raises its psycopg error."""
    res = conn.pgconn.exec_(statement.encode())
    if res.status not in _RESULT_OK:
        raise _result_error(conn, res)
    return res


# -- SQL --------------------------------------------------------------------------------------


_BYTEA = 17
_INT8 = 20
_BINARY = (1, 1, 1, 1)
_RESULT_OK = frozenset({1, 2})
"""libpq's PGRES_COMMAND_OK and PGRES_TUPLES_OK."""


@dataclass(frozen=True)
class _Stmt:
    """One statement run by name on the libpq connection: ``$n`` parameters of
    ``types`` (binary), binary results. Prepared on a connection at first use."""

    name: bytes
    text: bytes
    types: tuple[int, ...]

    @property
    def formats(self) -> tuple[int, ...]:
        """Every parameter binary."""
        return _BINARY[: len(self.types)]


@dataclass(frozen=True)
class _TableSql:
    get: _Stmt
    put: _Stmt
    delete: _Stmt
    scan_from: _Stmt
    scan_from_to: _Stmt
    scan_after: _Stmt
    scan_after_to: _Stmt


def _table_sql(qualified: str, table: str) -> _TableSql:
    cols = f"SELECT k, v FROM {qualified} WHERE"

    def stmt(kind: str, text: str, *types: int) -> _Stmt:
        return _Stmt(name=f"subagents_{table}_{kind}".encode(), text=text.encode(), types=types)

    return _TableSql(
        get=stmt("get", f"SELECT v FROM {qualified} WHERE k = $1", _BYTEA),
        put=stmt(
            "put",
            f"INSERT INTO {qualified} (k, v) VALUES ($1, $2) "
            "ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v",
            _BYTEA,
            _BYTEA,
        ),
        delete=stmt("delete", f"DELETE FROM {qualified} WHERE k = $1 RETURNING 1", _BYTEA),
        scan_from=stmt("from", f"{cols} k >= $1 ORDER BY k LIMIT $2", _BYTEA, _INT8),
        scan_from_to=stmt(
            "from_to", f"{cols} k >= $1 AND k < $2 ORDER BY k LIMIT $3", _BYTEA, _BYTEA, _INT8
        ),
        scan_after=stmt("after", f"{cols} k > $1 ORDER BY k LIMIT $2", _BYTEA, _INT8),
        scan_after_to=stmt(
            "after_to", f"{cols} k > $1 AND k < $2 ORDER BY k LIMIT $3", _BYTEA, _BYTEA, _INT8
        ),
    )


_CLOCK_STMT = _Stmt(name=b"subagents_clock", text=_CLOCK_SQL.encode(), types=())


def _int8(value: int) -> bytes:
    return value.to_bytes(8, "big", signed=True)


# -- migrations -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Migration:
    """One schema step. ``statements`` use ``{schema}`` (quoted) and ``{p}`` (table prefix)."""

    version: int
    name: str
    statements: tuple[str, ...]


_V1_TABLES = ("sessions", "runs", "receipts", "attempts", "artifacts", "continuations", "meta")
HOST_TABLES = ("host_events", "host_meta")
"""Tables the RPC host keeps beside the kernel's (its event log and fencing counter),
so every host sharing the database shares them; opened as a second
:class:`PostgresBackend` with ``tables=HOST_TABLES``."""

MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "kernel tables: one (k bytea primary key, v bytea) table per kernel table",
        tuple(
            "CREATE TABLE IF NOT EXISTS {schema}.{p}"
            + t
            + " (k bytea PRIMARY KEY, v bytea NOT NULL)"
            for t in _V1_TABLES
        ),
    ),
    Migration(
        2,
        "host tables: the RPC host's event log and metadata (host_events, host_meta)",
        tuple(
            "CREATE TABLE IF NOT EXISTS {schema}.{p}"
            + t
            + " (k bytea PRIMARY KEY, v bytea NOT NULL)"
            for t in HOST_TABLES
        ),
    ),
    Migration(
        3,
        "attempt indexes: their own kernel table (the kernel moves the entries on open)",
        ("CREATE TABLE IF NOT EXISTS {schema}.{p}index (k bytea PRIMARY KEY, v bytea NOT NULL)",),
    ),
    Migration(
        4,
        "checksummed values: the quarantine table (the kernel seals every value on open)",
        (
            "CREATE TABLE IF NOT EXISTS {schema}.{p}quarantine"
            " (k bytea PRIMARY KEY, v bytea NOT NULL)",
        ),
    ),
)
"""Every migration, in order. Append only: a released migration never changes."""

LATEST_VERSION = MIGRATIONS[-1].version


def _connect(dsn: str, *, connect_timeout: float) -> psycopg.Connection[Any]:
    pg, _ = _modules()
    try:
        conn: psycopg.Connection[Any] = pg.connect(
            dsn, autocommit=True, connect_timeout=max(1, int(connect_timeout))
        )
    except pg.Error as exc:
        raise map_error(exc, op="connect") from exc
    return conn


def _applied(conn: psycopg.Connection[Any], schema: str) -> list[int]:
    rows = conn.execute(
        f"SELECT version FROM {schema}.{MIGRATIONS_TABLE} ORDER BY version"
    ).fetchall()
    return [int(r[0]) for r in rows]


def migrate(dsn: str, *, schema: str = "public", connect_timeout: float = 10.0) -> list[int]:
    """Apply every missing migration to ``schema``; return the versions applied now.

    Idempotent: a migrated database gets nothing (``[]``). Concurrent callers
    serialize on an advisory lock, all in one transaction, so a crash leaves
    either all of this call's migrations or none. Raises :class:`Failed` when
    the database has a version newer than this code, :class:`RetryableStorage`
    when the server is unreachable. The CLI's ``subagents db migrate`` calls it.
    """
    quoted = _ident("schema", schema)
    pg, _ = _modules()
    conn = _connect(dsn, connect_timeout=connect_timeout)
    try:
        with conn.transaction():
            conn.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                (f"subagents migrate {schema}",),
            )
            conn.execute(f"CREATE SCHEMA IF NOT EXISTS {quoted}")
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {quoted}.{MIGRATIONS_TABLE} ("
                "version integer PRIMARY KEY, name text NOT NULL, "
                "applied_at timestamptz NOT NULL DEFAULT clock_timestamp())"
            )
            done = set(_applied(conn, quoted))
            newer = sorted(v for v in done if v > LATEST_VERSION)
            if newer:
                raise Failed(
                    "the database schema is newer than this code",
                    schema=schema,
                    versions=newer,
                    latest_known=LATEST_VERSION,
                )
            applied: list[int] = []
            for migration in MIGRATIONS:
                if migration.version in done:
                    continue
                for statement in migration.statements:
                    conn.execute(statement.format(schema=quoted, p=TABLE_PREFIX))
                conn.execute(
                    f"INSERT INTO {quoted}.{MIGRATIONS_TABLE} (version, name) VALUES (%s, %s)",
                    (migration.version, migration.name),
                )
                applied.append(migration.version)
            return applied
    except pg.Error as exc:
        raise map_error(exc, op="migrate", schema=schema) from exc
    finally:
        conn.close()


_migrate = migrate  # PostgresBackend's ``migrate`` flag shadows the function's name


def schema_version(dsn: str, *, schema: str = "public", connect_timeout: float = 10.0) -> int:
    """The highest migration applied to ``schema`` (0 when none)."""
    quoted = _ident("schema", schema)
    pg, _ = _modules()
    conn = _connect(dsn, connect_timeout=connect_timeout)
    try:
        exists = conn.execute(
            "SELECT to_regclass(%s) IS NOT NULL", (f"{quoted}.{MIGRATIONS_TABLE}",)
        ).fetchone()
        if not exists or not exists[0]:
            return 0
        versions = _applied(conn, quoted)
        return max(versions, default=0)
    except pg.Error as exc:
        raise map_error(exc, op="schema_version", schema=schema) from exc
    finally:
        conn.close()


# -- scratch databases (tests, benches) -------------------------------------------------------


def database_dsn(admin_dsn: str, name: str) -> str:
    """``admin_dsn`` with its database replaced by ``name``."""
    pg, _ = _modules()
    conninfo: str = pg.conninfo.make_conninfo(admin_dsn, dbname=name)
    return conninfo


def create_database(admin_dsn: str, name: str) -> str:
    """Create database ``name`` through ``admin_dsn``; return a DSN for it.

    For tests and benchmarks that need a database of their own.
    """
    quoted = _ident("database name", name)
    pg, _ = _modules()
    conn = _connect(admin_dsn, connect_timeout=10.0)
    try:
        conn.execute(f"CREATE DATABASE {quoted}")
    except pg.Error as exc:
        raise map_error(exc, op="create database", database=name) from exc
    finally:
        conn.close()
    return database_dsn(admin_dsn, name)


def drop_database(admin_dsn: str, name: str) -> None:
    """Drop database ``name`` if it exists, disconnecting its sessions first."""
    quoted = _ident("database name", name)
    pg, _ = _modules()
    conn = _connect(admin_dsn, connect_timeout=10.0)
    try:
        conn.execute(f"DROP DATABASE IF EXISTS {quoted} WITH (FORCE)")
    except pg.Error as exc:
        raise map_error(exc, op="drop database", database=name) from exc
    finally:
        conn.close()


def wipe(dsn: str, *, schema: str = "public") -> None:
    """Delete every row of the store's tables in ``schema`` (migrations stay).

    For tests that reuse one migrated schema between cases. Close the stores
    on it first: an open transaction would make this wait.
    """
    quoted = _ident("schema", schema)
    pg, _ = _modules()
    conn = _connect(dsn, connect_timeout=10.0)
    try:
        with conn.transaction():
            for table in (*KernelStore.TABLES, *HOST_TABLES):
                conn.execute(f"DELETE FROM {quoted}.{TABLE_PREFIX}{table}")
    except pg.Error as exc:
        raise map_error(exc, op="wipe", schema=schema) from exc
    finally:
        conn.close()


# -- transactions -----------------------------------------------------------------------------


class _PgTxn:
    """A :class:`~storage.Txn` over one PostgreSQL transaction on one connection.

    The first database error is remembered (``failure``): PostgreSQL aborts the
    transaction on any error, so the backend must not commit even if the
    caller's function swallowed the mapped error.
    """

    __slots__ = (
        "_conn",
        "_now",
        "_pgconn",
        "_prepared",
        "_sql",
        "failure",
        "writable",
        "wrote",
    )

    def __init__(
        self,
        conn: psycopg.Connection[Any],
        sql: dict[str, _TableSql],
        *,
        writable: bool,
        prepared: set[bytes],
    ) -> None:
        self._conn = conn
        # Statements go straight to libpq (PQexecPrepared: binary parameters,
        # binary rows), bypassing the cursor layer: for one-row key-value
        # statements that layer costs more CPU than the round trip.
        self._pgconn = conn.pgconn
        self._prepared = prepared
        self._sql = sql
        self.writable = writable
        self.failure: BaseException | None = None
        self._now: float | None = None
        self.wrote = False  # a put or delete ran: its COMMIT flushes the WAL

    @property
    def backend_pid(self) -> int:
        """The server process id of this transaction's connection."""
        pid: int = self._conn.info.backend_pid
        return pid

    def _table(self, table: str) -> _TableSql:
        try:
            return self._sql[table]
        except KeyError:
            raise Failed(
                "no such table in this backend", table=table, tables=sorted(self._sql)
            ) from None

    def _exec(
        self, stmt: _Stmt, params: Sequence[bytes], op: str, table: str, key: bytes
    ) -> list[tuple[bytes, ...]]:
        """Run ``stmt``; its rows (each column's bytes). Database errors are mapped
        and remembered (the transaction is aborted)."""
        if self.failure is not None:
            raise map_error(self.failure, op=op, table=table, key=key)
        try:
            return self._rows(stmt, params)
        except Exception as exc:
            pg = importlib.import_module("psycopg")
            if not isinstance(exc, pg.Error):
                raise
            self.failure = exc
            raise map_error(exc, op=op, table=table, key=key) from exc

    def _rows(self, stmt: _Stmt, params: Sequence[bytes]) -> list[tuple[bytes, ...]]:
        pgconn = self._pgconn
        if stmt.name not in self._prepared:
            # Prepared statements outlive transactions (even rolled back ones).
            # Lists, not tuples: psycopg's C libpq wrapper before 3.2 takes only lists.
            res = pgconn.prepare(stmt.name, stmt.text, list(stmt.types))
            if res.status not in _RESULT_OK:
                raise self._error(res)
            self._prepared.add(stmt.name)
        res = pgconn.exec_prepared(stmt.name, list(params), list(stmt.formats), 1)
        if res.status not in _RESULT_OK:
            raise self._error(res)
        width = res.nfields
        return [
            tuple(bytes(res.get_value(row, col) or b"") for col in range(width))
            for row in range(res.ntuples)
        ]

    def _error(self, res: Any) -> BaseException:
        return _result_error(self._conn, res)

    def _writable(self, table: str, key: bytes) -> None:
        if not self.writable:
            raise Failed("write in a read transaction", table=table, key=key)
        self.wrote = True

    def get(self, table: str, key: bytes) -> bytes | None:
        sql = self._table(table)
        rows = self._exec(sql.get, (key,), "get", table, key)
        return rows[0][0] if rows else None

    def put(self, table: str, key: bytes, value: bytes) -> None:
        sql = self._table(table)
        self._writable(table, key)
        self._exec(sql.put, (key, bytes(value)), "put", table, key)

    def delete(self, table: str, key: bytes) -> bool:
        sql = self._table(table)
        self._writable(table, key)
        return bool(self._exec(sql.delete, (key,), "delete", table, key))

    def scan(
        self, table: str, prefix: bytes = b"", start: bytes | None = None
    ) -> Iterator[tuple[bytes, bytes]]:
        sql = self._table(table)
        first = prefix if start is None or start < prefix else start
        return self._pages(sql, table, first, _prefix_end(prefix))

    def _pages(
        self, sql: _TableSql, table: str, first: bytes, end: bytes | None
    ) -> Iterator[tuple[bytes, bytes]]:
        # Pages grow from a few rows (a probe such as "the first key of the next
        # session" reads one) to _PAGE_MAX, so a long range costs few round trips.
        size = _PAGE_FIRST
        rows = self._page((sql.scan_from, sql.scan_from_to), table, first, end, size)
        while True:
            yield from ((row[0], row[1]) for row in rows)
            if len(rows) < size:
                return
            last = rows[-1][0]
            size = min(size * 4, _PAGE_MAX)
            rows = self._page((sql.scan_after, sql.scan_after_to), table, last, end, size)

    def _page(
        self, queries: tuple[_Stmt, _Stmt], table: str, lo: bytes, end: bytes | None, size: int
    ) -> list[tuple[bytes, ...]]:
        open_sql, bounded_sql = queries
        if end is None:
            return self._exec(open_sql, (lo, _int8(size)), "scan", table, lo)
        return self._exec(bounded_sql, (lo, end, _int8(size)), "scan", table, lo)

    def set_now(self, now: float) -> None:
        self._now = now

    def db_now(self) -> float:
        """The server's ``clock_timestamp()`` (epoch seconds) at this transaction's start."""
        if self._now is None:
            rows = self._exec(_CLOCK_STMT, (), "clock", "", b"")
            self._now = struct.unpack("!d", rows[0][0])[0]
        return self._now


# -- the backend ------------------------------------------------------------------------------


class PostgresBackend:
    """Atomic, durable transactions over the kernel's tables in PostgreSQL.

    ``dsn`` is a libpq connection string or URI. ``schema`` is the PostgreSQL
    schema holding the tables (created by the migrations). ``pool_size`` is
    the most connections this backend holds; ``pool_timeout`` how long an
    operation waits for one before :class:`~storage.RetryableStorage`.
    ``migrate`` applies missing migrations on open; without it, an unmigrated
    database raises :class:`~storage.Failed`. ``clock_reuse_seconds``: how long
    a server clock reading serves :meth:`server_now` (0: ask every time).

    Threads: every method may be called from any thread; ``fn`` runs on the
    calling thread with one pooled connection, and must not call the backend
    again (it would take a second connection and could deadlock the pool).
    """

    def __init__(
        self,
        dsn: str,
        *,
        tables: Sequence[str] = KernelStore.TABLES,
        schema: str = "public",
        pool_size: int = DEFAULT_POOL_SIZE,
        pool_timeout: float = 10.0,
        connect_timeout: float = 10.0,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        migrate: bool = True,
        clock_reuse_seconds: float = CLOCK_REUSE_SECONDS,
    ) -> None:
        if pool_size < 1:
            raise ValueError("pool_size must be at least 1")
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        quoted = _ident("schema", schema)
        pg, pool_mod = _modules()
        self._pg = pg
        self.tables: Sequence[str] = tuple(tables)
        self.schema = schema
        self.max_attempts = max_attempts
        self.pool_timeout = pool_timeout
        if clock_reuse_seconds < 0:
            raise ValueError("clock_reuse_seconds must not be negative")
        self.clock_reuse_seconds = clock_reuse_seconds
        self._monotonic: Callable[[], float] = time.monotonic
        # (server epoch seconds, local monotonic seconds when it arrived); never reused at first.
        self._reading: tuple[float, float] = (0.0, -float("inf"))
        if migrate:
            _migrate(dsn, schema=schema, connect_timeout=connect_timeout)
        version = schema_version(dsn, schema=schema, connect_timeout=connect_timeout)
        if version < LATEST_VERSION:
            raise Failed(
                "the database is not migrated: run `subagents db migrate`",
                schema=schema,
                version=version,
                latest=LATEST_VERSION,
            )
        self._sql = {
            t: _table_sql(f"{quoted}.{_ident('table', TABLE_PREFIX + t)}", t) for t in tables
        }
        # The statements prepared on each pooled connection (a new connection has none).
        self._prepared: weakref.WeakKeyDictionary[Any, set[bytes]] = weakref.WeakKeyDictionary()
        self._prepared_lock = threading.Lock()
        self._local = threading.local()
        self._cond = threading.Condition()
        self._inflight = 0
        self._closed = False
        # Backoff jitter only spreads competing retries apart; it decides nothing.
        self._jitter = random.Random()
        self.retries = 0
        """Transactions run again after a serialization failure or lost connection."""
        self._counts = [0, 0, 0]  # writes, commits, fsyncs (StoreCounters), under _cond
        self._pool: psycopg_pool.ConnectionPool[Any] = pool_mod.ConnectionPool(
            dsn,
            min_size=1,
            max_size=pool_size,
            kwargs={
                "autocommit": True,
                "connect_timeout": max(1, int(connect_timeout)),
                "application_name": APPLICATION_NAME,
            },
            timeout=pool_timeout,
            open=False,
            name=f"subagents-{schema}",
        )
        try:
            self._pool.open(wait=True, timeout=connect_timeout)
        except Exception as exc:
            self._pool.close()
            raise map_error(exc, op="open pool", schema=schema) from exc

    # -- bookkeeping ---------------------------------------------------------------------

    def _enter(self) -> None:
        with self._cond:
            if self._closed:
                raise Failed("PostgreSQL backend is closed", schema=self.schema)
            self._inflight += 1

    def _leave(self) -> None:
        with self._cond:
            self._inflight -= 1
            if self._inflight == 0:
                self._cond.notify_all()

    @property
    def in_flight(self) -> int:
        """Operations currently running on this backend."""
        with self._cond:
            return self._inflight

    def current_txn(self) -> _PgTxn | None:
        """The transaction this thread is running ``fn`` in, if any (used by the clock)."""
        txn: _PgTxn | None = getattr(self._local, "txn", None)
        return txn

    def _observe(self, txn: _PgTxn, now: float) -> None:
        """``now`` is the server's clock at ``txn``'s start: the transaction's instant,
        and the latest reading :meth:`server_now` may reuse."""
        txn.set_now(now)
        self._reading = (now, self._monotonic())

    def server_now(self) -> float:
        """The server's clock as epoch seconds, outside any transaction.

        The latest reading of this backend (taken at a transaction's start)
        advanced by the local monotonic clock, while it is at most
        ``clock_reuse_seconds`` old; else the server is asked (one round trip).
        Never ahead of the server's clock by more than the local clock's drift
        since that reading: a reading is taken at the server and timed here
        after it arrived.
        """
        server, at = self._reading
        elapsed = self._monotonic() - at
        if 0.0 <= elapsed <= self.clock_reuse_seconds:
            return server + elapsed
        now = self._ask_server()
        self._reading = (now, self._monotonic())
        return now

    def _ask_server(self) -> float:
        self._enter()
        try:
            with self._pool.connection(timeout=self.pool_timeout) as conn:
                row = conn.execute(_CLOCK_SQL).fetchone()
                assert row is not None
                return float(row[0])
        except self._pg.Error as exc:
            raise map_error(exc, op="clock") from exc
        except Exception as exc:
            if type(exc).__module__.startswith("psycopg_pool"):
                raise map_error(exc, op="clock") from exc
            raise
        finally:
            self._leave()

    # -- transactions --------------------------------------------------------------------

    def read(self, fn: Callable[[Txn], T]) -> T:
        """Run ``fn`` on one REPEATABLE READ READ ONLY snapshot."""
        return self._run(fn, writable=False)

    def write(self, fn: Callable[[Txn], T]) -> T:
        """Run ``fn`` in one SERIALIZABLE transaction, retried on serialization failures."""
        self._count(0, 0, writes=1)
        return self._run(fn, writable=True)

    def _count(self, commits: int, fsyncs: int, *, writes: int = 0) -> None:
        with self._cond:
            counts = self._counts
            counts[0] += writes
            counts[1] += commits
            counts[2] += fsyncs

    def counters(self) -> StoreCounters:
        """Write calls, committed write transactions and those that wrote
        (``fsyncs``: a writing ``COMMIT`` flushes the WAL under the default
        ``synchronous_commit = on``; a refusal commits nothing)."""
        with self._cond:
            writes, commits, fsyncs = self._counts
        return StoreCounters(writes=writes, commits=commits, fsyncs=fsyncs)

    def _run(self, fn: Callable[[Txn], T], *, writable: bool) -> T:
        op = "write" if writable else "read"
        if self.current_txn() is not None:
            # fn would wait for a second pooled connection, possibly on locks
            # its own transaction holds.
            raise Failed("a transaction cannot start another one", op=op, schema=self.schema)
        self._enter()
        try:
            serialization_failures = 0
            connection_failures = 0
            while True:
                try:
                    return self._attempt(fn, writable=writable)
                except _Abort as abort:
                    cause = abort.cause
                    if _is_serialization(cause):
                        serialization_failures += 1
                        if serialization_failures >= self.max_attempts:
                            raise map_error(
                                cause, op=op, attempts=serialization_failures
                            ) from cause
                        self._backoff(serialization_failures)
                    elif abort.at_commit and _is_connection(cause):
                        raise Failed(
                            f"PostgreSQL {op}: connection lost during COMMIT; "
                            "the outcome is unknown",
                            op=op,
                            in_doubt=True,
                            sqlstate=_sqlstate(cause),
                            cause=f"{type(cause).__name__}: {cause}",
                        ) from cause
                    elif _is_connection(cause):
                        connection_failures += 1
                        if connection_failures >= CONNECTION_ATTEMPTS:
                            raise map_error(cause, op=op, attempts=connection_failures) from cause
                        # The server may have restarted: every idle pooled
                        # connection may be dead too. Replace those now.
                        self._check_pool()
                    else:
                        raise map_error(cause, op=op) from cause
                    with self._cond:
                        self.retries += 1
        finally:
            self._leave()

    def _check_pool(self) -> None:
        try:
            self._pool.check()
        except Exception:
            # Best effort: a failed check leaves the pool to replace connections
            # as they are returned broken.
            return

    def _backoff(self, failures: int) -> None:
        # Exponential from 0.5 ms, capped at 50 ms, with full jitter so the
        # writers that collided do not collide again in step.
        cap = min(0.05, 0.0005 * (2 ** min(failures, 10)))
        time.sleep(self._jitter.uniform(0, cap))

    def _attempt(self, fn: Callable[[Txn], T], *, writable: bool) -> T:
        """One transaction. Database failures come out as :class:`_Abort`."""
        pg = self._pg
        try:
            conn = self._pool.getconn(timeout=self.pool_timeout)
        except Exception as exc:
            if type(exc).__name__ == "PoolClosed":
                raise Failed("PostgreSQL backend is closed", schema=self.schema) from exc
            if isinstance(exc, pg.Error) or type(exc).__module__.startswith("psycopg_pool"):
                # Pool exhausted or server unreachable for pool_timeout: waiting
                # again here would only multiply the caller's wait.
                raise map_error(exc, op="connect", schema=self.schema) from exc
            raise
        txn = _PgTxn(conn, self._sql, writable=writable, prepared=self._prepared_on(conn))
        try:
            try:
                self._observe(txn, self._begin(conn, writable=writable))
            except pg.Error as exc:
                raise _Abort(exc) from exc
            self._local.txn = txn
            try:
                result = fn(txn)
            except BaseException as exc:
                if txn.failure is not None:
                    raise _Abort(txn.failure) from exc
                if writable and isinstance(exc, Exception):
                    # A refusal: undo fn's writes but commit its reads, so that
                    # serializable validation confirms the refusal was decided
                    # on a serializable view (else: run fn again).
                    # Nothing is written either way, so a lost connection here
                    # is a plain retryable failure, not an in-doubt commit.
                    self._commit(conn, "ROLLBACK TO SAVEPOINT subagents_fn; COMMIT", in_doubt=False)
                raise
            finally:
                self._local.txn = None
            if txn.failure is not None:
                raise _Abort(txn.failure)
            # A read-only snapshot has nothing to commit: a failure here changes nothing.
            self._commit(conn, "COMMIT", in_doubt=writable)
            if writable:
                self._count(1, 1 if txn.wrote else 0)
            return result
        finally:
            self._release(conn)

    @staticmethod
    def _begin(conn: psycopg.Connection[Any], *, writable: bool) -> float:
        """Open the transaction; return the server's clock at its snapshot.

        BEGIN, the savepoint (writes) and the clock read go in one round trip
        (one simple query of several statements). The clock read is the first
        statement after BEGIN, so it also takes the transaction's snapshot:
        the store's "now" is the instant its reads are taken at.
        """
        begin = (
            "BEGIN ISOLATION LEVEL SERIALIZABLE; SAVEPOINT subagents_fn; "
            if writable
            else "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; "
        )
        res = _simple(conn, begin + _CLOCK_SQL)
        raw = res.get_value(0, 0) if res.ntuples else None
        if raw is None:
            raise Failed("PostgreSQL returned no clock reading at BEGIN")
        return float(bytes(raw))

    def _commit(self, conn: psycopg.Connection[Any], statement: str, *, in_doubt: bool) -> None:
        """Send ``statement`` (ending in COMMIT). ``in_doubt``: a lost reply leaves
        the outcome unknown (a real write was committing)."""
        try:
            _simple(conn, statement)
        except self._pg.Error as exc:
            raise _Abort(exc, at_commit=in_doubt and not _is_serialization(exc)) from exc

    def _prepared_on(self, conn: psycopg.Connection[Any]) -> set[bytes]:
        """The names of the statements prepared on ``conn`` (used by one thread at a time)."""
        with self._prepared_lock:
            found = self._prepared.get(conn)
            if found is None:
                found = self._prepared[conn] = set()
            return found

    def _release(self, conn: psycopg.Connection[Any]) -> None:
        pg = self._pg
        try:
            if not conn.closed and conn.info.transaction_status != pg.pq.TransactionStatus.IDLE:
                conn.execute("ROLLBACK")
        except pg.Error:
            # A broken connection: the pool discards it on return.
            pass
        try:
            self._pool.putconn(conn)
        except Exception:
            # A closed pool refuses the connection: close it ourselves.
            conn.close()

    def drain(self) -> None:
        """Return once no operation of this backend is in flight."""
        with self._cond:
            self._cond.wait_for(lambda: self._inflight == 0)

    def close(self) -> None:
        """Refuse new operations, wait for running ones, close the pool. Idempotent."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._cond.wait_for(lambda: self._inflight == 0)
        self._pool.close()


class PostgresClock:
    """Database server time: ``clock_timestamp()`` of the current transaction.

    Inside a backend transaction on this thread, ``now()`` is the server's
    clock read when that transaction began (no extra round trip), the same
    instant for the whole transaction (the kernel's "one instant per
    operation"). Outside one, :meth:`PostgresBackend.server_now`: the latest
    reading advanced locally while it is recent, else the server's answer.
    ``monotonic()`` is the local monotonic clock (durations only).
    Safe from any thread.
    """

    def __init__(self, backend: PostgresBackend) -> None:
        self._backend = backend

    def now(self) -> float:
        txn = self._backend.current_txn()
        if txn is not None:
            return txn.db_now()
        return self._backend.server_now()

    def monotonic(self) -> float:
        return time.monotonic()

    def __repr__(self) -> str:
        return f"PostgresClock(schema={self._backend.schema!r})"


class PostgresSessionStore(KernelStore):
    """The SessionStore contract on PostgreSQL, shared safely by several hosts.

    ``dsn``: a libpq connection string or URI. ``clock``: default
    :class:`PostgresClock` (database server time); tests pass a ManualClock.
    ``schema``: the PostgreSQL schema of the tables (several independent
    stores can share one database in different schemas). ``pool_size``: most
    connections held. ``migrate``: apply missing migrations on open. ``ids``:
    where the store's identity comes from when the kernel first writes it.

    Opening raises :class:`DriverMissing` without the ``postgres`` extra,
    :class:`~storage.RetryableStorage` when the server is unreachable.
    ``drain()`` waits for in-flight operations; ``close()`` drains and closes
    the pool. Threads: as :class:`~storage.KernelStore`.
    """

    def __init__(
        self,
        dsn: str,
        *,
        clock: Clock | None = None,
        schema: str = "public",
        pool_size: int = DEFAULT_POOL_SIZE,
        pool_timeout: float = 10.0,
        connect_timeout: float = 10.0,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        retention_seconds: float = 86400.0,
        migrate: bool = True,
        ids: IdSource | None = None,
    ) -> None:
        backend = PostgresBackend(
            dsn,
            tables=self.TABLES + self.EVENT_TABLES,
            schema=schema,
            pool_size=pool_size,
            pool_timeout=pool_timeout,
            connect_timeout=connect_timeout,
            max_attempts=max_attempts,
            migrate=migrate,
        )
        try:
            super().__init__(
                backend,
                clock=clock if clock is not None else PostgresClock(backend),
                retention_seconds=retention_seconds,
                ids=ids,
            )
        except BaseException:
            backend.close()
            raise

    @property
    def postgres(self) -> PostgresBackend:
        """The PostgreSQL backend (retry counters, schema)."""
        backend = self.raw_backend  # under the seals and the fault hooks
        assert isinstance(backend, PostgresBackend)
        return backend
