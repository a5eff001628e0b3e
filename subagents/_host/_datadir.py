"""Opening a host's store: a data directory (LMDB) or a PostgreSQL database.

Layout of a data directory (created 0700; every file 0600, only the owner
can read the prompts and outputs it holds)::

    host.lock     held (flock) by the one host serving it; holds its pid
    lmdb/         the SessionStore and the host's event tables (one LMDB environment),
                  with its marker ``store.marker`` beside ``data.mdb``
    http.token    the bearer token of ``serve --http`` (:func:`write_token_file`)

Opening an existing directory that others can read logs a warning (and lists
it in :attr:`OpenedStore.warnings`). A directory, symlink or other non-file
where ``host.lock`` belongs is :class:`DataDirCorrupt`. A store the storage
layer refuses (:class:`storage.StoreRefused`: marker without database,
truncated or damaged file, another store's database) is
:class:`DataDirCorrupt` carrying the storage layer's own ``fix``.

A directory served by a live host is *busy* (:class:`DataDirBusy`) unless every
host serving it asks to share it (``shared=True``: several hosts, each with its
own owner identity, fenced by leases in the store). Files that are not a valid
store are *corrupt* (:class:`DataDirCorrupt`). Both errors carry a one-line
``fix``.

A store URL (``postgresql://user@host:5432/db``, see :func:`open_store_url`)
puts everything in one PostgreSQL database instead: the kernel's tables and
the event log and fencing counter (the store's ``host_events`` / ``host_meta``), so any
number of hosts, on any machines, share it; there is no lock and no data
directory. A URL that is malformed, a server that does not answer or a database
that cannot be used raise :class:`StoreUrlError` (:class:`StoreUnreachable` for
the transient case), whose messages never contain the password
(:func:`mask_url`).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import re
import stat
from collections.abc import Callable
from pathlib import Path
from urllib.parse import unquote, urlsplit

from statemachines import SubagentsError
from storage import (
    CorruptRecord,
    LmdbSessionStore,
    MemorySessionStore,
    RetryableStorage,
    SessionStore,
    StoreError,
    StoreRefused,
)

from .._providers._common import install_command
from ._config import HostConfig
from ._eventlog import EventLog, StoreEventLog

DEFAULT_DATA_DIR = ".subagents"

log = logging.getLogger("subagents.host")


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


class StoreUrlError(SubagentsError):
    """A store URL cannot be used. Fields: ``url`` (password masked), ``fix``.

    Raised for a malformed URL or an unknown scheme, a missing driver (the
    ``postgres`` extra), a database whose schema is newer than this code or
    that is not migrated when migration is off.
    """

    url: str
    fix: str

    def __str__(self) -> str:
        return self.message


class StoreUnreachable(StoreUrlError):
    """The database server did not answer, refused the login, or the database is missing."""


STORE_SCHEMES = ("postgresql", "postgres")
"""URL schemes :func:`open_store_url` accepts (both mean PostgreSQL, as in libpq)."""

_PASSWORD_PARAM = re.compile(r"(?i)(password=)([^&\s]*)")


def is_store_url(value: str) -> bool:
    """Whether ``value`` names a store by URL (``postgresql://...``) rather than a directory."""
    scheme, sep, _rest = value.partition("://")
    return bool(sep) and scheme.lower() in STORE_SCHEMES


def url_password(url: str) -> str | None:
    """The password in ``url`` (userinfo or ``password=`` parameter), if any."""
    try:
        password = urlsplit(url).password
    except ValueError:
        password = None
    if password:
        return unquote(password)
    match = _PASSWORD_PARAM.search(url)
    return unquote(match.group(2)) if match and match.group(2) else None


def mask_url(url: str) -> str:
    """``url`` with its password replaced by ``***`` (safe for messages and logs)."""
    masked = _PASSWORD_PARAM.sub(r"\1***", url)
    try:
        parts = urlsplit(masked)
    except ValueError:
        return re.sub(r"(://[^/@:]*:)[^/@]*@", r"\1***@", masked)
    if parts.password is None:
        return masked
    userinfo, _, hostinfo = parts.netloc.rpartition("@")
    user = userinfo.partition(":")[0]
    return parts._replace(netloc=f"{user}:***@{hostinfo}").geturl()


def redact(text: str, url: str) -> str:
    """``text`` with the password of ``url`` masked wherever it appears."""
    password = url_password(url)
    if password:
        text = text.replace(password, "***")
    return text


def _open_private(path: Path, what: str, flags: int) -> int:
    """Open the regular file ``path`` (created 0600) without following a symlink;
    :class:`DataDirCorrupt` when something else is in its place."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o600)
    except OSError as exc:
        if exc.errno not in (errno.EISDIR, errno.ELOOP, errno.ENXIO):
            raise DataDirError(
                f"cannot open the {what} {path}: {exc.strerror or exc}",
                path=str(path.parent),
                fix="check the data directory's permissions, or pass another --data-dir",
            ) from None
        fd = -1
    if fd >= 0:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode):
            if stat.S_IMODE(st.st_mode) & 0o077:
                with contextlib.suppress(OSError):
                    os.fchmod(fd, 0o600)
            return fd
        os.close(fd)
    kind = "cannot be opened"
    with contextlib.suppress(OSError):
        mode = os.lstat(path).st_mode
        kind = (
            "is a directory"
            if stat.S_ISDIR(mode)
            else "is a symlink"
            if stat.S_ISLNK(mode)
            else "is not a regular file"
        )
    raise DataDirCorrupt(
        f"the {what} {path} {kind}",
        path=str(path.parent),
        fix=f"remove {path} (the host creates it again), or pass another --data-dir",
    )


class DataDirLock:
    """A lock on ``<data_dir>/host.lock`` (flock), released on close or process death.

    Exclusive by default: no other host, shared or not, may hold it. With
    ``shared=True`` it is a shared lock: any number of shared hosts hold it
    together, but not beside an exclusive one. Either way a conflicting holder
    raises :class:`DataDirBusy` whose ``fix`` says what the caller can change;
    :class:`DataDirCorrupt` when ``host.lock`` is a directory, a symlink or
    another non-file.
    """

    def __init__(self, directory: Path, *, shared: bool = False) -> None:
        self.path = directory / "host.lock"
        self._fd: int | None = None
        fd = _open_private(self.path, "lock file", os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = ""
            with contextlib.suppress(OSError, ValueError):
                holder = os.pread(fd, 32, 0).decode().strip()
            os.close(fd)
            raise self._busy(directory, holder, shared) from None
        os.ftruncate(fd, 0)  # shared holders are several: no one pid to name
        if not shared:
            os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._fd = fd

    @staticmethod
    def _busy(directory: Path, holder: str, shared: bool) -> DataDirBusy:
        if shared:  # an exclusive host holds it: sharing needs every host to ask for it
            what = "another host that does not share it"
            fix = "stop that host, or restart it with --shared too, or pass another --data-dir"
        else:
            what = "another host"
            fix = "stop that host, pass another --data-dir, or share it on purpose with --shared"
        return DataDirBusy(
            f"data directory {directory} is in use by {what}"
            + (f" (pid {holder})" if holder else ""),
            path=str(directory),
            fix=fix,
        )

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
    fd = _open_private(path, "lock file", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


class OpenedStore:
    """A store, its event log and how to release them (in order).

    ``warnings``: what opening found worth telling the operator (each also logged).
    """

    def __init__(
        self,
        store: SessionStore,
        events: EventLog,
        name: str,
        data_dir: str | None,
        closers: list[Callable[[], None]],
        *,
        warnings: list[str] | None = None,
    ) -> None:
        self.store = store
        self.events = events
        self.name = name
        self.data_dir = data_dir
        self.closers = closers
        self.warnings: list[str] = list(warnings or [])

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
        return OpenedStore(memory, StoreEventLog(memory), "memory", None, [memory.close])
    warnings = prepare_data_dir(directory)
    closers: list[Callable[[], None]] = []
    held: DataDirLock | None = None
    if lock:
        held = DataDirLock(directory, shared=shared)
    try:
        try:
            store = LmdbSessionStore(
                directory / "lmdb", retention_seconds=retention_seconds, auto_grow=True
            )
        except StoreRefused as exc:
            raise DataDirCorrupt(
                f"data directory {directory} does not hold a valid store ({exc.message})",
                path=str(directory),
                fix=str(exc.fields.get("fix") or "move the damaged directory aside"),
            ) from None
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
        events = StoreEventLog(store)  # the store opened (and sealed) its event tables
    except BaseException:
        if held is not None:
            held.close()
        raise
    closers = [store.close]
    if held is not None:
        closers.append(held.close)
    return OpenedStore(store, events, "lmdb", str(directory), closers, warnings=warnings)


def prepare_data_dir(directory: Path) -> list[str]:
    """Create ``directory`` (0700, parents too) or inspect the existing one; return
    the warnings to give (each also logged): an existing directory that group or
    others can read. Raises :class:`DataDirError` when it cannot be created."""
    try:
        st = os.stat(directory)
    except FileNotFoundError:
        try:
            # Every missing level 0700 (makedirs would give the mode to the last only).
            for level in reversed([directory, *directory.parents]):
                if not level.exists():
                    level.mkdir(mode=0o700, exist_ok=True)
        except OSError as exc:
            raise DataDirError(
                f"cannot create data directory {directory}: {exc.strerror or exc}",
                path=str(directory),
                fix="pass a writable --data-dir",
            ) from None
        return []
    except OSError as exc:
        raise DataDirError(
            f"cannot use data directory {directory}: {exc.strerror or exc}",
            path=str(directory),
            fix="pass a readable --data-dir",
        ) from None
    if not stat.S_ISDIR(st.st_mode):
        raise DataDirError(
            f"data directory {directory} is not a directory",
            path=str(directory),
            fix="pass a directory as --data-dir",
        )
    if stat.S_IMODE(st.st_mode) & 0o044:
        message = (
            f"data directory {directory} can be read by other users"
            f" (mode {stat.S_IMODE(st.st_mode):04o}); it holds every prompt and output:"
            f" chmod 700 {directory}"
        )
        log.warning("%s", message)
        return [message]
    return []


def write_token_file(path: Path, token: str) -> None:
    """Write the bearer token to ``path``, readable by the owner only (0600).

    The token goes to a new file created with ``O_EXCL|O_NOFOLLOW`` beside
    ``path`` and is renamed over it, so an existing token file of any mode is
    replaced by a private one, and nothing is ever written through a symlink.
    A symlink or other non-file at ``path`` is refused (:class:`DataDirError`):
    replacing it could break what the link was meant for. The parent directory
    is created 0700 when missing.
    """
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        mode = os.lstat(path).st_mode
        if not stat.S_ISREG(mode):
            raise DataDirError(
                f"the token file {path} is "
                + ("a symlink" if stat.S_ISLNK(mode) else "not a regular file"),
                path=str(path),
                fix=f"remove {path}, or pass another --token-file",
            )
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(temp)
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(token)
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise


def open_store_url(
    url: str,
    *,
    retention_seconds: float = 86400.0,
    schema: str = "public",
    migrate: bool = True,
    pool_size: int = 8,
    connect_timeout: float = 10.0,
) -> OpenedStore:
    """Open the PostgreSQL store and event log named by ``url``.

    ``migrate`` applies missing migrations first (as ``subagents db migrate``
    does). The store reads time from the database server, so every host
    sharing it agrees on lease expiry. Raises :class:`StoreUrlError` or
    :class:`StoreUnreachable`; their messages mask the password.
    """
    from storage import PostgresSessionStore  # noqa: PLC0415 - optional driver, imported lazily

    masked = mask_url(url)
    check_store_url(url)
    try:
        store = PostgresSessionStore(
            url,
            retention_seconds=retention_seconds,
            schema=schema,
            pool_size=pool_size,
            connect_timeout=connect_timeout,
            migrate=migrate,
        )
    except StoreError as exc:
        raise store_url_error(exc, url) from None
    except ValueError as exc:
        raise StoreUrlError(
            f"store {masked}: {redact(str(exc), url)}", url=masked, fix="check the store URL"
        ) from None
    return OpenedStore(store, StoreEventLog(store), "postgresql", None, [store.close])


def check_store_url(url: str) -> None:
    """Refuse a store URL that cannot name a PostgreSQL database (no connection made)."""
    masked = mask_url(url)
    if not is_store_url(url):
        raise StoreUrlError(
            f"store {masked!r} is not a PostgreSQL URL",
            url=masked,
            fix="use postgresql://USER@HOST:PORT/DATABASE (or pass --data-dir for LMDB)",
        )
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - parsing the port validates it
    except ValueError as exc:
        raise StoreUrlError(
            f"store {masked}: malformed URL ({redact(str(exc), url)})",
            url=masked,
            fix="use postgresql://USER@HOST:PORT/DATABASE",
        ) from None


def store_url_error(exc: StoreError, url: str) -> StoreUrlError:
    masked = mask_url(url)
    detail = redact(getattr(exc, "message", "") or str(exc), url)
    cause = redact(str(getattr(exc, "cause", "") or ""), url)
    if type(exc).__name__ == "DriverMissing":
        return StoreUrlError(
            f"store {masked}: the PostgreSQL driver is not installed (the postgres extra)",
            url=masked,
            fix=install_command("postgres"),
        )
    if isinstance(exc, RetryableStorage):
        reason = " ".join((cause.rsplit(": ", 1)[-1] if cause else detail).split())
        return StoreUnreachable(
            f"cannot connect to the store {masked}: {reason or detail}",
            url=masked,
            fix="check that the server is running, the host/port/database/user are right, "
            "and the password (or ~/.pgpass / $PGPASSWORD)",
        )
    if "not migrated" in detail:
        fix = f"run: subagents db migrate --store {masked}"
    elif "newer than this code" in detail:
        fix = "upgrade subagents on this machine to the version that migrated the database"
    else:
        fix = "check the store URL and the database's permissions"
    reason = f"{detail} ({cause})" if cause else detail
    return StoreUrlError(f"store {masked}: {reason}", url=masked, fix=fix)


def open_host_store(
    config: HostConfig,
    *,
    data_dir: str | os.PathLike[str] | None = None,
    store: str | None = None,
    memory: bool = False,
    shared: bool = False,
) -> OpenedStore:
    """The store a host serves, chosen as the command line and the config say.

    In order: ``memory``; an explicit ``store`` URL; an explicit ``data_dir``;
    the config's ``host.store``; the config's ``host.data_dir``; ``.subagents``.
    Raises :class:`DataDirError` or :class:`StoreUrlError`.
    """
    if memory:
        return open_store(None)
    url = store if store is not None else None if data_dir is not None else config.host.store
    if url is not None:
        return open_store_url(url)
    return open_store(resolve_data_dir(config, data_dir), shared=shared)
