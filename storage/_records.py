"""Durable records: frozen msgspec Structs, msgpack on disk, versioned.

Every class is ``frozen=True, kw_only=True`` (``kw_only`` is not inherited, so
each class states it). Bytes that are hashed or compared are always produced
by an encoder with ``order="deterministic"`` (sorted dict keys), see
:mod:`storage._digest` and :mod:`storage._codec`. New fields always get
defaults so old bytes still decode. Times are
float seconds of *store* time (the store's injectable clock), never read from
the caller's clock.
"""

from __future__ import annotations

from typing import Any

import msgspec

from statemachines import (
    DeliveryStatus,
    ExecutionStatus,
    RetentionStatus,
    RunStatus,
    SessionStatus,
)

SCHEMA_VERSION = 1
"""Schema version written into every record this code creates."""

ASYNC_SUBAGENT_RESULT = "async_subagent_result"
"""``trigger_type`` of a run admitted to consume a background result."""


class OwnerLease(msgspec.Struct, frozen=True, kw_only=True):
    """The fenced owner of a non-terminal attempt.

    Valid when ``host_instance_id`` is non-empty, ``fencing_generation > 0``
    and ``lease_expires_at > heartbeat_at``. Expired when
    ``lease_expires_at <= now`` (store time).
    """

    host_instance_id: str
    fencing_generation: int
    heartbeat_at: float
    lease_expires_at: float


class ResultRef(msgspec.Struct, frozen=True, kw_only=True):
    """Bounded terminal result material: inline content or error, or an artifact pointer.

    ``digest`` is the result digest of the complete logical result and
    ``size_bytes`` its UTF-8 size before any preview truncation. After
    retention expiry only ``digest`` and ``size_bytes`` remain.
    """

    content: str | None = None
    error: str | None = None
    artifact_ref: str | None = None
    digest: str | None = None
    size_bytes: int = 0


class DeliveryClaim(msgspec.Struct, frozen=True, kw_only=True):
    """One consumer's bounded ownership of delivering a terminal result.

    ``continuation_run_id`` names the consumer run, when the consumer is a run
    (a parent turn or an admitted continuation); reconcile keeps an expired
    claim while that run is live under its admission lease.
    """

    claim_id: str
    deadline: float
    continuation_run_id: str | None = None


class AttemptRecord(msgspec.Struct, frozen=True, kw_only=True):
    """The durable projection of one background attempt.

    Execution, delivery and retention are persisted separately; the card's
    phase is derived (:func:`statemachines.derive_phase`).
    """

    attempt_id: str
    agent_id: str
    subagent_name: str
    namespace_id: str
    parent_session_id: str
    parent_run_id: str
    owner_lease: OwnerLease
    accepted_at: float
    updated_at: float
    schema_version: int = SCHEMA_VERSION
    linked_task_id: str | None = None
    child_run_id: str | None = None
    continuation_run_id: str | None = None
    profile: str = ""
    execution_status: ExecutionStatus = ExecutionStatus.ACCEPTED
    result_ref: ResultRef | None = None
    failure_category: str | None = None
    cancellation_reason: str | None = None
    delivery_status: DeliveryStatus = DeliveryStatus.UNDELIVERED
    delivery_claim: DeliveryClaim | None = None
    delivered_claim_id: str | None = None
    delivered_to_run_id: str | None = None
    """The consumer run that completed with the result (``None``: a consumer
    without a durable run acknowledged it, or not delivered yet)."""
    automatic_continuation_suppressed_by_run_id: str | None = None
    retention_status: RetentionStatus = RetentionStatus.INLINE
    retention_expires_at: float | None = None
    terminal_fingerprint: str | None = None
    trace_context: dict[str, str] | None = None
    terminal_at: float | None = None


class Artifact(msgspec.Struct, frozen=True, kw_only=True):
    """The complete oversized output of one successful attempt, owned by the host."""

    artifact_ref: str
    namespace_id: str
    attempt_id: str
    content: str
    digest: str
    size_bytes: int
    created_at: float
    expires_at: float
    schema_version: int = SCHEMA_VERSION


class ArtifactLimits(msgspec.Struct, frozen=True, kw_only=True):
    """Byte limits enforced in the terminal-commit transaction.

    Valid when both are positive and ``max_single_bytes <= max_retained_bytes``.
    ``max_retained_bytes`` counts unexpired artifacts of one namespace only.
    """

    max_single_bytes: int
    max_retained_bytes: int


class TerminalCommit(msgspec.Struct, frozen=True, kw_only=True):
    """A terminal record plus its optional artifact, committed atomically.

    ``artifact_limits`` is required whenever ``artifact`` is given.

    ``via``: the execution statuses the attempt passed through, in order, after
    the stored one and before the terminal one, committed in this same
    transaction instead of one commit each (see ``docs/durability.md``). The
    store checks every step (stored -> ``via[0]`` -> ... -> terminal) against
    :data:`~statemachines.EXECUTION`, as it checks a single move; a stored
    status that lies on the path (the owner persisted part of it already, with
    a lease renewal) is where the check starts. ``()``: the terminal status
    follows the stored one directly. Not part of the terminal
    fingerprint: an exact replay of a committed terminal is recognized whatever
    path led to it.

    ``deliver_claim_id``: the result is also handed to an in-process consumer
    (one without a durable run) that waits for it, in this same transaction:
    claimed and acknowledged under this claim id, as
    :meth:`~storage.SessionStore.claim_and_acknowledge` would in a commit of its
    own (``docs/durability.md``). Not part of the fingerprint either; an exact
    replay returns the stored record, whose ``delivered_claim_id`` says whether
    this consumer has the result (a store written before this field ignores it
    and leaves the result undelivered, so the consumer checks).
    """

    record: AttemptRecord
    artifact: Artifact | None = None
    artifact_limits: ArtifactLimits | None = None
    via: tuple[ExecutionStatus, ...] = ()
    deliver_claim_id: str | None = None


class Retryable(msgspec.Struct, frozen=True, kw_only=True, tag="retryable"):
    """Release a claim because a retryable step before consumption failed."""


class ConsumerTerminated(msgspec.Struct, frozen=True, kw_only=True, tag="consumer_terminated"):
    """Release a claim because its consumer run failed or was cancelled.

    Records ``run_id`` as ``automatic_continuation_suppressed_by_run_id``.
    """

    run_id: str


DeliveryRelease = Retryable | ConsumerTerminated
"""Why a delivery claim is released."""


class SessionRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A durable parent session. ``status == deleting`` is the deletion fence."""

    session_id: str
    namespace_id: str
    created_at: float
    updated_at: float
    schema_version: int = SCHEMA_VERSION
    status: SessionStatus = SessionStatus.ACTIVE
    profile: str = ""
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)


class InputPart(msgspec.Struct, frozen=True, kw_only=True):
    """One part of a run's durable input. Only ``kind == "text"`` exists today."""

    text: str
    kind: str = "text"


class AdmissionLease(msgspec.Struct, frozen=True, kw_only=True):
    """The host that admitted a run and may advance it until ``lease_expires_at``."""

    admission_id: str
    host_instance_id: str
    fencing_generation: int
    lease_expires_at: float


class RunRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A run of a parent session.

    ``sequence_no`` is allocated by the store (submit 0). A continuation run
    has ``trigger_type == "async_subagent_result"`` and metadata keys
    ``async_subagent.attempt_id``, ``async_subagent.agent_id``,
    ``async_subagent.parent_run_id`` and, when known,
    ``async_subagent.child_run_id``.
    """

    session_id: str
    run_id: str
    created_at: float
    updated_at: float
    schema_version: int = SCHEMA_VERSION
    status: RunStatus = RunStatus.ADMITTED
    input: tuple[InputPart, ...] = ()
    trigger_type: str | None = None
    parent_run_id: str | None = None
    restore_from_run_id: str | None = None
    profile: str = ""
    metadata: dict[str, str] = msgspec.field(default_factory=dict)
    trace_context: dict[str, str] | None = None
    admission_lease: AdmissionLease | None = None
    output_preview: str | None = None
    sequence_no: int = 0


class RunAdmissionReceipt(msgspec.Struct, frozen=True, kw_only=True):
    """What admitting a run returns; an exact retry returns the same receipt
    with ``idempotent_replay=True``."""

    run: RunRecord
    idempotency_key: str | None = None
    request_digest: str = ""
    idempotent_replay: bool = False


class ContinuationCause(msgspec.Struct, frozen=True, kw_only=True):
    """The typed cause of one result-triggered continuation.

    Binds the attempt and run identities, the result digest and size, the trace
    and the SHA-256 digest of the exact canonical continuation input.
    """

    attempt_id: str
    agent_id: str
    parent_session_id: str
    parent_run_id: str
    input_digest: str
    child_run_id: str | None = None
    result_digest: str | None = None
    result_size_bytes: int = 0
    trace_context: dict[str, str] = msgspec.field(default_factory=dict)


class AcquireContinuation(msgspec.Struct, frozen=True, kw_only=True):
    """Request to admit ``run`` as the one continuation consuming ``attempt_id``'s result."""

    attempt_id: str
    claim_id: str
    claim_deadline: float
    cause: ContinuationCause
    run: RunRecord
    expected_head_run_id: str | None = None
    """When given, must be the session's latest run id, else Conflict (stale head)."""


class ContinuationReceipt(msgspec.Struct, frozen=True, kw_only=True):
    """Proof that one continuation was admitted: the store-derived cause, the
    attempt after delivery was linked, and the admitted run. An exact retry
    returns the same receipt with ``idempotent_replay=True``."""

    cause: ContinuationCause
    record: AttemptRecord
    run: RunRecord
    idempotent_replay: bool = False
