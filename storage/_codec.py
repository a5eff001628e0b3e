"""msgpack encoding of every stored record, and the byte keys of the kernel's tables.

Guarantees:
- Encoding is deterministic (``order="deterministic"``): the same record always
  gives the same bytes, so stored bytes can be compared and hashed.
- Decoding never lets a msgspec error escape: bytes that do not decode, have
  the wrong types, or carry a ``schema_version`` newer than this code knows
  raise :class:`~storage.CorruptRecord` with ``table`` and ``key`` fields. The
  store fails closed instead of guessing.
- One encoder and one decoder per record type, built once at import (msgspec
  encoders and decoders are safe to share between threads).

Keys are UTF-8 ids joined by NUL (ids never contain NUL: the kernel refuses
such ids), so a prefix ``namespace\\0`` selects one namespace and ascending
key order is id order. Times inside keys use :func:`time_key`, an 8-byte
big-endian encoding whose byte order is numeric order.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import msgspec

from ._errors import CorruptRecord, InvalidRecord
from ._records import (
    SCHEMA_VERSION,
    AcquireContinuation,
    Artifact,
    AttemptRecord,
    ContinuationReceipt,
    DeliveryClaim,
    RunAdmissionReceipt,
    RunRecord,
    SessionRecord,
    TerminalCommit,
)

T = TypeVar("T")

SEP = b"\x00"


class RunHead(msgspec.Struct, frozen=True, kw_only=True, array_like=True):
    """The latest run of a session and the last allocated ``sequence_no``."""

    sequence_no: int
    run_id: str


class Codec(Generic[T]):
    """Encode and decode one record type, mapping every decode failure to
    :class:`CorruptRecord` (``table``, ``key``, ``reason``)."""

    __slots__ = ("_decode", "_encode", "_version", "name")

    def __init__(self, kind: type[T], *, versioned: bool = True) -> None:
        self.name = kind.__name__
        self._encode = msgspec.msgpack.Encoder(order="deterministic").encode
        self._decode = msgspec.msgpack.Decoder(kind).decode
        self._version = _VERSION_OF.get(kind) if versioned else None

    def encode(self, value: T) -> bytes:
        return self._encode(value)

    def normalize(self, value: object, *, what: str) -> T:
        """``value`` re-read through its schema (enums, int-to-float), or
        :class:`InvalidRecord` when a caller submits ill-typed data."""
        try:
            return self._decode(self._encode(value))
        except (msgspec.DecodeError, msgspec.ValidationError, ValueError, TypeError) as exc:
            raise InvalidRecord(f"ill-typed {what}", record=what, reason=str(exc)) from None

    def decode(self, data: bytes, *, table: str, key: bytes) -> T:
        try:
            value = self._decode(data)
        except (msgspec.DecodeError, msgspec.ValidationError, ValueError, TypeError) as exc:
            raise CorruptRecord(
                f"undecodable {self.name} in table {table!r}",
                table=table,
                key=key,
                reason=str(exc),
            ) from None
        if self._version is not None:
            version = self._version(value)
            if version > SCHEMA_VERSION or version < 1:
                raise CorruptRecord(
                    f"{self.name} in table {table!r} has unknown schema_version {version}",
                    table=table,
                    key=key,
                    schema_version=version,
                )
        return value


def _own_version(value: Any) -> int:
    return int(value.schema_version)


def _continuation_version(value: Any) -> int:
    # Receipts have no version of their own: the records inside them do.
    return max(int(value.record.schema_version), int(value.run.schema_version))


def _admission_version(value: Any) -> int:
    return int(value.run.schema_version)


_VERSION_OF: dict[type, Callable[[Any], int]] = {
    SessionRecord: _own_version,
    RunRecord: _own_version,
    AttemptRecord: _own_version,
    Artifact: _own_version,
    ContinuationReceipt: _continuation_version,
    RunAdmissionReceipt: _admission_version,
}


SESSION = Codec(SessionRecord)
RUN = Codec(RunRecord)
ATTEMPT = Codec(AttemptRecord)
ARTIFACT = Codec(Artifact)
ADMISSION_RECEIPT = Codec(RunAdmissionReceipt)
CONTINUATION_RECEIPT = Codec(ContinuationReceipt)
RUN_HEAD = Codec(RunHead, versioned=False)
TERMINAL_COMMIT = Codec(TerminalCommit, versioned=False)
DELIVERY_CLAIM = Codec(DeliveryClaim, versioned=False)
ACQUIRE = Codec(AcquireContinuation, versioned=False)


def key(*parts: str) -> bytes:
    """The table key of ``parts``: UTF-8, NUL-separated."""
    return "\x00".join(parts).encode("utf-8")


def prefix(*parts: str) -> bytes:
    """The scan prefix selecting every key that starts with ``parts``."""
    return key(*parts) + SEP


_SIGN = 1 << 63
_MASK = (1 << 64) - 1
_Q = struct.Struct(">Q")
_D = struct.Struct(">d")


def time_key(t: float) -> bytes:
    """8 bytes whose unsigned big-endian order is the numeric order of ``t``."""
    (bits,) = _Q.unpack(_D.pack(t))
    bits = (~bits & _MASK) if bits & _SIGN else (bits | _SIGN)
    return _Q.pack(bits)


def time_from_key(data: bytes) -> float:
    """Inverse of :func:`time_key`."""
    (bits,) = _Q.unpack(data)
    bits = (bits & ~_SIGN) if bits & _SIGN else (~bits & _MASK)
    (value,) = _D.unpack(_Q.pack(bits))
    return float(value)


_SEQ = struct.Struct(">Q")

# Kinds of index entry. The ``index`` table holds every attempt index (a
# short tree of small entries beside the deep tree of attempt records), the
# ``runs`` table the run records and the run indexes: on LMDB every page a
# commit dirties (each tree's copied path included) is written before the
# fsync, so an operation should dirty as few pages as it can.
# Index kinds start with NUL, which no id may contain: records keep the plain id
# as their key and every index entry sorts before every record.
INDEX = b"\x00"
LIVE = INDEX + b"G"
"""``G ns\\0session\\0agent_id -> attempt_id``: the one non-terminal attempt of
an agent. Namespace-wide (not under ``T``), so the namespace's live attempts
are one contiguous range whose size follows the active attempts only; a
session's own entries are the sub-range ``G ns\\0session\\0``."""
CLAIM = INDEX + b"C"
"""``C ns\\0session\\0attempt_id -> time_key(deadline)``: a claimed result.
Namespace-wide like :data:`LIVE`, so reconcile reads the claims alone."""
TRACK = INDEX + b"T"
"""``T ns\\0session\\0`` + kind + id: one session's terminal results, adjacent
so the moves of one result dirty few pages. Kinds:

- ``R`` + time_key(retention deadline) + attempt_id -> :data:`UNDELIVERED` or
  :data:`DELIVERED`: a terminal result whose retention has not expired, in
  deadline order, flagged while it is not yet delivered. A terminal commit
  moves the :data:`LIVE` entry to ``R``; acknowledging only flips the flag;
- ``P`` + attempt_id -> ``b""``: a terminal result not yet delivered that has
  no ``R`` entry (its retention expired, or it has no deadline)."""
UNDELIVERED = b"P"
"""Value of an ``R`` entry whose result is not yet delivered (undelivered or claimed)."""
DELIVERED = b""
"""Value of an ``R`` entry whose result was delivered (kept until its deadline)."""
LINK = INDEX + b"L"
"""``L session\0run_id\0attempt_id -> b""``: a result claimed for consumer run
``run_id`` (a claim with ``continuation_run_id``), so the run's terminal commit
finds the claims it settles without reading any other result."""
AGENT = INDEX + b"A"
"""``A ns\0session\0agent_id\0attempt_id -> subagent_name``: a terminal attempt
that has no ``R`` entry (its retention expired, or it has no deadline). With
the :data:`LIVE` and ``T`` entries it makes every attempt of a session
reachable from the session's own ranges: ``G`` while active, ``R`` while its
result is retained, ``A`` after (``P`` entries always have an ``A`` twin). Written
by retention expiry, off the hot path; never removed (attempt records are kept)."""
QUOTA = INDEX + b"Q"
"""``Q ns\\0 time_key(expires_at) \\0 artifact_ref -> size``: retained artifacts."""
SEQ = INDEX + b"S"
"""``S session\\0 sequence_no(8 bytes) -> run_id``: runs of a session in order."""
HEAD = INDEX + b"H"
"""``H session -> RunHead``: the latest run of a session."""


def ikey(kind: bytes, *parts: str) -> bytes:
    """The key of one entry of ``kind``."""
    return kind + key(*parts)


def iprefix(kind: bytes, *parts: str) -> bytes:
    """The scan prefix of every entry of ``kind`` under ``parts``."""
    return kind + prefix(*parts)


def attempt_key(attempt_id: str) -> bytes:
    """The key of an attempt record (table ``attempts``)."""
    return attempt_id.encode("utf-8")


def run_key(session_id: str, run_id: str) -> bytes:
    """The key of a run record (table ``runs``)."""
    return key(session_id, run_id)


RECORDS_START = b"\x01"
"""Scan start that skips every index entry of a table (they start with NUL)."""


def track_prefix(namespace_id: str, session_id: str | None = None) -> bytes:
    """Prefix of a namespace's (or one session's) tracked entries."""
    if session_id is None:
        return TRACK + prefix(namespace_id)
    return TRACK + prefix(namespace_id, session_id)


def agent_key(namespace_id: str, session_id: str, agent_id: str) -> bytes:
    """The :data:`LIVE` entry of an agent."""
    return ikey(LIVE, namespace_id, session_id, agent_id)


def claim_key(namespace_id: str, session_id: str, attempt_id: str) -> bytes:
    """The :data:`CLAIM` entry of a claimed result."""
    return ikey(CLAIM, namespace_id, session_id, attempt_id)


def link_key(session_id: str, run_id: str, attempt_id: str) -> bytes:
    """The :data:`LINK` entry of a result claimed for consumer run ``run_id``."""
    return ikey(LINK, session_id, run_id, attempt_id)


def link_prefix(session_id: str, run_id: str) -> bytes:
    """Prefix of the :data:`LINK` entries of one consumer run."""
    return iprefix(LINK, session_id, run_id)


def live_prefix(namespace_id: str, session_id: str | None = None) -> bytes:
    """Prefix of a namespace's (or one session's) :data:`LIVE` entries."""
    if session_id is None:
        return iprefix(LIVE, namespace_id)
    return iprefix(LIVE, namespace_id, session_id)


def agent_attempt_key(namespace_id: str, session_id: str, agent_id: str, attempt_id: str) -> bytes:
    """The :data:`AGENT` entry of a terminal attempt without an ``R`` entry."""
    return ikey(AGENT, namespace_id, session_id, agent_id, attempt_id)


def agent_prefix(namespace_id: str, *within: str) -> bytes:
    """Prefix of a namespace's :data:`AGENT` entries, or of those under ``within``
    (a session id, then an agent id)."""
    return iprefix(AGENT, namespace_id, *within)


def claim_prefix(namespace_id: str) -> bytes:
    """Prefix of a namespace's :data:`CLAIM` entries."""
    return iprefix(CLAIM, namespace_id)


def pending_key(namespace_id: str, session_id: str, attempt_id: str) -> bytes:
    return track_prefix(namespace_id, session_id) + b"P" + attempt_id.encode("utf-8")


def retain_key(namespace_id: str, session_id: str, deadline: float, attempt_id: str) -> bytes:
    """The ``R`` entry of a retained result: fixed-width deadline, then the attempt id."""
    return (
        track_prefix(namespace_id, session_id)
        + b"R"
        + time_key(deadline)
        + attempt_id.encode("utf-8")
    )


def timed_key(kind: bytes, namespace_id: str, t: float, tail: str) -> bytes:
    """``kind ns\\0 time_key(t) \\0 tail``: entries of a namespace ordered by time."""
    return kind + prefix(namespace_id) + time_key(t) + SEP + tail.encode("utf-8")


def seq_key(session_id: str, sequence_no: int) -> bytes:
    """The key of a session's run number ``sequence_no`` (numeric order)."""
    return SEQ + session_id.encode("utf-8") + SEP + _SEQ.pack(sequence_no)
