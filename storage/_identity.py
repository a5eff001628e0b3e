"""A store that knows it exists: its identity, kept in the database and in a marker file.

On first open a kernel store writes a :class:`StoreIdentity` (a uuid from the
store's id source, the layout version, the creation time from the store's
clock) into its ``meta`` table. The LMDB store also writes it to a marker file
beside ``data.mdb`` (:data:`MARKER_NAME`), after the database commit that holds
it is durable, so the marker never claims a store the database does not hold.
The marker is written whole or not at all: a temporary file is written and
fsynced, renamed over the marker, and the directory is fsynced.

From then on the marker says "a store was created here". A database that is
missing, empty, truncated or holds another identity is refused with
:class:`~storage.StoreRefused` instead of being served (or re-created) as an
empty store.
"""

from __future__ import annotations

import contextlib
import os
import stat

import msgspec

from ._errors import StoreRefused

MARKER_NAME = "store.marker"
"""The marker file beside ``data.mdb``."""

MARKER_FORMAT = "subagents-store"
"""``format`` of every identity and marker this code writes (anything else is foreign)."""

FIX_MOVE_ASIDE = (
    "restore the directory from a backup (subagents db backup), or move it aside and start fresh"
)


class StoreIdentity(msgspec.Struct, frozen=True, kw_only=True):
    """Who a store is: written once, when the store is created, never changed."""

    format: str = MARKER_FORMAT
    store_id: str
    layout: int
    created_at: float


_encode = msgspec.json.Encoder(order="deterministic").encode
_decode_json = msgspec.json.Decoder(StoreIdentity).decode
_encode_mp = msgspec.msgpack.Encoder(order="deterministic").encode
_decode_mp = msgspec.msgpack.Decoder(StoreIdentity).decode


def encode_identity(identity: StoreIdentity) -> bytes:
    """The identity as stored in the ``meta`` table (msgpack)."""
    return _encode_mp(identity)


def decode_identity(data: bytes) -> StoreIdentity | None:
    """The identity in ``data``, or ``None`` when it does not decode or is foreign."""
    try:
        identity = _decode_mp(data)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    return identity if identity.format == MARKER_FORMAT else None


def require_regular(path: str, what: str) -> bool:
    """Whether ``path`` exists; :class:`StoreRefused` when it is not a regular file
    (a directory, a symlink, a socket ... where a store file belongs)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise StoreRefused(
            f"cannot inspect the {what} {path}: {exc.strerror or exc}",
            path=path,
            reason="unreadable",
            fix="check the data directory's permissions",
        ) from None
    if not stat.S_ISREG(st.st_mode):
        raise StoreRefused(
            f"the {what} {path} is not a regular file",
            path=path,
            reason="not a regular file",
            fix=f"remove or rename {path} (it is not one of the store's files)",
        )
    return True


def read_marker(directory: str) -> StoreIdentity | None:
    """The identity in ``directory``'s marker; ``None`` when there is no marker.

    :class:`StoreRefused` when the marker is not a regular file, cannot be
    read, or is not a marker this code wrote (foreign or damaged).
    """
    path = os.path.join(directory, MARKER_NAME)
    if not require_regular(path, "store marker"):
        return None
    try:
        with open(path, "rb") as handle:
            data = handle.read(65536)
    except OSError as exc:
        raise StoreRefused(
            f"cannot read the store marker {path}: {exc.strerror or exc}",
            path=path,
            reason="unreadable",
            fix="check the data directory's permissions",
        ) from None
    try:
        identity = _decode_json(data)
    except (msgspec.DecodeError, msgspec.ValidationError):
        identity = None
    if identity is None or identity.format != MARKER_FORMAT:
        raise StoreRefused(
            f"the store marker {path} is damaged or was not written by subagents",
            path=path,
            reason="foreign marker",
            fix=f"if the database beside it is whole, remove {path} (it is rewritten on open); "
            + FIX_MOVE_ASIDE,
        )
    return identity


def write_marker(directory: str, identity: StoreIdentity) -> None:
    """Write ``identity`` to ``directory``'s marker, atomically and durably (mode 0600)."""
    write_durably(os.path.join(directory, MARKER_NAME), _encode(identity) + b"\n")


def write_durably(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` whole or not at all, and durably (mode 0600): a
    temporary file is written and fsynced, renamed over ``path``, and the directory
    is fsynced. Raises ``OSError``; the caller maps it."""
    # One temporary name per process: two processes writing one file at once
    # (two creating one store) must not trip over each other's temporary file.
    temp = f"{path}.{os.getpid()}.tmp"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(temp)
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        rest = memoryview(data)
        while rest:
            rest = rest[os.write(fd, rest) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temp, path)
    fsync_directory(os.path.dirname(path))


def fsync_directory(directory: str) -> None:
    """Make a rename or create in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
