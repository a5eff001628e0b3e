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
from typing import Any, Generic, TypeVar

import msgspec

from ._errors import CorruptRecord
from ._records import (
    SCHEMA_VERSION,
    Artifact,
    AttemptRecord,
    ContinuationReceipt,
    RunAdmissionReceipt,
    RunRecord,
    SessionRecord,
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

    __slots__ = ("_decode", "_encode", "_versioned", "name")

    def __init__(self, kind: type[T], *, versioned: bool = True) -> None:
        self.name = kind.__name__
        self._encode = msgspec.msgpack.Encoder(order="deterministic").encode
        self._decode = msgspec.msgpack.Decoder(kind).decode
        self._versioned = versioned

    def encode(self, value: T) -> bytes:
        return self._encode(value)

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
        if self._versioned:
            version = _schema_version(value)
            if version is not None and (version > SCHEMA_VERSION or version < 1):
                raise CorruptRecord(
                    f"{self.name} in table {table!r} has unknown schema_version {version}",
                    table=table,
                    key=key,
                    schema_version=version,
                )
        return value


def _schema_version(value: Any) -> int | None:
    # Receipts have no version of their own: the records inside them do.
    if isinstance(value, ContinuationReceipt):
        return max(value.record.schema_version, value.run.schema_version)
    if isinstance(value, RunAdmissionReceipt):
        return int(value.run.schema_version)
    version = getattr(value, "schema_version", None)
    return version if isinstance(version, int) else None


SESSION = Codec(SessionRecord)
RUN = Codec(RunRecord)
ATTEMPT = Codec(AttemptRecord)
ARTIFACT = Codec(Artifact)
ADMISSION_RECEIPT = Codec(RunAdmissionReceipt)
CONTINUATION_RECEIPT = Codec(ContinuationReceipt)
RUN_HEAD = Codec(RunHead, versioned=False)


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


def seq_key(session_id: str, sequence_no: int) -> bytes:
    """``session\\0`` + 8-byte big-endian sequence: runs of a session in order."""
    return session_id.encode("utf-8") + SEP + _SEQ.pack(sequence_no)
