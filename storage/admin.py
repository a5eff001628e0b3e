"""Operator tools for a store: check, repair and back up (what ``subagents db check|backup`` run).

- :func:`check` verifies every record's checksum and decoding and every index
  entry against its record, on any kernel store (memory, LMDB, PostgreSQL);
  ``repair=True`` quarantines unreadable values and rebuilds the indexes.
- :func:`check_lmdb` opens an LMDB directory the way a host does (marker,
  identity, meta pages and size, and py-lmdb's full structural walk whatever
  the file's size) and then checks it. A store that is refused is reported
  (``refused``), never raised.
- :func:`backup` writes a consistent, compacted copy of an LMDB store while
  it keeps serving (one read snapshot: LMDB's ``mdb_env_copy2``), with the
  store's marker, so the copy opens as the same store and passes the check.
  A PostgreSQL store is backed up with ``pg_dump`` (:func:`postgres_backup_command`).

Every function runs on the caller's thread and raises only storage errors.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

from ._check import CheckReport, Finding, check_store, expected_index, printable_key, quarantined
from ._errors import CorruptRecord, Failed
from ._identity import write_marker
from ._kernel import KernelStore
from ._lmdb import LmdbSessionStore

__all__ = [
    "CheckReport",
    "Finding",
    "backup",
    "check",
    "check_lmdb",
    "expected_index",
    "postgres_backup_command",
    "printable_key",
    "quarantined",
]


def check(store: KernelStore, *, repair: bool = False) -> CheckReport:
    """Check ``store``'s records and indexes; with ``repair`` fix what can be fixed.

    The report lists each finding by table and key; after a repair it is the
    report of the check run again on the repaired store (``repaired=True``,
    with how many values were quarantined and index entries rewritten).
    """
    return check_store(store, repair=repair)


def check_lmdb(path: str | os.PathLike[str], *, repair: bool = False) -> CheckReport:
    """Open the LMDB store in ``path`` with every open-time check at full depth,
    then :func:`check` it. A refusal is returned as ``CheckReport.refused``.

    The open-time checks run when this process first opens ``path``; if it
    already has the store open they ran then, and only the record check runs.
    """
    try:
        store = LmdbSessionStore(path, auto_grow=True, verify_bytes=sys.maxsize)
    except CorruptRecord as exc:
        return CheckReport(records=0, index_entries=0, findings=(), refused=exc.message)
    try:
        return check_store(store, repair=repair)
    finally:
        store.close()


def backup(
    source: LmdbSessionStore | str | os.PathLike[str], destination: str | os.PathLike[str]
) -> Path:
    """Copy the LMDB store ``source`` (an open store, or its directory) to the
    empty or missing directory ``destination`` (0700, files 0600); return it.

    Consistent while writers go on: the copy is one committed snapshot. The
    marker written beside it names the same store, so the copy opens as a
    working store and :func:`check_lmdb` accepts it.
    """
    target = Path(destination)
    if isinstance(source, LmdbSessionStore):
        _copy(source, target)
        return target
    store = LmdbSessionStore(source, auto_grow=True)
    try:
        _copy(store, target)
    finally:
        store.close()
    return target


def _copy(store: LmdbSessionStore, target: Path) -> None:
    store.lmdb_backend.copy(target, compact=True)
    try:
        write_marker(str(target), store.identity)
    except OSError as exc:
        raise Failed("cannot write the backup's marker", path=str(target), cause=repr(exc)) from exc


def postgres_backup_command(url: str, destination: str, *, schema: str = "public") -> str:
    """The ``pg_dump`` command line that backs up a PostgreSQL store consistently
    (one snapshot; restore with ``pg_restore``). ``url`` is used as given: pass
    it without a password and let ``~/.pgpass`` or ``$PGPASSWORD`` supply it."""
    return shlex.join(
        ["pg_dump", "--format=custom", f"--schema={schema}", f"--file={destination}", url]
    )
