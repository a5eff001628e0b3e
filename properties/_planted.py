"""Planted bugs: wrappers that break one guarantee of any store.

They exist to show that each property machine catches the class of bug it
is about (a suite that cannot fail proves nothing). Each wrapper delegates
every operation to a real store and changes exactly one behaviour:

- :class:`StaleHeartbeatRevives` lets an expired owner heartbeat (the fencing
  machine must catch it);
- :class:`ReplaySkipsFingerprint` accepts any replay of a committed terminal
  (the replay machine must catch it);
- :class:`SecondContinuation` admits a second continuation run for an
  already delivered attempt (the delivery machine must catch it);
- :class:`IgnoresAggregateQuota` ignores the namespace aggregate artifact
  limit (the retention machine must catch it).
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from statemachines import RunStatus, SessionStatus
from storage import (
    AcquireContinuation,
    Artifact,
    AttemptRecord,
    Conflict,
    ContinuationReceipt,
    Delivered,
    DeliveryClaim,
    DeliveryRelease,
    ManualClock,
    NotFound,
    Retryable,
    RunAdmissionReceipt,
    RunRecord,
    SessionRecord,
    SessionStore,
    StaleFence,
    TerminalCommit,
    continuation_cause,
)

from ._factories import NamedFactory, StoreFactory, StoreHandle


class StoreProxy(SessionStore):
    """Delegates every contract operation to ``inner``."""

    def __init__(self, inner: SessionStore) -> None:
        self.inner = inner
        self.clock = inner.clock

    def create_session(self, session: SessionRecord) -> SessionRecord:
        return self.inner.create_session(session)

    def load_session(self, session_id: str) -> SessionRecord:
        return self.inner.load_session(session_id)

    def list_sessions(self, namespace_id: str) -> list[SessionRecord]:
        return self.inner.list_sessions(namespace_id)

    def update_session_status(self, session_id: str, status: SessionStatus) -> SessionRecord:
        return self.inner.update_session_status(session_id, status)

    def fence_session_deletion(self, session_id: str) -> SessionRecord:
        return self.inner.fence_session_deletion(session_id)

    def admit_run(
        self, run: RunRecord, *, idempotency_key: str | None = None
    ) -> RunAdmissionReceipt:
        return self.inner.admit_run(run, idempotency_key=idempotency_key)

    def load_run(self, session_id: str, run_id: str) -> RunRecord:
        return self.inner.load_run(session_id, run_id)

    def list_runs(self, session_id: str) -> list[RunRecord]:
        return self.inner.list_runs(session_id)

    def transition_run(
        self,
        session_id: str,
        run_id: str,
        status: RunStatus,
        *,
        admission_id: str | None = None,
        output_preview: str | None = None,
    ) -> RunRecord:
        return self.inner.transition_run(
            session_id, run_id, status, admission_id=admission_id, output_preview=output_preview
        )

    def renew_run_admission(
        self, session_id: str, run_id: str, admission_id: str, lease_expires_at: float
    ) -> RunRecord:
        return self.inner.renew_run_admission(session_id, run_id, admission_id, lease_expires_at)

    def accept_attempt(self, record: AttemptRecord) -> AttemptRecord:
        return self.inner.accept_attempt(record)

    def update_attempt_execution(self, record: AttemptRecord) -> AttemptRecord:
        return self.inner.update_attempt_execution(record)

    def heartbeat_attempt(
        self,
        attempt_id: str,
        host_instance_id: str,
        fencing_generation: int,
        lease_expires_at: float,
    ) -> AttemptRecord:
        return self.inner.heartbeat_attempt(
            attempt_id, host_instance_id, fencing_generation, lease_expires_at
        )

    def take_over_attempt(
        self,
        attempt_id: str,
        host_instance_id: str,
        fencing_generation: int,
        lease_expires_at: float,
    ) -> AttemptRecord:
        return self.inner.take_over_attempt(
            attempt_id, host_instance_id, fencing_generation, lease_expires_at
        )

    def commit_terminal(self, commit: TerminalCommit) -> AttemptRecord:
        return self.inner.commit_terminal(commit)

    def load_attempt(self, attempt_id: str) -> AttemptRecord:
        return self.inner.load_attempt(attempt_id)

    def list_attempts(
        self, namespace_id: str, session_id: str | None = None
    ) -> list[AttemptRecord]:
        return self.inner.list_attempts(namespace_id, session_id)

    def list_active_attempts(self, namespace_id: str) -> list[AttemptRecord]:
        return self.inner.list_active_attempts(namespace_id)

    def list_pending_attempts(
        self, namespace_id: str, session_id: str | None = None
    ) -> list[AttemptRecord]:
        return self.inner.list_pending_attempts(namespace_id, session_id)

    def load_artifact(self, artifact_ref: str) -> Artifact:
        return self.inner.load_artifact(artifact_ref)

    def claim_delivery(
        self, attempt_id: str, claim: DeliveryClaim, *, automatic: bool = False
    ) -> AttemptRecord:
        return self.inner.claim_delivery(attempt_id, claim, automatic=automatic)

    def acknowledge_delivery(self, attempt_id: str, claim_id: str) -> AttemptRecord:
        return self.inner.acknowledge_delivery(attempt_id, claim_id)

    def release_delivery(
        self, attempt_id: str, claim_id: str, release: DeliveryRelease
    ) -> AttemptRecord:
        return self.inner.release_delivery(attempt_id, claim_id, release)

    def acquire_continuation(self, request: AcquireContinuation) -> ContinuationReceipt:
        return self.inner.acquire_continuation(request)

    def claim_pending_for_run(
        self, session_id: str, run_id: str, deadline: float
    ) -> list[AttemptRecord]:
        return self.inner.claim_pending_for_run(session_id, run_id, deadline)

    def reconcile(self, namespace_id: str) -> list[AttemptRecord]:
        return self.inner.reconcile(namespace_id)

    def expire_retention(self, namespace_id: str, limit: int = 1000) -> list[AttemptRecord]:
        return self.inner.expire_retention(namespace_id, limit)

    def drain(self) -> None:
        self.inner.drain()

    def close(self) -> None:
        self.inner.close()


class StaleHeartbeatRevives(StoreProxy):
    """BUG: an owner whose lease expired revives itself by heartbeat."""

    def heartbeat_attempt(
        self,
        attempt_id: str,
        host_instance_id: str,
        fencing_generation: int,
        lease_expires_at: float,
    ) -> AttemptRecord:
        try:
            return super().heartbeat_attempt(
                attempt_id, host_instance_id, fencing_generation, lease_expires_at
            )
        except StaleFence:
            lease = self.inner.load_attempt(attempt_id).owner_lease
            if (lease.host_instance_id, lease.fencing_generation) != (
                host_instance_id,
                fencing_generation,
            ):
                raise
            # "Revive" through the store's own takeover path.
            return self.inner.take_over_attempt(
                attempt_id, host_instance_id, fencing_generation + 1, lease_expires_at
            )


class ReplaySkipsFingerprint(StoreProxy):
    """BUG: any commit on an already terminal attempt is answered as an exact replay."""

    def commit_terminal(self, commit: TerminalCommit) -> AttemptRecord:
        try:
            return super().commit_terminal(commit)
        except Conflict:
            stored = self.inner.load_attempt(commit.record.attempt_id)
            if stored.terminal_fingerprint is None:
                raise
            return stored


class SecondContinuation(StoreProxy):
    """BUG: a delivered attempt admits another continuation run (kept beside the store)."""

    def __init__(self, inner: SessionStore) -> None:
        super().__init__(inner)
        self.extra_runs: list[RunRecord] = []

    def acquire_continuation(self, request: AcquireContinuation) -> ContinuationReceipt:
        try:
            return super().acquire_continuation(request)
        except Delivered:
            record = self.inner.load_attempt(request.attempt_id)
            if record.continuation_run_id in (None, request.run.run_id):
                raise
            run = msgspec.structs.replace(request.run, sequence_no=10_000 + len(self.extra_runs))
            self.extra_runs.append(run)
            return ContinuationReceipt(
                cause=continuation_cause(record, request.run.input), record=record, run=run
            )

    def list_runs(self, session_id: str) -> list[RunRecord]:
        extra = [r for r in self.extra_runs if r.session_id == session_id]
        return super().list_runs(session_id) + extra

    def load_run(self, session_id: str, run_id: str) -> RunRecord:
        try:
            return super().load_run(session_id, run_id)
        except NotFound:
            for run in self.extra_runs:
                if (run.session_id, run.run_id) == (session_id, run_id):
                    return run
            raise


class IgnoresAggregateQuota(StoreProxy):
    """BUG: the namespace aggregate artifact limit is not enforced."""

    def commit_terminal(self, commit: TerminalCommit) -> AttemptRecord:
        limits = commit.artifact_limits
        if limits is not None and 0 < limits.max_single_bytes <= limits.max_retained_bytes:
            limits = msgspec.structs.replace(limits, max_retained_bytes=1 << 40)
            commit = msgspec.structs.replace(commit, artifact_limits=limits)
        return super().commit_terminal(commit)


class DeadConsumerUnsuppressed(StoreProxy):
    """BUG: a failed or cancelled consumer run's claims are released without the
    suppression (as if its host had died), so an automatic continuation starts at once."""

    def transition_run(
        self,
        session_id: str,
        run_id: str,
        status: RunStatus,
        *,
        admission_id: str | None = None,
        output_preview: str | None = None,
    ) -> RunRecord:
        if status in (RunStatus.FAILED, RunStatus.CANCELLED):
            namespace = self.inner.load_session(session_id).namespace_id
            for record in self.inner.list_pending_attempts(namespace, session_id):
                claim = record.delivery_claim
                if claim is not None and claim.continuation_run_id == run_id:
                    self.inner.release_delivery(record.attempt_id, claim.claim_id, Retryable())
        return super().transition_run(
            session_id, run_id, status, admission_id=admission_id, output_preview=output_preview
        )


PLANTED: dict[str, type[StoreProxy]] = {
    "fencing": StaleHeartbeatRevives,
    "replay": ReplaySkipsFingerprint,
    "delivery": SecondContinuation,
    "retention": IgnoresAggregateQuota,
    "consumers": DeadConsumerUnsuppressed,
}
"""Which planted bug each machine is expected to catch."""


def planted(factory: StoreFactory, bug: type[StoreProxy]) -> NamedFactory:
    """``factory`` with ``bug`` wrapped around every store it opens (reopens too)."""

    def make(clock: ManualClock) -> StoreHandle:
        handle = factory(clock)
        handle.store = bug(handle.store)
        reopen = handle.open_again
        if reopen is not None:
            again: Callable[[], SessionStore] = reopen
            handle.open_again = lambda: bug(again())
        return handle

    return NamedFactory(f"{factory.name}+{bug.__name__}", make)
