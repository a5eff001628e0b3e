"""The independent reference model of the SessionStore contract.

Plain Python dicts and dataclasses, written from the docstrings of
:class:`storage.SessionStore` (and DESIGN §5), never from a store's code: the
model shares nothing with :mod:`storage._kernel` or
:class:`storage.MemorySessionStore`. It uses only the record types, the
lifecycle tables and the shared digest helpers (the canonical forms are part
of the contract).

For every operation the model returns an :class:`Outcome`: the error class the
store must raise, or Ok with a change that is applied to the model when the
store answers Ok. When several preconditions fail at once, the contract does
not fix which one a store reports first, so the model predicts the most
specific error class common to all of them (:func:`common_error`). Where the
contract leaves an answer open, the outcome allows either (``ok_allowed``
together with ``error``); the harness still checks that a refused operation
changed nothing.

Decisions taken where the contract is silent are listed in :data:`DECISIONS`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import msgspec

from statemachines import EXECUTION, RUN, is_active_execution
from storage import (
    ASYNC_SUBAGENT_RESULT,
    AcquireContinuation,
    AttemptRecord,
    Conflict,
    ConsumerTerminated,
    ContinuationCause,
    Delivered,
    DeliveryClaim,
    DeliveryClaimed,
    DeliveryRelease,
    IdempotencyConflict,
    IllegalTransition,
    InputPart,
    InvalidRecord,
    NotFound,
    QuotaExceeded,
    ResultRef,
    RunConflict,
    RunRecord,
    StaleFence,
    StoreError,
    TerminalCommit,
    continuation_cause,
    continuation_input,
    result_digest,
    terminal_fingerprint,
)

DECISIONS: tuple[str, ...] = (
    "A deadline, lease or expiry at exactly `now` has passed (`<= now`), for leases, "
    "claims, admission leases, retention deadlines and artifact expiry alike.",
    "When several preconditions fail, any error class common to all of them is accepted.",
    "The aggregate artifact quota counts artifacts whose `expires_at` is still after now and "
    "that expire_retention has not deleted.",
    "An identical acceptance retry after the stored record moved on (heartbeat, takeover, "
    "terminal) may be Ok or refused; it must change nothing.",
    "An execution update to the current status by a stale writer may be Ok (no-op) or "
    "StaleFence; it must change nothing.",
    "A Retryable release of a claim id the store never issued, on an undelivered record, "
    "may be Ok or Conflict.",
    "reconcile() terminalizes expired attempts of a deletion-fenced session too; its "
    "synthesized failure must replay exactly (TerminalCommit of the stored record is Ok).",
    "Once a result's retention deadline has passed, acquire_continuation derives the expiry "
    "summary even before expire_retention ran (content past its deadline is never delivered).",
    "After delivery the stored `delivery_claim` is not compared (a store may keep or clear it).",
    "acquire_continuation's `claim_deadline` bounds the claim it takes; when the attempt is "
    "already claimed under `request.claim_id` a past deadline is not refused.",
    "An admit_run retry with the same idempotency key and request returns the first receipt "
    "(idempotent_replay=True) even when a run is now live or the session inactive.",
    "A failed or cancelled consumer's expired claim is released with suppression by reconcile "
    "and by the next claim alike; an automatic claim is then refused but the release stays.",
    "`updated_at` is compared only where the contract stamps it (update_attempt_execution).",
    "A run (plain or continuation) submitted with an admission lease already expired at store "
    "time is refused with Conflict, like an already-expired acceptance.",
    "A claim linked to a consumer run needs that run live (admitted or running under an "
    "unexpired admission lease) when it is taken; otherwise Conflict.",
    "An exact acquire_continuation retry returns the first receipt whatever happened to the "
    "continuation run since; after a lease-lost release another (replacement) continuation "
    "may be admitted, so `at most one continuation` means at most one live or completed one.",
    "claim_pending_for_run skips results whose retention expired (by status or deadline), "
    "and results claimed by another consumer whose claim is live (deadline ahead, or its run "
    "live); an expired dead claim is settled first, as claim_delivery settles it.",
)


def common_error(classes: list[type[StoreError]]) -> type[StoreError]:
    """The most specific class every one of ``classes`` is a subclass of."""
    first = classes[0]
    for candidate in first.__mro__:
        if not (isinstance(candidate, type) and issubclass(candidate, StoreError)):
            continue
        if all(issubclass(c, candidate) for c in classes):
            return candidate
    return StoreError


def _finite(*values: float | None) -> bool:
    return all(v is None or math.isfinite(v) for v in values)


def acceptance_problems(record: AttemptRecord) -> list[str]:
    """Why ``record`` is not a canonical acceptance (empty when it is)."""
    lease = record.owner_lease
    problems = []
    if record.execution_status != "accepted":
        problems.append(f"execution {record.execution_status}")
    if record.delivery_status != "undelivered" or record.delivery_claim is not None:
        problems.append("not undelivered")
    if record.retention_status != "inline":
        problems.append(f"retention {record.retention_status}")
    if record.result_ref is not None or record.terminal_fingerprint is not None:
        problems.append("has a result")
    if record.terminal_at is not None or record.retention_expires_at is not None:
        problems.append("has terminal fields")
    if record.failure_category is not None or record.delivered_claim_id is not None:
        problems.append("has terminal or delivery evidence")
    if record.cancellation_reason is not None:
        problems.append("has a cancellation reason")
    if record.continuation_run_id is not None:
        problems.append("names a continuation run")
    if record.automatic_continuation_suppressed_by_run_id is not None:
        problems.append("suppresses automatic continuation")
    if record.delivered_to_run_id is not None:
        problems.append("names a consumer run")
    if not lease.host_instance_id or lease.fencing_generation <= 0:
        problems.append("owner lease has no host or a generation <= 0")
    if not _finite(lease.heartbeat_at, lease.lease_expires_at, record.accepted_at):
        problems.append("non-finite time")
    elif lease.lease_expires_at <= lease.heartbeat_at:
        problems.append("lease_expires_at <= heartbeat_at")
    if not (lease.heartbeat_at == record.accepted_at == record.updated_at):
        problems.append("heartbeat_at, accepted_at, updated_at differ")
    return problems


_IDENTITY = (
    "attempt_id",
    "agent_id",
    "subagent_name",
    "namespace_id",
    "parent_session_id",
    "parent_run_id",
    "linked_task_id",
    "profile",
    "accepted_at",
    "trace_context",
)


def terminal_problems(stored: AttemptRecord, commit: TerminalCommit) -> list[str]:
    """Why ``commit`` is not a canonical first terminal commit of ``stored``."""
    r = commit.record
    ref = r.result_ref
    problems = [
        f"{name} differs from the stored record"
        for name in _IDENTITY
        if getattr(r, name) != getattr(stored, name)
    ]
    if is_active_execution(r.execution_status):
        problems.append(f"execution {r.execution_status} is not terminal")
    if ref is None:
        problems.append("no result_ref")
    if r.delivery_status != "undelivered" or r.delivery_claim is not None:
        problems.append("not undelivered")
    if r.retention_status not in ("inline", "artifact"):
        problems.append(f"retention {r.retention_status}")
    if r.terminal_at is None or r.terminal_at != r.updated_at:
        problems.append("terminal_at != updated_at")
    if not _finite(r.terminal_at, r.updated_at, r.retention_expires_at):
        problems.append("non-finite time")
    art = commit.artifact
    if art is not None:
        if (
            ref is None
            or ref.artifact_ref != art.artifact_ref
            or art.attempt_id != r.attempt_id
            or art.namespace_id != r.namespace_id
            or art.digest != result_digest(art.content)
            or art.size_bytes != len(art.content.encode("utf-8"))
            or r.retention_status != "artifact"
        ):
            problems.append("artifact does not match the record or its content")
    elif r.retention_status == "artifact" or (ref is not None and ref.artifact_ref is not None):
        problems.append("artifact retention without an artifact")
    return problems


def _noop() -> None:
    return None


@dataclass
class Outcome:
    """The model's prediction for one operation."""

    error: type[StoreError] | None
    why: str
    apply: Callable[[], None] = _noop
    """Model change when the store answers Ok."""
    ok_allowed: bool = True
    apply_on_error: Callable[[], None] | None = None
    """Model change that stays committed even when the store raises (a claim's release)."""

    @property
    def writes_on_error(self) -> bool:
        return self.apply_on_error is not None


def ok(why: str = "ok", apply: Callable[[], None] = _noop) -> Outcome:
    return Outcome(error=None, why=why, apply=apply)


def err(reasons: list[tuple[type[StoreError], str]]) -> Outcome:
    classes = [c for c, _ in reasons]
    return Outcome(
        error=common_error(classes),
        why="; ".join(w for _, w in reasons),
        ok_allowed=False,
    )


def either(error: type[StoreError], why: str, apply: Callable[[], None] = _noop) -> Outcome:
    return Outcome(error=error, why=why, apply=apply, ok_allowed=True)


@dataclass
class ModelSession:
    session_id: str
    namespace_id: str
    status: str = "active"


@dataclass
class ModelRun:
    session_id: str
    run_id: str
    order: int
    status: str
    trigger_type: str | None
    input: tuple[InputPart, ...]
    admission_id: str | None
    lease_expires_at: float | None
    metadata: dict[str, str] = field(default_factory=dict)


@dataclass
class ModelArtifact:
    artifact_ref: str
    namespace_id: str
    attempt_id: str
    content: str
    size_bytes: int
    expires_at: float
    deleted: bool = False


@dataclass
class ModelReceipt:
    request: AcquireContinuation
    cause: ContinuationCause
    run_id: str
    input: tuple[InputPart, ...]


_ALWAYS_LOOSE = frozenset({"updated_at"})
_LOOSE_AFTER_DELIVERY = frozenset({"delivery_claim"})


def diff_attempt(expected: AttemptRecord, actual: AttemptRecord) -> list[str]:
    """Fields where ``actual`` differs from the model (ignoring fields the contract leaves open)."""
    want = msgspec.structs.asdict(expected)
    got = msgspec.structs.asdict(actual)
    loose = set(_ALWAYS_LOOSE)
    if expected.delivery_status == "delivered":
        loose |= _LOOSE_AFTER_DELIVERY
    out = []
    for name, value in want.items():
        if name in loose:
            continue
        if got.get(name) != value:
            out.append(f"{name}: model {value!r} != store {got.get(name)!r}")
    return out


def _encode(value: object) -> bytes:
    return msgspec.json.encode(value, order="deterministic")


class Reference:
    """The contract as plain data. ``now`` is the same ManualClock the store reads."""

    def __init__(self, now: Callable[[], float]) -> None:
        self.now = now
        self.sessions: dict[str, ModelSession] = {}
        self.runs: dict[tuple[str, str], ModelRun] = {}
        self.attempts: dict[str, AttemptRecord] = {}
        self.commits: dict[str, TerminalCommit] = {}
        """The first terminal commit of each attempt (for exact replay)."""
        self.artifacts: dict[str, ModelArtifact] = {}
        self.receipts: dict[str, ModelReceipt] = {}
        self.released_claims: dict[str, set[str]] = {}
        self.canonical_inputs: dict[str, bytes] = {}
        """Per continuation run id: the bytes of the canonical input it was admitted with."""
        self.consumed: dict[str, list[str]] = {}
        """Per attempt: every consumer run that completed while it held the result."""
        self.consumer_deaths: dict[str, int] = {}
        """How often a consumer run holding results died, by how (failed, cancelled,
        lease_lost): the rules the delivery machine counts."""
        self._run_order = 0
        self.idempotency: dict[tuple[str, str], RunRecord] = {}
        """(session, idempotency key) -> the request first admitted under it."""

    # -- helpers ----------------------------------------------------------------------------

    def run_live(self, run: ModelRun | None) -> bool:
        return (
            run is not None
            and run.status in ("admitted", "running")
            and run.lease_expires_at is not None
            and run.lease_expires_at > self.now()
        )

    def session_runs(self, session_id: str) -> list[ModelRun]:
        return sorted(
            (r for r in self.runs.values() if r.session_id == session_id), key=lambda r: r.order
        )

    def live_run(self, session_id: str) -> ModelRun | None:
        for run in self.session_runs(session_id):
            if self.run_live(run):
                return run
        return None

    def lease_live(self, record: AttemptRecord) -> bool:
        return record.owner_lease.lease_expires_at > self.now()

    def is_terminal(self, record: AttemptRecord) -> bool:
        return not is_active_execution(record.execution_status)

    def retained_bytes(self, namespace_id: str) -> int:
        now = self.now()
        return sum(
            a.size_bytes
            for a in self.artifacts.values()
            if a.namespace_id == namespace_id and not a.deleted and a.expires_at > now
        )

    def artifact_content(self, record: AttemptRecord) -> tuple[str | None, bool]:
        """(full artifact content or None, whether the answer is ambiguous)."""
        ref = record.result_ref
        if record.retention_status != "artifact" or ref is None or ref.artifact_ref is None:
            return None, False
        art = self.artifacts.get(ref.artifact_ref)
        if art is None or art.deleted:
            return None, True
        if art.expires_at <= self.now():
            return art.content, True
        return art.content, False

    def _put(self, record: AttemptRecord) -> None:
        self.attempts[record.attempt_id] = record

    # -- sessions ---------------------------------------------------------------------------

    def create_session(self, session_id: str, namespace_id: str) -> Outcome:
        if session_id in self.sessions:
            return ok("identical retry")

        def apply() -> None:
            self.sessions[session_id] = ModelSession(session_id, namespace_id)

        return ok("new session", apply)

    def set_session_status(self, session_id: str, status: str) -> Outcome:
        s = self.sessions[session_id]
        if s.status == status:
            return ok("same status is a no-op")
        if s.status == "deleting":
            return err([(IllegalTransition, "a deletion-fenced session never moves back")])

        def apply() -> None:
            s.status = status

        return ok(f"{s.status} -> {status}", apply)

    def fence_session(self, session_id: str) -> Outcome:
        s = self.sessions[session_id]
        if s.status == "deleting":
            return ok("already fenced")
        for a in self.attempts.values():
            if a.parent_session_id == session_id and not self.is_terminal(a) and self.lease_live(a):
                return err([(Conflict, f"{a.attempt_id} holds a live lease")])

        def apply() -> None:
            s.status = "deleting"

        return ok("no live lease", apply)

    # -- runs -------------------------------------------------------------------------------

    def admit_run(self, run: RunRecord, idempotency_key: str | None = None) -> Outcome:
        s = self.sessions.get(run.session_id)
        if s is None:
            return err([(NotFound, "no such session")])
        if idempotency_key is not None:
            first = self.idempotency.get((run.session_id, idempotency_key))
            if first is not None:
                if first == run:
                    return ok("same key, same request: the first receipt again")
                return err([(IdempotencyConflict, "same key, another request")])
        reasons: list[tuple[type[StoreError], str]] = []
        if s.status != "active":
            reasons.append((Conflict, f"session is {s.status}"))
        if run.trigger_type == ASYNC_SUBAGENT_RESULT:
            reasons.append((Conflict, "continuations are admitted by acquire_continuation only"))
        lease = run.admission_lease
        if lease is not None and lease.lease_expires_at <= self.now():
            reasons.append((Conflict, "admission lease already expired"))
        if (run.session_id, run.run_id) in self.runs:
            reasons.append((StoreError, "run id already used"))
        live = self.live_run(run.session_id)
        if live is not None:
            reasons.append((RunConflict, f"run {live.run_id} is live"))
        if reasons:
            return err(reasons)

        def apply() -> None:
            self._add_run(run)
            if idempotency_key is not None:
                self.idempotency[(run.session_id, idempotency_key)] = run

        return ok("admitted", apply)

    def _add_run(self, run: RunRecord) -> None:
        self._run_order += 1
        lease = run.admission_lease
        self.runs[(run.session_id, run.run_id)] = ModelRun(
            session_id=run.session_id,
            run_id=run.run_id,
            order=self._run_order,
            status="admitted",
            trigger_type=run.trigger_type,
            input=run.input,
            admission_id=lease.admission_id if lease else None,
            lease_expires_at=lease.lease_expires_at if lease else None,
            metadata=dict(run.metadata),
        )

    def transition_run(
        self, session_id: str, run_id: str, status: str, admission_id: str | None
    ) -> Outcome:
        run = self.runs.get((session_id, run_id))
        if run is None:
            return err([(NotFound, "no such run")])
        reasons: list[tuple[type[StoreError], str]] = []
        if run.admission_id is not None and admission_id != run.admission_id:
            reasons.append((StaleFence, "admission id differs"))
        if status == run.status:
            if reasons:
                return either(
                    common_error([c for c, _ in reasons]), "same status by a stale writer"
                )
            return ok("same status is a no-op")
        if not RUN.allows(run.status, status):
            reasons.append((IllegalTransition, f"run {run.status} -> {status}"))
        # A run whose admission lease lapsed may be failed or cancelled (the
        # reconciler records a dead host's run) but neither resumed nor completed:
        # its claims may already be released to a replacement consumer, so its
        # completion would feed the same result to two runs.
        if (
            status in ("running", "completed")
            and run.lease_expires_at is not None
            and run.lease_expires_at <= self.now()
        ):
            reasons.append((Conflict, "admission lease expired"))
        if reasons:
            return err(reasons)

        linked = self.linked_claims(session_id, run_id)
        # A run failed or cancelled after its lease lapsed is a consumer lost with its
        # host (the reconciler records it): its claims go back unsuppressed.
        lost = run.lease_expires_at is not None and run.lease_expires_at <= self.now()
        if status in ("completed", "failed", "cancelled") and linked:
            verb = (
                "acknowledging"
                if status == "completed"
                else "releasing (lease lost)"
                if lost
                else "releasing (suppressed)"
            )
            why = f"run -> {status}, {verb} {len(linked)} linked claim(s)"
        else:
            why = f"run -> {status}"

        def apply() -> None:
            run.status = status
            self.settle_linked(session_id, run_id, status, lost=lost)

        return ok(why, apply)

    def linked_claims(self, session_id: str, run_id: str) -> list[str]:
        """Attempts currently claimed for consumer run ``run_id``."""
        return sorted(
            a.attempt_id
            for a in self.attempts.values()
            if a.parent_session_id == session_id
            and a.delivery_status == "claimed"
            and a.delivery_claim is not None
            and a.delivery_claim.continuation_run_id == run_id
        )

    def settle_linked(
        self, session_id: str, run_id: str, status: str, *, lost: bool = False
    ) -> None:
        """The run's terminal commit settles its claims: completed acknowledges them,
        failed or cancelled releases them with suppression (without, when the run's
        lease had lapsed: its host died)."""
        linked = self.linked_claims(session_id, run_id)
        if status == "completed":
            for aid in linked:
                claim = self.attempts[aid].delivery_claim
                assert claim is not None
                self._deliver(aid, claim.claim_id, run_id)
        elif status in ("failed", "cancelled"):
            for aid in linked:
                self._release(aid, None if lost else run_id)
            if linked:
                self.consumer_deaths[status] = self.consumer_deaths.get(status, 0) + 1

    def renew_run(
        self, session_id: str, run_id: str, admission_id: str, lease_expires_at: float
    ) -> Outcome:
        run = self.runs.get((session_id, run_id))
        if run is None:
            return err([(NotFound, "no such run")])
        reasons: list[tuple[type[StoreError], str]] = []
        if admission_id != run.admission_id:
            reasons.append((StaleFence, "admission id differs"))
        if run.lease_expires_at is None or run.lease_expires_at <= self.now():
            reasons.append((StaleFence, "admission lease already expired"))
        if run.status not in ("admitted", "running"):
            reasons.append((Conflict, f"run is {run.status}"))
        if lease_expires_at <= self.now():
            reasons.append((Conflict, "new expiry is not after now"))
        if reasons:
            return err(reasons)

        def apply() -> None:
            run.lease_expires_at = lease_expires_at

        return ok("renewed", apply)

    # -- attempts ---------------------------------------------------------------------------

    def accept(self, record: AttemptRecord) -> Outcome:
        stored = self.attempts.get(record.attempt_id)
        if stored is not None:
            if stored == record and self.lease_live(stored):
                return ok("identical retry")
            return either(StoreError, "retry after the stored record moved on or expired")
        reasons: list[tuple[type[StoreError], str]] = [
            (InvalidRecord, problem) for problem in acceptance_problems(record)
        ]
        if record.owner_lease.lease_expires_at <= self.now():
            reasons.append((Conflict, "lease already expired at store time"))
        s = self.sessions.get(record.parent_session_id)
        if s is None or s.status != "active":
            reasons.append((Conflict, "parent session missing, inactive or fenced"))
        for other in self.attempts.values():
            if (
                other.namespace_id == record.namespace_id
                and other.parent_session_id == record.parent_session_id
                and other.agent_id == record.agent_id
                and not self.is_terminal(other)
            ):
                reasons.append((Conflict, f"{other.attempt_id} holds agent_id {record.agent_id}"))
                break
        if reasons:
            return err(reasons)
        return ok("accepted", lambda: self._put(record))

    def _owner_reasons(
        self, stored: AttemptRecord, host: str, generation: int
    ) -> list[tuple[type[StoreError], str]]:
        lease = stored.owner_lease
        if (host, generation) != (lease.host_instance_id, lease.fencing_generation):
            return [
                (
                    StaleFence,
                    f"writer {host}/{generation} is not owner "
                    f"{lease.host_instance_id}/{lease.fencing_generation}",
                )
            ]
        if not self.lease_live(stored):
            return [(StaleFence, "owner lease expired")]
        return []

    def _fenced(self, record: AttemptRecord) -> bool:
        s = self.sessions.get(record.parent_session_id)
        return s is not None and s.status == "deleting"

    def update_execution(self, record: AttemptRecord) -> Outcome:
        stored = self.attempts.get(record.attempt_id)
        if stored is None:
            return err([(NotFound, "no such attempt")])
        reasons: list[tuple[type[StoreError], str]] = []
        if self.is_terminal(stored):
            reasons.append((Conflict, f"attempt is {stored.execution_status}"))
        if record.owner_lease != stored.owner_lease:
            reasons.append((StaleFence, "writer lease is not the stored owner lease"))
        elif not self.lease_live(stored):
            reasons.append((StaleFence, "owner lease expired"))
        if self._fenced(stored):
            reasons.append((Conflict, "session deletion-fenced"))
        new_status = record.execution_status
        if new_status == stored.execution_status and record.child_run_id == stored.child_run_id:
            if reasons:
                return either(common_error([c for c, _ in reasons]), "same status, stale writer")
            return ok("same status is a no-op")
        if new_status != stored.execution_status:
            if not is_active_execution(new_status):
                reasons.append((Conflict, "terminal outcomes use commit_terminal"))
            elif not EXECUTION.allows(stored.execution_status, new_status):
                reasons.append(
                    (IllegalTransition, f"execution {stored.execution_status} -> {new_status}")
                )
        if reasons:
            return err(reasons)
        updated = msgspec.structs.replace(
            stored,
            execution_status=new_status,
            child_run_id=record.child_run_id,
            updated_at=self.now(),
        )
        return ok(f"execution -> {new_status}", lambda: self._put(updated))

    def heartbeat(
        self, attempt_id: str, host: str, generation: int, lease_expires_at: float
    ) -> Outcome:
        stored = self.attempts.get(attempt_id)
        if stored is None:
            return err([(NotFound, "no such attempt")])
        reasons: list[tuple[type[StoreError], str]] = []
        if self.is_terminal(stored):
            reasons.append((Conflict, f"attempt is {stored.execution_status}"))
        reasons += self._owner_reasons(stored, host, generation)
        if lease_expires_at <= self.now():
            reasons.append((Conflict, "new expiry is not after now"))
        if self._fenced(stored):
            reasons.append((Conflict, "session deletion-fenced"))
        if reasons:
            return err(reasons)
        lease = msgspec.structs.replace(
            stored.owner_lease, heartbeat_at=self.now(), lease_expires_at=lease_expires_at
        )
        updated = msgspec.structs.replace(stored, owner_lease=lease)
        return ok("heartbeat", lambda: self._put(updated))

    def take_over(
        self, attempt_id: str, host: str, generation: int, lease_expires_at: float
    ) -> Outcome:
        stored = self.attempts.get(attempt_id)
        if stored is None:
            return err([(NotFound, "no such attempt")])
        reasons: list[tuple[type[StoreError], str]] = []
        if self.is_terminal(stored):
            reasons.append((Conflict, f"attempt is {stored.execution_status}"))
        if self.lease_live(stored):
            reasons.append((StaleFence, "current lease has not expired"))
        if generation <= stored.owner_lease.fencing_generation:
            reasons.append((StaleFence, "generation not greater than the current one"))
        if lease_expires_at <= self.now():
            reasons.append((Conflict, "new expiry is not after now"))
        if reasons:
            return err(reasons)
        lease = msgspec.structs.replace(
            stored.owner_lease,
            host_instance_id=host,
            fencing_generation=generation,
            heartbeat_at=self.now(),
            lease_expires_at=lease_expires_at,
        )
        updated = msgspec.structs.replace(stored, owner_lease=lease)
        if self._fenced(stored):
            return either(Conflict, "takeover in a fenced session", lambda: self._put(updated))
        return ok("taken over", lambda: self._put(updated))

    def commit_terminal(self, commit: TerminalCommit) -> Outcome:
        record = commit.record
        stored = self.attempts.get(record.attempt_id)
        if stored is None:
            return err([(NotFound, "no such attempt")])
        if self.is_terminal(stored):
            if stored.terminal_fingerprint == terminal_fingerprint(commit):
                after = [
                    label
                    for label, cond in (
                        ("lease expired", not self.lease_live(stored)),
                        ("delivered", stored.delivery_status == "delivered"),
                        ("retention expired", stored.retention_status == "expired"),
                        ("session fenced", self._fenced(stored)),
                    )
                    if cond
                ]
                return ok("exact replay" + (f" after {', '.join(after)}" if after else ""))
            return err([(Conflict, "terminal already committed with another fingerprint")])
        reasons: list[tuple[type[StoreError], str]] = [
            (Conflict, problem) for problem in terminal_problems(stored, commit)
        ]
        if record.owner_lease != stored.owner_lease:
            reasons.append((StaleFence, "writer lease is not the stored owner lease"))
        elif not self.lease_live(stored):
            reasons.append((StaleFence, "owner lease expired"))
        if self._fenced(stored):
            reasons.append((Conflict, "session deletion-fenced"))
        if not EXECUTION.allows(stored.execution_status, record.execution_status):
            reasons.append(
                (
                    IllegalTransition,
                    f"execution {stored.execution_status} -> {record.execution_status}",
                )
            )
        if record.retention_expires_at is None or record.retention_expires_at <= self.now():
            reasons.append((Conflict, "retention deadline not after now"))
        art = commit.artifact
        if art is not None:
            limits = commit.artifact_limits
            if limits is None:
                reasons.append((Conflict, "artifact without limits"))
            elif (
                limits.max_single_bytes <= 0
                or limits.max_retained_bytes <= 0
                or limits.max_single_bytes > limits.max_retained_bytes
            ):
                reasons.append((Conflict, "invalid artifact limits"))
            else:
                if art.size_bytes > limits.max_single_bytes:
                    reasons.append((QuotaExceeded, "artifact over max_single_bytes"))
                retained = self.retained_bytes(record.namespace_id)
                if retained + art.size_bytes > limits.max_retained_bytes:
                    reasons.append(
                        (
                            QuotaExceeded,
                            f"aggregate {retained}+{art.size_bytes} > {limits.max_retained_bytes}",
                        )
                    )
            old = self.artifacts.get(art.artifact_ref)
            if old is not None and not old.deleted and old.content != art.content:
                reasons.append((Conflict, "changed bytes under the same artifact ref"))
        if reasons:
            return err(reasons)
        fingerprint = terminal_fingerprint(commit)
        stored_record = msgspec.structs.replace(record, terminal_fingerprint=fingerprint)

        def apply() -> None:
            self._put(stored_record)
            self.commits[record.attempt_id] = commit
            if commit.deliver_claim_id is not None:
                # Handed to an in-process consumer in the same transaction.
                self._deliver(record.attempt_id, commit.deliver_claim_id)
            if art is not None:
                self.artifacts[art.artifact_ref] = ModelArtifact(
                    artifact_ref=art.artifact_ref,
                    namespace_id=art.namespace_id,
                    attempt_id=art.attempt_id,
                    content=art.content,
                    size_bytes=art.size_bytes,
                    expires_at=art.expires_at,
                )

        return ok("first terminal commit", apply)

    # -- delivery ---------------------------------------------------------------------------

    def _consumer(self, record: AttemptRecord, claim: DeliveryClaim) -> ModelRun | None:
        if claim.continuation_run_id is None:
            return None
        return self.runs.get((record.parent_session_id, claim.continuation_run_id))

    def _release(self, attempt_id: str, suppress_by: str | None) -> None:
        rec = self.attempts[attempt_id]
        if rec.delivery_claim is not None:
            self.released_claims.setdefault(attempt_id, set()).add(rec.delivery_claim.claim_id)
        self._put(
            msgspec.structs.replace(
                rec,
                delivery_status="undelivered",
                delivery_claim=None,
                automatic_continuation_suppressed_by_run_id=(
                    suppress_by or rec.automatic_continuation_suppressed_by_run_id
                ),
            )
        )

    def _deliver(self, attempt_id: str, claim_id: str, run_id: str | None = None) -> None:
        rec = self.attempts[attempt_id]
        if run_id is not None:
            self.consumed.setdefault(attempt_id, []).append(run_id)
        self._put(
            msgspec.structs.replace(
                rec,
                delivery_status="delivered",
                delivered_claim_id=claim_id,
                delivered_to_run_id=run_id,
                automatic_continuation_suppressed_by_run_id=None,
            )
        )

    def _expired_claim_fate(
        self, record: AttemptRecord, claim: DeliveryClaim
    ) -> tuple[str, str | None]:
        """What happens to an expired claim: keep, acknowledge or release(suppress_by)."""
        consumer = self._consumer(record, claim)
        if self.run_live(consumer):
            return "keep", None
        if consumer is not None and consumer.status == "completed":
            return "acknowledge", None
        if consumer is not None and consumer.status in ("failed", "cancelled"):
            return "release", consumer.run_id
        return "release", None

    def claim(self, attempt_id: str, claim: DeliveryClaim, automatic: bool) -> Outcome:
        rec = self.attempts.get(attempt_id)
        if rec is None:
            return err([(NotFound, "no such attempt")])
        now = self.now()
        if rec.delivery_status == "claimed" and rec.delivery_claim == claim:
            if claim.deadline <= now:
                return either(Conflict, "exact replay of an expired claim")
            return ok("exact replay of the current claim")
        reasons: list[tuple[type[StoreError], str]] = []
        if not self.is_terminal(rec):
            reasons.append((Conflict, "attempt not terminal"))
        if claim.deadline <= now:
            reasons.append((Conflict, "claim deadline not after now"))
        if rec.delivery_status == "delivered":
            reasons.append((Delivered, "already delivered"))
        if claim.continuation_run_id is not None and not self.run_live(
            self.runs.get((rec.parent_session_id, claim.continuation_run_id))
        ):
            reasons.append((Conflict, "the claim's consumer run is not live"))
        if reasons:
            return err(reasons)
        released: Callable[[], None] | None = None
        how = "claimed"
        suppressed = rec.automatic_continuation_suppressed_by_run_id
        if rec.delivery_status == "claimed":
            old = rec.delivery_claim
            assert old is not None
            consumer = self._consumer(rec, old)
            if old.deadline > now or self.run_live(consumer):
                return err([(DeliveryClaimed, f"claim {old.claim_id} is live")])
            fate, suppress_by = self._expired_claim_fate(rec, old)
            if fate == "acknowledge":
                out = err([(Delivered, "the old claim's consumer completed")])
                out.apply_on_error = lambda: self._deliver(
                    attempt_id, old.claim_id, old.continuation_run_id
                )
                return out

            def released_fn() -> None:
                if suppress_by is None and old.continuation_run_id is not None:
                    deaths = self.consumer_deaths
                    deaths["lease_lost"] = deaths.get("lease_lost", 0) + 1
                self._release(attempt_id, suppress_by)

            released = released_fn
            how = "claimed after releasing an expired claim" + (
                " of a failed/cancelled consumer (suppressing)" if suppress_by else ""
            )
            suppressed = suppress_by or suppressed
        s = self.sessions.get(rec.parent_session_id)
        if automatic and (suppressed is not None or s is None or s.status != "active"):
            out = err(
                [
                    (
                        Conflict,
                        "automatic continuation suppressed or session not active"
                        + (" (after releasing an expired claim)" if released else ""),
                    )
                ]
            )
            out.apply_on_error = released
            return out

        def apply() -> None:
            if released is not None:
                released()
            cur = self.attempts[attempt_id]
            self._put(msgspec.structs.replace(cur, delivery_status="claimed", delivery_claim=claim))

        return ok(how, apply)

    def acknowledge(self, attempt_id: str, claim_id: str) -> Outcome:
        rec = self.attempts.get(attempt_id)
        if rec is None:
            return err([(NotFound, "no such attempt")])
        if not self.is_terminal(rec):
            return err([(Conflict, "attempt not terminal")])
        if rec.delivery_status == "delivered":
            if rec.delivered_claim_id == claim_id:
                return ok("repeat acknowledge")
            return err([(Delivered, "delivered under another claim")])
        if rec.delivery_status == "claimed":
            assert rec.delivery_claim is not None
            if rec.delivery_claim.claim_id != claim_id:
                return err([(DeliveryClaimed, "claimed by another claim id")])
            if rec.delivery_claim.continuation_run_id is not None:
                return err([(Conflict, "a run-linked claim is acknowledged by its run completing")])
            cleared = rec.automatic_continuation_suppressed_by_run_id is not None
            return ok(
                "acknowledged" + (", clearing the suppression" if cleared else ""),
                lambda: self._deliver(attempt_id, claim_id),
            )
        return err([(Conflict, "not claimed")])

    def release(self, attempt_id: str, claim_id: str, release: DeliveryRelease) -> Outcome:
        rec = self.attempts.get(attempt_id)
        if rec is None:
            return err([(NotFound, "no such attempt")])
        if not self.is_terminal(rec):
            return err([(Conflict, "attempt not terminal")])
        if rec.delivery_status == "delivered":
            return err([(Conflict, "already delivered")])
        terminated = isinstance(release, ConsumerTerminated)
        if rec.delivery_status == "undelivered":
            if terminated:
                return err([(Conflict, "ConsumerTerminated on a record that is not claimed")])
            if claim_id in self.released_claims.get(attempt_id, set()):
                return ok("already released")
            return either(Conflict, "Retryable release of a claim id never issued")
        claim = rec.delivery_claim
        assert claim is not None
        if claim.claim_id != claim_id:
            return err([(Conflict, "claimed under another claim id")])
        if isinstance(release, ConsumerTerminated):
            if claim.continuation_run_id != release.run_id:
                return err([(Conflict, "claim's consumer is another run")])
            run_id = release.run_id
            return ok("released, suppressed", lambda: self._release(attempt_id, run_id))
        return ok("released", lambda: self._release(attempt_id, None))

    def continuation_request_parts(
        self, attempt_id: str
    ) -> tuple[tuple[InputPart, ...], ContinuationCause, bool]:
        """The canonical input and cause the store must derive now (and whether ambiguous)."""
        rec = self.attempts[attempt_id]
        deadline = rec.retention_expires_at
        if rec.retention_status != "expired" and deadline is not None and deadline <= self.now():
            # Content past its retention deadline is never delivered, even before
            # expire_retention ran: the continuation carries the expiry summary.
            view = msgspec.structs.replace(rec, retention_status="expired")
            parts = continuation_input(view, None)
            return parts, continuation_cause(view, parts), False
        content, ambiguous = self.artifact_content(rec)
        parts = continuation_input(rec, content)
        return parts, continuation_cause(rec, parts), ambiguous

    def acquire(self, request: AcquireContinuation) -> Outcome:
        rec = self.attempts.get(request.attempt_id)
        if rec is None:
            return err([(NotFound, "no such attempt")])
        prior = self.receipts.get(request.attempt_id)
        if prior is not None and prior.request == request:
            return ok("exact retry returns the first receipt")
        if rec.delivery_status == "delivered":
            return err([(Delivered, "already delivered")])
        reasons: list[tuple[type[StoreError], str]] = []
        if not self.is_terminal(rec):
            return err([(Conflict, "attempt not terminal")])
        if rec.delivery_status == "claimed":
            assert rec.delivery_claim is not None
            if rec.delivery_claim.claim_id != request.claim_id:
                reasons.append((Conflict, "claimed under another claim id"))
        if rec.automatic_continuation_suppressed_by_run_id is not None:
            reasons.append((Conflict, "automatic continuation suppressed"))
        s = self.sessions.get(rec.parent_session_id)
        if s is None or s.status != "active":
            reasons.append((Conflict, "session not active"))
        live = self.live_run(rec.parent_session_id)
        if live is not None:
            reasons.append((RunConflict, f"run {live.run_id} is live"))
        parts, cause, ambiguous = self.continuation_request_parts(request.attempt_id)
        run = request.run
        if not run.input or _encode(list(run.input)) != _encode(list(parts)):
            reasons.append((Conflict, "forged or empty input"))
        if request.cause != cause:
            reasons.append((Conflict, "forged cause"))
        expected_meta = {
            "async_subagent.attempt_id": rec.attempt_id,
            "async_subagent.agent_id": rec.agent_id,
            "async_subagent.parent_run_id": rec.parent_run_id,
        }
        if rec.child_run_id is not None:
            expected_meta["async_subagent.child_run_id"] = rec.child_run_id
        if (
            run.session_id != rec.parent_session_id
            or run.parent_run_id != rec.parent_run_id
            or run.trigger_type != ASYNC_SUBAGENT_RESULT
            or run.profile != rec.profile
            or run.metadata != expected_meta
            or run.trace_context != rec.trace_context
        ):
            reasons.append((Conflict, "run causal fields differ from the record"))
        lease = run.admission_lease
        if lease is None or lease.lease_expires_at <= self.now():
            reasons.append((Conflict, "continuation run has no live admission lease"))
        runs = self.session_runs(rec.parent_session_id)
        head = runs[-1].run_id if runs else None
        if request.expected_head_run_id is not None and request.expected_head_run_id != head:
            reasons.append((Conflict, f"stale head (head is {head})"))
        if run.restore_from_run_id != head:
            reasons.append((Conflict, f"restore_from_run_id is not the session head ({head})"))
        if (run.session_id, run.run_id) in self.runs:
            reasons.append((StoreError, "run id already used"))
        already_claimed = (
            rec.delivery_claim is not None and rec.delivery_claim.claim_id == request.claim_id
        )
        if request.claim_deadline <= self.now() and not already_claimed:
            # The deadline bounds the claim acquire takes; under an existing claim it is moot.
            reasons.append((Conflict, "claim deadline not after now"))
        if reasons:
            out = err(reasons)
            if ambiguous:
                out.ok_allowed = True
            return out

        def apply() -> None:
            self._add_run(run)
            self.receipts[request.attempt_id] = ModelReceipt(request, cause, run.run_id, parts)
            self.canonical_inputs[run.run_id] = _encode(list(parts))
            cur = self.attempts[request.attempt_id]
            # Claimed for the continuation run: its completion is the acknowledgement.
            self._put(
                msgspec.structs.replace(
                    cur,
                    delivery_status="claimed",
                    delivery_claim=DeliveryClaim(
                        claim_id=request.claim_id,
                        deadline=request.claim_deadline,
                        continuation_run_id=run.run_id,
                    ),
                    continuation_run_id=run.run_id,
                )
            )

        if ambiguous:
            return either(Conflict, "artifact expired by time, retention not yet run", apply)
        return ok("continuation admitted", apply)

    def claim_pending(
        self, session_id: str, run_id: str, deadline: float
    ) -> tuple[Outcome, list[str]]:
        """claim_pending_for_run: the outcome and the attempt ids it must return, in order."""
        run = self.runs.get((session_id, run_id))
        if run is None:
            return err([(NotFound, "no such run")]), []
        reasons: list[tuple[type[StoreError], str]] = []
        if not self.run_live(run):
            reasons.append((Conflict, f"run {run_id} is not live"))
        if deadline <= self.now():
            reasons.append((Conflict, "claim deadline not after now"))
        if reasons:
            return err(reasons), []
        now = self.now()
        taken: list[AttemptRecord] = []
        settle: list[str] = []
        for a in self.attempts.values():
            if a.parent_session_id != session_id or not self.is_terminal(a):
                continue
            if a.delivery_status == "delivered":
                continue
            expired = a.retention_status == "expired" or (
                a.retention_expires_at is not None and a.retention_expires_at <= now
            )
            if expired:
                continue
            claim = a.delivery_claim
            if a.delivery_status == "claimed" and claim is not None:
                if claim.continuation_run_id == run_id:
                    taken.append(a)
                    continue
                if claim.deadline > now or self.run_live(self._consumer(a, claim)):
                    continue
                fate, _ = self._expired_claim_fate(a, claim)
                settle.append(a.attempt_id)
                if fate != "release":
                    continue
            taken.append(a)
        taken.sort(key=lambda r: (r.terminal_at or 0.0, r.attempt_id))
        ids = [a.attempt_id for a in taken]

        def apply() -> None:
            for aid in settle:
                self.apply_claim_fate(aid)
            for aid in ids:
                cur = self.attempts[aid]
                if cur.delivery_status == "claimed":
                    continue  # already linked to this run
                self._put(
                    msgspec.structs.replace(
                        cur,
                        delivery_status="claimed",
                        delivery_claim=DeliveryClaim(
                            claim_id=f"run:{run_id}",
                            deadline=deadline,
                            continuation_run_id=run_id,
                        ),
                    )
                )

        return ok(f"claimed {len(ids)} pending result(s) for the run", apply), ids

    # -- maintenance ------------------------------------------------------------------------

    def reconcile_plan(self, namespace_id: str) -> tuple[set[str], set[str], dict[str, str]]:
        """(attempts whose lease expired, attempts whose claim changes, every expired claim's
        fate: keep, acknowledge, release or release and suppress)."""
        lost: set[str] = set()
        claims: dict[str, str] = {}
        for a in self.attempts.values():
            if a.namespace_id != namespace_id:
                continue
            if not self.is_terminal(a):
                if not self.lease_live(a):
                    lost.add(a.attempt_id)
                continue
            claim = a.delivery_claim
            if (
                a.delivery_status == "claimed"
                and claim is not None
                and claim.deadline <= self.now()
            ):
                fate, suppress_by = self._expired_claim_fate(a, claim)
                claims[a.attempt_id] = fate + (" and suppress" if suppress_by else "")
        return lost, {a for a, fate in claims.items() if fate != "keep"}, claims

    def apply_claim_fate(self, attempt_id: str) -> None:
        rec = self.attempts[attempt_id]
        claim = rec.delivery_claim
        assert claim is not None
        fate, suppress_by = self._expired_claim_fate(rec, claim)
        if fate == "acknowledge":
            self._deliver(attempt_id, claim.claim_id, claim.continuation_run_id)
        elif fate == "release":
            if suppress_by is None and claim.continuation_run_id is not None:
                self.consumer_deaths["lease_lost"] = self.consumer_deaths.get("lease_lost", 0) + 1
            self._release(attempt_id, suppress_by)

    def expirable(self, namespace_id: str) -> set[str]:
        now = self.now()
        return {
            a.attempt_id
            for a in self.attempts.values()
            if a.namespace_id == namespace_id
            and self.is_terminal(a)
            and a.retention_status != "expired"
            and a.retention_expires_at is not None
            and a.retention_expires_at <= now
        }

    def apply_expiry(self, attempt_id: str) -> None:
        rec = self.attempts[attempt_id]
        ref = rec.result_ref or ResultRef()
        if ref.artifact_ref is not None and ref.artifact_ref in self.artifacts:
            self.artifacts[ref.artifact_ref].deleted = True
        self._put(
            msgspec.structs.replace(
                rec,
                retention_status="expired",
                result_ref=ResultRef(digest=ref.digest, size_bytes=ref.size_bytes),
            )
        )
