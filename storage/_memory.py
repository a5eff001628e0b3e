"""The in-memory backend and :class:`MemorySessionStore` (the kernel on it).

Nothing is durable: a process exit loses everything. Otherwise it gives the
same guarantees as the LMDB store, so the contract and property suites run
against both.
"""

from __future__ import annotations

import bisect
import heapq
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

from ._backend import Txn
from ._clock import Clock
from ._errors import Failed
from ._kernel import KernelStore

T = TypeVar("T")

_DELETED = None


class _Table:
    """One table: a dict plus its keys kept sorted for ordered scans."""

    __slots__ = ("keys", "rows")

    def __init__(self) -> None:
        self.rows: dict[bytes, bytes] = {}
        self.keys: list[bytes] = []

    def put(self, key: bytes, value: bytes) -> None:
        if key not in self.rows:
            bisect.insort(self.keys, key)
        self.rows[key] = value

    def delete(self, key: bytes) -> None:
        if self.rows.pop(key, None) is not None:
            del self.keys[bisect.bisect_left(self.keys, key)]

    def scan(self, prefix: bytes, start: bytes) -> Iterator[tuple[bytes, bytes]]:
        keys = self.keys
        i = bisect.bisect_left(keys, start)
        while i < len(keys):
            k = keys[i]
            if not k.startswith(prefix):
                return
            yield k, self.rows[k]
            i += 1


class _MemoryTxn:
    """A transaction over the committed tables.

    A write transaction records its puts and deletes in an overlay (``None``
    marks a delete) and applies them only when ``fn`` returns, so a raising
    ``fn`` leaves nothing. Reads see the overlay first.
    """

    __slots__ = ("_overlay", "_tables", "_writable")

    def __init__(self, tables: dict[str, _Table], *, writable: bool) -> None:
        self._tables = tables
        self._writable = writable
        self._overlay: dict[str, dict[bytes, bytes | None]] = {}

    def _table(self, table: str) -> _Table:
        try:
            return self._tables[table]
        except KeyError:
            raise Failed("no such table", table=table) from None

    def get(self, table: str, key: bytes) -> bytes | None:
        base = self._table(table)
        overlay = self._overlay.get(table)
        if overlay is not None and key in overlay:
            return overlay[key]
        return base.rows.get(key)

    def put(self, table: str, key: bytes, value: bytes) -> None:
        if not self._writable:
            raise Failed("write in a read transaction", table=table, key=key)
        self._table(table)
        self._overlay.setdefault(table, {})[key] = bytes(value)

    def delete(self, table: str, key: bytes) -> bool:
        existed = self.get(table, key) is not None
        if not self._writable:
            raise Failed("write in a read transaction", table=table, key=key)
        self._overlay.setdefault(table, {})[key] = _DELETED
        return existed

    def scan(
        self, table: str, prefix: bytes = b"", start: bytes | None = None
    ) -> Iterator[tuple[bytes, bytes]]:
        base = self._table(table)
        lo = prefix if start is None or start < prefix else start
        overlay = self._overlay.get(table)
        if not overlay:
            yield from base.scan(prefix, lo)
            return
        # Snapshot the overlay's matching keys so the merge is stable.
        mine = sorted((k, v) for k, v in overlay.items() if k >= lo and k.startswith(prefix))
        merged = heapq.merge(
            ((k, 1, v) for k, v in base.scan(prefix, lo) if k not in overlay),
            ((k, 0, v) for k, v in mine),
        )
        for k, _, v in merged:
            if v is not None:
                yield k, v

    def commit(self) -> None:
        for name, changes in self._overlay.items():
            table = self._tables[name]
            for k, v in changes.items():
                if v is None:
                    table.delete(k)
                else:
                    table.put(k, v)


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
            txn = _MemoryTxn(self._data, writable=True)
            result = fn(txn)
            txn.commit()
            return result

    def drain(self) -> None:
        """A no-op: every write already completed synchronously."""

    def close(self) -> None:
        with self._lock:
            self._closed = True


class MemorySessionStore(KernelStore):
    """The SessionStore contract in memory. Not durable; thread-safe.

    ``drain()`` returns at once: no operation outlives its call.
    """

    def __init__(self, *, clock: Clock | None = None, retention_seconds: float = 86400.0) -> None:
        super().__init__(
            MemoryBackend(self.TABLES), clock=clock, retention_seconds=retention_seconds
        )
