"""Record builders for the SessionStore contract tests.

Every builder reads "now" from the test's :class:`~storage.ManualClock`, the
same clock the store under test was given, so a record built at ``clock.now()``
is exactly what the store sees as current.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import msgspec

import storage
from statemachines import ExecutionStatus, RetentionStatus, RunStatus
from storage import (
    AcquireContinuation,
    AdmissionLease,
    Artifact,
    ArtifactLimits,
    AttemptRecord,
    ContinuationCause,
    InputPart,
    ManualClock,
    OwnerLease,
    ResultRef,
    RunRecord,
    SessionRecord,
    SessionStore,
    TerminalCommit,
)

NS = "ns-contract"
SESSION = "session-1"
PARENT_RUN = "parent-run-1"
PROFILE = "default"
HOST = "host-a"
LEASE_TTL = 30.0
RETENTION = 86_400.0
CLAIM_TTL = 60.0
TRACE = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}

replace = msgspec.structs.replace

Reopen = Callable[[SessionStore], SessionStore]
"""``store = reopen(store)``: reopen a persistent store on the same path."""


def fresh_session(
    clock: ManualClock, session_id: str = SESSION, namespace_id: str = NS
) -> SessionRecord:
    now = clock.now()
    return SessionRecord(
        session_id=session_id,
        namespace_id=namespace_id,
        created_at=now,
        updated_at=now,
        profile=PROFILE,
    )


def admission_lease(
    clock: ManualClock, admission_id: str, ttl: float = LEASE_TTL, host: str = HOST
) -> AdmissionLease:
    return AdmissionLease(
        admission_id=admission_id,
        host_instance_id=host,
        fencing_generation=1,
        lease_expires_at=clock.now() + ttl,
    )


def plain_run(
    clock: ManualClock,
    run_id: str,
    session_id: str = SESSION,
    *,
    ttl: float = LEASE_TTL,
    text: str = "hello",
) -> RunRecord:
    """A user-triggered run with a live admission lease ``adm-<run_id>``."""
    now = clock.now()
    return RunRecord(
        session_id=session_id,
        run_id=run_id,
        created_at=now,
        updated_at=now,
        input=(InputPart(text=text),),
        profile=PROFILE,
        admission_lease=admission_lease(clock, f"adm-{run_id}", ttl),
    )


def setup_session(
    store: SessionStore, clock: ManualClock, session_id: str = SESSION, parent_run: str = PARENT_RUN
) -> SessionRecord:
    """Create an active session whose parent run has completed (no live run left)."""
    session = store.create_session(fresh_session(clock, session_id))
    store.admit_run(plain_run(clock, parent_run, session_id))
    admission = f"adm-{parent_run}"
    store.transition_run(session_id, parent_run, RunStatus.RUNNING, admission_id=admission)
    store.transition_run(session_id, parent_run, RunStatus.COMPLETED, admission_id=admission)
    return session


def acceptance(
    clock: ManualClock,
    attempt_id: str = "subattempt_1",
    agent_id: str = "researcher-bg-0000aaaa",
    *,
    session_id: str = SESSION,
    parent_run_id: str = PARENT_RUN,
    host: str = HOST,
    generation: int = 1,
    ttl: float = LEASE_TTL,
    namespace_id: str = NS,
) -> AttemptRecord:
    """A canonical acceptance whose lease runs ``ttl`` seconds from now."""
    now = clock.now()
    return AttemptRecord(
        attempt_id=attempt_id,
        agent_id=agent_id,
        subagent_name="researcher",
        namespace_id=namespace_id,
        parent_session_id=session_id,
        parent_run_id=parent_run_id,
        owner_lease=OwnerLease(
            host_instance_id=host,
            fencing_generation=generation,
            heartbeat_at=now,
            lease_expires_at=now + ttl,
        ),
        accepted_at=now,
        updated_at=now,
        profile=PROFILE,
        trace_context=dict(TRACE),
    )


def moved(
    record: AttemptRecord, status: ExecutionStatus | str, clock: ManualClock, **changes: object
) -> AttemptRecord:
    """``record`` asking for one execution update at ``clock.now()``."""
    return replace(
        record, execution_status=ExecutionStatus(status), updated_at=clock.now(), **changes
    )


def drive(
    store: SessionStore,
    record: AttemptRecord,
    clock: ManualClock,
    path: Iterable[str] = ("starting", "running"),
) -> AttemptRecord:
    """Move an accepted attempt along ``path``; sets ``child_run_id`` on ``running``."""
    for status in path:
        extra = {"child_run_id": f"child-{record.attempt_id}"} if status == "running" else {}
        record = store.update_attempt_execution(moved(record, status, clock, **extra))
    return record


def terminal(
    record: AttemptRecord,
    clock: ManualClock,
    status: ExecutionStatus | str = ExecutionStatus.COMPLETED,
    *,
    content: str = "durable result",
    retention: float = RETENTION,
) -> TerminalCommit:
    """The canonical terminal commit of ``record`` at ``clock.now()``, inline."""
    now = clock.now()
    status = ExecutionStatus(status)
    failure: str | None = None
    reason: str | None = None
    if status is ExecutionStatus.COMPLETED:
        ref = ResultRef(
            content=content,
            digest=storage.result_digest(content),
            size_bytes=len(content.encode("utf-8")),
        )
    else:
        error = f"{status.value}: {content}"
        ref = ResultRef(
            error=error,
            digest=storage.result_digest(None, error),
            size_bytes=len(error.encode("utf-8")),
        )
        failure = "execution_error" if status is ExecutionStatus.FAILED else "cancelled"
        reason = "cancelled by parent" if status is ExecutionStatus.CANCELLED else None
    return TerminalCommit(
        record=replace(
            record,
            execution_status=status,
            result_ref=ref,
            failure_category=failure,
            cancellation_reason=reason,
            retention_status=RetentionStatus.INLINE,
            retention_expires_at=now + retention,
            terminal_at=now,
            updated_at=now,
        )
    )


def artifact_terminal(
    record: AttemptRecord,
    clock: ManualClock,
    *,
    artifact_ref: str,
    content: str,
    retention: float = 60.0,
    limits: ArtifactLimits | None = None,
    preview: str = "oversized-result-preview",
) -> TerminalCommit:
    """A completed terminal whose full output lives in an artifact."""
    now = clock.now()
    digest = storage.result_digest(content)
    size = len(content.encode("utf-8"))
    artifact = Artifact(
        artifact_ref=artifact_ref,
        namespace_id=record.namespace_id,
        attempt_id=record.attempt_id,
        content=content,
        digest=digest,
        size_bytes=size,
        created_at=now,
        expires_at=now + retention,
    )
    return TerminalCommit(
        record=replace(
            record,
            execution_status=ExecutionStatus.COMPLETED,
            result_ref=ResultRef(
                content=preview, artifact_ref=artifact_ref, digest=digest, size_bytes=size
            ),
            retention_status=RetentionStatus.ARTIFACT,
            retention_expires_at=now + retention,
            terminal_at=now,
            updated_at=now,
        ),
        artifact=artifact,
        artifact_limits=limits,
    )


def continuation_run(
    record: AttemptRecord,
    clock: ManualClock,
    run_id: str,
    parts: tuple[InputPart, ...],
    *,
    ttl: float = LEASE_TTL,
    restore_from_run_id: str | None = None,
) -> RunRecord:
    """The continuation run consuming ``record``, with its causal fields. It restores
    from ``restore_from_run_id`` (default: the causal parent run, which is the session's
    head in a session where nothing else ran)."""
    now = clock.now()
    metadata = {
        "async_subagent.attempt_id": record.attempt_id,
        "async_subagent.agent_id": record.agent_id,
        "async_subagent.parent_run_id": record.parent_run_id,
    }
    if record.child_run_id is not None:
        metadata["async_subagent.child_run_id"] = record.child_run_id
    return RunRecord(
        session_id=record.parent_session_id,
        run_id=run_id,
        created_at=now,
        updated_at=now,
        input=parts,
        trigger_type=storage.ASYNC_SUBAGENT_RESULT,
        parent_run_id=record.parent_run_id,
        restore_from_run_id=restore_from_run_id or record.parent_run_id,
        profile=record.profile,
        metadata=metadata,
        trace_context=record.trace_context,
        admission_lease=admission_lease(clock, f"adm-{run_id}", ttl),
    )


def continuation(
    record: AttemptRecord,
    clock: ManualClock,
    *,
    run_id: str = "continuation-run-1",
    claim_id: str = "continuation-claim-1",
    artifact_content: str | None = None,
    parts: tuple[InputPart, ...] | None = None,
    cause: ContinuationCause | None = None,
    expected_head_run_id: str | None = None,
    restore_from_run_id: str | None = None,
) -> AcquireContinuation:
    """A continuation request for the terminal ``record`` (as stored).

    By default its input and cause are the canonical ones; ``parts`` forges
    the input (with a cause matching the forged input unless ``cause`` is given).
    """
    if parts is None:
        parts = storage.continuation_input(record, artifact_content)
    if cause is None:
        cause = storage.continuation_cause(record, parts)
    return AcquireContinuation(
        attempt_id=record.attempt_id,
        claim_id=claim_id,
        claim_deadline=clock.now() + CLAIM_TTL,
        cause=cause,
        run=continuation_run(record, clock, run_id, parts, restore_from_run_id=restore_from_run_id),
        expected_head_run_id=expected_head_run_id,
    )


def mixed_attempt_states(store: SessionStore, clock: ManualClock) -> None:
    """Attempts in every indexed state, in the session of :func:`setup_session`:
    live, undelivered, claimed, delivered, expired-undelivered, expired-delivered,
    and one retaining an artifact."""

    def done(n: int, retention: float = RETENTION) -> AttemptRecord:
        record = drive(
            store, store.accept_attempt(acceptance(clock, f"subattempt_m{n}", f"ag-m{n}")), clock
        )
        return store.commit_terminal(terminal(record, clock, retention=retention))

    store.accept_attempt(acceptance(clock, "subattempt_live", "ag-live"))
    done(1)
    claimed = done(2)
    store.claim_delivery(
        claimed.attempt_id,
        storage.DeliveryClaim(claim_id="c-2", deadline=clock.now() + CLAIM_TTL),
    )
    delivered = done(3)
    store.claim_delivery(
        delivered.attempt_id,
        storage.DeliveryClaim(claim_id="c-3", deadline=clock.now() + CLAIM_TTL),
    )
    store.acknowledge_delivery(delivered.attempt_id, "c-3")
    done(4, retention=10.0)
    old = done(5, retention=10.0)
    store.claim_delivery(
        old.attempt_id, storage.DeliveryClaim(claim_id="c-5", deadline=clock.now() + CLAIM_TTL)
    )
    store.acknowledge_delivery(old.attempt_id, "c-5")
    clock.advance(10.0)
    store.expire_retention(NS)
    record = drive(
        store, store.accept_attempt(acceptance(clock, "subattempt_art", "ag-art")), clock
    )
    store.commit_terminal(
        artifact_terminal(
            record,
            clock,
            artifact_ref="art-m",
            content="artifact body",
            limits=ArtifactLimits(max_single_bytes=1000, max_retained_bytes=1000),
        )
    )


def as_layout_1(backend: storage.Backend) -> None:
    """Rewrite a store's tables into layout 1 (schema marker 1): every index
    entry in ``attempts``, live attempts and claims under their session's
    ``T`` prefix (``T ns\\0 session\\0 G agent_id``, ``... C attempt_id``), a
    namespace-wide ``R`` index (``R ns\\0 deadline \\0 attempt_id``), a
    ``P`` entry for every undelivered result and no ``A`` entries."""

    def fn(txn: storage.Txn) -> None:
        entries = list(txn.scan("index"))
        for k, value in entries:
            txn.delete("index", k)
            ns_end = k.find(b"\x00", 2)
            session_end = k.find(b"\x00", ns_end + 1)
            if k[:2] == b"\x00A":
                continue  # layout 4's agent entries: the migration writes them again
            if k[:2] in (b"\x00G", b"\x00C"):
                # ``G ns\0 session\0 agent_id`` -> ``T ns\0 session\0 G agent_id``.
                txn.put(
                    "attempts",
                    b"\x00T" + k[2 : session_end + 1] + k[1:2] + k[session_end + 1 :],
                    value,
                )
            elif k.startswith(b"\x00T") and k[session_end + 1 : session_end + 2] == b"R":
                ns = k[2:ns_end]
                deadline = k[session_end + 2 : session_end + 10]
                attempt_id = k[session_end + 10 :]
                txn.put("attempts", b"\x00R" + ns + b"\x00" + deadline + b"\x00" + attempt_id, b"")
                if value == b"P":
                    txn.put("attempts", k[: session_end + 1] + b"P" + attempt_id, b"")
            else:
                txn.put("attempts", k, value)
        txn.put("meta", b"schema_version", (1).to_bytes(8, "big"))

    backend.write(fn)


def tables(store: SessionStore) -> dict[str, list[tuple[bytes, bytes]]]:
    """Every table of a kernel store, as ``(key, value)`` lists in key order."""
    kernel: storage.KernelStore = store  # type: ignore[assignment]
    return kernel.backend.read(lambda txn: {t: list(txn.scan(t)) for t in kernel.TABLES})


class PassTxn:
    """A :class:`storage.Txn` handing every call to ``raw``: a test's own view of a
    transaction overrides the calls it watches or breaks."""

    def __init__(self, raw: storage.Txn) -> None:
        self.raw = raw

    def get(self, table: str, key: bytes) -> bytes | None:
        return self.raw.get(table, key)

    def put(self, table: str, key: bytes, value: bytes) -> None:
        self.raw.put(table, key, value)

    def delete(self, table: str, key: bytes) -> bool:
        return self.raw.delete(table, key)

    def scan(
        self, table: str, prefix: bytes = b"", start: bytes | None = None
    ) -> Iterator[tuple[bytes, bytes]]:
        return self.raw.scan(table, prefix, start)
