"""The SessionStore contract.

Every operation is one atomic transaction that reads the store's own "now"
(its injectable :class:`~storage.Clock`) *inside* that transaction; callers
never pass the current time. Every persisted change of execution, delivery,
retention, run or session status is checked against the
:mod:`statemachines` tables (:class:`~storage.IllegalTransition` otherwise).
Failures are the typed errors of :mod:`storage._errors`; a failed operation
writes nothing unless its docstring says otherwise. Bytes on disk that do not
decode fail closed with :class:`~storage.CorruptRecord`.

Implementations: :class:`~storage.MemorySessionStore` and
:class:`~storage.LmdbSessionStore` (one contract logic on two backends). A
third-party store implements this class directly and can be checked with the
``properties`` suite.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from statemachines import ExecutionStatus, RunStatus, SessionStatus

from ._backend import StoreCounters
from ._clock import Clock
from ._errors import Delivered, Failed
from ._events import EventListener, StoreEvent
from ._records import (
    AcquireContinuation,
    Artifact,
    AttemptRecord,
    ContinuationReceipt,
    DeliveryClaim,
    DeliveryRelease,
    RunAdmissionReceipt,
    RunRecord,
    SessionRecord,
    TerminalCommit,
)


class SessionStore(abc.ABC):
    """Durable sessions, runs and background attempts, with fenced ownership.

    Thread safety: every method may be called from any thread.
    """

    clock: Clock

    # -- sessions ---------------------------------------------------------------------------

    @abc.abstractmethod
    def create_session(self, session: SessionRecord) -> SessionRecord:
        """Insert a session. An identical retry returns the stored record;
        a different record under the same id is :class:`AlreadyExists`."""

    @abc.abstractmethod
    def load_session(self, session_id: str) -> SessionRecord:
        """The session, or :class:`NotFound`."""

    @abc.abstractmethod
    def list_sessions(self, namespace_id: str) -> list[SessionRecord]:
        """Sessions of one namespace, ordered by id."""

    @abc.abstractmethod
    def update_session_status(self, session_id: str, status: SessionStatus) -> SessionRecord:
        """Move a session along the SESSION table (not into ``deleting``: use
        :meth:`fence_session_deletion`). Same status is a no-op."""

    @abc.abstractmethod
    def fence_session_deletion(self, session_id: str) -> SessionRecord:
        """Fence a session for deletion (status ``deleting``).

        Refused with :class:`Conflict` while any attempt of the session is
        non-terminal under an unexpired owner lease; then nothing is written.
        Idempotent once fenced. After the fence, heartbeat, execution update
        and terminal commit on the session's attempts fail closed
        (:class:`Conflict`), acceptance is refused and automatic continuation
        is suppressed; exact terminal replay stays Ok.
        """

    # -- runs -------------------------------------------------------------------------------

    @abc.abstractmethod
    def admit_run(
        self, run: RunRecord, *, idempotency_key: str | None = None
    ) -> RunAdmissionReceipt:
        """Admit a new run (status ``admitted``) into an active session.

        The store allocates ``sequence_no`` and stamps ``created_at`` /
        ``updated_at``. :class:`RunConflict` while another run of the session
        is admitted/running under an unexpired admission lease. With an
        ``idempotency_key``: the same key and the same request return the first
        receipt with ``idempotent_replay=True``; the same key with another
        request is :class:`IdempotencyConflict`. A run with
        ``trigger_type == "async_subagent_result"`` is refused here: it is only
        admitted through :meth:`acquire_continuation`.
        """

    @abc.abstractmethod
    def load_run(self, session_id: str, run_id: str) -> RunRecord:
        """The run, or :class:`NotFound`."""

    @abc.abstractmethod
    def list_runs(self, session_id: str) -> list[RunRecord]:
        """Runs of a session in ``sequence_no`` order."""

    def head_run_id(self, session_id: str) -> str | None:
        """The session's head run (its latest: the last of :meth:`list_runs`), or
        ``None`` when it has no run. Stores answer it without reading every run."""
        runs = self.list_runs(session_id)
        return runs[-1].run_id if runs else None

    @abc.abstractmethod
    def transition_run(
        self,
        session_id: str,
        run_id: str,
        status: RunStatus,
        *,
        admission_id: str | None = None,
        output_preview: str | None = None,
    ) -> RunRecord:
        """Move a run along the RUN table. When the run has an admission lease,
        ``admission_id`` must match it (:class:`StaleFence` otherwise); moving to
        ``running`` additionally needs the lease unexpired. Same status with the
        same preview is an idempotent no-op.

        A run's terminal commit settles every result claimed for it (claims whose
        ``continuation_run_id`` is this run) in the same transaction: ``completed``
        acknowledges them (delivered, ``delivered_claim_id`` and
        ``delivered_to_run_id`` set, suppression cleared); ``failed`` or
        ``cancelled`` releases them to undelivered with
        ``automatic_continuation_suppressed_by_run_id`` = this run.

        A store with an event log appends, in the same transaction, ``run.started``
        (data ``profile``) or the terminal event ``run.completed`` / ``run.failed`` /
        ``run.cancelled`` (data ``output`` / ``error`` / ``reason``: the preview),
        and an ``attempt.delivered`` or ``attempt.released`` event per claim it
        settles. A no-op appends nothing. (:meth:`storage.KernelStore.transition_run`
        also takes ``event_data``, merged into the run's event.)"""

    @abc.abstractmethod
    def renew_run_admission(
        self, session_id: str, run_id: str, admission_id: str, lease_expires_at: float
    ) -> RunRecord:
        """Extend a live run's admission lease. :class:`StaleFence` if the
        admission id differs or the lease already expired; :class:`Conflict` if
        the run is terminal or ``lease_expires_at <= now``."""

    # -- background attempts ----------------------------------------------------------------

    @abc.abstractmethod
    def accept_attempt(self, record: AttemptRecord) -> AttemptRecord:
        """Persist a freshly accepted attempt.

        ``record`` must be a canonical acceptance (execution ``accepted``,
        undelivered, inline, no result, no claim, no terminal fields, a valid
        owner lease with ``heartbeat_at == accepted_at == updated_at``), else
        :class:`InvalidRecord`. An identical retry returns the stored record;
        a different record under the same id is :class:`AlreadyExists`.
        :class:`Conflict` when the lease is already expired at store time, the
        parent session is missing, not active or deletion-fenced, or another
        non-terminal attempt holds the same (namespace, session, agent_id).
        """

    @abc.abstractmethod
    def update_attempt_execution(self, record: AttemptRecord) -> AttemptRecord:
        """Persist one non-terminal execution transition (or set ``child_run_id``).

        Only ``execution_status``, ``child_run_id`` and ``updated_at`` may
        differ from the stored record; the transition must be allowed and
        non-terminal (terminal outcomes use :meth:`commit_terminal`). The
        writer's lease must equal the stored owner and be unexpired at store
        time (:class:`StaleFence`). The store stamps ``updated_at``. The same
        status again is an idempotent no-op.
        """

    @abc.abstractmethod
    def heartbeat_attempt(
        self,
        attempt_id: str,
        host_instance_id: str,
        fencing_generation: int,
        lease_expires_at: float,
    ) -> AttemptRecord:
        """Extend the owner lease of a non-terminal attempt.

        :class:`StaleFence` on owner or generation mismatch or when the lease
        already expired (an expired owner never revives); :class:`Conflict`
        when terminal, when ``lease_expires_at <= now`` or when the session is
        deletion-fenced. Sets ``heartbeat_at = now``.
        """

    @abc.abstractmethod
    def take_over_attempt(
        self,
        attempt_id: str,
        host_instance_id: str,
        fencing_generation: int,
        lease_expires_at: float,
    ) -> AttemptRecord:
        """Give a non-terminal attempt whose lease expired to a new owner.

        Requires the current lease expired at store time and
        ``fencing_generation`` greater than the current one (:class:`StaleFence`
        otherwise). Every later write with the old lease fails.
        """

    @abc.abstractmethod
    def commit_terminal(self, commit: TerminalCommit) -> AttemptRecord:
        """Commit the terminal outcome (and its artifact) atomically.

        First commit: the stored attempt is non-terminal, the writer is the
        live owner (an expired owner's first terminal commit is
        :class:`StaleFence`), the session is not deletion-fenced, the move is
        allowed, the record is a canonical terminal projection (result_ref set,
        undelivered, retention inline/artifact with a deadline after now,
        ``terminal_at == updated_at``); an artifact needs limits
        (:class:`Conflict` otherwise) and must fit ``max_single_bytes`` and the
        namespace's unexpired aggregate (:class:`QuotaExceeded`). The store
        stores the terminal fingerprint, removes the attempt from the active
        index and returns the record.

        With ``commit.deliver_claim_id`` (a non-empty id without NUL, else
        :class:`InvalidRecord`), the same transaction also hands the result to
        the in-process consumer waiting for it, as :meth:`claim_and_acknowledge`
        would: the returned record is ``delivered`` under that claim id. A
        refused commit hands nothing over.

        Replay: if the attempt is already terminal, a commit with the same
        fingerprint returns the stored record (Ok even after the lease or the
        retention expired, and after delivery); anything else is
        :class:`Conflict`.
        """

    @abc.abstractmethod
    def load_attempt(self, attempt_id: str) -> AttemptRecord:
        """The attempt, or :class:`NotFound`."""

    @abc.abstractmethod
    def list_attempts(
        self, namespace_id: str, session_id: str | None = None
    ) -> list[AttemptRecord]:
        """Attempts of a namespace (and session), ordered by ``accepted_at`` then id."""

    def find_agent(self, namespace_id: str, session_id: str, agent_id: str) -> str | None:
        """The ``subagent_name`` of the session's attempts of ``agent_id`` (the
        subagent it is bound to), or ``None`` when the session never had it.

        A supervisor asks when a continuation names an agent it no longer holds
        in memory (after hibernation or a restart). This default reads
        :meth:`list_attempts` of the session; a store with an index of agents
        should answer without reading the session's whole history.
        """
        for record in self.list_attempts(namespace_id, session_id):
            if record.agent_id == agent_id:
                return record.subagent_name
        return None

    @abc.abstractmethod
    def list_active_attempts(self, namespace_id: str) -> list[AttemptRecord]:
        """Non-terminal attempts of a namespace; cost follows the active count."""

    @abc.abstractmethod
    def list_pending_attempts(
        self, namespace_id: str, session_id: str | None = None
    ) -> list[AttemptRecord]:
        """Terminal attempts not yet delivered (undelivered or claimed)."""

    @abc.abstractmethod
    def load_artifact(self, artifact_ref: str) -> Artifact:
        """A retained artifact. :class:`NotFound` if missing or expired at store
        time; :class:`CorruptRecord` if its content no longer matches its digest."""

    # -- delivery ---------------------------------------------------------------------------

    @abc.abstractmethod
    def claim_delivery(
        self, attempt_id: str, claim: DeliveryClaim, *, automatic: bool = False
    ) -> AttemptRecord:
        """Claim a terminal result for one consumer.

        With ``claim.continuation_run_id`` the claim is linked to that consumer
        run, which must be a live run (admitted or running under an unexpired
        admission lease) of the attempt's parent session (:class:`Conflict`
        otherwise); the run's terminal commit then settles the claim (see
        :meth:`transition_run`). Without one, the consumer acknowledges it
        (an in-process parent with no durable run).

        Exact replay of the current claim returns the record. :class:`Conflict`
        when not terminal or ``claim.deadline <= now``; :class:`Delivered` when
        delivered. If another claim exists: while its deadline has not passed,
        or its consumer run is live under its admission lease,
        :class:`DeliveryClaimed`; if its consumer run completed, the old claim
        is acknowledged (committed) and :class:`Delivered` raised; otherwise it
        is released (a failed or cancelled consumer also sets
        ``automatic_continuation_suppressed_by_run_id``) and the new claim
        proceeds. An ``automatic`` claim is refused with :class:`Conflict`
        while automatic continuation is suppressed, or the session is not
        active; any release done first stays committed.
        """

    @abc.abstractmethod
    def acknowledge_delivery(self, attempt_id: str, claim_id: str) -> AttemptRecord:
        """Mark the result delivered under the matching claim (even past its
        deadline, while nobody else claimed it). Sets ``delivered_claim_id`` and
        clears the suppression. Repeating it is Ok; another claim id is
        :class:`DeliveryClaimed` / :class:`Delivered`. A claim linked to a
        consumer run is refused with :class:`Conflict`: that run's completion is
        its acknowledgement."""

    def claim_and_acknowledge(self, attempt_id: str, claim: DeliveryClaim) -> AttemptRecord:
        """Claim a terminal result and acknowledge it at once, for a consumer without a
        durable run that has the result in hand already (``claim`` names no
        consumer run): :meth:`claim_delivery` then :meth:`acknowledge_delivery`,
        with their refusals, and the same record as the two would leave
        (``delivered_claim_id = claim.claim_id``). A repeat with the same claim id
        after it applied is Ok.

        This default makes the two calls (two transactions). A store may do both
        in one (``KernelStore`` does: one durable commit instead of two), since no
        other consumer can tell the difference: between the two nothing but this
        consumer could have taken the result.
        """
        try:
            self.claim_delivery(attempt_id, claim)
        except Delivered:
            if self.load_attempt(attempt_id).delivered_claim_id != claim.claim_id:
                raise
        return self.acknowledge_delivery(attempt_id, claim.claim_id)

    def advance_attempt(
        self,
        record: AttemptRecord,
        *,
        via: tuple[ExecutionStatus, ...] = (),
        lease_expires_at: float | None = None,
    ) -> AttemptRecord:
        """Persist the execution progress an owner made (``record``'s
        ``execution_status`` and ``child_run_id``, reached from the stored status
        through ``via``) and, with ``lease_expires_at``, renew its lease: the
        progress of a heartbeat tick (see ``docs/durability.md``).

        The rules of :meth:`update_attempt_execution` for every step (each checked
        against ``EXECUTION``, nothing but the status and ``child_run_id`` may
        change) and of :meth:`heartbeat_attempt` for the renewal. This default
        makes one :meth:`update_attempt_execution` per status, then the heartbeat;
        a store may do it all in one transaction (``KernelStore`` does).
        """
        stored = record
        for step in (*via, record.execution_status):
            stored = self.update_attempt_execution(
                msgspec.structs.replace(record, execution_status=step)
            )
        if lease_expires_at is not None:
            lease = record.owner_lease
            stored = self.heartbeat_attempt(
                record.attempt_id,
                lease.host_instance_id,
                lease.fencing_generation,
                lease_expires_at,
            )
        return stored

    def counters(self) -> StoreCounters:
        """What the store's backend did so far (writes, commits, fsyncs): see
        :class:`~storage.StoreCounters`. This default counts nothing
        (``counted=False``)."""
        return StoreCounters(counted=False)

    @abc.abstractmethod
    def release_delivery(
        self, attempt_id: str, claim_id: str, release: DeliveryRelease
    ) -> AttemptRecord:
        """Release the matching claim back to undelivered.

        ``Retryable()`` just releases. ``ConsumerTerminated(run_id)`` requires a
        claim whose consumer is that run and records the suppression;
        on a record that is not claimed (e.g. undelivered) it is
        :class:`Conflict`. Releasing an already released claim with
        ``Retryable`` is Ok.
        """

    @abc.abstractmethod
    def acquire_continuation(self, request: AcquireContinuation) -> ContinuationReceipt:
        """Admit exactly one continuation run consuming a terminal result.

        In one transaction: the attempt must be terminal and undelivered (or
        claimed under ``request.claim_id``) and not suppressed; the session
        active and not fenced; no other run of the session live
        (:class:`RunConflict`). The store re-derives the canonical input from
        the record and the full artifact content (or the expiry summary, also
        once the retention deadline has passed even if expiry has not run yet:
        see :func:`storage.retained_view`),
        requires ``request.run.input`` byte-equal to it and non-empty, the
        run's causal fields (session, parent run, trigger type, profile,
        attempt metadata, trace) and ``request.cause`` equal to the
        store-derived cause (:class:`Conflict` for a stale head, a forged cause
        or a forged or empty input); the run's ``restore_from_run_id`` must be
        the session's head run (its latest run, ``None`` when it has none),
        else :class:`Conflict`. It admits the run, leaves the attempt claimed
        for it (``delivery_claim`` with ``claim_id``, ``claim_deadline`` and
        ``continuation_run_id`` = the run; the attempt's ``continuation_run_id``
        too) and returns a receipt with the store-derived cause. The run's
        completion acknowledges the result; its failure or cancellation
        releases it with suppression; losing its admission lease releases it
        at the claim's deadline without suppression, and then another
        continuation may be admitted for it.

        An exact retry (same attempt, claim id and run) returns the same receipt
        with ``idempotent_replay=True``, whatever happened to the run since;
        anything else after delivery is :class:`Delivered`. At most one run
        consumes a result.
        """

    @abc.abstractmethod
    def claim_pending_for_run(
        self, session_id: str, run_id: str, deadline: float
    ) -> list[AttemptRecord]:
        """Claim for the live run ``run_id`` every result of its session waiting.

        In one transaction: every terminal attempt of the session that is
        undelivered (suppressed or not), whose retention has not expired (by
        status or deadline, see :func:`storage.retained_view`) and that no
        other consumer holds (a claim whose deadline passed and whose consumer
        run is not live is settled first, as :meth:`claim_delivery` settles
        it) is claimed with ``DeliveryClaim(claim_id="run:" + run_id,
        deadline, continuation_run_id=run_id)``. Returns the claimed records,
        those already claimed for ``run_id`` included (a repeat returns the
        same set; their claims are not renewed), ordered by ``terminal_at``
        then attempt id. The run's terminal commit settles them (see
        :meth:`transition_run`). :class:`NotFound` for an unknown run;
        :class:`Conflict` when the run is not live or ``deadline <= now``.
        """

    # -- maintenance ------------------------------------------------------------------------

    @abc.abstractmethod
    def reconcile(self, namespace_id: str) -> list[AttemptRecord]:
        """Classify lost work and reclaim expired claims, at store time.

        Non-terminal attempts whose lease expired become ``failed`` with
        ``failure_category = "host_process_lost"``, a result error, a retention
        deadline and a terminal fingerprint; live foreign owners are left
        alone. Expired claims: kept while the consumer run is live under its
        admission lease; acknowledged if it completed; else released (a failed
        or cancelled consumer sets the suppression; a consumer that lost its
        admission lease, i.e. died with its host, does not, so automatic
        continuation may admit a replacement). Returns the records it
        changed. Cost follows the number of active attempts and claims, not
        history.
        """

    @abc.abstractmethod
    def expire_retention(self, namespace_id: str, limit: int = 1000) -> list[AttemptRecord]:
        """Expire up to ``limit`` retained results whose deadline passed.

        Deletes inline content and artifacts; keeps digest, size, terminal and
        delivery evidence and the fingerprint (backfilling a missing one only
        while the complete terminal projection still exists). Idempotent.
        """

    # -- events (the outbox) ----------------------------------------------------------------

    def append_event(
        self, session_id: str, kind: str, run_id: str | None, data: dict[str, Any]
    ) -> StoreEvent:
        """Append an event to the session's log, numbered after every event committed
        so far (the store's own run and attempt events share the sequence); ``at`` is
        the store's clock. A store without an event log raises :class:`Failed`."""
        raise Failed(f"{type(self).__name__} keeps no event log")

    def replay_events(
        self, session_id: str, after_seq: int = 0, limit: int = 1000
    ) -> list[StoreEvent]:
        """Up to ``limit`` committed events of the session with ``seq > after_seq``, in
        order (one consistent snapshot). Seqs are dense from 1. A store without an event
        log has none."""
        return []

    def last_event_seq(self, session_id: str) -> int:
        """The seq of the session's last committed event (0: none)."""
        return 0

    def add_event_listener(self, listener: EventListener) -> Callable[[], None]:
        """Call ``listener(events)`` with the events each write of this store object
        committed, once it committed, on the thread that called the write, in seq
        order; an exception it raises is logged and swallowed. Returns the function
        that removes it. Events committed by other processes are not reported (read
        them with :meth:`replay_events`)."""
        return lambda: None

    def drain(self) -> None:
        """Return once every store-owned background operation has finished.

        Each store says how it drains; this default fails closed.
        """
        raise Failed(f"{type(self).__name__} does not say how it drains")

    def close(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Release resources. Idempotent."""


AttemptList = Sequence[AttemptRecord]
