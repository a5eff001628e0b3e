"""The host's view of the durable event log, and the fencing generation counter.

Since issue 15 the store keeps the log (:meth:`storage.SessionStore.append_event`,
its outbox): every run and attempt event is committed in the transaction of the
change it describes, and the host's own events (``session.created``,
``run.steered``, ...) are appended to the same per-session sequence.
:class:`StoreEventLog` is the host's :class:`EventLog`: a thin view over a
:class:`storage.KernelStore`. The layout (tables ``host_events`` / ``host_meta``,
keys, JSON, seals, the ``layout`` marker) is :mod:`storage._events`, the one
this module wrote before, so a data directory or database of an earlier version
keeps replaying.

The older standalone logs remain for tools and tests that open the tables
without a store (``subagents db check``, a second reader): :class:`BackendEventLog`
over a :class:`storage.Backend` holding the two tables:

- :class:`LmdbEventLog`: the same LMDB environment as the store (opened after
  it, through :class:`storage.LmdbBackend`);
- :class:`PostgresEventLog`: the same PostgreSQL database as the store (the
  ``subagents_host_events`` / ``subagents_host_meta`` tables of migration 2),
  so every host sharing the database reads and appends one log per session and
  draws its fencing generation from one counter;
- :class:`MemoryEventLog`: an in-process log of its own (a host given one uses
  its store's log instead; see :class:`~subagents._host._service.HostService`).

``host_meta`` also holds the fencing generation counter: each host start takes
the next one in a write transaction of its own, so a restarted host (same
instance id or not) always outranks every earlier process, and a stale process
still running with an older generation is refused by the store's fence.

Checksums: every value of both tables is *sealed* like the store's values
(:mod:`storage._sealed`: a CRC-32 over the table, the key and the bytes). The
marker ``host_meta[layout]`` (itself sealed) says the log is sealed; opening a
log without it seals every existing value first, in one write transaction (so
a data directory or database written before checksums keeps its history). A
value whose seal fails, or that does not decode, is :class:`storage.CorruptRecord`
naming the table and the key; every other session's events keep being served.
:func:`check_event_log` (run by ``subagents db check``) lists each damaged value,
and with ``repair`` moves it aside into ``host_meta`` under ``quarantine\0``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
from collections.abc import Callable
from typing import Any, Protocol

import msgspec

from storage import (
    Backend,
    CorruptRecord,
    KernelStore,
    LmdbBackend,
    PostgresBackend,
    StoreError,
    Txn,
)
from storage import _events as store_events
from storage._sealed import intact, raw_backend, seal, sealed, unseal
from storage.admin import Finding

from ._methods import HostEvent

_EVENTS = store_events.EVENTS_TABLE
_META = store_events.META_TABLE
TABLES = store_events.EVENT_TABLES
"""The event log's tables (in the store's LMDB environment or PostgreSQL schema)."""
_GENERATION = store_events.GENERATION_KEY
_LAYOUT = store_events.LAYOUT_KEY
EVENT_LOG_LAYOUT = store_events.EVENT_LAYOUT
"""The event log's layout, kept sealed in ``host_meta``: 1, every value sealed."""
QUARANTINE_PREFIX = b"quarantine\0"
"""``host_meta`` keys of values a repair moved aside (``quarantine\0 table \0 key``)."""

log = logging.getLogger("subagents.host")

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(HostEvent)


def decode_event(key: bytes, data: bytes) -> HostEvent:
    """The event stored under ``key`` (unsealed bytes), or :class:`CorruptRecord`."""
    try:
        return _decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError, TypeError) as exc:
        raise CorruptRecord(
            f"undecodable event in table {_EVENTS!r}", table=_EVENTS, key=key, reason=str(exc)
        ) from None


_counter = store_events.counter


class EventLog(Protocol):
    """Append and replay a session's events; allocate fencing generations."""

    def append(
        self, session_id: str, kind: str, at: float, run_id: str | None, data: dict[str, Any]
    ) -> HostEvent: ...

    def replay(self, session_id: str, after_seq: int = 0, limit: int = 1000) -> list[HostEvent]: ...

    def last_seq(self, session_id: str) -> int: ...

    def next_generation(self) -> int: ...

    def close(self) -> None: ...


class MemoryEventLog:
    """An in-process event log (lost with the process)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: dict[str, list[HostEvent]] = {}
        self._generation = 0

    def append(
        self, session_id: str, kind: str, at: float, run_id: str | None, data: dict[str, Any]
    ) -> HostEvent:
        with self._lock:
            events = self._events.setdefault(session_id, [])
            event = HostEvent(
                seq=len(events) + 1,
                session_id=session_id,
                kind=kind,
                at=at,
                run_id=run_id,
                data=data,
            )
            events.append(event)
            return event

    def replay(self, session_id: str, after_seq: int = 0, limit: int = 1000) -> list[HostEvent]:
        with self._lock:
            events = self._events.get(session_id, [])
            start = max(after_seq, 0)
            return list(events[start : start + max(limit, 0)])

    def last_seq(self, session_id: str) -> int:
        with self._lock:
            return len(self._events.get(session_id, []))

    def next_generation(self) -> int:
        with self._lock:
            self._generation += 1
            return self._generation

    def close(self) -> None:
        pass


def host_event(event: store_events.StoreEvent) -> HostEvent:
    """The wire shape of a store event (the same fields)."""
    return HostEvent(
        seq=event.seq,
        session_id=event.session_id,
        kind=event.kind,
        at=event.at,
        run_id=event.run_id,
        data=event.data,
    )


class StoreEventLog:
    """The store's own event log (its outbox), as the host's :class:`EventLog`.

    ``append`` is :meth:`storage.SessionStore.append_event` (``at`` is the store's
    clock: the argument is ignored); ``replay`` / ``last_seq`` read the committed
    log; ``next_generation`` takes the next value of the fencing counter kept in
    ``host_meta`` (:meth:`storage.KernelStore.next_fencing_generation`). Every
    method is one store transaction, safe from any thread; storage failures
    surface as :class:`storage.StoreError`. ``close`` does nothing: the store
    is closed by its owner.
    """

    def __init__(self, store: KernelStore) -> None:
        self.store = store

    @property
    def raw_backend(self) -> Backend:
        """The store's backend under the seals (the event tables included)."""
        return self.store.raw_backend

    def append(
        self, session_id: str, kind: str, at: float, run_id: str | None, data: dict[str, Any]
    ) -> HostEvent:
        return host_event(self.store.append_event(session_id, kind, run_id, data))

    def replay(self, session_id: str, after_seq: int = 0, limit: int = 1000) -> list[HostEvent]:
        return [host_event(e) for e in self.store.replay_events(session_id, after_seq, limit)]

    def last_seq(self, session_id: str) -> int:
        return self.store.last_event_seq(session_id)

    def next_generation(self) -> int:
        return self.store.next_fencing_generation()

    def close(self) -> None:
        pass


# The store's key layout: the old host-owned log and the store's outbox share it.
_prefix = store_events.session_prefix
_key = store_events.event_key
_seq_key = store_events.seq_key


class BackendEventLog:
    """Events in the host-owned tables ``host_events`` / ``host_meta`` of ``backend``.

    Every method is one backend transaction, safe from any thread; storage
    failures surface as :class:`storage.StoreError`. Closing closes the backend.
    Values are sealed (see the module docstring): opening an unsealed log seals
    it; a damaged marker is :class:`storage.CorruptRecord`.
    """

    def __init__(self, backend: Backend) -> None:
        self.raw_backend: Backend = raw_backend(backend)
        self._backend: Backend = sealed(backend)
        try:
            open_layout(self.raw_backend)
        except BaseException:
            self.raw_backend.close()
            raise

    def append(
        self, session_id: str, kind: str, at: float, run_id: str | None, data: dict[str, Any]
    ) -> HostEvent:
        def fn(txn: Txn) -> HostEvent:
            key = _seq_key(session_id)
            raw = txn.get(_META, key)
            seq = (_counter(key, raw) if raw else 0) + 1
            event = HostEvent(
                seq=seq, session_id=session_id, kind=kind, at=at, run_id=run_id, data=data
            )
            txn.put(_EVENTS, _key(session_id, seq), _encoder.encode(event))
            txn.put(_META, _seq_key(session_id), seq.to_bytes(8, "big"))
            return event

        return self._backend.write(fn)

    def replay(self, session_id: str, after_seq: int = 0, limit: int = 1000) -> list[HostEvent]:
        def fn(txn: Txn) -> list[HostEvent]:
            out: list[HostEvent] = []
            if limit <= 0:
                return out
            start = _key(session_id, max(after_seq, 0) + 1)
            for key, value in txn.scan(_EVENTS, prefix=_prefix(session_id), start=start):
                out.append(decode_event(key, value))
                if len(out) >= limit:
                    break
            return out

        return self._backend.read(fn)

    def last_seq(self, session_id: str) -> int:
        def fn(txn: Txn) -> int:
            key = _seq_key(session_id)
            raw = txn.get(_META, key)
            return _counter(key, raw) if raw else 0

        return self._backend.read(fn)

    def next_generation(self) -> int:
        def fn(txn: Txn) -> int:
            raw = txn.get(_META, _GENERATION)
            value = (_counter(_GENERATION, raw) if raw else 0) + 1
            txn.put(_META, _GENERATION, value.to_bytes(8, "big"))
            return value

        return self._backend.write(fn)

    def close(self) -> None:
        self._backend.close()


class LmdbEventLog(BackendEventLog):
    """Events in host-owned tables of the store's LMDB environment.

    Open it *after* the :class:`storage.LmdbSessionStore` on the same
    directory (the store sizes the environment's table count).
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__(LmdbBackend(path, tables=TABLES))


class PostgresEventLog(BackendEventLog):
    """Events in the host tables of the store's PostgreSQL database.

    ``dsn`` and ``schema`` name the same database and schema as the
    :class:`storage.PostgresSessionStore`; open the store first (it applies the
    migrations that create these tables). Its own small connection pool
    (``pool_size``) keeps event appends from queueing behind store operations.
    Appends by several hosts to one session serialize in the database
    (SERIALIZABLE, retried), so sequence numbers stay dense and unique.
    """

    def __init__(
        self,
        dsn: str,
        *,
        schema: str = "public",
        pool_size: int = 2,
        connect_timeout: float = 10.0,
    ) -> None:
        super().__init__(
            PostgresBackend(
                dsn,
                tables=TABLES,
                schema=schema,
                pool_size=pool_size,
                connect_timeout=connect_timeout,
                migrate=False,
            )
        )


# -- layout and check ---------------------------------------------------------------------------


def open_layout(raw: Backend) -> None:
    """Seal an unsealed log (every value, one write transaction) and stamp its
    marker; refuse a newer layout. Reads first: an open of a sealed log writes nothing.
    The store runs the same function when it opens (:mod:`storage._events`), so
    whichever opens a log first seals it, once."""
    store_events.open_event_layout(raw)


def _value_problem(table: str, key: bytes, raw: bytes) -> tuple[str, str] | None:
    if not intact(table, key, raw):
        return "checksum", "the stored bytes do not match their CRC-32"
    data = unseal(table, key, raw)
    try:
        if table == _EVENTS:
            decode_event(key, data)
        elif not key.startswith(QUARANTINE_PREFIX):
            _counter(key, data)
    except CorruptRecord as exc:
        return "undecodable", str(exc.fields.get("reason", exc.message))
    return None


def check_event_log(
    raw: Backend, *, repair: bool = False, now_us: Callable[[], int] | None = None
) -> tuple[int, list[Finding]]:
    """Every value of the event log's tables in ``raw`` (the backend as stored,
    seals included) checked: ``(values, findings)``.

    With ``repair`` (then ``now_us``, the wall clock in microseconds, is needed),
    each damaged value except the layout marker is moved to ``host_meta`` under
    ``quarantine\0 table \0 key`` with its stored bytes, and a damaged counter is
    rebuilt: a session's from its highest stored event, the fencing generation as
    ``now_us()`` (above every counter value, so no generation is handed out twice).
    The findings returned are those of a check run again afterwards.
    """

    def walk(txn: Txn) -> tuple[int, list[Finding]]:
        count, findings = 0, []
        for table in TABLES:
            for key, value in txn.scan(table):
                if table == _META and key.startswith(QUARANTINE_PREFIX):
                    continue
                count += 1
                problem = _value_problem(table, key, value)
                if problem is not None:
                    findings.append(
                        Finding(table=table, key=key, problem=problem[0], detail=problem[1])
                    )
        return count, findings

    count, findings = raw.read(walk)
    if not repair or not findings:
        return count, findings
    if now_us is None:
        raise ValueError("repairing the event log needs now_us")
    clock = now_us
    raw.write(lambda txn: _move_aside(txn, [(f.table, f.key) for f in findings], clock))
    return raw.read(walk)


def _move_aside(txn: Txn, damaged: list[tuple[str, bytes]], now_us: Callable[[], int]) -> None:
    for table, key in damaged:
        value = txn.get(table, key)
        if value is None or (table, key) == (_META, _LAYOUT):
            continue
        if _value_problem(table, key, value) is None:  # rewritten since the walk
            continue
        aside = QUARANTINE_PREFIX + table.encode("utf-8") + b"\0" + key
        txn.put(_META, aside, seal(_META, aside, value))
        txn.delete(table, key)
        if table == _META and key == _GENERATION:
            counter = now_us()
        elif table == _META and key.startswith(b"seq\0"):
            prefix = key[len(b"seq\0") :] + b"\0"
            counter = max(
                (int.from_bytes(k[-8:], "big") for k, _ in txn.scan(_EVENTS, prefix=prefix)),
                default=0,
            )
        else:
            continue
        txn.put(_META, key, seal(_META, key, counter.to_bytes(8, "big")))


# -- live subscriptions -------------------------------------------------------------------------


class _Subscriber:
    __slots__ = ("delivered", "push", "session_id")

    def __init__(self, session_id: str, push: Callable[[HostEvent], None], delivered: int) -> None:
        self.session_id = session_id
        self.push = push
        self.delivered = delivered


class EventFanout:
    """The host's live subscriptions, fed from the committed log.

    :meth:`on_store_events` is the store's event listener: it runs on whichever
    thread committed (the loop, an actor thread, a delivery thread) and hands
    the events to the event loop the subscriptions were made on
    (``call_soon_threadsafe``; on the loop thread itself it publishes at once).
    :meth:`publish` then runs on the loop, so every push function is called on
    the loop thread, one at a time. Each subscription receives its session's
    events in seq order without a gap or a repeat: an event at or below the
    last one it received is skipped, and one that skips ahead (committed by
    another thread whose hand-over is still queued, or by another process) is
    preceded by the missing events read from ``log``. A push that raises is
    logged and skipped. Without a loop (nothing subscribed yet) nothing is
    published.
    """

    def __init__(self, log: EventLog) -> None:
        self._log = log
        self._subs: dict[str, _Subscriber] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None

    def __len__(self) -> int:
        return len(self._subs)

    def add(
        self, sub_id: str, session_id: str, push: Callable[[HostEvent], None], after: int
    ) -> None:
        """Subscribe ``push`` to the session's events after seq ``after`` (on the loop)."""
        with contextlib.suppress(RuntimeError):
            self._loop = asyncio.get_running_loop()
            self._loop_thread = threading.get_ident()
        self._subs[sub_id] = _Subscriber(session_id, push, after)

    def remove(self, sub_id: str) -> bool:
        return self._subs.pop(sub_id, None) is not None

    def clear(self) -> None:
        self._subs.clear()

    def on_store_events(self, events: list[store_events.StoreEvent]) -> None:
        """The store's listener (any thread, after the commit)."""
        loop = self._loop
        if not self._subs or loop is None:
            return
        converted = [host_event(e) for e in events]
        if threading.get_ident() == self._loop_thread:
            self.publish(converted)
            return
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody listens
            loop.call_soon_threadsafe(self.publish, converted)

    def publish(self, events: list[HostEvent]) -> None:
        """Push committed events to their session's subscriptions (loop thread)."""
        for event in events:
            for sub_id, sub in list(self._subs.items()):
                if sub.session_id == event.session_id and event.seq > sub.delivered:
                    self._catch_up(sub_id, sub, event.seq)
                    self._push(sub_id, sub, event)

    def _catch_up(self, sub_id: str, sub: _Subscriber, seq: int) -> None:
        while sub.delivered + 1 < seq and sub_id in self._subs:
            try:
                missed = self._log.replay(sub.session_id, sub.delivered, seq - sub.delivered - 1)
            except StoreError as exc:
                log.warning("events of %s not replayed to a subscriber: %s", sub.session_id, exc)
                return
            if not missed:
                return
            for event in missed:
                self._push(sub_id, sub, event)

    def _push(self, sub_id: str, sub: _Subscriber, event: HostEvent) -> None:
        if sub_id not in self._subs or event.seq <= sub.delivered:
            return
        sub.delivered = event.seq
        try:
            sub.push(event)
        except Exception:
            log.exception("event subscriber failed")
