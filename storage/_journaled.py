"""The redo journal under one LMDB environment: recovery, commits, checkpoints.

:class:`Keeper` is what an ``LmdbBackend(journal=True)`` environment adds to
LMDB (the plan and its reasons: ``docs/journal.md``; the file:
:mod:`storage._journal`). LMDB runs without syncing; durability comes from
the journal. The keeper guarantees:

- **Order of a commit** (:meth:`Keeper.commit`): the transaction's writes are
  appended to the journal and flushed, then LMDB commits (to the page cache):
  a commit is visible only once its entry is on the disk. If the LMDB commit
  fails after the append, a void entry is flushed before the error goes on,
  so recovery never applies a commit whose caller was told it failed.
- **Checkpoints** (:meth:`Keeper.checkpoint`): LMDB is flushed, its two meta
  pages are read off the disk into the journal's next header, and the commit
  is pinned by a read transaction until the next checkpoint, so none of its
  pages is reused and it stays on the disk as flushed whatever the page cache
  writes back later. Whoever drops the pin (a map resize, a fork) checkpoints
  first (:meth:`Keeper.unpinned`).
- **Recovery** (:func:`prepare` before LMDB maps the file, then
  :meth:`Keeper.replay` once it is open): an unclean journal's meta pages are
  written back over ``data.mdb``'s (LMDB is then at the checkpoint's commit),
  every entry since is replayed in one transaction, and a checkpoint follows.
  Replaying whole values in order from any state between the checkpoint and
  the last commit ends at the last commit, so one recovery serves a process
  crash and a power cut alike.
- **One owner**: the journaled process holds an exclusive ``flock`` on the
  store's directory; an LMDB store opened without the journal holds a shared
  one, and first recovers and removes a journal it finds (:func:`prepare`), so
  a later journaled open never rolls the database back to an old checkpoint.

Every method runs on the thread that holds the environment's writer role or
its exclusive gate (so appends and checkpoints never interleave), except
:func:`prepare`, :meth:`Keeper.replay` and :meth:`Keeper.close`, which run
while nothing else uses the environment. Errors are storage errors.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
from collections.abc import Iterator, Sequence
from typing import Any

import lmdb

from ._errors import Failed, StorageFull, StoreError, StoreRefused
from ._identity import fsync_directory
from ._journal import (
    DEFAULT_REGION_BYTES,
    FIX_JOURNAL,
    JOURNAL_NAME,
    Journal,
    Op,
    Recovered,
    open_journal,
)
from ._lmdbfile import DATA_NAME, _txnids

log = logging.getLogger("subagents.storage")

LOW_WATER = 1 << 20
"""A commit that leaves less than this (or a quarter of a smaller region) in the
journal's region is followed by a checkpoint."""

CHECKPOINT_COMMITS = 128
"""Journaled commits between two checkpoints. While a checkpoint is pinned LMDB
reuses none of the pages freed after it, so every commit takes new pages and a
checkpoint flushes all of them: this bounds both (about 10 pages a commit here),
at the price of one LMDB flush per that many commits (``bench/journal.py``)."""


class DirectoryLock:
    """A ``flock`` on the store's directory, held until :meth:`release` (or process exit)."""

    def __init__(self, directory: str, *, exclusive: bool) -> None:
        self.directory = directory
        self.exclusive = exclusive
        try:
            self._fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            raise Failed(
                "cannot open the store directory", path=directory, cause=repr(exc)
            ) from exc
        try:
            self._take(exclusive)
        except BaseException:
            os.close(self._fd)
            raise

    def _take(self, exclusive: bool) -> None:
        try:
            fcntl.flock(self._fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise Failed(
                    "cannot lock the store directory", path=self.directory, cause=repr(exc)
                ) from exc
            raise Failed(
                "the store is open in another process"
                + (" " if exclusive else " with the journal ")
                + "(a journaled store has one process)",
                path=self.directory,
                reason="busy",
                fix="stop the other process, or open every process without the journal",
            ) from None
        self.exclusive = exclusive

    def make_exclusive(self) -> None:
        """Turn a shared lock into an exclusive one, or :class:`Failed` (``busy``)."""
        if not self.exclusive:
            self._take(True)

    def share(self) -> None:
        """Turn an exclusive lock into a shared one (after leaving a journal)."""
        if self.exclusive:
            self._take(False)

    def release(self) -> None:
        """Drop the lock (in a forked child: close the inherited descriptor; the
        parent keeps the lock). Idempotent."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _restore(directory: str, recovered: Recovered) -> None:
    """Write the checkpoint's meta pages back over ``data.mdb``'s and flush them."""
    data = os.path.join(directory, DATA_NAME)
    header = recovered.header
    if not header.metas:
        return
    if not os.path.exists(data):
        raise StoreRefused(
            f"journal {JOURNAL_NAME} names commit {header.txnid} but {data} is missing",
            path=data,
            reason="database missing",
            fix=FIX_JOURNAL,
        )
    now = [txnid for txnid in _txnids(data) if txnid is not None]
    if now and max(now) < header.txnid:
        raise StoreRefused(
            f"the database {data} is at commit {max(now)}, older than its journal's"
            f" checkpoint {header.txnid}: the journal belongs to a later copy",
            path=data,
            reason="journal newer than the database",
            fix=FIX_JOURNAL,
        )
    fd = os.open(data, os.O_RDWR)
    try:
        os.pwrite(fd, header.metas, 0)
        os.fsync(fd)
    finally:
        os.close(fd)


def prepare(
    directory: str, *, journal: bool
) -> tuple[DirectoryLock, tuple[Journal, Recovered] | None]:
    """Lock ``directory`` and, before LMDB maps its file, roll it back to the
    journal's checkpoint when the journal is unclean.

    Returns the lock and, when a journal file exists, it open with what it
    holds (the entries still to replay). Without ``journal`` the caller
    replays them, then removes the file (:meth:`Keeper.leave`)."""
    path = os.path.join(directory, JOURNAL_NAME)
    lock = DirectoryLock(directory, exclusive=journal)
    try:
        # Looked for under the lock: a journaled owner that died before this
        # opener locked left its journal, and it must be recovered.
        if not os.path.lexists(path):
            return lock, None
        lock.make_exclusive()
        opened = open_journal(directory, txnid=0, metas=b"")  # it exists: read back
        try:
            if not opened[1].header.clean:
                _restore(directory, opened[1])
        except BaseException:
            opened[0].close()
            raise
    except BaseException:
        lock.release()
        raise
    return lock, opened


def _meta_pages(directory: str, page_size: int) -> bytes:
    with open(os.path.join(directory, DATA_NAME), "rb") as handle:
        return handle.read(2 * page_size)


class Keeper:
    """The journal of one open environment (see the module docstring)."""

    def __init__(self, env: lmdb.Environment, directory: str) -> None:
        self.env = env
        self.directory = directory
        self.journal: Journal | None = None
        self.pin: lmdb.Transaction[bytes] | None = None
        self.flushes = 0
        """Durable flushes of checkpoints (each: LMDB's data and meta, then a header)."""
        self.since_checkpoint = 0

    # -- opening ------------------------------------------------------------------------------

    def replay(
        self, opened: tuple[Journal, Recovered] | None, region_bytes: int = DEFAULT_REGION_BYTES
    ) -> None:
        """Apply what ``opened`` (from :func:`prepare`) holds and checkpoint; or,
        without a journal yet, create one based on the database as it is."""
        try:
            if opened is not None:
                self.journal, recovered = opened
                _apply(self.env, [entry.ops for _, entry in recovered.entries])
                self.checkpoint()
                return
            self.env.sync(True)
            self.journal, _ = open_journal(
                self.directory,
                txnid=self._txnid(),
                metas=self._metas(),
                region_bytes=region_bytes,
            )
            self._pin()
        except lmdb.Error as exc:
            raise Failed("journal recovery failed", path=self.directory, cause=repr(exc)) from exc

    def leave(self, opened: tuple[Journal, Recovered]) -> None:
        """Without the journal: apply what it holds, flush, and remove the file."""
        journal, recovered = opened
        try:
            _apply(self.env, [entry.ops for _, entry in recovered.entries])
            self.env.sync(True)
        except lmdb.Error as exc:
            raise Failed("journal recovery failed", path=self.directory, cause=repr(exc)) from exc
        finally:
            journal.close()
        os.unlink(os.path.join(self.directory, JOURNAL_NAME))
        fsync_directory(self.directory)

    # -- commits ------------------------------------------------------------------------------

    def commit(self, txn: lmdb.Transaction[bytes], ops: Sequence[Op]) -> None:
        """Append ``ops``, flush, then commit ``txn`` (see the module docstring).

        A journal error aborts ``txn`` and propagates (a storage error); an LMDB
        commit error voids the entry and propagates (``lmdb.Error``)."""
        journal = self._journal()
        if not ops:
            txn.commit()
            return
        try:
            seq = self._append(journal, ops)
        except BaseException:
            txn.abort()
            raise
        if seq is None:  # larger than the whole region: LMDB flushes it itself
            txn.commit()
            self.checkpoint()
            return
        try:
            txn.commit()
        except lmdb.Error:
            journal.void(seq)
            raise
        self.since_checkpoint += 1
        low = journal.room() < min(LOW_WATER, journal.region_bytes // 4)
        if low or self.since_checkpoint >= CHECKPOINT_COMMITS:
            try:
                self.checkpoint()
            except StoreError as exc:
                # The commit is durable (its entry is flushed): it must not be
                # reported as failed. The next commit tries again; a journal that
                # an I/O error broke refuses it (and every later one).
                log.warning("journal checkpoint after a commit failed: %s", exc)

    def _append(self, journal: Journal, ops: Sequence[Op]) -> int | None:
        try:
            return journal.append(ops)
        except StorageFull as full:
            if "size" not in full.fields:
                raise  # the disk is full, not the region
            if full.fields["size"] > journal.region_bytes:
                return None
        self.checkpoint()
        return journal.append(ops)

    # -- checkpoints ------------------------------------------------------------------------

    def checkpoint(self, *, clean: bool = False) -> None:
        """Flush LMDB, start the journal's next generation on it, and pin it."""
        journal = self._journal()
        try:
            self.env.sync(True)
            txnid = self._txnid()
            metas = self._metas()
        except (lmdb.Error, OSError) as exc:
            raise Failed("journal checkpoint failed", path=self.directory, cause=repr(exc)) from exc
        journal.checkpoint(txnid=txnid, metas=metas, clean=clean)
        self.flushes += 2
        self.since_checkpoint = 0
        self._pin()

    @contextlib.contextmanager
    def unpinned(self) -> Iterator[None]:
        """Checkpoint and drop the pin for a map resize, then pin again."""
        self.drop_pin()
        try:
            yield
        finally:
            self.pin_again()

    def drop_pin(self) -> None:
        """Checkpoint, then drop the pin: nothing may commit until :meth:`pin_again`
        (the caller holds the exclusive gate), so the checkpoint stays whole."""
        self.checkpoint()
        self._unpin()

    def pin_again(self) -> None:
        """Pin the current commit (the checkpoint :meth:`drop_pin` made)."""
        self._pin()

    def _pin(self) -> None:
        old, self.pin = self.pin, self.env.begin(write=False)
        if old is not None:
            with contextlib.suppress(lmdb.Error):
                old.abort()

    def _unpin(self) -> None:
        pin, self.pin = self.pin, None
        if pin is not None:
            with contextlib.suppress(lmdb.Error):
                pin.abort()

    # -- closing ------------------------------------------------------------------------------

    def close(self) -> None:
        """Checkpoint as clean, drop the pin and close the journal. Before LMDB closes;
        the directory's lock is its environment's to release."""
        try:
            if self.journal is not None:
                self.checkpoint(clean=True)
        finally:
            self.discard()

    def discard(self) -> None:
        """Drop the pin and close the journal (also after a failed open)."""
        self._unpin()
        if self.journal is not None:
            self.journal.close()

    def forget(self) -> None:
        """In a forked child: close the inherited journal. The pin is left alone: its
        reader slot is the parent's."""
        self.pin = None
        if self.journal is not None:
            self.journal.close()

    # -- helpers ------------------------------------------------------------------------------

    def _journal(self) -> Journal:
        if self.journal is None:
            raise Failed("the journal is not open", path=self.directory)
        return self.journal

    def _txnid(self) -> int:
        return int(self.env.info()["last_txnid"])

    def _metas(self) -> bytes:
        """``data.mdb``'s two meta pages as they are now (flushed by the caller)."""
        return _meta_pages(self.directory, int(self.env.stat()["psize"]))


def _apply(env: lmdb.Environment, entries: Sequence[Sequence[Op]]) -> None:
    """Every entry's writes, in order, in one transaction (LMDB's own flush follows)."""
    if not entries:
        return
    dbs: dict[str, Any] = {}
    with env.begin(write=True) as txn:
        for ops in entries:
            for table, key, value in ops:
                db = dbs.get(table)
                if db is None:
                    db = dbs[table] = env.open_db(table.encode("utf-8"), txn=txn)
                if value is None:
                    txn.delete(key, db=db)
                else:
                    txn.put(key, value, db=db)
