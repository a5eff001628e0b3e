"""The host's durable event log and host metadata, beside the SessionStore.

The SessionStore contract has no event log, so the host keeps one itself:
per session, events numbered from 1, appended atomically with their number.
:class:`BackendEventLog` keeps them in two host-owned tables (``host_events``,
``host_meta``) of a :class:`storage.Backend`:

- :class:`LmdbEventLog`: the same LMDB environment as the store (opened after
  it, through :class:`storage.LmdbBackend`);
- :class:`PostgresEventLog`: the same PostgreSQL database as the store (the
  ``subagents_host_events`` / ``subagents_host_meta`` tables of migration 2),
  so every host sharing the database reads and appends one log per session and
  draws its fencing generation from one counter;
- :class:`MemoryEventLog`: the in-process twin for tests and ``--memory`` hosts.

``host_meta`` also holds the fencing generation counter: each host start takes
the next one in a write transaction of its own, so a restarted host (same
instance id or not) always outranks every earlier process, and a stale process
still running with an older generation is refused by the store's fence.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Protocol

import msgspec

from storage import Backend, LmdbBackend, PostgresBackend, Txn

from ._methods import HostEvent

_EVENTS = "host_events"
_META = "host_meta"
_GENERATION = b"generation"

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(HostEvent)


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


def _prefix(session_id: str) -> bytes:
    return session_id.encode("utf-8") + b"\0"


def _key(session_id: str, seq: int) -> bytes:
    return _prefix(session_id) + seq.to_bytes(8, "big")


def _seq_key(session_id: str) -> bytes:
    return b"seq\0" + session_id.encode("utf-8")


class BackendEventLog:
    """Events in the host-owned tables ``host_events`` / ``host_meta`` of ``backend``.

    Every method is one backend transaction, safe from any thread; storage
    failures surface as :class:`storage.StoreError`. Closing closes the backend.
    """

    def __init__(self, backend: Backend) -> None:
        self._backend = backend

    def append(
        self, session_id: str, kind: str, at: float, run_id: str | None, data: dict[str, Any]
    ) -> HostEvent:
        def fn(txn: Txn) -> HostEvent:
            raw = txn.get(_META, _seq_key(session_id))
            seq = (int.from_bytes(raw, "big") if raw else 0) + 1
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
            for _k, value in txn.scan(_EVENTS, prefix=_prefix(session_id), start=start):
                out.append(_decoder.decode(value))
                if len(out) >= limit:
                    break
            return out

        return self._backend.read(fn)

    def last_seq(self, session_id: str) -> int:
        def fn(txn: Txn) -> int:
            raw = txn.get(_META, _seq_key(session_id))
            return int.from_bytes(raw, "big") if raw else 0

        return self._backend.read(fn)

    def next_generation(self) -> int:
        def fn(txn: Txn) -> int:
            raw = txn.get(_META, _GENERATION)
            value = (int.from_bytes(raw, "big") if raw else 0) + 1
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
        super().__init__(LmdbBackend(path, tables=(_EVENTS, _META)))


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
                tables=(_EVENTS, _META),
                schema=schema,
                pool_size=pool_size,
                connect_timeout=connect_timeout,
                migrate=False,
            )
        )
