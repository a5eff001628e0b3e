"""Opening a host's data directory: the lock, the LMDB store and the event log.

Layout of a data directory::

    host.lock     held (flock) by the one host serving it; holds its pid
    lmdb/         the SessionStore and the host's event tables (one LMDB environment)
    http.token    the bearer token of ``serve --http`` (mode 0600)

A directory served by a live host is *busy* (:class:`DataDirBusy`) unless the
second host asks to share it (``shared=True``: several hosts, each with its
own owner identity, fenced by leases in the store). Files that are not a valid
store are *corrupt* (:class:`DataDirCorrupt`). Both errors carry a one-line
``fix``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Callable
from pathlib import Path

from statemachines import SubagentsError
from storage import CorruptRecord, LmdbSessionStore, MemorySessionStore, SessionStore, StoreError

from ._config import HostConfig
from ._eventlog import EventLog, LmdbEventLog, MemoryEventLog

DEFAULT_DATA_DIR = ".subagents"


class DataDirError(SubagentsError):
    """The data directory cannot be used. Fields: ``path``, ``fix``."""

    path: str
    fix: str

    def __str__(self) -> str:
        return self.message


class DataDirBusy(DataDirError):
    """Another live host process serves this data directory."""


class DataDirCorrupt(DataDirError):
    """The data directory's files are not a valid store."""


class DataDirLock:
    """An exclusive lock on ``<data_dir>/host.lock``, released on close or process death."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / "host.lock"
        self._fd: int | None = None
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = ""
            with contextlib.suppress(OSError, ValueError):
                holder = os.pread(fd, 32, 0).decode().strip()
            os.close(fd)
            raise DataDirBusy(
                f"data directory {directory} is in use by another host"
                + (f" (pid {holder})" if holder else ""),
                path=str(directory),
                fix="stop that host, pass another --data-dir, or share it on purpose with --shared",
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._fd = fd

    def close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


def is_busy(directory: Path) -> bool:
    """Whether a live host holds the lock of ``directory`` right now."""
    path = directory / "host.lock"
    if not path.exists():
        return False
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


class OpenedStore:
    """A store, its event log and how to release them (in order)."""

    def __init__(
        self,
        store: SessionStore,
        events: EventLog,
        name: str,
        data_dir: str | None,
        closers: list[Callable[[], None]],
    ) -> None:
        self.store = store
        self.events = events
        self.name = name
        self.data_dir = data_dir
        self.closers = closers

    def close(self) -> None:
        for closer in self.closers:
            with contextlib.suppress(Exception):
                closer()
        self.closers = []


def resolve_data_dir(config: HostConfig | None, override: str | os.PathLike[str] | None) -> Path:
    if override is not None:
        return Path(override)
    if config is not None:
        configured = config.data_dir()
        if configured is not None:
            return configured
    return Path(DEFAULT_DATA_DIR)


def open_store(
    directory: Path | None,
    *,
    retention_seconds: float = 86400.0,
    lock: bool = True,
    shared: bool = False,
) -> OpenedStore:
    """Open the store of ``directory`` (``None``: an in-memory store).

    Raises :class:`DataDirBusy` or :class:`DataDirCorrupt`.
    """
    if directory is None:
        memory = MemorySessionStore(retention_seconds=retention_seconds)
        return OpenedStore(memory, MemoryEventLog(), "memory", None, [memory.close])
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DataDirError(
            f"cannot create data directory {directory}: {exc.strerror or exc}",
            path=str(directory),
            fix="pass a writable --data-dir",
        ) from None
    closers: list[Callable[[], None]] = []
    held: DataDirLock | None = None
    if lock and not shared:
        held = DataDirLock(directory)
    try:
        try:
            store = LmdbSessionStore(
                directory / "lmdb", retention_seconds=retention_seconds, auto_grow=True
            )
        except CorruptRecord as exc:
            raise DataDirCorrupt(
                f"data directory {directory} does not hold a valid store ({exc.message})",
                path=str(directory),
                fix="point --data-dir at a fresh directory, or move the damaged one aside",
            ) from None
        except StoreError as exc:
            raise DataDirCorrupt(
                f"cannot open the store in {directory} ({exc.message})",
                path=str(directory),
                fix="point --data-dir at a fresh directory, or check its permissions",
            ) from None
        try:
            events = LmdbEventLog(directory / "lmdb")
        except StoreError as exc:
            store.close()
            raise DataDirCorrupt(
                f"cannot open the event log in {directory} ({exc.message})",
                path=str(directory),
                fix="point --data-dir at a fresh directory",
            ) from None
    except BaseException:
        if held is not None:
            held.close()
        raise
    closers = [events.close, store.close]
    if held is not None:
        closers.append(held.close)
    return OpenedStore(store, events, "lmdb", str(directory), closers)
