"""Checks of an LMDB directory made with plain file I/O, before LMDB maps the file.

LMDB maps ``data.mdb`` and trusts it: a file shorter than its meta pages say
raises SIGBUS on the first read past its end, and a damaged page can trip an
assertion (SIGABRT). Neither can be caught, so the store looks at the file
before handing it to LMDB (:func:`preflight`):

- the marker (:mod:`storage._identity`), ``data.mdb`` and ``lock.mdb`` must be
  regular files when present;
- a marker without a database, or a zero-length database, is refused;
- both meta pages must parse (magic, version, page size, flags) and the
  committed one (the higher txnid, as LMDB picks it) must point inside the
  file: its roots and last page below the file's page count;
- the two meta pages must be the last two commits (:func:`_check_commit_order`);
- a file shorter than its committed meta says, and (up to ``verify_bytes``)
  any file, is walked by py-lmdb's offline verifier (:func:`lmdb.verify.verify`,
  pure Python, never maps the file): every reachable page is sound and
  stores its own number. Any finding refuses the file.

A store shared by several processes (``shared=True`` host data directories)
may be committed to by another process while these checks read the file: the
walk then mixes two snapshots and finds damage that is not there (every walk
did, beside a writer committing in a loop). So a check that refuses is
believed only if the committed txnid was the same before and after it (no
commit ended meanwhile, so the snapshot it read was whole: LMDB writes only
pages that the last commit does not reach). Otherwise it is made again, up to
:data:`CHECK_TRIES` times; when every try raced a commit, the file is in use
by live writers that map it, the checks that could not be made are skipped
and a warning is logged (``subagents.storage``).

Every refusal is :class:`~storage.StoreRefused` with ``path``, ``reason`` and
a one-line ``fix``. The format parsed is LMDB 0.9 on a 64-bit little-endian
host (the one py-lmdb bundles); anything else is refused as foreign.

What is left undetected: LMDB 0.9 meta pages carry no checksum, so a flip
that turns the older meta's txnid into exactly the newer one's plus one (bit
1 of an even/odd pair) while both name the same last page passes every rule,
and LMDB then serves the previous commit. Every value it serves is still
whole (sealed); what is lost is the last commit.
"""

from __future__ import annotations

import logging
import os
import stat
import struct
from dataclasses import dataclass

import lmdb.verify

from ._errors import StoreRefused
from ._identity import FIX_MOVE_ASIDE, StoreIdentity, read_marker, require_regular

DATA_NAME = "data.mdb"
LOCK_NAME = "lock.mdb"

MDB_MAGIC = 0xBEEFC0DE
MDB_DATA_VERSION = 1
P_META = 0x08
P_INVALID = (1 << 64) - 1
PAGE_HEADER = 16
"""Bytes of LMDB 0.9's page header (64-bit): pgno, pad, flags, lower/upper."""
MAX_DEPTH = 32

_HEADER = struct.Struct("<QHHI")
# MDB_meta after the page header: magic, version, address, mapsize, then two
# MDB_db (pad, flags, depth, branch, leaf, overflow, entries, root), last_pg, txnid.
_META = struct.Struct("<IIQQ" + "IHHQQQQQ" * 2 + "QQ")
META_BYTES = PAGE_HEADER + _META.size

DEFAULT_VERIFY_BYTES = 16 << 20
"""Files up to this size are walked by the full verifier on every open (~0.1 s)."""
CHECK_TRIES = 5
"""Checks of a file that another process commits to, before they are given up."""

log = logging.getLogger("subagents.storage")


@dataclass(frozen=True)
class Meta:
    """One parsed meta page."""

    pgno: int
    psize: int
    last_pg: int
    txnid: int
    roots: tuple[int, int]
    depths: tuple[int, int]
    mapsize: int


def _refuse(path: str, message: str, reason: str, fix: str = FIX_MOVE_ASIDE) -> StoreRefused:
    return StoreRefused(message, path=path, reason=reason, fix=fix)


def parse_meta(buf: bytes, offset: int) -> Meta | None:
    """The meta page at ``offset`` of ``buf``, or ``None`` when it is not one."""
    if len(buf) < offset + META_BYTES:
        return None
    pgno, _pad, flags, _bounds = _HEADER.unpack_from(buf, offset)
    fields = _META.unpack_from(buf, offset + PAGE_HEADER)
    magic, version, _address, mapsize = fields[:4]
    free, main = fields[4:12], fields[12:20]
    last_pg, txnid = fields[20:22]
    if not flags & P_META or magic != MDB_MAGIC or version != MDB_DATA_VERSION:
        return None
    return Meta(
        pgno=pgno,
        psize=free[0],
        last_pg=last_pg,
        txnid=txnid,
        roots=(free[7], main[7]),
        depths=(free[2], main[2]),
        mapsize=mapsize,
    )


def _meta_pages(path: str) -> tuple[Meta | None, Meta | None]:
    """Both meta pages as the file holds them now (``None``: not a meta page; the
    second is read only behind a first of a plausible page size)."""
    with open(path, "rb") as handle:
        first = parse_meta(handle.read(META_BYTES), 0)
        psize = first.psize if first is not None else 0
        if psize < 512 or psize > 65536 or psize & (psize - 1):
            return None, None
        handle.seek(psize)
        return first, parse_meta(handle.read(META_BYTES), 0)


def committed_meta(path: str, size: int) -> Meta:
    """The meta page LMDB would use, checked against the file's size (see module doc)."""
    first, second = _meta_pages(path)
    if first is None:
        raise _refuse(path, f"{path} is not an LMDB database (meta page 0)", "bad meta page")
    psize = first.psize
    if second is None or second.psize != psize:
        raise _refuse(path, f"{path} has a damaged meta page 1", "bad meta page")
    meta = second if second.txnid > first.txnid else first
    older = first if meta is second else second
    _check_commit_order(path, first, second, meta, older)
    pages = size // psize
    for other in (first, second):
        bad = [r for r in other.roots if r != P_INVALID and not 2 <= r <= other.last_pg]
        if other.last_pg < 1 or bad or max(other.depths) > MAX_DEPTH:
            raise _refuse(path, f"{path} has a damaged meta page {other.pgno}", "bad meta page")
    if meta.mapsize < (meta.last_pg + 1) * psize or meta.last_pg + 1 > pages + (1 << 20):
        raise _refuse(path, f"{path} has a damaged meta page {meta.pgno}", "bad meta page")
    return meta


def _check_commit_order(path: str, first: Meta, second: Meta, meta: Meta, older: Meta) -> None:
    """The two meta pages must be the last two commits: commit N writes slot
    N % 2, so slot 0 holds an even txnid, slot 1 an odd one, they differ by
    one (both 0 in a file never written), and the newer one's last page is
    not below the older one's (LMDB 0.9 never gives pages back to the end of
    the file). A bit flipped in a txnid otherwise makes LMDB serve the older
    snapshot, silently losing the last commit."""
    fresh = first.txnid == second.txnid == 0
    ordered = first.txnid % 2 == 0 and second.txnid % 2 == 1 and meta.txnid - older.txnid == 1
    if not fresh and not (ordered and meta.last_pg >= older.last_pg):
        raise _refuse(
            path,
            f"{path} has damaged meta pages: they disagree about the last commit"
            f" (txnids {first.txnid} and {second.txnid})",
            "bad meta page",
        )


def _verify(path: str, size: int, needed: int) -> None:
    try:
        problems: list[str] = lmdb.verify.verify(path, subdir=False)  # type: ignore[no-untyped-call]
    except (lmdb.verify.VerifyError, OSError, ValueError, struct.error) as exc:
        problems = [str(exc)]
    if not problems:
        return
    if size < needed:
        raise _refuse(
            path,
            f"{path} is truncated: it holds {size} bytes, its meta pages say {needed}",
            "truncated",
        )
    raise _refuse(
        path,
        f"{path} is damaged: {problems[0]}"
        + (f" (and {len(problems) - 1} more findings)" if len(problems) > 1 else ""),
        "damaged pages",
    )


def _tighten(path: str) -> None:
    # Files of a store made before they were created 0600: take group and other
    # bits away (only the owner can; anyone else leaves them as they are).
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
        if mode & 0o077:
            os.chmod(path, mode & 0o700)
    except OSError:
        pass


def preflight(directory: str, *, verify_bytes: int = DEFAULT_VERIFY_BYTES) -> StoreIdentity | None:
    """Refuse an LMDB directory that cannot be mapped safely; return its marker.

    ``None``: there is no marker (a fresh directory, or a store made before
    markers). Raises :class:`StoreRefused` (see the module docstring).
    """
    marker = read_marker(directory)
    data = os.path.join(directory, DATA_NAME)
    lock = os.path.join(directory, LOCK_NAME)
    if require_regular(lock, "LMDB lock file"):
        _tighten(lock)
    if not require_regular(data, "database file"):
        if marker is not None:
            raise _refuse(
                data,
                f"the marker says store {marker.store_id} was created here,"
                f" but its database {data} is missing",
                "database missing",
            )
        return None
    _tighten(data)
    for _ in range(CHECK_TRIES):
        before = _txnids(data)
        try:
            _check_file(data, verify_bytes)
        except StoreRefused:
            if _txnids(data) == before:
                raise  # no commit ended during the check: what it found is there
            continue  # it raced another process's commit: check again
        return marker
    log.warning(
        "%s: every check of the file raced a commit of another process; "
        "checks skipped (the file is in use)",
        data,
    )
    return marker


def _txnids(path: str) -> tuple[int | None, int | None]:
    """Both meta pages' txnids as they are now (``None``: not a meta page)."""
    first, second = _meta_pages(path)
    return (first.txnid if first else None, second.txnid if second else None)


def _check_file(data: str, verify_bytes: int) -> None:
    """The checks of ``data`` itself (see the module docstring); ``StoreRefused``."""
    size = os.stat(data).st_size
    if size == 0:
        raise _refuse(
            data,
            f"the database {data} is empty (0 bytes)",
            "empty",
            fix=FIX_MOVE_ASIDE + " (a store that never held anything: delete data.mdb)",
        )
    meta = committed_meta(data, size)
    needed = (meta.last_pg + 1) * meta.psize
    if size < needed or size <= verify_bytes:
        _verify(data, size, needed)
