"""The host's durable event log and host metadata, beside the SessionStore.

The SessionStore contract has no event log, so the host keeps one itself:
per session, events numbered from 1, appended atomically with their number.
:class:`LmdbEventLog` keeps them in host-owned tables (``host_events``,
``host_meta``) of the same LMDB environment as the store (opened after it,
through :class:`storage.LmdbBackend`); :class:`MemoryEventLog` is the
in-process twin for tests and ``--memory`` hosts. ``host_meta`` also holds the
fencing generation counter: each host start takes the next one, so a
restarted host always fences out its predecessor.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Protocol

import msgspec

from storage import LmdbBackend, Txn

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


class LmdbEventLog:
    """Events in host-owned tables of the store's LMDB environment.

    Open it *after* the :class:`storage.LmdbSessionStore` on the same
    directory (the store sizes the environment's table count).
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._backend = LmdbBackend(path, tables=(_EVENTS, _META))

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
