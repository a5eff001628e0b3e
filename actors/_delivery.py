"""Exactly-once delivery of terminal results: the one delivery engine.

A result reaches its consumer through the completion callback, a ``wait``, the
parent's next turn (:meth:`Deliverer.take_pending`) or a continuation run the
host admits for it (:meth:`Deliverer.admit_continuation`), whichever claims it
first in the store; the store's claim is the only arbiter, so the others see
``DeliveryClaimed`` or ``Delivered``.

Delivered means consumed. When the consumer is a durable run (a host's run
waiting in-band, at its next turn, a continuation run, an explicit
``run.start``) the claim names that run (``DeliveryClaim.continuation_run_id``)
and this engine never acknowledges it: the run's own terminal transition in
the store does, in the same transaction (``completed`` acknowledges;
``failed``/``cancelled`` release with suppression of automatic continuation; a
lost admission lease releases without), so a consumer that dies never takes
the result with it. A consumer without a durable run keeps claim, hand-off,
acknowledge in one go: the completion callback claims, runs, then acknowledges
(a raising callback releases); a wait or turn of an in-process SDK parent,
whose hand-off cannot fail once the result is built, builds it from the
stored record and then claims and acknowledges in one store transaction
(``SessionStore.claim_and_acknowledge``: one durable commit, not two).

Every store call about a delivery goes through one replay rule
(:func:`replayed`): only exact replays are retried, which the store answers
with Ok (or the same receipt) when the first try applied and its response was
lost. The child's context delta lives in memory (:class:`DeltaBox`) from the
moment the terminal state is persisted and is handed out once, with the
delivery that hands the result over.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import msgspec

from statemachines import RetentionStatus
from storage import (
    AcquireContinuation,
    AttemptRecord,
    Conflict,
    ContinuationReceipt,
    Delivered,
    DeliveryClaim,
    DeliveryClaimed,
    IdSource,
    InputPart,
    NotFound,
    Retryable,
    RetryableStorage,
    RunRecord,
    SessionStore,
    StoreError,
    continuation_cause,
    continuation_input,
    continuation_outcome,
    retained_view,
)
from storage._faultpoints import fault_point

from ._config import SupervisorLimits
from ._errors import BackgroundSubagentError
from ._results import BackgroundResult

log = logging.getLogger("subagents.actors")
T = TypeVar("T")

DELIVERY_RETRIES = 8
"""Tries of one claim, acknowledgement or release before its failure surfaces."""
VERDICTS = (Delivered, DeliveryClaimed, Conflict, NotFound)
"""Store answers about the delivery itself: never retried."""
RUN_CLAIM_SECONDS = 1.0
"""The deadline of a claim linked to a durable consumer run (a wait or turn of a
host's run, :meth:`Deliverer.claim_for_run`, a continuation admission). Short on
purpose: past it the store keeps the claim only while the run is live under its
admission lease, so once the run's host is gone the reconciler releases the
result, without suppression, as soon as the lease has lapsed."""
CONTINUATION_REPLAYS = 3
"""How often a continuation admission whose response was lost is replayed at once."""


def replayed(
    call: Callable[[], T],
    *,
    tries: int,
    pause: float,
    transient: Callable[[StoreError], bool],
    on_replay: Callable[[], None] | None = None,
    sleep: Callable[[float], object] = time.sleep,
) -> T:
    """``call()``, replayed exactly while it fails with a ``transient`` store error.

    Up to ``tries`` tries, ``pause`` seconds apart (``sleep(pause)``: injectable, so
    a test or a stoppable caller decides how the pause passes; ``on_replay`` runs
    before each replay); the last failure, any other store error and any other
    exception propagate. ``call`` must be an exact replay of itself (the same claim, claim id,
    release or admission), which the store answers with Ok, or with the same
    receipt, when an earlier try applied and its response was lost.
    """
    for _ in range(tries - 1):
        try:
            return call()
        except StoreError as exc:
            if not transient(exc):
                raise
        if on_replay is not None:
            on_replay()
        if pause > 0:
            sleep(pause)
    return call()


def _not_a_verdict(exc: StoreError) -> bool:
    return not isinstance(exc, VERDICTS)


def _retryable(exc: StoreError) -> bool:
    return isinstance(exc, RetryableStorage)


_DELTAS_LOCK = threading.Lock()
"""Guards every :class:`DeltaBox` (each critical section is one dict operation): one
lock for all of them, not one per box, since a host keeps a box per session, idle
ones included (issue 16: a lock costs about 90 bytes)."""


class DeltaBox:
    """Context deltas and usage of persisted terminal attempts, handed out once. Thread-safe.

    An empty box holds no dict (``_items`` is made by the first :meth:`put` and
    dropped when the last item goes): an idle session's box costs its slots only.
    """

    __slots__ = ("_items",)

    def __init__(self) -> None:
        self._items: dict[str, tuple[Any, dict[str, Any]]] | None = None

    def __len__(self) -> int:
        with _DELTAS_LOCK:
            return len(self._items or ())

    def __contains__(self, attempt_id: object) -> bool:
        with _DELTAS_LOCK:
            return attempt_id in (self._items or ())

    def put(self, attempt_id: str, delta: Any, usage: dict[str, Any]) -> None:
        with _DELTAS_LOCK:
            if self._items is None:
                self._items = {}
            self._items[attempt_id] = (delta, usage)

    def peek(self, attempt_id: str) -> tuple[Any, dict[str, Any]]:
        with _DELTAS_LOCK:
            return (self._items or {}).get(attempt_id, (None, {}))

    def pop(self, attempt_id: str) -> None:
        with _DELTAS_LOCK:
            if self._items is not None:
                self._items.pop(attempt_id, None)
                if not self._items:
                    self._items = None

    def keep_only(self, attempt_ids: set[str]) -> None:
        """Drop every item but those of ``attempt_ids`` (the results still pending: a
        delivered result's delta was handed out, or never will be)."""
        with _DELTAS_LOCK:
            if self._items is not None:
                kept = {a: item for a, item in self._items.items() if a in attempt_ids}
                self._items = kept or None


class Deliverer:
    """Claims, builds and acknowledges deliveries of one namespace; safe to use from
    any thread.

    Two kinds of consumer (see the module docstring): one with a durable run
    (``consumer_run_id``: the claim names the run and the run's terminal
    transition in the store acknowledges or releases it; this engine never
    acknowledges such a claim) and one without (an in-process SDK parent with
    no durable run, the completion callback: claim, hand-off and acknowledge
    here, as one step).

    Store errors other than the claim outcomes surface as
    ``BackgroundSubagentError.Durability`` (the claim, if taken, expires at its
    deadline and the result can be claimed again); continuation admission
    raises the store's own errors (the host's next tick tries again).
    """

    # Slots: a host keeps one per session, idle ones included (issue 16).
    __slots__ = ("delivered", "deltas", "ids", "limits", "namespace_id", "sleep", "store")

    RUN_CLAIM_SECONDS = RUN_CLAIM_SECONDS
    """See :data:`RUN_CLAIM_SECONDS` (a host waits this long past a lost run's lease,
    twice, before failing the run, so its claims are released unsuppressed first)."""

    def __init__(
        self,
        *,
        store: SessionStore,
        ids: IdSource,
        namespace_id: str,
        limits: SupervisorLimits | None = None,
        deltas: DeltaBox | None = None,
        sleep: Callable[[float], object] = time.sleep,
    ) -> None:
        self.sleep = sleep
        """How a pause between two replays passes (injectable)."""
        self.store = store
        self.ids = ids
        self.limits = limits or SupervisorLimits()
        self.deltas = deltas if deltas is not None else DeltaBox()
        self.namespace_id = namespace_id
        self.delivered: list[str] = []
        """Attempt ids whose delivery this deliverer acknowledged, oldest first (any
        thread appends; the supervisor actor takes the list, swapping in an empty one,
        when it prunes its table: an id appended to the old list during the swap is
        lost, which only makes the prune ask the store). A list, not a deque: an idle
        supervisor keeps one, and an empty deque costs 600 bytes."""

    def _retrying(self, call: Callable[[], T]) -> T:
        """``call()``, retried while the store's answer is not a verdict.

        Only exact replays are retried (the same claim, the same claim id, the same
        release), which the store answers with Ok when the first try applied and its
        response was lost; so any failure that is not a verdict on the delivery
        (``Delivered``, ``DeliveryClaimed``, ``Conflict``, ``NotFound``) is retried:
        a transient ``RetryableStorage`` as well as a lost or garbled response. Up to
        :data:`DELIVERY_RETRIES` tries, at most the retry interval apart.
        """
        pause = min(self.limits.retry_interval_for(self.limits.lease_ttl), 0.05)
        return replayed(
            call, tries=DELIVERY_RETRIES, pause=pause, transient=_not_a_verdict, sleep=self.sleep
        )

    def claim_id(self, consumer: str) -> str:
        """A fresh claim id of ``consumer`` (``wait``, ``turn``, ``callback``...)."""
        return f"{consumer}_{self.ids.uuid4()}"

    def _claim_for(
        self, consumer: str, continuation_run_id: str | None, claim_id: str | None = None
    ) -> DeliveryClaim:
        """A claim of ``consumer`` (under ``claim_id``, else a fresh one)."""
        seconds = RUN_CLAIM_SECONDS if continuation_run_id else self.limits.claim_deadline
        return DeliveryClaim(
            claim_id=claim_id or self.claim_id(consumer),
            deadline=self.store.clock.now() + seconds,
            continuation_run_id=continuation_run_id,
        )

    def claim(
        self, attempt_id: str, consumer: str, continuation_run_id: str | None = None
    ) -> tuple[str, AttemptRecord]:
        claim = self._claim_for(consumer, continuation_run_id)
        record = self._claiming(attempt_id, lambda: self.store.claim_delivery(attempt_id, claim))
        return claim.claim_id, record

    def _claiming(self, attempt_id: str, call: Callable[[], AttemptRecord]) -> AttemptRecord:
        """``call()`` (a claim), retried; the store's verdicts as the supervisor's errors."""
        try:
            return self._retrying(call)
        except DeliveryClaimed as exc:
            raise BackgroundSubagentError.DeliveryClaimed(
                "another consumer holds a live claim on this result", attempt_id=attempt_id
            ) from exc
        except Delivered as exc:
            raise BackgroundSubagentError.Delivered(
                "the result was already delivered", attempt_id=attempt_id
            ) from exc
        except NotFound as exc:
            raise BackgroundSubagentError.NotFound(
                "no such attempt", attempt_id=attempt_id
            ) from exc
        except StoreError as exc:
            raise BackgroundSubagentError.Durability(
                "the store refused the delivery claim", attempt_id=attempt_id
            ) from exc

    def build(self, record: AttemptRecord, *, with_delta: bool) -> BackgroundResult:
        """The parent-facing result of a terminal record (full artifact content included)."""
        ref = record.result_ref
        content: str | None = None
        error: str | None = None
        if record.retention_status == RetentionStatus.EXPIRED:
            content = continuation_outcome(record, None)
        elif ref is not None and ref.artifact_ref is not None:
            try:
                content = self.store.load_artifact(ref.artifact_ref).content
            except NotFound:
                content = continuation_outcome(msgspec_replace_retention_expired(record), None)
        elif ref is not None:
            content, error = ref.content, ref.error
        if str(record.execution_status) != "completed":
            content, error = None, error if error is not None else content
        delta, usage = self.deltas.peek(record.attempt_id) if with_delta else (None, {})
        return BackgroundResult(
            attempt_id=record.attempt_id,
            agent_id=record.agent_id,
            subagent_name=record.subagent_name,
            linked_task_id=record.linked_task_id,
            status=str(record.execution_status),
            output=content,
            error=error,
            failure_category=record.failure_category,
            cancellation_reason=record.cancellation_reason,
            child_run_id=record.child_run_id,
            digest=ref.digest if ref else None,
            size_bytes=ref.size_bytes if ref else 0,
            retention_status=str(record.retention_status),
            usage=dict(usage),
            context_delta=delta,
        )

    def acknowledge(self, attempt_id: str, claim_id: str) -> AttemptRecord:
        try:
            record = self._retrying(lambda: self.store.acknowledge_delivery(attempt_id, claim_id))
        except StoreError as exc:
            raise BackgroundSubagentError.Durability(
                "the store did not confirm the delivery", attempt_id=attempt_id
            ) from exc
        self._acknowledged(attempt_id)
        return record

    def _acknowledged(self, attempt_id: str) -> None:
        """The delivery is durable: its delta was handed out, for the last time."""
        self.deltas.pop(attempt_id)
        self.delivered.append(attempt_id)

    def _deliver_at_once(
        self, attempt_id: str, consumer: str, claim_as: str | None = None
    ) -> AttemptRecord:
        """Claim and acknowledge in one store call (one durable commit, see
        ``SessionStore.claim_and_acknowledge``), for a consumer without a durable
        run whose result is built already; the errors of :meth:`claim`. Under the
        claim id ``claim_as`` when given (a wait's hand-over offer), so a terminal
        commit that delivered under it already makes this an exact repeat."""
        claim = self._claim_for(consumer, None, claim_as)
        record = self._claiming(
            attempt_id, lambda: self.store.claim_and_acknowledge(attempt_id, claim)
        )
        self._acknowledged(attempt_id)
        return record

    def _terminal(self, attempt_id: str) -> AttemptRecord:
        """The stored record, for a delivery built before it is committed."""
        try:
            return self.store.load_attempt(attempt_id)
        except NotFound as exc:
            raise BackgroundSubagentError.NotFound(
                "no such attempt", attempt_id=attempt_id
            ) from exc
        except StoreError as exc:
            raise BackgroundSubagentError.Durability(
                "could not load the result", attempt_id=attempt_id
            ) from exc

    def release(self, attempt_id: str, claim_id: str | None) -> None:
        if claim_id is None:
            return  # nothing was claimed
        try:
            self._retrying(lambda: self.store.release_delivery(attempt_id, claim_id, Retryable()))
        except StoreError:
            # The claim then simply expires at its deadline.
            log.warning("attempt %s: could not release claim %s", attempt_id, claim_id)

    def deliver(
        self,
        attempt_id: str,
        consumer: str,
        consumer_run_id: str | None = None,
        claim_as: str | None = None,
    ) -> tuple[BackgroundResult, AttemptRecord]:
        """Hand one result over; the result carries the delta.

        Without ``consumer_run_id``: build from the stored record, then claim and
        acknowledge in one store transaction (one durable commit; the returned
        record is ``delivered``, and a consumer that lost the race to another
        gets that one's verdict), under the claim id ``claim_as`` when given. With it: claim
        for that durable run and hand over, without acknowledging (the record is
        ``claimed``, linked to the run; the run's terminal transition settles it).
        """
        if consumer_run_id is None:
            claim_id, record = None, self._terminal(attempt_id)
        else:
            claim_id, record = self.claim(attempt_id, consumer, consumer_run_id)
        try:
            result = self.build(record, with_delta=True)
            if consumer_run_id is not None:
                fault_point("delivery.after_continuation_admitted_before_ack")
        except BaseException:
            self.release(attempt_id, claim_id)
            raise
        if consumer_run_id is not None:
            self.deltas.pop(attempt_id)  # handed out once, with this hand-off
            return result, record
        return result, self._deliver_at_once(attempt_id, consumer, claim_as)

    def handed_over(self, record: AttemptRecord) -> BackgroundResult:
        """The result a terminal commit delivered to a waiter of this process
        (``TerminalCommit.deliver_claim_id``): built from that committed ``record``
        with no store call (it names no artifact), its delta handed out now, once."""
        result = self.build(record, with_delta=True)
        self._acknowledged(record.attempt_id)
        return result

    def take_pending(self, session_id: str, run_id: str | None = None) -> list[BackgroundResult]:
        """Every pending result of the session not claimed by someone else.

        With ``run_id`` (an admitted, live durable run of the session) one store
        transaction claims them all for that run (:meth:`claim_for_run`), so
        they are acknowledged when it completes. Without, each is claimed and
        acknowledged here (an SDK parent with no durable run).
        """
        if run_id is not None:
            return self.results_for_run(self.claim_for_run(session_id, run_id))
        try:
            pending = self.store.list_pending_attempts(self.namespace_id, session_id)
        except StoreError as exc:
            raise BackgroundSubagentError.Durability("could not list pending results") from exc
        out: list[BackgroundResult] = []
        for record in pending:
            try:
                result, _ = self.deliver(record.attempt_id, "turn")
            except (
                BackgroundSubagentError.DeliveryClaimed,
                BackgroundSubagentError.Delivered,
            ):
                continue
            out.append(result)
        return out

    def claim_for_run(self, session_id: str, run_id: str) -> list[AttemptRecord]:
        """Claim, for durable run ``run_id``, every result of the session that waits
        for a consumer (undelivered, or released with automatic continuation
        suppressed), whichever process launched it; in one store transaction.

        Idempotent: a repeat for the same run returns the same records (an exact
        replay after a lost response; a caller asks once per run). The claims are the run's:
        its completion acknowledges them, its failure or cancellation releases
        them. The deltas this process holds for them are handed out now.
        """
        deadline = self.store.clock.now() + RUN_CLAIM_SECONDS

        try:
            # A lost response is answered by the exact replay (the same set).
            return self._retrying(
                lambda: self.store.claim_pending_for_run(session_id, run_id, deadline)
            )
        except StoreError as exc:
            raise BackgroundSubagentError.Durability(
                "the store refused to claim the waiting results for the run"
            ) from exc

    def results_for_run(self, records: list[AttemptRecord]) -> list[BackgroundResult]:
        """The parent-facing results of records claimed for a run, deltas handed out."""
        out = []
        for record in records:
            out.append(self.build(record, with_delta=True))
            self.deltas.pop(record.attempt_id)
        return out

    def run_input(self, record: AttemptRecord, now: float) -> tuple[InputPart, ...]:
        """The canonical input parts that carry ``record``'s result into a run: past
        its retention deadline (at ``now``) the expiry summary, else the content
        (the artifact's, when it has one)."""
        visible = retained_view(record, now)
        content = None
        if visible.retention_status == RetentionStatus.ARTIFACT and visible.result_ref:
            content = self.store.load_artifact(visible.result_ref.artifact_ref or "").content
        return continuation_input(visible, content)

    def run_callback(self, attempt_id: str, callback: Callable[[BackgroundResult], Any]) -> bool:
        """Offer one result to the completion callback. Returns whether it was delivered.

        The callback runs on the calling (delivery) thread. If it raises, the
        claim is released so a wait or the next turn can still take the result
        (and its delta); the exception is logged, never propagated.
        """
        try:
            claim_id, record = self.claim(attempt_id, "callback")
        except (
            BackgroundSubagentError.DeliveryClaimed,
            BackgroundSubagentError.Delivered,
        ):
            return False
        try:
            result = self.build(record, with_delta=True)
            callback(result)
        except Exception:
            log.exception("attempt %s: completion callback raised; claim released", attempt_id)
            self.release(attempt_id, claim_id)
            return False
        self.acknowledge(attempt_id, claim_id)
        return True

    def admit_continuation(
        self,
        record: AttemptRecord,
        make_run: Callable[[tuple[InputPart, ...], float], RunRecord],
        now: float,
        head_run_id: str | None = None,
    ) -> ContinuationReceipt:
        """Hand ``record``'s result to a new run of its session, in one store
        transaction that claims the result for the run and admits it.

        The result stays claimed by the run: its completion acknowledges it, its
        failure, cancellation or lost lease releases it (the store does both with
        the run's terminal transition). ``head_run_id`` (the session's head run,
        which the run restores from) is checked by the store: a session that
        moved on meanwhile is a ``Conflict`` and nothing is admitted.

        What is delivered is decided here, as for every delivery: past its
        retention deadline (at ``now``) the expiry summary, else the content (the
        artifact's, when it has one). ``make_run(input_parts, now)`` builds the run
        that consumes it (the host's: ids, profile, admission lease). A transient
        error may come after the store committed the admission (the response was
        lost): the same request again is answered with the same receipt
        (``idempotent_replay``), so the run is launched instead of being left
        admitted and never started. Any other store error, or a transient one
        ``CONTINUATION_REPLAYS`` times over, propagates; nothing is admitted then
        that a later call cannot finish.
        """
        parts = self.run_input(record, now)
        cause = continuation_cause(retained_view(record, now), parts)
        run = make_run(parts, now)
        request = AcquireContinuation(
            attempt_id=record.attempt_id,
            claim_id=f"claim_{self.ids.token_hex(8)}",
            claim_deadline=now + RUN_CLAIM_SECONDS,
            cause=cause,
            run=run,
            expected_head_run_id=head_run_id,
        )

        def admit() -> ContinuationReceipt:
            receipt = self.store.acquire_continuation(request)
            fault_point("delivery.after_continuation_admitted_before_ack")
            return receipt

        def replaying() -> None:
            log.info("replaying the continuation admission of %s", record.attempt_id)

        return replayed(
            admit,
            tries=CONTINUATION_REPLAYS + 1,
            pause=0.0,
            transient=_retryable,
            on_replay=replaying,
        )


def msgspec_replace_retention_expired(record: AttemptRecord) -> AttemptRecord:
    return msgspec.structs.replace(record, retention_status=RetentionStatus.EXPIRED)
