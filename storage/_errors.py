"""Typed errors of the storage layer.

Every store operation fails with one of these (lower-layer errors from lmdb,
msgspec or the OS are always mapped here). The tree, with the rest of the
project's errors, is drawn once in :mod:`statemachines._errors`.

Errors carry structured keyword fields (``attempt_id``, ``owner``,
``fencing_generation``, ``table``, ``key`` ...) readable as attributes.
"""

from __future__ import annotations

from statemachines import SubagentsError


class StoreError(SubagentsError):
    """Root of every SessionStore failure."""


class NotFound(StoreError):
    """The session, run, attempt or artifact does not exist (or has expired)."""


class AlreadyExists(StoreError):
    """A different record already holds this identity."""


class Conflict(StoreError):
    """The request contradicts committed state; nothing was written."""


class StaleFence(Conflict):
    """The writer is not the current live owner: another host, an older generation,
    or its lease has expired at store time. An expired owner never revives."""


class IllegalTransition(Conflict):
    """The lifecycle tables do not allow this move (fields ``machine``, ``source``, ``dest``)."""


class InvalidRecord(Conflict):
    """A submitted record is malformed or not in its canonical form."""


class IdempotencyConflict(Conflict):
    """An idempotency key was reused with a different request."""


class RunConflict(Conflict):
    """Another run of the same session is active under a live admission lease."""


class DeliveryClaimed(Conflict):
    """Another consumer holds a delivery claim that is live (or whose consumer is live)."""


class Delivered(Conflict):
    """The result was already delivered; it is never delivered twice."""


class QuotaExceeded(StoreError):
    """A byte or count limit would be exceeded; nothing was written."""


class RetryableStorage(StoreError):
    """A transient storage failure. Nothing was written; the same call may be retried."""


class StorageFull(StoreError):
    """The store has no room (LMDB map full). Nothing was written."""


class CorruptRecord(StoreError):
    """Bytes on disk do not decode into a valid record. The store fails closed."""


class Failed(StoreError):
    """Any other store failure, including an operation the store does not support."""


class StoreRefused(CorruptRecord):
    """The store's files contradict what the store knows about itself, so it is not
    opened: its marker says it was initialised but the database is missing, empty,
    truncated or another store's; the file is shorter than its own meta pages say;
    or a non-file sits where a store file belongs. Fields: ``path``, ``reason``,
    ``fix`` (one line saying what to do). A :class:`CorruptRecord`, so callers that
    fail closed on damage already refuse it."""
