"""The embedded default store: the contract logic on an LMDB backend.

:class:`LmdbBackend` turns LMDB into the byte-level :class:`~storage.Backend`
the :class:`~storage.KernelStore` runs on; :class:`LmdbSessionStore` is that
kernel on LMDB.

Environments. LMDB forbids opening the same environment twice in one process
(its locks are per process), so every backend on one directory shares one
``lmdb.Environment`` from a module-level registry keyed by the directory's real
path, reference counted and guarded by a lock. The registry records the pid
that opened each environment: a forked child never uses its parent's handle,
it opens a fresh one (see :func:`_before_fork`). Several *processes* may open
the same directory at once (``lock=True``: LMDB's shared lock file); stale
reader slots left by dead processes are cleared on every open.

Writes. LMDB has one writer and no group commit, so every durable commit costs
the fsyncs of one transaction. :meth:`LmdbBackend.write` is a leader/follower
batching writer (DESIGN §6): an uncontended caller runs its function in its own
write transaction on its own thread (no hand-off). Callers that arrive while a
transaction is in flight queue up; when the leader finishes, the oldest queued
caller becomes the next leader and runs *every* queued function in one write
transaction, each inside its own nested child transaction, and commits once.
A function that raises aborts only its child transaction. Every caller is
answered (its value or its exception) only after the commit that holds its
writes returned. While writers are concurrent, a new leader briefly waits
(woken as each one queues, at most half an fsync) for as many writers as the
previous batch held, so N steady writers share one commit; a lone writer keeps
the direct path unless the backend was opened with a ``linger_seconds`` window
(then a writer that finds the writer idle waits up to that long for a second
one before it commits; default 0, see :class:`LmdbBackend`). A full map
aborts the batch and runs each function alone, so one that does not fit never
fails one that does.

Opening. Before LMDB maps ``data.mdb`` (once per path per process) the
directory is checked with plain file I/O (:func:`storage._lmdbfile.preflight`):
non-files where store files belong, a marker without a database, a zero-length
or truncated file, damaged meta pages and (files up to ``verify_bytes``) any
structural damage are :class:`~storage.StoreRefused`, so a damaged file is
refused instead of killing the process with SIGBUS or an LMDB assertion. The
directory is created 0700, ``data.mdb`` and ``lock.mdb`` 0600 (existing ones
are narrowed to 0600). :class:`LmdbSessionStore` then checks the database's
identity against the marker beside it (:mod:`storage._identity`) and writes
the marker on first open.

Disk errors: ENOSPC, EDQUOT and EFBIG are :class:`~storage.StorageFull`; EIO
(and EAGAIN, EINTR, EBUSY) :class:`~storage.RetryableStorage`: LMDB aborts a
transaction whose write or fsync failed before its meta page is written, so
nothing of it is visible. (After a failed meta write LMDB marks the
environment broken: later calls fail with :class:`~storage.Failed` until it is
reopened.)

Durability: ``sync=True`` (the default) makes every commit durable before
``write`` returns. ``sync=False`` trades that for speed (an OS crash may lose
the last commits, never corrupt the file); it is for bulk set-up only.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Generic, TypeVar, cast

import lmdb

from ._backend import StoreCounters, Txn
from ._clock import Clock, IdSource
from ._errors import CorruptRecord, Failed, RetryableStorage, StorageFull, StoreError, StoreRefused
from ._identity import FIX_MOVE_ASIDE, StoreIdentity, read_marker, write_marker
from ._journal import DEFAULT_REGION_BYTES, Journal, Op, Recovered
from ._journaled import DirectoryLock, Keeper, prepare
from ._kernel import KernelStore
from ._lmdbfile import DEFAULT_VERIFY_BYTES, preflight

T = TypeVar("T")

GIB = 1 << 30
DEFAULT_MAP_SIZE = GIB
DEFAULT_MAX_READERS = 126

# How long a fork or a map resize waits for in-flight transactions of this
# process to finish before giving up (the work is short; waiting this long
# means a transaction is stuck, and we must not remap under it).
_QUIESCE_TIMEOUT = 10.0

# How long a batch leader waits for the writers of the previous batch to queue
# again (it is woken as each one does). Below one fsync, so waiting costs less
# than the commit it saves; paid only when concurrency just dropped.
_GATHER_SECONDS = 0.0005

# lmdb errors that mean "try again": nothing was written and the cause is
# transient (reader table full, another process resized the map, a lock
# contended, a reader slot invalidated by a fork).
_TRANSIENT: tuple[type[BaseException], ...] = (
    lmdb.ReadersFullError,
    lmdb.MapResizedError,
    lmdb.LockError,
    lmdb.BadRslotError,
    lmdb.TlsFullError,
)


# lmdb errors that mean the files on disk are damaged or not LMDB at all.
_CORRUPT: tuple[type[BaseException], ...] = (
    lmdb.CorruptedError,
    lmdb.InvalidError,
    lmdb.PageNotFoundError,
)


# errno values of a failed write or fsync. No room: StorageFull. An I/O error:
# LMDB aborted the transaction before its meta page was written, so nothing of
# it is visible and the call may be retried (the disk may be failing: the
# error says so).
_NO_ROOM = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
_IO_ERRORS = frozenset({errno.EIO, errno.EAGAIN, errno.EINTR, errno.EBUSY})


def _errno_of(exc: BaseException) -> int | None:
    """The OS error number behind an lmdb or OS error (lmdb puts it in ``code``)."""
    if isinstance(exc, OSError):
        return exc.errno
    code = getattr(exc, "code", None)
    if isinstance(code, int) and code > 0:
        return code
    numbers = [a for a in getattr(exc, "args", ())[1:] if isinstance(a, int) and a > 0]
    return numbers[0] if numbers else None


def _map_error(exc: BaseException, *, op: str, path: str, **fields: Any) -> StoreError:
    """Map a lower-layer error (lmdb, OS) to the storage error tree."""
    if isinstance(exc, StoreError):
        return exc
    detail = f"{type(exc).__name__}: {exc}"
    number = _errno_of(exc)
    if isinstance(exc, lmdb.MapFullError | lmdb.TxnFullError | lmdb.DiskError) or (
        number in _NO_ROOM
    ):
        return StorageFull(
            f"LMDB {op}: no room (map or disk full); nothing was written",
            path=path,
            cause=detail,
            **fields,
        )
    if number in _IO_ERRORS:
        return RetryableStorage(
            f"LMDB {op}: I/O error ({errno.errorcode.get(number, number)});"
            " nothing was written, the call may be retried",
            path=path,
            cause=detail,
            errno=number,
            **fields,
        )
    if isinstance(exc, _CORRUPT):
        return CorruptRecord(
            f"LMDB {op}: the environment's files are not a valid LMDB database",
            path=path,
            cause=detail,
            **fields,
        )
    if isinstance(exc, _TRANSIENT):
        return RetryableStorage(
            f"LMDB {op}: transient failure; nothing was written",
            path=path,
            cause=detail,
            **fields,
        )
    return Failed(f"LMDB {op} failed", path=path, cause=detail, **fields)


# -- transactions ------------------------------------------------------------------------------


class _LmdbTxn:
    """A :class:`~storage.Txn` over one lmdb transaction and a backend's tables.

    Every lmdb error is mapped to a storage error here. The first one is also
    remembered (``failure``): once LMDB reports an error inside a transaction
    that transaction is unusable, so the writer aborts it even if the caller's
    function swallowed the error.
    """

    __slots__ = ("_dbs", "_path", "_txn", "failure", "ops", "wrote")

    def __init__(
        self,
        txn: lmdb.Transaction[bytes],
        dbs: dict[str, Any],
        path: str,
        ops: list[Op] | None = None,
    ) -> None:
        self._txn = txn
        self._dbs = dbs
        self._path = path
        self.failure: BaseException | None = None
        self.wrote = False  # a put or delete was asked for: committing it syncs
        # With a journal: every write, in order, for the commit's journal entry.
        self.ops = ops

    def _db(self, table: str) -> Any:
        try:
            return self._dbs[table]
        except KeyError:
            raise Failed(
                "no such table in this backend", table=table, tables=sorted(self._dbs)
            ) from None

    def _fail(self, exc: lmdb.Error, op: str, table: str, key: bytes) -> StoreError:
        if self.failure is None:
            self.failure = exc
        return _map_error(exc, op=op, path=self._path, table=table, key=key)

    def get(self, table: str, key: bytes) -> bytes | None:
        db = self._db(table)
        try:
            return self._txn.get(key, db=db)
        except lmdb.Error as exc:
            raise self._fail(exc, "get", table, key) from exc

    def put(self, table: str, key: bytes, value: bytes) -> None:
        db = self._db(table)
        self.wrote = True
        if self.ops is not None:
            self.ops.append((table, key, value))
        try:
            self._txn.put(key, value, db=db)
        except lmdb.Error as exc:
            raise self._fail(exc, "put", table, key) from exc

    def delete(self, table: str, key: bytes) -> bool:
        db = self._db(table)
        self.wrote = True
        if self.ops is not None:
            self.ops.append((table, key, None))
        try:
            return self._txn.delete(key, db=db)
        except lmdb.Error as exc:
            raise self._fail(exc, "delete", table, key) from exc

    def scan(
        self, table: str, prefix: bytes = b"", start: bytes | None = None
    ) -> Iterator[tuple[bytes, bytes]]:
        db = self._db(table)
        first = prefix if start is None or start < prefix else start
        try:
            cursor = self._txn.cursor(db=db)
        except lmdb.Error as exc:
            raise self._fail(exc, "scan", table, first) from exc
        return self._iterate(cursor, table, prefix, first)

    def _iterate(
        self, cursor: lmdb.Cursor[bytes], table: str, prefix: bytes, first: bytes
    ) -> Iterator[tuple[bytes, bytes]]:
        try:
            if not cursor.set_range(first):
                return
            for key, value in cursor.iternext():
                if not key.startswith(prefix):
                    return
                yield key, value
        except lmdb.Error as exc:
            raise self._fail(exc, "scan", table, first) from exc
        finally:
            cursor.close()


# -- the shared environment --------------------------------------------------------------------


class _Gate:
    """Lets many transactions of this process run at once, or one exclusive
    action (a map resize, a fork) run with none in flight.

    The common path takes no lock: a transaction appends a token to a list and
    pops it when done (both atomic in CPython), then checks the exclusive flag.
    The exclusive side sets the flag first and then waits for the list to
    empty, so either a transaction sees the flag and backs off, or the
    exclusive side sees its token and waits for it. A transaction that leaves
    while the flag is set wakes the exclusive side.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._tokens: list[None] = []
        self._exclusive = False

    def enter(self) -> None:
        while True:
            if self._exclusive:
                with self._cond:
                    while self._exclusive:
                        self._cond.wait()
            self._tokens.append(None)
            if not self._exclusive:
                return
            self.leave()

    def leave(self) -> None:
        self._tokens.pop()
        if self._exclusive:
            with self._cond:
                self._cond.notify_all()

    def acquire_exclusive(self, timeout: float) -> bool:
        with self._cond:
            if not self._cond.wait_for(lambda: not self._exclusive, timeout):
                return False
            self._exclusive = True
            if self._cond.wait_for(lambda: not self._tokens, timeout):
                return True
            self._exclusive = False
            self._cond.notify_all()
            return False

    def release_exclusive(self) -> None:
        with self._cond:
            self._exclusive = False
            self._cond.notify_all()


class _Pending(Generic[T]):
    """One queued write: the function, the caller's tables, its outcome."""

    __slots__ = ("dbs", "done", "error", "fn", "ops", "promoted", "value", "wrote")

    def __init__(self, fn: Callable[[Txn], T], dbs: dict[str, Any]) -> None:
        self.fn = fn
        self.dbs = dbs
        self.wrote = False
        self.ops: list[Op] = []  # with a journal: the writes its child committed
        self.done = threading.Event()
        self.promoted = False
        self.value: T | None = None
        self.error: BaseException | None = None


class _Retry(Exception):
    """Internal: the map was resized or grown; run the transaction again."""


_tls = threading.local()


def _refuse_nested(path: str) -> None:
    # A function running inside a store transaction that starts another one
    # would wait on itself (the writer role, or a map resize waiting for its
    # own transaction to end): refuse it.
    if getattr(_tls, "inside", False):
        raise Failed("a store transaction may not start another transaction", path=path)


class _Env:
    """One open lmdb.Environment shared by every backend on a path in this process."""

    def __init__(
        self,
        path: str,
        *,
        sync: bool,
        map_size: int,
        max_map_size: int | None,
        auto_grow: bool,
        max_readers: int,
        max_dbs: int,
        linger: float = 0.0,
        journaled: bool = False,
    ) -> None:
        self.path = path
        # How long a lone writer waits for a second one before committing (0: it does not).
        self.linger = linger
        self.pid = os.getpid()
        self.sync = sync
        self.auto_grow = auto_grow
        self.max_map_size = max_map_size
        self.refs = 0
        self.dead = False
        self.env = lmdb.Environment(
            path,
            map_size=map_size,
            subdir=True,
            readonly=False,
            # With a journal the journal's flush makes a commit durable, not LMDB's.
            metasync=sync and not journaled,
            sync=sync and not journaled,
            lock=True,
            max_readers=max_readers,
            max_dbs=max_dbs,
            max_spare_txns=0,
            # data.mdb and lock.mdb hold every prompt and output: owner only.
            mode=0o600,
        )
        # What the marker beside data.mdb said when this process first opened it.
        self.marker: StoreIdentity | None = None
        self.dbs: dict[str, Any] = {}
        self.gate = _Gate()
        self.journaled = journaled
        # Set by attach(): the journal's keeper (journaled), the directory's lock.
        self.keeper: Keeper | None = None
        self.dir_lock: DirectoryLock | None = None
        # The batching writer's state, guarded by ``mu``.
        self.mu = threading.Lock()
        self.idle = threading.Condition(self.mu)
        # Notified whenever a write queues (lets tests and diagnostics wait for it).
        self.enqueued = threading.Condition(self.mu)
        self.busy = False
        # How many writes the last commit held: > 1 means writers are concurrent.
        self.last_batch = 1
        self.queue: collections.deque[_Pending[Any]] = collections.deque()
        # The store's own counters (see StoreCounters): ``writes`` under ``mu``,
        # the others by the writer (one at a time).
        self.writes = 0
        self.commits = 0
        self.fsyncs = 0

    def attach(
        self,
        lock: DirectoryLock,
        opened: tuple[Journal, Recovered] | None,
        region_bytes: int,
    ) -> None:
        """Take over the directory's lock and its journal (see storage._journaled):
        replay and keep it when journaled, else replay and remove it."""
        self.dir_lock = lock  # released by close() (or by the caller if this raises)
        keeper = Keeper(self.env, self.path)
        if self.journaled:
            try:
                keeper.replay(opened, region_bytes)
            except BaseException:
                keeper.discard()  # the caller releases the lock and closes LMDB
                raise
            self.keeper = keeper
        elif opened is not None:
            keeper.leave(opened)
            lock.share()

    def _commit(self, txn: lmdb.Transaction[bytes], ops: list[Op] | None) -> None:
        """Commit a top-level write transaction (through the journal, when there is one)."""
        if self.keeper is None:
            txn.commit()
        else:
            self.keeper.commit(txn, ops or ())

    def _committed(self, wrote: bool) -> None:
        """Count one top-level commit that returned (LMDB syncs only a changed one)."""
        self.commits += 1
        if wrote and self.sync:
            self.fsyncs += 1

    # -- tables ---------------------------------------------------------------------------

    def open_tables(self, tables: Sequence[str]) -> dict[str, Any]:
        missing = [name for name in tables if name not in self.dbs]
        if missing:
            self._lead()
            try:
                self.gate.enter()
                try:
                    txn = self.env.begin(write=True)
                    try:
                        opened = {
                            name: self.env.open_db(name.encode("utf-8"), txn=txn)
                            for name in missing
                        }
                    except BaseException:
                        txn.abort()
                        raise
                    txn.commit()
                    if self.keeper is not None:
                        self.keeper.checkpoint()  # not journaled: flushed by LMDB
                    with self.mu:
                        self.writes += 1  # opening tables is a write of its own
                    self._committed(True)
                finally:
                    self.gate.leave()
                self.dbs.update(opened)
            except lmdb.Error as exc:
                raise _map_error(exc, op="open tables", path=self.path, tables=missing) from exc
            finally:
                self._hand_off()
        return {name: self.dbs[name] for name in tables}

    # -- reads ----------------------------------------------------------------------------

    def read(self, fn: Callable[[Txn], T], dbs: dict[str, Any]) -> T:
        _refuse_nested(self.path)
        while True:
            self.gate.enter()
            try:
                try:
                    txn = self.env.begin(write=False)
                except lmdb.MapResizedError:
                    raise _Retry from None
                except lmdb.Error as exc:
                    raise _map_error(exc, op="read", path=self.path) from exc
                _tls.inside = True
                try:
                    return fn(_LmdbTxn(txn, dbs, self.path))
                finally:
                    _tls.inside = False
                    txn.abort()
            except _Retry:
                pass
            finally:
                self.gate.leave()
            self._adopt_map_size()

    # -- the batching writer --------------------------------------------------------------

    def write(self, fn: Callable[[Txn], T], dbs: dict[str, Any]) -> T:
        _refuse_nested(self.path)
        pending: _Pending[T] | None = None
        with self.mu:
            if self.dead:
                raise Failed("LMDB environment is closed", path=self.path)
            self.writes += 1
            if self.busy:
                pending = _Pending(fn, dbs)
                self.queue.append(pending)
                self.enqueued.notify_all()
            else:
                self.busy = True
                if self.last_batch > 1 or self.linger > 0:
                    # Writers were concurrent a moment ago (or the backend
                    # lingers): lead a batch and let them join it, instead of
                    # committing alone first.
                    pending = _Pending(fn, dbs)
                    pending.promoted = True
                    self.queue.append(pending)
                    self.enqueued.notify_all()
        if pending is None:
            # Uncontended: run on the caller's thread, no hand-off.
            try:
                return self._solo(fn, dbs)
            finally:
                self.last_batch = 1
                self._hand_off()
        if not pending.promoted:
            pending.done.wait()
        if pending.promoted:
            self._lead_batch(pending)
        error, pending.error = pending.error, None
        if error is not None:
            # Unlinked first: the error's traceback holds the writer's frames, which
            # hold ``pending``; kept, every failed write would be cyclic garbage
            # (pinning its transaction and frames until a full collection).
            try:
                raise error
            finally:
                del error, pending
        return cast(T, pending.value)

    def _lead(self) -> None:
        """Become the writer (wait for the current one to finish)."""
        with self.mu:
            if self.dead:
                raise Failed("LMDB environment is closed", path=self.path)
            while self.busy:
                self.idle.wait()
            self.busy = True

    def _hand_off(self) -> None:
        """Leave the writer role: promote the oldest waiter, or go idle."""
        with self.mu:
            if self.queue:
                head = self.queue[0]
                head.promoted = True
                head.done.set()
            else:
                self.busy = False
                self.idle.notify_all()

    def _lead_batch(self, leader: _Pending[Any]) -> None:
        """Run every queued write (the leader's included) and answer each caller.

        Callers answered by the previous batch are usually about to write
        again; wait (at most ``_GATHER_SECONDS``, woken as each one queues)
        until as many are queued as the previous batch held, so a steady
        stream of N concurrent writers shares one commit instead of
        alternating between one alone and N-1 together. A lone writer
        waits only with a ``linger`` window: at most that long, for a second
        writer.
        """
        with self.mu:
            want = self.last_batch
            if want > 1 and len(self.queue) < want:
                self.enqueued.wait_for(lambda: len(self.queue) >= want, _GATHER_SECONDS)
            elif self.linger > 0 and len(self.queue) < 2:
                self.enqueued.wait_for(lambda: len(self.queue) >= 2, self.linger)
            batch = list(self.queue)
            self.queue.clear()
            self.last_batch = len(batch)
        try:
            if len(batch) == 1:
                try:
                    leader.value = self._solo(leader.fn, leader.dbs)
                except BaseException as exc:
                    leader.error = exc
            else:
                self._batch(batch)
        except BaseException as exc:
            # Interrupted (e.g. KeyboardInterrupt) while the batch transaction
            # was open: it was aborted, so nobody's writes were committed.
            for pending in batch:
                pending.value = None
                pending.error = (
                    exc
                    if pending is leader
                    else Failed(
                        "the batch writer was interrupted; nothing was written",
                        path=self.path,
                        cause=repr(exc),
                    )
                )
        finally:
            for pending in batch:
                pending.promoted = False
                pending.done.set()
            self._hand_off()

    def _begin_write(self) -> lmdb.Transaction[bytes]:
        try:
            return self.env.begin(write=True)
        except lmdb.MapResizedError:
            raise _Retry from None
        except lmdb.Error as exc:
            raise _map_error(exc, op="begin write", path=self.path) from exc

    def _solo(self, fn: Callable[[Txn], T], dbs: dict[str, Any]) -> T:
        """Run ``fn`` alone in one write transaction.

        When the map is full the transaction is aborted; if the map can be made
        larger (another process grew it, or ``auto_grow``) ``fn`` runs again,
        else :class:`StorageFull` is raised.
        """
        while True:
            full: StoreError | None = None
            self.gate.enter()
            try:
                txn = self._begin_write()
                wrapped = _LmdbTxn(txn, dbs, self.path, [] if self.journaled else None)
                _tls.inside = True
                try:
                    value = fn(wrapped)
                except BaseException as exc:
                    txn.abort()
                    if wrapped.failure is None or isinstance(exc, StoreError):
                        error: BaseException = exc
                    else:
                        error = _map_error(wrapped.failure, op="write", path=self.path)
                    if not (self._full(wrapped.failure) and isinstance(error, StorageFull)):
                        try:
                            if error is exc:
                                raise
                            raise error from exc
                        finally:
                            del error  # its traceback holds this frame: no cycle
                    full = error
                finally:
                    _tls.inside = False
                if full is None:
                    if wrapped.failure is not None:
                        # fn swallowed an lmdb error: the transaction is unusable.
                        txn.abort()
                        full = _map_error(wrapped.failure, op="write", path=self.path)
                        if not self._full(wrapped.failure):
                            raise full
                    else:
                        try:
                            self._commit(txn, wrapped.ops)
                        except lmdb.Error as exc:
                            full = _map_error(exc, op="commit", path=self.path)
                            if not self._full(exc):
                                raise full from exc
                        else:
                            self._committed(wrapped.wrote)
                            return value
            except _Retry:
                full = None
            finally:
                self.gate.leave()
            if full is None:
                self._adopt_map_size()
            # Read the size only now, off the hot path: this thread holds the
            # writer role, so nobody else grew the map since it overflowed
            # (a reader may only have adopted a size another process set).
            elif not self._make_room(self._map_size()):
                raise full

    def _batch(self, batch: list[_Pending[Any]]) -> None:
        """Run several functions in one write transaction, one nested child each.

        A function that raises aborts only its child. If the map fills up, the
        batch is aborted and each function runs in its own transaction instead
        (:meth:`_solo`), so one that fits is never failed by one that does not.
        """
        while True:
            resized = one_by_one = False
            outcomes: list[tuple[bool, Any]] = []
            self.gate.enter()
            try:
                txn = self._begin_write()
                try:
                    wrote = False
                    for pending in batch:
                        ok, result, full = self._run_child(txn, pending)
                        if full:
                            one_by_one = True
                            break
                        outcomes.append((ok, result))
                        wrote = wrote or (ok and pending.wrote)
                except BaseException:
                    txn.abort()
                    raise
                if one_by_one:
                    txn.abort()
                else:
                    try:
                        self._commit(txn, self._batch_ops(batch, outcomes))
                    except lmdb.Error as exc:
                        if self._too_big(exc):
                            one_by_one = True
                        else:
                            error = _map_error(exc, op="commit", path=self.path)
                            outcomes = [(False, error) if ok else (ok, r) for ok, r in outcomes]
                    else:
                        self._committed(wrote)
            except _Retry:
                resized = True
            finally:
                self.gate.leave()
            if resized:
                self._adopt_map_size()
                continue
            if one_by_one:
                for pending in batch:
                    try:
                        pending.value = self._solo(pending.fn, pending.dbs)
                    except BaseException as exc:
                        pending.error = exc
                return
            for pending, (ok, result) in zip(batch, outcomes, strict=True):
                if ok:
                    pending.value = result
                else:
                    pending.error = result
            # A failed function's traceback reaches this frame (through its callee's
            # ``f_back``): holding the errors here would make each one cyclic garbage.
            outcomes.clear()
            result = None
            return

    def _batch_ops(
        self, batch: list[_Pending[Any]], outcomes: list[tuple[bool, Any]]
    ) -> list[Op] | None:
        """The writes of the batch's committed children, in order (with a journal)."""
        if not self.journaled:
            return None
        # A batch that stopped early has fewer outcomes than members: zip stops there.
        ran = zip(batch, outcomes, strict=False)
        return [op for pending, (ok, _) in ran if ok for op in pending.ops]

    def _run_child(
        self, parent: lmdb.Transaction[bytes], pending: _Pending[Any]
    ) -> tuple[bool, Any, bool]:
        """Run one function in a child transaction: (ok, value-or-error, map full)."""
        try:
            child = self.env.begin(write=True, parent=parent)
        except lmdb.Error as exc:
            error = _map_error(exc, op="begin nested", path=self.path)
            return False, error, self._too_big(exc)
        wrapped = _LmdbTxn(child, pending.dbs, self.path, [] if self.journaled else None)
        _tls.inside = True
        try:
            value = pending.fn(wrapped)
            pending.wrote = wrapped.wrote
        except (KeyboardInterrupt, SystemExit):
            # This thread is being stopped: the whole batch is abandoned.
            raise
        except BaseException as exc:
            # Anything else (including control-flow signals) belongs to its caller.
            child.abort()
            if wrapped.failure is not None and not isinstance(exc, StoreError):
                exc = _map_error(wrapped.failure, op="write", path=self.path)
            return False, exc, self._too_big(wrapped.failure)
        finally:
            _tls.inside = False
        if wrapped.failure is not None:
            child.abort()
            error = _map_error(wrapped.failure, op="write", path=self.path)
            return False, error, self._too_big(wrapped.failure)
        try:
            child.commit()
        except lmdb.Error as exc:
            return False, _map_error(exc, op="commit nested", path=self.path), self._too_big(exc)
        pending.ops = wrapped.ops or []
        return True, value, False

    # -- map size ---------------------------------------------------------------------------

    @staticmethod
    def _full(exc: BaseException | None) -> bool:
        """The map is full: a larger map would help."""
        return isinstance(exc, lmdb.MapFullError)

    @staticmethod
    def _too_big(exc: BaseException | None) -> bool:
        """The map or the transaction is full: a smaller transaction may fit."""
        return isinstance(exc, lmdb.MapFullError | lmdb.TxnFullError)

    def _map_size(self) -> int:
        return int(self.env.info()["map_size"])

    def _make_room(self, seen: int) -> bool:
        """After a full map: adopt a larger size another process set, or (with
        ``auto_grow``) double the map up to ``max_map_size``. True if the map
        is now larger than ``seen``. Runs with no transaction of this process
        in flight (LMDB remaps the file)."""
        if not self.gate.acquire_exclusive(_QUIESCE_TIMEOUT):
            raise RetryableStorage(
                "LMDB map resize timed out waiting for transactions", path=self.path
            )
        try:
            with self._unpinned():
                return self._resize(seen)
        except lmdb.Error as exc:
            raise _map_error(exc, op="resize map", path=self.path) from exc
        finally:
            self.gate.release_exclusive()

    def _unpinned(self) -> contextlib.AbstractContextManager[None]:
        """A map resize aborts every transaction of this process, the journal's pin too."""
        return contextlib.nullcontext() if self.keeper is None else self.keeper.unpinned()

    def _resize(self, seen: int) -> bool:
        """The body of :meth:`_make_room`, with the gate held exclusively."""
        # Size zero adopts the size in the newest meta page, which another
        # process may have raised (it may also be our own, smaller, size
        # from before an uncommitted growth: then it is put back below).
        self.env.set_mapsize(0)
        current = self._map_size()
        if current > seen:
            return True
        target = seen * 2
        if self.max_map_size is not None:
            target = min(target, self.max_map_size)
        if self.auto_grow and target > seen:
            self.env.set_mapsize(target)
            return True
        if current < seen:
            self.env.set_mapsize(seen)
        return False

    def _adopt_map_size(self) -> None:
        """Another process grew the map past ours: adopt its size."""
        if not self.gate.acquire_exclusive(_QUIESCE_TIMEOUT):
            raise RetryableStorage(
                "LMDB map resize timed out waiting for transactions", path=self.path
            )
        try:
            with self._unpinned():
                current = self._map_size()
                self.env.set_mapsize(0)
                if self._map_size() < current:
                    self.env.set_mapsize(current)
        except lmdb.Error as exc:
            raise _map_error(exc, op="resize map", path=self.path) from exc
        finally:
            self.gate.release_exclusive()

    # -- shutdown ---------------------------------------------------------------------------

    def drain(self) -> None:
        _refuse_nested(self.path)
        with self.mu:
            while self.busy or self.queue:
                self.idle.wait()

    def close(self) -> None:
        with self.mu:
            while self.busy or self.queue:
                self.idle.wait()
            self.dead = True
        if self.gate.acquire_exclusive(_QUIESCE_TIMEOUT):
            try:
                if self.keeper is not None:
                    self.keeper.close()  # a clean checkpoint: nothing to replay
                elif not self.sync:
                    # Flush what the unsynced commits left in the page cache.
                    self.env.sync(True)
                self.env.close()
            finally:
                self.gate.release_exclusive()
                if self.dir_lock is not None:
                    self.dir_lock.release()


_registry: dict[str, _Env] = {}
_registry_lock = threading.Lock()


_quiesced: list[_Env] = []


def _before_fork() -> None:
    """Quiesce every environment of this process so a forked child can drop its copy.

    The child must not use the parent's handle, and py-lmdb refuses a second
    handle on the same files while the first is open, so the child closes the
    inherited one. Closing aborts that handle's transactions, whose reader
    slots live in shared memory: a read transaction open (or cached) at fork
    time would be freed under the parent. So before forking, wait until no
    transaction of this process is in flight, and drop py-lmdb's cached read
    transaction (``set_mapsize`` to the current size aborts it).
    An environment that cannot be quiesced is left open in the child, where
    opening its path then fails with :class:`Failed`.
    """
    _registry_lock.acquire()
    for entry in _registry.values():
        if entry.pid != os.getpid() or entry.dead:
            continue
        if entry.gate.acquire_exclusive(_QUIESCE_TIMEOUT):
            _quiesced.append(entry)
            try:
                if entry.keeper is not None:
                    entry.keeper.drop_pin()  # set_mapsize aborts it; checkpoint first
                entry.env.set_mapsize(entry._map_size())
            except (lmdb.Error, StoreError):  # pragma: no cover - the child keeps the handle
                entry.pid = -entry.pid


def _after_fork_in_parent() -> None:
    for entry in _quiesced:
        entry.pid = abs(entry.pid)
        if entry.keeper is not None:
            entry.keeper.pin_again()
        entry.gate.release_exclusive()
    _quiesced.clear()
    _registry_lock.release()


def _after_fork_in_child() -> None:
    for entry in list(_registry.values()):
        entry.dead = True
        # The child's copies of the parent's locks may be held by threads that
        # do not exist here; give the dead entry fresh ones so calls on it
        # fail cleanly instead of hanging.
        entry.mu = threading.Lock()
        entry.idle = threading.Condition(entry.mu)
        entry.enqueued = threading.Condition(entry.mu)
        entry.gate = _Gate()
        entry.busy = False
        entry.queue.clear()
        if entry.keeper is not None:
            entry.keeper.forget()
        if entry.dir_lock is not None:
            entry.dir_lock.release()
        if entry in _quiesced and entry.pid > 0:
            with contextlib.suppress(lmdb.Error):
                entry.env.close()
    _registry.clear()
    _quiesced.clear()
    # Taken by _before_fork on the thread that forked, which is this one.
    _registry_lock.release()


os.register_at_fork(
    before=_before_fork,
    after_in_parent=_after_fork_in_parent,
    after_in_child=_after_fork_in_child,
)


# -- the backend -------------------------------------------------------------------------------


def _make_private_dirs(path: str) -> None:
    """Create ``path`` and every missing parent 0700 (``os.makedirs`` gives its
    ``mode`` to the last one only): the store holds every prompt and output."""
    if os.path.isdir(path):
        return
    parent = os.path.dirname(os.path.abspath(path))
    if parent != path and not os.path.isdir(parent):
        _make_private_dirs(parent)
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)


class LmdbBackend:
    """The :class:`~storage.Backend` on LMDB: named databases in one environment.

    ``path`` is a directory (created if missing). Every backend on one path in
    one process shares one environment (reference counted); the first opener's
    ``map_size``, ``max_readers`` and ``max_dbs`` apply, and every opener must
    ask for the same ``sync`` (:class:`Failed` otherwise). ``auto_grow`` lets a
    write that finds the map full double it (up to ``max_map_size``, if given)
    and retry transparently; without it the write fails with
    :class:`StorageFull` and nothing of it is written.

    ``linger_seconds``: the group-commit window of a lone writer. With 0 (the
    default) a write that finds the writer idle commits at once on its own
    thread; with a window it waits up to that long (woken as soon as a second
    write queues) so that writes arriving close together share one commit.
    The first opener's window applies to every backend on the path. The
    default follows bench/linger.py's figures: every microsecond of the
    window is paid by a lone writer, and concurrent writers already batch
    without it.

    ``verify_bytes``: a ``data.mdb`` up to this size is walked by py-lmdb's
    offline verifier before it is mapped (see the module docstring); larger
    ones get the cheap checks only (marker, meta pages, size). Opening raises
    :class:`~storage.StoreRefused` for a directory that cannot be mapped safely.

    Thread safety: every method may be called from any thread. ``write``
    functions may run on another caller's thread (the batching writer) and
    must not call back into a store. Failures are storage errors, never raw
    lmdb exceptions; after :meth:`close` every call raises :class:`Failed`.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        tables: Sequence[str],
        sync: bool = True,
        map_size: int = DEFAULT_MAP_SIZE,
        max_map_size: int | None = None,
        auto_grow: bool = False,
        max_readers: int = DEFAULT_MAX_READERS,
        max_dbs: int | None = None,
        verify_bytes: int = DEFAULT_VERIFY_BYTES,
        linger_seconds: float = 0.0,
        journal: bool = False,
        journal_region_bytes: int = DEFAULT_REGION_BYTES,
    ) -> None:
        if not tables:
            raise Failed("an LMDB backend needs at least one table", path=str(path))
        if max_map_size is not None and max_map_size < map_size:
            raise Failed(
                "max_map_size is smaller than map_size",
                map_size=map_size,
                max_map_size=max_map_size,
            )
        if not 0.0 <= linger_seconds <= 1.0:
            raise Failed("linger_seconds must be between 0 and 1", linger_seconds=linger_seconds)
        if journal and not sync:
            raise Failed("a journal makes commits durable: it needs sync=True", path=str(path))
        self.tables: Sequence[str] = tuple(tables)
        self.sync = sync
        try:
            _make_private_dirs(os.fspath(path))
            self.path = os.path.realpath(path)
        except OSError as exc:
            raise Failed(
                "cannot create the LMDB directory", path=str(path), cause=repr(exc)
            ) from exc
        self._closed = False
        with _registry_lock:
            entry = _registry.get(self.path)
            if entry is not None and (entry.pid != os.getpid() or entry.dead):
                del _registry[self.path]
                entry = None
            if entry is None:
                entry = self._open_env(
                    sync=sync,
                    map_size=map_size,
                    max_map_size=max_map_size,
                    auto_grow=auto_grow,
                    max_readers=max_readers,
                    max_dbs=max_dbs if max_dbs is not None else len(self.tables) + 8,
                    linger=linger_seconds,
                    verify_bytes=verify_bytes,
                    journaled=journal,
                    region_bytes=journal_region_bytes,
                )
                _registry[self.path] = entry
            elif (entry.sync, entry.journaled) != (sync, journal):
                raise Failed(
                    "this LMDB environment is already open with another sync or journal mode",
                    path=self.path,
                    open_sync=entry.sync,
                    requested_sync=sync,
                    open_journal=entry.journaled,
                    requested_journal=journal,
                )
            else:
                entry.auto_grow = entry.auto_grow or auto_grow
                if entry.max_map_size is not None:
                    entry.max_map_size = (
                        None if max_map_size is None else max(entry.max_map_size, max_map_size)
                    )
            entry.refs += 1
        self._entry = entry
        try:
            # Readers left in the lock table by processes that died.
            self.stale_readers_cleared = entry.env.reader_check()
            self._dbs = entry.open_tables(self.tables)
        except BaseException:
            self._release()
            raise

    def _open_env(
        self, *, verify_bytes: int, region_bytes: int, journaled: bool, **options: Any
    ) -> _Env:
        """Lock the directory, recover its journal's checkpoint, check the file, open
        LMDB, then replay or leave the journal (storage._journaled). ``options`` are
        :class:`_Env`'s."""
        try:
            lock, opened = prepare(self.path, journal=journaled)
        except OSError as exc:
            raise _map_error(exc, op="recover the journal", path=self.path) from exc
        entry: _Env | None = None
        try:
            # Before LMDB maps the file: a truncated or damaged one is
            # refused here instead of killing the process.
            marker = preflight(self.path, verify_bytes=verify_bytes)
            entry = _Env(self.path, journaled=journaled, **options)
            entry.attach(lock, opened, region_bytes)
        except BaseException as exc:
            if opened is not None:
                opened[0].close()
            if entry is not None:
                entry.env.close()
            lock.release()
            if isinstance(exc, lmdb.Error | OSError):
                raise _map_error(exc, op="open", path=self.path) from exc
            raise
        entry.marker = marker
        return entry

    # -- Backend ------------------------------------------------------------------------------

    def read(self, fn: Callable[[Txn], T]) -> T:
        """Run ``fn`` on a read-only snapshot. Its exceptions propagate unchanged."""
        entry = self._live()
        return entry.read(fn, self._dbs)

    def write(self, fn: Callable[[Txn], T]) -> T:
        """Run ``fn`` in a write transaction and return its value once committed.

        Durable when ``sync`` is on. If ``fn`` raises, nothing it wrote is
        committed and the exception propagates; other callers batched with it
        are unaffected. A full map is :class:`StorageFull` (after growing, with
        ``auto_grow``, until ``max_map_size``).
        """
        entry = self._live()
        return entry.write(fn, self._dbs)

    def drain(self) -> None:
        """Return once every write accepted so far on this path is committed or failed."""
        self._live().drain()

    def counters(self) -> StoreCounters:
        """The environment's counters (every backend on this path in this process
        shares them): write calls, real commits, and synced commits that changed
        something (``fsyncs``; each flushes the data pages, then the meta page)."""
        entry = self._live()
        flushes = entry.keeper.flushes if entry.keeper is not None else 0
        return StoreCounters(
            writes=entry.writes, commits=entry.commits, fsyncs=entry.fsyncs + flushes
        )

    def close(self) -> None:
        """Release this backend's share of the environment. Idempotent.

        The environment closes when the last backend on the path closes, after
        its pending writes are answered.
        """
        if self._closed:
            return
        # Closing from inside a transaction would wait for that transaction.
        _refuse_nested(self.path)
        self._closed = True
        self._release()

    # -- helpers ------------------------------------------------------------------------------

    @property
    def map_size(self) -> int:
        """The current map size in bytes."""
        return self._live()._map_size()

    @property
    def marker(self) -> StoreIdentity | None:
        """The marker's identity when this process first opened the path (``None``: none)."""
        return self._live().marker

    def flush(self) -> None:
        """Make every commit so far durable (a no-op cost with ``sync=True``)."""
        entry = self._live()
        try:
            entry.env.sync(True)
        except lmdb.Error as exc:
            raise _map_error(exc, op="sync", path=self.path) from exc

    def copy(self, destination: str | os.PathLike[str], *, compact: bool = True) -> None:
        """Write a consistent copy of the environment to the directory
        ``destination`` (created 0700; it must be empty), taken from one read
        snapshot while writers go on (LMDB's ``mdb_env_copy2``; ``compact``
        omits free pages). The copy has no marker: the store writes one when
        it is opened."""
        entry = self._live()
        target = os.fspath(destination)
        try:
            _make_private_dirs(target)
            if os.listdir(target):
                raise Failed("the backup directory is not empty", path=target)
            entry.gate.enter()
            try:
                entry.env.copy(target, compact=compact)
            finally:
                entry.gate.leave()
            for name in os.listdir(target):
                os.chmod(os.path.join(target, name), 0o600)
        except (lmdb.Error, OSError) as exc:
            raise _map_error(exc, op="copy", path=target) from exc

    def readers(self) -> str:
        """LMDB's reader table, for diagnostics."""
        return self._live().env.readers()

    def _live(self) -> _Env:
        if self._closed:
            raise Failed("LMDB backend is closed", path=self.path)
        entry = self._entry
        if entry.dead:
            raise Failed(
                "LMDB environment is closed or was opened by another process (fork)",
                path=self.path,
                opened_by_pid=entry.pid,
                pid=os.getpid(),
            )
        return entry

    def _release(self) -> None:
        entry = self._entry
        with _registry_lock:
            entry.refs -= 1
            last = entry.refs == 0
            if last and _registry.get(entry.path) is entry:
                del _registry[entry.path]
        if last and entry.pid == os.getpid() and not entry.dead:
            try:
                entry.close()
            except lmdb.Error as exc:
                raise _map_error(exc, op="close", path=entry.path) from exc

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"LmdbBackend({self.path!r}, sync={self.sync}, {state})"


# -- the store ---------------------------------------------------------------------------------


class LmdbSessionStore(KernelStore):
    """The embedded default :class:`~storage.SessionStore`: the kernel on LMDB.

    Durable by default: every operation is one write transaction that is
    fsynced before the call returns (``sync=False`` only for bulk set-up).
    Concurrent operations share commits through the batching writer, each
    still checked and applied atomically. Several processes may open the same
    directory. :meth:`drain` waits for the writer to be idle; :meth:`close`
    releases this store's share of the environment.

    ``journal=True``: each commit is made durable by one flushed block of a
    redo journal instead of LMDB's own two flushes (``docs/journal.md``); the
    directory then belongs to this one process (another is refused with
    :class:`~storage.Failed`, ``reason="busy"``). Opening a journaled
    directory without the journal replays and removes the journal first.

    Identity: the first open writes the store's identity (a uuid from ``ids``,
    the creation time from ``clock``) into the database and then into the
    marker ``store.marker`` beside ``data.mdb``. A later open whose database
    is missing, empty, truncated or holds another identity than the marker is
    :class:`~storage.StoreRefused` (``path``, ``reason``, ``fix``); nothing is
    written to it. A lost marker is written again from the database.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        clock: Clock | None = None,
        sync: bool = True,
        map_size: int = DEFAULT_MAP_SIZE,
        auto_grow: bool = False,
        max_map_size: int | None = None,
        retention_seconds: float = 86400.0,
        ids: IdSource | None = None,
        verify_bytes: int = DEFAULT_VERIFY_BYTES,
        journal: bool = False,
    ) -> None:
        backend = LmdbBackend(
            path,
            tables=KernelStore.TABLES + KernelStore.EVENT_TABLES,
            sync=sync,
            map_size=map_size,
            auto_grow=auto_grow,
            max_map_size=max_map_size,
            verify_bytes=verify_bytes,
            journal=journal,
        )
        try:
            marker = backend.marker
            try:
                super().__init__(
                    backend,
                    clock=clock,
                    retention_seconds=retention_seconds,
                    ids=ids,
                    expect_store_id=None if marker is None else marker.store_id,
                )
            except StoreRefused as exc:
                raise StoreRefused(
                    f"{exc.message} ({backend.path})",
                    **{**exc.fields, "path": backend.path},
                ) from None
            if marker is None:
                self._write_marker(backend)
        except BaseException:
            backend.close()
            raise
        self.lmdb_backend = backend

    def _write_marker(self, backend: LmdbBackend) -> None:
        """Record beside data.mdb that this store exists, once the database that
        holds its identity is durable (so the marker never names a store the
        file does not hold). Another process may have written it meanwhile."""
        backend.flush()
        try:
            found = read_marker(backend.path)
            if found is None:
                write_marker(backend.path, self.identity)
            elif found.store_id != self.identity.store_id:
                raise StoreRefused(
                    f"the database holds store {self.identity.store_id}, but the marker"
                    f" says store {found.store_id} ({backend.path})",
                    path=backend.path,
                    reason="another identity",
                    fix=FIX_MOVE_ASIDE,
                )
        except OSError as exc:
            raise _map_error(exc, op="write marker", path=backend.path) from exc

    def drain(self) -> None:
        """Return once every write submitted so far is committed (or failed)."""
        self.lmdb_backend.drain()

    def close(self) -> None:
        """Release the environment (shared, reference counted). Idempotent."""
        self.lmdb_backend.close()
