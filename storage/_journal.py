"""A redo journal: one flush per commit, for an LMDB store that one process owns.

Why: a durable LMDB commit flushes twice (its data pages, then its meta page)
and every page the transaction dirtied goes to the disk before it returns; a
kernel operation dirties 5 to 15 pages. Appending the operation's writes to
a pre-written file and flushing that one block costs one device flush, about
half an LMDB commit here (``bench/journal.py``). The LMDB environment then
commits without syncing (its pages reach the page cache, which a process
crash does not lose), and the journal is what an OS crash or a power cut
cannot undo.

This module is the file and its rules; :mod:`storage._journaled` runs it
under an LMDB environment (``LmdbBackend(journal=True)``, ``docs/journal.md``).
What it guarantees:

- :meth:`Journal.append` returns only after the entry is on the disk
  (``os.fdatasync``). The file has its full size from creation on, written
  with zeros, so an append changes no file metadata and the flush is one
  block's.
- Every entry starts on a :data:`BLOCK` boundary and no append rewrites a
  block an earlier entry lies in, so a write torn by a power cut can only
  damage the entry being written, whose append never returned.
- :func:`recover` returns every entry whose append returned since the last
  checkpoint, in order, minus those voided (:meth:`Journal.void`). A torn or
  unwritten tail ends the journal. A damaged entry *followed* by a whole one
  of the same generation is not a tail: entries that were acknowledged would
  be lost, so the journal is refused (:class:`~storage.StoreRefused`).
- :meth:`Journal.checkpoint` starts a new generation: it writes the new header
  into the slot the current one does not use and flushes it, then appends
  from the start of the entry region again. A power cut during it leaves the
  old header (and the old generation's entries) or the new one whole; entries
  of an older generation are never read as current ones.
- After an I/O error the journal refuses every later append
  (:class:`~storage.Failed`): what reached the disk is unknown, and only a
  reopen (which reads back what is there) may decide.

Nothing here reads a clock or a random source.
"""

from __future__ import annotations

import errno
import os
import struct
import zlib
from collections.abc import Sequence

import msgspec

from ._errors import Failed, StorageFull, StoreError, StoreRefused
from ._identity import require_regular, write_durably

JOURNAL_NAME = "journal.log"
"""The journal's file, beside ``data.mdb``."""

JOURNAL_FORMAT = 1
"""``format`` of every header this code writes; any other is refused."""

BLOCK = 4096
"""Entries start on this boundary: a torn write damages no earlier entry."""

SLOT_BYTES = 64 * 1024
"""Each of the two header slots (a header holds the checkpoint's LMDB meta pages)."""

ENTRIES_AT = 2 * SLOT_BYTES
"""Where the entry region starts."""

DEFAULT_REGION_BYTES = 4 << 20
"""The entry region's size: room for 1,024 one-block entries between checkpoints
(an owner checkpoints every few hundred commits; a larger region costs every open
a longer read)."""

FIX_JOURNAL = (
    "restore the directory from a backup (subagents db backup); the journal holds"
    " commits the database may not"
)

_HEAD = struct.Struct("<4sII")  # magic, length, crc32 of the body
_ENTRY = struct.Struct("<4sIIQQ")  # magic, length, crc32, generation, seq
_HEADER_MAGIC = b"SJH1"
_ENTRY_MAGIC = b"SJE1"
_ZERO_BLOCK = bytes(BLOCK)

Op = tuple[str, bytes, bytes | None]
"""One write of a transaction: (table, key, value); ``None`` deletes the key."""


class JournalHeader(msgspec.Struct, frozen=True, kw_only=True):
    """What a checkpoint leaves: where the database stood when it was last flushed.

    ``generation`` counts checkpoints; ``metas`` is the database's meta pages
    as they were on the disk right after the checkpoint's flush (restoring
    them rolls the database back to that commit); ``txnid`` is that commit's
    LMDB transaction id; ``region_bytes`` is the entry region's size, set at
    creation (a file of another size is damaged); ``clean`` says the owner
    closed the store after the checkpoint, so no entry follows it."""

    format: int = JOURNAL_FORMAT
    generation: int
    txnid: int
    metas: bytes
    region_bytes: int
    clean: bool = False


class JournalEntry(msgspec.Struct, frozen=True, kw_only=True, array_like=True):
    """One committed transaction's writes, in the order they were made; or, with
    ``void`` set, the word that the entry with that sequence number never
    committed (its database commit failed after it was appended)."""

    ops: tuple[tuple[str, bytes, bytes | None], ...] = ()
    void: int | None = None


class Recovered(msgspec.Struct, frozen=True, kw_only=True):
    """What :func:`recover` read: the current header, and the entries since it
    (``(seq, entry)``, voided ones and the void marks left out). ``next_seq``
    and ``offset`` are where the next append goes."""

    header: JournalHeader
    entries: tuple[tuple[int, JournalEntry], ...]
    next_seq: int
    offset: int


_encode = msgspec.msgpack.Encoder(order="deterministic").encode
_decode_header = msgspec.msgpack.Decoder(JournalHeader).decode
_decode_entry = msgspec.msgpack.Decoder(JournalEntry).decode


def _padded(size: int) -> int:
    return -(-size // BLOCK) * BLOCK


def _entry_crc(generation: int, seq: int, body: bytes) -> int:
    return zlib.crc32(body, zlib.crc32(struct.pack("<QQ", generation, seq)))


def _frame_entry(generation: int, seq: int, entry: JournalEntry) -> bytes:
    body = _encode(entry)
    head = _ENTRY.pack(_ENTRY_MAGIC, len(body), _entry_crc(generation, seq, body), generation, seq)
    framed = head + body
    return framed + bytes(_padded(len(framed)) - len(framed))


def _frame_header(header: JournalHeader) -> bytes:
    body = _encode(header)
    framed = _HEAD.pack(_HEADER_MAGIC, len(body), zlib.crc32(body)) + body
    if len(framed) > SLOT_BYTES:
        raise Failed(
            "journal header does not fit its slot", size=len(framed), slot_bytes=SLOT_BYTES
        )
    return framed


def _refuse(path: str, reason: str, **fields: object) -> StoreRefused:
    return StoreRefused(
        f"journal {path}: {reason}", path=path, reason=reason, fix=FIX_JOURNAL, **fields
    )


def _os_error(exc: OSError, op: str, path: str) -> StoreError:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return StorageFull(f"journal {op}: no room on the disk", path=path, cause=str(exc))
    return Failed(f"journal {op} failed", path=path, cause=f"{type(exc).__name__}: {exc}")


class Journal:
    """An open journal file. One writer at a time: the caller serialises
    :meth:`append`, :meth:`void` and :meth:`checkpoint` (the LMDB store's
    writer role does). Create or open one with :func:`open_journal`."""

    def __init__(self, path: str, fd: int, recovered: Recovered) -> None:
        self.path = path
        self._fd = fd
        self.generation = recovered.header.generation
        self._next_seq = recovered.next_seq
        self._offset = recovered.offset
        self._end = ENTRIES_AT + recovered.header.region_bytes
        self._broken: str | None = None

    @property
    def region_bytes(self) -> int:
        """The entry region's size: an entry larger than this never fits."""
        return self._end - ENTRIES_AT

    def room(self) -> int:
        """Bytes left in the entry region before a checkpoint is needed."""
        return self._end - self._offset

    def append(self, ops: Sequence[Op]) -> int:
        """Write one transaction's writes and flush them; return its sequence number.

        Raises :class:`~storage.StorageFull` when the region has no room for it
        (nothing written: checkpoint, then append again; an entry larger than
        the whole region never fits, so its writes need another way to the
        disk) and
        :class:`~storage.Failed` after an I/O error (then and on every later
        call: whether the entry reached the disk is unknown)."""
        return self._write(JournalEntry(ops=tuple(ops)))

    def void(self, seq: int) -> None:
        """Record that the entry ``seq`` of this generation never committed, and flush it."""
        self._write(JournalEntry(void=seq))

    def _write(self, entry: JournalEntry) -> int:
        if self._broken is not None:
            raise Failed(
                "journal refuses appends after an I/O error; reopen the store",
                path=self.path,
                cause=self._broken,
            )
        framed = _frame_entry(self.generation, self._next_seq, entry)
        if self._offset + len(framed) > self._end:
            raise StorageFull(
                "journal region is full; checkpoint first", path=self.path, size=len(framed)
            )
        try:
            os.pwrite(self._fd, framed, self._offset)
            os.fdatasync(self._fd)
        except OSError as exc:
            self._broken = f"{type(exc).__name__}: {exc}"
            raise _os_error(exc, "append", self.path) from exc
        seq = self._next_seq
        self._next_seq += 1
        self._offset += len(framed)
        return seq

    def checkpoint(self, *, txnid: int, metas: bytes, clean: bool = False) -> None:
        """Start a new generation whose base is the database as flushed at ``txnid``.

        The caller flushes the database first and passes its meta pages as they
        are on the disk now; every entry appended so far is then covered by
        the database and none is replayed again. Raises like :meth:`append`."""
        header = JournalHeader(
            generation=self.generation + 1,
            txnid=txnid,
            metas=metas,
            region_bytes=self.region_bytes,
            clean=clean,
        )
        framed = _frame_header(header)
        slot = header.generation % 2
        try:
            os.pwrite(self._fd, framed + bytes(SLOT_BYTES - len(framed)), slot * SLOT_BYTES)
            os.fdatasync(self._fd)
        except OSError as exc:
            self._broken = f"{type(exc).__name__}: {exc}"
            raise _os_error(exc, "checkpoint", self.path) from exc
        self.generation = header.generation
        self._next_seq = 1
        self._offset = ENTRIES_AT

    def close(self) -> None:
        """Close the file. Idempotent; later appends fail with :class:`~storage.Failed`."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
            self._broken = self._broken or "closed"


def open_journal(
    directory: str,
    *,
    txnid: int,
    metas: bytes,
    region_bytes: int = DEFAULT_REGION_BYTES,
) -> tuple[Journal, Recovered]:
    """Open ``directory``'s journal, creating it when there is none.

    A new journal's header holds ``txnid`` and ``metas`` (the database as it is
    now, flushed by the caller). An existing journal is read back
    (:func:`recover`) and its header and entries are returned beside it: the
    caller restores the database to the header's commit and replays the
    entries before it appends. ``region_bytes`` sizes a new journal; an
    existing one keeps the size its header records. Raises
    :class:`~storage.StoreRefused` for a damaged journal (a file of another
    size than its header says included), and storage errors for I/O failures."""
    if region_bytes <= 0 or region_bytes % BLOCK:
        raise ValueError(f"region_bytes must be a positive multiple of {BLOCK}, not {region_bytes}")
    path = os.path.join(directory, JOURNAL_NAME)
    if not require_regular(path, "journal"):
        first = JournalHeader(generation=1, txnid=txnid, metas=metas, region_bytes=region_bytes)
        _create(path, first, region_bytes)
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError as exc:
        raise _os_error(exc, "open", path) from exc
    try:
        recovered = recover(path, fd)
        size = os.fstat(fd).st_size
    except BaseException:
        os.close(fd)
        raise
    expected = ENTRIES_AT + recovered.header.region_bytes
    if size != expected:
        os.close(fd)
        raise _refuse(path, f"the file is {size} bytes, its header says {expected}", size=size)
    return Journal(path, fd, recovered), recovered


def _create(path: str, header: JournalHeader, region_bytes: int) -> None:
    """Write the whole file (slot 0 empty, the header in slot 1 where generation 1
    lives, then the region as zeros) whole or not at all: a journal file that
    exists is always whole."""
    framed = _frame_header(header)
    whole = bytes(SLOT_BYTES) + framed + bytes(SLOT_BYTES - len(framed) + region_bytes)
    try:
        write_durably(path, whole)
    except OSError as exc:
        raise _os_error(exc, "create", path) from exc


def _read_header(path: str, fd: int) -> JournalHeader:
    found: list[JournalHeader] = []
    for slot in (0, 1):
        raw = os.pread(fd, SLOT_BYTES, slot * SLOT_BYTES)
        if len(raw) < _HEAD.size:
            continue
        magic, length, crc = _HEAD.unpack_from(raw)
        body = raw[_HEAD.size : _HEAD.size + length]
        if magic != _HEADER_MAGIC or len(body) != length or zlib.crc32(body) != crc:
            continue
        try:
            header = _decode_header(body)
        except msgspec.DecodeError:
            continue
        if header.format != JOURNAL_FORMAT:
            raise _refuse(path, f"its format is {header.format}, not {JOURNAL_FORMAT}")
        if header.generation % 2 == slot:
            found.append(header)
    if not found:
        raise _refuse(path, "neither header slot holds a whole header")
    return max(found, key=lambda header: header.generation)


def _entry_at(raw: bytes, at: int, generation: int) -> tuple[int, JournalEntry, int] | None:
    """The whole entry of ``generation`` starting at ``at`` in ``raw``: (seq, entry, size)."""
    if at + _ENTRY.size > len(raw):
        return None
    magic, length, crc, gen, seq = _ENTRY.unpack_from(raw, at)
    if magic != _ENTRY_MAGIC or gen != generation:
        return None
    body = raw[at + _ENTRY.size : at + _ENTRY.size + length]
    if len(body) != length or _entry_crc(gen, seq, body) != crc:
        return None
    try:
        entry = _decode_entry(body)
    except msgspec.DecodeError:
        return None
    return seq, entry, _padded(_ENTRY.size + length)


def recover(path: str, fd: int) -> Recovered:
    """Read the journal open on ``fd`` back (see the module docstring for the rules)."""
    try:
        header = _read_header(path, fd)
        size = os.fstat(fd).st_size
        raw = os.pread(fd, max(0, size - ENTRIES_AT), ENTRIES_AT)
    except OSError as exc:
        raise _os_error(exc, "read", path) from exc
    entries: list[tuple[int, JournalEntry]] = []
    at, seq = 0, 1
    while (found := _entry_at(raw, at, header.generation)) is not None and found[0] == seq:
        entries.append((seq, found[1]))
        at += found[2]
        seq += 1
    _refuse_lost_entries(path, raw, at, header.generation, seq)
    voided = {entry.void for _, entry in entries if entry.void is not None}
    kept = tuple((n, e) for n, e in entries if e.void is None and n not in voided)
    return Recovered(header=header, entries=kept, next_seq=seq, offset=ENTRIES_AT + at)


def _refuse_lost_entries(path: str, raw: bytes, tail: int, generation: int, seq: int) -> None:
    """A whole entry of this generation past the tail means the tail is damage."""
    for at in range(tail + BLOCK, len(raw), BLOCK):
        if raw[at : at + 4] != _ENTRY_MAGIC:
            continue
        found = _entry_at(raw, at, generation)
        if found is not None and found[0] >= seq:
            raise _refuse(
                path,
                f"the entry at offset {ENTRIES_AT + tail} is damaged but entry {found[0]}"
                f" at offset {ENTRIES_AT + at} is whole: committed entries would be lost",
                offset=ENTRIES_AT + tail,
            )
