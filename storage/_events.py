"""The store's outbox: run and attempt events committed with the change they describe.

Per session, events are numbered densely from 1. They live in two tables of the
store's own backend (the same LMDB environment or PostgreSQL database):

============= ================================ ==========================================
table         key                              value
============= ================================ ==========================================
host_events   session_id, NUL, 8-byte seq      the event as JSON (:class:`StoreEvent`)
host_meta     ``seq\\0`` session_id             the session's last seq (8 bytes)
host_meta     ``generation``                   the hosts' fencing counter (8 bytes)
host_meta     ``layout``                       :data:`EVENT_LAYOUT` (8 bytes)
============= ================================ ==========================================

These are the tables (keys and JSON) the RPC host's event log wrote before the
store kept events, so a data directory or database written by an earlier
version keeps replaying, and the host's own events (``session.created``, ...)
share the one sequence of each session.

Checksums: every value is sealed (:mod:`storage._sealed`). The event tables
have their *own* layout marker, ``host_meta[layout]`` (sealed): the kernel's
migration seals only the kernel's tables, and :func:`open_event_layout` seals
the event tables once, when the marker is missing, in the same write
transaction that stamps it. Whoever opens the log first (the kernel, or an
older host's event log) decides inside that transaction, so no value is ever
sealed twice.

:class:`EventOutbox` is the view of the kernel's backend that appends the
events of a write (each session's counter read once and put once per run of
the write's function) and hands them to the listeners once ``write``
returned (the commit happened). A write whose function ran more than once (a
serialization retry, a batch run again) reports only the events of its last
run.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import msgspec

from ._backend import Backend, Txn
from ._errors import CorruptRecord
from ._sealed import seal, unseal

T = TypeVar("T")

log = logging.getLogger("subagents.storage")

EVENTS_TABLE = "host_events"
META_TABLE = "host_meta"
EVENT_TABLES: tuple[str, ...] = (EVENTS_TABLE, META_TABLE)
"""The outbox's tables, beside :attr:`~storage.KernelStore.TABLES`."""
GENERATION_KEY = b"generation"
LAYOUT_KEY = b"layout"
EVENT_LAYOUT = 1
"""The event tables' layout, kept sealed in ``host_meta``: 1, every value sealed."""


class StoreEvent(msgspec.Struct, frozen=True, kw_only=True):
    """One durable event of a session: ``seq`` dense from 1, ``at`` the store's clock."""

    seq: int
    session_id: str
    kind: str
    at: float
    run_id: str | None = None
    data: dict[str, Any] = msgspec.field(default_factory=dict)


EventListener = Callable[[list[StoreEvent]], None]

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(StoreEvent)


def session_prefix(session_id: str) -> bytes:
    return session_id.encode("utf-8") + b"\0"


def event_key(session_id: str, seq: int) -> bytes:
    return session_prefix(session_id) + seq.to_bytes(8, "big")


def seq_key(session_id: str) -> bytes:
    return b"seq\0" + session_id.encode("utf-8")


def counter(key: bytes, data: bytes) -> int:
    """An 8-byte counter of ``host_meta`` or :class:`CorruptRecord`."""
    if len(data) != 8:
        raise CorruptRecord(
            f"a counter in table {META_TABLE!r} is not 8 bytes",
            table=META_TABLE,
            key=key,
            reason=f"{len(data)} bytes",
        )
    return int.from_bytes(data, "big")


def decode_event(key: bytes, data: bytes) -> StoreEvent:
    """The event stored under ``key`` (unsealed bytes), or :class:`CorruptRecord`."""
    try:
        return _decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError, TypeError) as exc:
        raise CorruptRecord(
            f"undecodable event in table {EVENTS_TABLE!r}",
            table=EVENTS_TABLE,
            key=key,
            reason=str(exc),
        ) from None


# -- inside a (sealed) transaction ------------------------------------------------------------


def last_seq(txn: Txn, session_id: str) -> int:
    key = seq_key(session_id)
    raw = txn.get(META_TABLE, key)
    return counter(key, raw) if raw else 0


def append(
    txn: Txn, session_id: str, kind: str, run_id: str | None, data: dict[str, Any], *, at: float
) -> StoreEvent:
    """Append the session's next event (one counter read, two puts)."""
    seq = last_seq(txn, session_id) + 1
    event = StoreEvent(seq=seq, session_id=session_id, kind=kind, at=at, run_id=run_id, data=data)
    put_event(txn, event)
    txn.put(META_TABLE, seq_key(session_id), seq.to_bytes(8, "big"))
    return event


def put_event(txn: Txn, event: StoreEvent) -> None:
    """Put ``event`` under its session and seq (the session's counter is the caller's)."""
    txn.put(EVENTS_TABLE, event_key(event.session_id, event.seq), _encoder.encode(event))


def replay(txn: Txn, session_id: str, after_seq: int, limit: int) -> list[StoreEvent]:
    out: list[StoreEvent] = []
    if limit <= 0:
        return out
    start = event_key(session_id, max(after_seq, 0) + 1)
    for key, value in txn.scan(EVENTS_TABLE, prefix=session_prefix(session_id), start=start):
        out.append(decode_event(key, value))
        if len(out) >= limit:
            break
    return out


def next_generation(txn: Txn) -> int:
    raw = txn.get(META_TABLE, GENERATION_KEY)
    value = (counter(GENERATION_KEY, raw) if raw else 0) + 1
    txn.put(META_TABLE, GENERATION_KEY, value.to_bytes(8, "big"))
    return value


# -- layout -----------------------------------------------------------------------------------


def event_layout_of(txn: Txn) -> int | None:
    """The sealed marker's version in a raw transaction (``None``: no marker, unsealed)."""
    raw = txn.get(META_TABLE, LAYOUT_KEY)
    if raw is None:
        return None
    return counter(LAYOUT_KEY, unseal(META_TABLE, LAYOUT_KEY, raw))


def _seal_event_tables(txn: Txn) -> None:
    if event_layout_of(txn) is not None:  # another process sealed them meanwhile
        return
    for table in EVENT_TABLES:
        for key, value in list(txn.scan(table)):
            txn.put(table, key, seal(table, key, value))
    txn.put(META_TABLE, LAYOUT_KEY, seal(META_TABLE, LAYOUT_KEY, EVENT_LAYOUT.to_bytes(8, "big")))


def open_event_layout(raw: Backend) -> None:
    """Seal unsealed event tables (every value, one write transaction that also
    stamps the marker) and refuse a newer layout (:class:`CorruptRecord`). ``raw``
    is the backend under the seals. An open of sealed tables writes nothing."""
    version = raw.read(event_layout_of)
    if version is None:
        raw.write(_seal_event_tables)
        version = raw.read(event_layout_of)
    if version != EVENT_LAYOUT:
        raise CorruptRecord(
            f"the event log has layout {version}, newer than this code ({EVENT_LAYOUT})",
            table=META_TABLE,
            key=LAYOUT_KEY,
            reason="unknown layout",
        )


# -- the outbox -------------------------------------------------------------------------------


class _Run:
    """One run of a write's function: the events it appended and, per session, the
    last seq it gave (the counter in ``host_meta`` is put once, as the run ends)."""

    __slots__ = ("events", "seqs", "txn")

    def __init__(self, txn: Txn) -> None:
        self.txn = txn
        self.events: list[StoreEvent] = []
        self.seqs: dict[str, int] = {}

    def settle(self) -> None:
        """Put each session's last seq (in the run's own transaction)."""
        for session_id, seq in self.seqs.items():
            self.txn.put(META_TABLE, seq_key(session_id), seq.to_bytes(8, "big"))


class EventOutbox:
    """A view of the kernel's backend that appends events and reports those each
    write committed.

    ``write(fn)`` runs ``fn`` through ``inner``; :meth:`append` (called by the
    kernel inside ``fn``, with ``fn``'s transaction) appends the session's next
    event. Within one run of ``fn`` a session's counter is read once and put once,
    when ``fn`` returns, in the same transaction (a run that raises puts nothing,
    and its transaction, or its part of a batch, is rolled back). Once
    ``inner.write`` returned, the events of the run that committed go to every
    listener, on the calling thread, in seq order; a listener that raises is
    logged and skipped. A write that raised reports nothing (nothing committed,
    or, for a lost response, the events are in the log though never pushed).
    """

    def __init__(self, inner: Backend) -> None:
        self.inner = inner
        self.tables: Sequence[str] = inner.tables
        self._local = threading.local()
        self._lock = threading.Lock()
        self._listeners: tuple[EventListener, ...] = ()

    def read(self, fn: Callable[[Txn], T]) -> T:
        return self.inner.read(fn)

    def write(self, fn: Callable[[Txn], T]) -> T:
        last: list[_Run] = []

        def run(txn: Txn) -> T:
            this = _Run(txn)  # a function run again reports its last run only
            last[:] = [this]
            outer = getattr(self._local, "run", None)
            self._local.run = this
            try:
                result = fn(txn)
                this.settle()
                return result
            finally:
                self._local.run = outer

        result = self.inner.write(run)
        if last and last[0].events and self._listeners:
            self._notify(list(last[0].events))
        return result

    def append(
        self,
        txn: Txn,
        session_id: str,
        kind: str,
        run_id: str | None,
        data: dict[str, Any],
        *,
        at: float,
    ) -> StoreEvent:
        """Append the session's next event in ``txn`` (see the class docstring); in a
        transaction this outbox did not open, the counter is read and put at once."""
        this: _Run | None = getattr(self._local, "run", None)
        if this is None or this.txn is not txn:
            return append(txn, session_id, kind, run_id, data, at=at)
        seq = this.seqs.get(session_id)
        seq = (last_seq(txn, session_id) if seq is None else seq) + 1
        event = StoreEvent(
            seq=seq, session_id=session_id, kind=kind, at=at, run_id=run_id, data=data
        )
        put_event(txn, event)
        this.seqs[session_id] = seq
        this.events.append(event)
        return event

    def add_listener(self, listener: EventListener) -> Callable[[], None]:
        with self._lock:
            self._listeners = (*self._listeners, listener)

        def remove() -> None:
            with self._lock:
                self._listeners = tuple(x for x in self._listeners if x is not listener)

        return remove

    def _notify(self, events: list[StoreEvent]) -> None:
        for listener in self._listeners:
            try:
                listener(events)
            except Exception:
                log.exception("a store event listener failed")

    def drain(self) -> None:
        self.inner.drain()

    def close(self) -> None:
        self.inner.close()
