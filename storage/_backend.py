"""The byte-level backend a :class:`~storage.KernelStore` runs its contract logic on.

A backend offers atomic transactions over a fixed set of named tables of
``bytes -> bytes``, ordered by key. The contract logic (validation, lifecycle
checks, fencing, encoding) lives once in :mod:`storage._kernel`; a backend only
has to make each ``write`` atomic and durable. The memory and LMDB stores are
the same logic on two backends.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Protocol, TypeVar

import msgspec

T = TypeVar("T")


class StoreCounters(msgspec.Struct, frozen=True, kw_only=True):
    """What a store's backend did since it was opened (see ``docs/durability.md``).

    ``writes``: write transactions the kernel asked for (one per store
    operation that may write). ``commits``: transactions the backend really
    committed (the LMDB batching writer may hold several writes in one).
    ``fsyncs``: durable flushes, one per commit that changed something on a
    durable backend (LMDB with ``sync=True``: its data pages, then its meta
    page; PostgreSQL: the WAL flush of a writing ``COMMIT``); a refused or
    unchanged operation commits nothing durable. ``counted``: whether the
    backend counts at all (a backend without counters reports zeros and
    ``False``). Monotonic; read them before and after, and subtract.
    """

    writes: int = 0
    commits: int = 0
    fsyncs: int = 0
    counted: bool = True

    def __sub__(self, other: StoreCounters) -> StoreCounters:
        return StoreCounters(
            writes=self.writes - other.writes,
            commits=self.commits - other.commits,
            fsyncs=self.fsyncs - other.fsyncs,
            counted=self.counted and other.counted,
        )


class Txn(Protocol):
    """One transaction: a consistent snapshot, writable inside ``Backend.write``.

    Keys and values are ``bytes``. ``scan`` yields ``(key, value)`` pairs in
    ascending key order starting at ``start`` (inclusive) while the key starts
    with ``prefix``; it must tolerate writes made earlier in the same
    transaction (they are visible) but callers do not write while iterating.
    """

    def get(self, table: str, key: bytes) -> bytes | None: ...

    def put(self, table: str, key: bytes, value: bytes) -> None: ...

    def delete(self, table: str, key: bytes) -> bool: ...

    def scan(
        self, table: str, prefix: bytes = b"", start: bytes | None = None
    ) -> Iterator[tuple[bytes, bytes]]: ...


class Backend(Protocol):
    """Atomic, durable transactions over named tables.

    Guarantees:
    - ``write(fn)`` runs ``fn`` in one write transaction. If ``fn`` returns,
      every put/delete it made is committed (durably, when the backend is
      durable) before ``write`` returns its value. If ``fn`` raises, nothing it
      did is visible and the exception propagates unchanged.
    - ``read(fn)`` runs ``fn`` on a consistent read-only snapshot.
    - Both are safe to call from any thread. ``fn`` may be called on another
      thread than the caller's (a batching writer) and must not block on other
      store calls.
    - Backend failures are mapped to ``storage`` errors: ``StorageFull`` when
      there is no room (map or disk full, ENOSPC; nothing written),
      ``RetryableStorage`` for transient failures (an I/O error that left
      nothing written included), ``Failed`` otherwise.
    - Values are stored exactly as given: the kernel seals them (a checksum,
      :mod:`storage._sealed`) before they reach a backend.
    """

    tables: Sequence[str]

    def read(self, fn: Callable[[Txn], T]) -> T: ...

    def write(self, fn: Callable[[Txn], T]) -> T: ...

    def drain(self) -> None:
        """Return once every write accepted so far is committed or failed."""
        ...

    def close(self) -> None:
        """Release resources. Later calls fail with ``Failed``. Idempotent."""
        ...
