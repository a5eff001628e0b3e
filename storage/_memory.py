"""The in-memory backend and :class:`MemorySessionStore` (the kernel on it).

Nothing is durable: a process exit loses everything. Otherwise it gives the
same guarantees as the LMDB store, so the contract and property suites run
against both.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

from ._backend import StoreCounters, Txn
from ._clock import Clock, IdSource
from ._errors import Failed
from ._kernel import KernelStore

T = TypeVar("T")


class _Table:
    """One table: a dict plus its keys kept sorted for ordered scans."""

    __slots__ = ("keys", "rows")

    def __init__(self) -> None:
        self.rows: dict[bytes, bytes] = {}
        self.keys: list[bytes] = []

    def put(self, key: bytes, value: bytes) -> bytes | None:
        """Store ``value``; return the value it replaced (``None``: a new key)."""
        rows = self.rows
        old = rows.get(key)
        if old is None:
            bisect.insort(self.keys, key)
        rows[key] = value
        return old

    def delete(self, key: bytes) -> bytes | None:
        """Remove ``key``; return the value it had (``None``: it was absent)."""
        old = self.rows.pop(key, None)
        if old is not None:
            del self.keys[bisect.bisect_left(self.keys, key)]
        return old

    def restore(self, key: bytes, old: bytes | None) -> None:
        """Put back what ``put``/``delete`` returned (undo)."""
        if old is None:
            self.delete(key)
        else:
            self.put(key, old)

    def scan(self, prefix: bytes, start: bytes) -> Iterator[tuple[bytes, bytes]]:
        keys, rows = self.keys, self.rows
        i = bisect.bisect_left(keys, start)
        while i < len(keys):
            k = keys[i]
            if not k.startswith(prefix):
                return
            n = len(keys)
            yield k, rows[k]
            if len(keys) != n or i >= n or keys[i] is not k:
                # The table changed under the iterator (a write in the same
                # transaction): resume right after the last key yielded.
                i = bisect.bisect_right(keys, k)
            else:
                i += 1


class _MemoryTxn:
    """A transaction over the committed tables.

    A write transaction applies each put and delete to the tables at once and
    keeps an undo log (the value each write replaced); when ``fn`` raises, the
    backend replays the log backwards, so a failed ``fn`` leaves nothing. No
    other transaction runs meanwhile (the backend's lock), so nobody sees a
    half-applied write.
    """

    __slots__ = ("_tables", "_undo", "_writable")

    def __init__(self, tables: dict[str, _Table], *, writable: bool) -> None:
        self._tables = tables
        self._writable = writable
        self._undo: list[tuple[_Table, bytes, bytes | None]] = []

    def _table(self, table: str) -> _Table:
        try:
            return self._tables[table]
        except KeyError:
            raise Failed("no such table", table=table) from None

    def get(self, table: str, key: bytes) -> bytes | None:
        return self._table(table).rows.get(key)

    def put(self, table: str, key: bytes, value: bytes) -> None:
        if not self._writable:
            raise Failed("write in a read transaction", table=table, key=key)
        t = self._table(table)
        if type(value) is not bytes:
            value = bytes(value)  # never keep a caller's mutable buffer
        self._undo.append((t, key, t.put(key, value)))

    def delete(self, table: str, key: bytes) -> bool:
        t = self._table(table)
        if not self._writable:
            raise Failed("write in a read transaction", table=table, key=key)
        old = t.delete(key)
        if old is None:
            return False
        self._undo.append((t, key, old))
        return True

    def scan(
        self, table: str, prefix: bytes = b"", start: bytes | None = None
    ) -> Iterator[tuple[bytes, bytes]]:
        base = self._table(table)
        lo = prefix if start is None or start < prefix else start
        return base.scan(prefix, lo)

    def rollback(self) -> None:
        undo = self._undo
        while undo:
            table, key, old = undo.pop()
            table.restore(key, old)


class MemoryBackend:
    """Atomic (not durable) transactions over in-memory tables.

    One lock serializes every transaction, reads included, so each sees a
    consistent snapshot. ``drain()`` is a no-op: every write is applied before
    ``write`` returns. ``fn`` must not call back into the store (the lock is
    not reentrant).
    """

    def __init__(self, tables: Sequence[str]) -> None:
        self.tables: Sequence[str] = tuple(tables)
        self._data = {name: _Table() for name in self.tables}
        self._lock = threading.Lock()
        self._closed = False
        self._writes = 0
        self._commits = 0

    def _open(self) -> None:
        if self._closed:
            raise Failed("memory backend is closed")

    def read(self, fn: Callable[[Txn], T]) -> T:
        with self._lock:
            self._open()
            return fn(_MemoryTxn(self._data, writable=False))

    def write(self, fn: Callable[[Txn], T]) -> T:
        with self._lock:
            self._open()
            self._writes += 1
            txn = _MemoryTxn(self._data, writable=True)
            try:
                value = fn(txn)
            except BaseException:
                txn.rollback()
                raise
            self._commits += 1
            return value

    def counters(self) -> StoreCounters:
        """Write calls and the ones that returned (committed); never an fsync."""
        with self._lock:
            return StoreCounters(writes=self._writes, commits=self._commits, fsyncs=0)

    def drain(self) -> None:
        """A no-op: every write already completed synchronously."""

    def close(self) -> None:
        with self._lock:
            self._closed = True


class MemorySessionStore(KernelStore):
    """The SessionStore contract in memory. Not durable; thread-safe.

    ``drain()`` returns at once: no operation outlives its call. ``ids`` gives
    the store's identity (default :class:`~storage.RandomIds`).
    """

    def __init__(
        self,
        *,
        clock: Clock | None = None,
        retention_seconds: float = 86400.0,
        ids: IdSource | None = None,
    ) -> None:
        super().__init__(
            MemoryBackend(self.TABLES + self.EVENT_TABLES),
            clock=clock,
            retention_seconds=retention_seconds,
            ids=ids,
        )
