"""Trusted operations on durable attempts: inspect and cancel (not in the JSON-RPC table).

They open a data directory directly, as the operator: listing and showing
read the store (also while a host serves it); cancelling needs the attempt's
owner to be gone. An attempt still under a live, unexpired lease is refused
with :class:`AttemptOwned` (cancel it through its host, or wait for the lease
to lapse); otherwise the operator takes the attempt over under the next
fencing generation and commits a ``cancelled`` terminal outcome, so any late
write of the old owner fails closed.
"""

from __future__ import annotations

import os
from pathlib import Path

import msgspec

from statemachines import ExecutionStatus, RetentionStatus, SubagentsError, derive_phase
from storage import (
    AttemptRecord,
    NotFound,
    ResultRef,
    SessionStore,
    TerminalCommit,
    result_digest,
)

from ._datadir import open_store

OPERATOR_ID = "operator"
OPERATOR_LEASE_SECONDS = 30.0
_ACTIVE = {"accepted", "starting", "running", "waiting"}


class AttemptOwned(SubagentsError):
    """The attempt runs under a live owner lease. Fields: ``attempt_id``, ``owner``, ``fix``."""

    def __str__(self) -> str:
        return self.message


class AmbiguousAttemptId(SubagentsError):
    """An id prefix matches more than one attempt.

    Fields: ``prefix``, ``candidates`` (the matching full ids, sorted), ``fix``.
    """

    def __str__(self) -> str:
        return self.message


class AttemptView(msgspec.Struct, frozen=True, kw_only=True):
    """What an operator sees of one attempt."""

    attempt_id: str
    agent_id: str
    subagent_name: str
    session_id: str
    parent_run_id: str
    phase: str
    execution_status: str
    delivery_status: str
    retention_status: str
    owner: str
    fencing_generation: int
    lease_expires_at: float
    lease_live: bool
    failure_category: str | None
    cancellation_reason: str | None
    continuation_run_id: str | None
    accepted_at: float
    terminal_at: float | None


def view(record: AttemptRecord, now: float) -> AttemptView:
    lease = record.owner_lease
    return AttemptView(
        attempt_id=record.attempt_id,
        agent_id=record.agent_id,
        subagent_name=record.subagent_name,
        session_id=record.parent_session_id,
        parent_run_id=record.parent_run_id,
        phase=str(
            derive_phase(
                str(record.execution_status),
                str(record.delivery_status),
                str(record.retention_status),
            )
        ),
        execution_status=str(record.execution_status),
        delivery_status=str(record.delivery_status),
        retention_status=str(record.retention_status),
        owner=lease.host_instance_id,
        fencing_generation=lease.fencing_generation,
        lease_expires_at=lease.lease_expires_at,
        lease_live=str(record.execution_status) in _ACTIVE and lease.lease_expires_at > now,
        failure_category=record.failure_category,
        cancellation_reason=record.cancellation_reason,
        continuation_run_id=record.continuation_run_id,
        accepted_at=record.accepted_at,
        terminal_at=record.terminal_at,
    )


class TrustedAttempts:
    """Inspect and cancel durable attempts in one store (``subagents attempts`` in Python)."""

    def __init__(self, store: SessionStore, namespace_id: str = "default") -> None:
        self.store = store
        self.namespace_id = namespace_id

    def list(self, session_id: str | None = None) -> list[AttemptView]:
        now = self.store.clock.now()
        records = self.store.list_attempts(self.namespace_id, session_id)
        return [view(record, now) for record in records]

    def resolve(self, id_or_prefix: str) -> str:
        """The full attempt id: ``id_or_prefix`` itself when it is an id, else the one
        attempt of the namespace whose id starts with it.

        Raises :class:`storage.NotFound` when nothing matches and
        :class:`AmbiguousAttemptId` (listing the candidates) when several do.
        """
        try:
            return self.store.load_attempt(id_or_prefix).attempt_id
        except NotFound:
            pass
        matches = sorted(
            record.attempt_id
            for record in self.store.list_attempts(self.namespace_id, None)
            if id_or_prefix and record.attempt_id.startswith(id_or_prefix)
        )
        if len(matches) == 1:
            return matches[0]
        if not matches:
            raise NotFound("no such attempt", attempt_id=id_or_prefix)
        raise AmbiguousAttemptId(
            f"attempt id prefix {id_or_prefix[:100]!r} matches {len(matches)} attempts: "
            + ", ".join(matches[:10])
            + (" ..." if len(matches) > 10 else ""),
            prefix=id_or_prefix,
            candidates=matches,
            fix="give more characters of the id, or the full id",
        )

    def show(self, attempt_id: str) -> AttemptView:
        """One attempt, by its full id or a unique prefix of it (see :meth:`resolve`)."""
        found = self.store.load_attempt(self.resolve(attempt_id))
        return view(found, self.store.clock.now())

    def cancel(self, attempt_id: str, reason: str = "cancelled by operator") -> AttemptView:
        """Cancel a non-terminal attempt whose owner is gone; terminal ones are returned as is."""
        store = self.store
        record = store.load_attempt(attempt_id)
        now = store.clock.now()
        if str(record.execution_status) not in _ACTIVE:
            return view(record, now)
        lease = record.owner_lease
        if lease.lease_expires_at > now:
            raise AttemptOwned(
                f"attempt {attempt_id} is owned by live host {lease.host_instance_id} for "
                f"{lease.lease_expires_at - now:.0f} more seconds",
                attempt_id=attempt_id,
                owner=lease.host_instance_id,
                fix="cancel it through its host, or retry after the lease expires",
            )
        taken = store.take_over_attempt(
            attempt_id, OPERATOR_ID, lease.fencing_generation + 1, now + OPERATOR_LEASE_SECONDS
        )
        now = store.clock.now()
        text = reason or "cancelled by operator"
        commit = TerminalCommit(
            record=msgspec.structs.replace(
                taken,
                execution_status=ExecutionStatus.CANCELLED,
                result_ref=ResultRef(
                    error=text, digest=result_digest(None, text), size_bytes=len(text.encode())
                ),
                failure_category="cancelled",
                cancellation_reason=text,
                retention_status=RetentionStatus.INLINE,
                retention_expires_at=now + store_retention(store),
                terminal_at=now,
                updated_at=now,
                terminal_fingerprint=None,
            )
        )
        return view(store.commit_terminal(commit), store.clock.now())


def store_retention(store: SessionStore) -> float:
    value = getattr(store, "retention_seconds", None)
    return float(value) if isinstance(value, int | float) and value > 0 else 86400.0


def list_attempts(
    data_dir: str | os.PathLike[str],
    *,
    namespace_id: str = "default",
    session_id: str | None = None,
) -> list[AttemptView]:
    """Every attempt in ``data_dir`` (also while a host serves it)."""
    opened = open_store(Path(data_dir), lock=False)
    try:
        return TrustedAttempts(opened.store, namespace_id).list(session_id)
    finally:
        opened.close()


def show_attempt(data_dir: str | os.PathLike[str], attempt_id: str) -> AttemptView:
    opened = open_store(Path(data_dir), lock=False)
    try:
        return TrustedAttempts(opened.store).show(attempt_id)
    finally:
        opened.close()


def cancel_attempt(
    data_dir: str | os.PathLike[str], attempt_id: str, reason: str = "cancelled by operator"
) -> AttemptView:
    """Cancel an attempt whose owner is gone (:class:`AttemptOwned` while its lease is live)."""
    opened = open_store(Path(data_dir), lock=False)
    try:
        return TrustedAttempts(opened.store).cancel(attempt_id, reason)
    finally:
        opened.close()
