"""Exactly-once delivery of terminal results: the one delivery engine.

A result reaches its consumer through the completion callback, a ``wait``, the
parent's next turn (:meth:`Deliverer.take_pending`) or a continuation run the
host admits for it (:meth:`Deliverer.admit_continuation`), whichever claims it
first in the store; the store's claim is the only arbiter, so the others see
``DeliveryClaimed`` or ``Delivered``. Every store call about a delivery goes
through one replay rule (:func:`replayed`): only exact replays are retried,
which the store answers with Ok (or the same receipt) when the first try
applied and its response was lost. The child's context delta lives in memory
(:class:`DeltaBox`) from the moment the terminal state is persisted and is
handed out with the one delivery that acknowledges the claim.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
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
CONTINUATION_CLAIM_SECONDS = 30.0
"""How long a continuation admission's claim lives (the store links the run at once)."""
CONTINUATION_REPLAYS = 3
"""How often a continuation admission whose response was lost is replayed at once."""


def replayed(
    call: Callable[[], T],
    *,
    tries: int,
    pause: float,
    transient: Callable[[StoreError], bool],
    on_replay: Callable[[], None] | None = None,
) -> T:
    """``call()``, replayed exactly while it fails with a ``transient`` store error.

    Up to ``tries`` tries, ``pause`` seconds apart (``on_replay`` runs before each
    replay); the last failure, any other store error and any other exception
    propagate. ``call`` must be an exact replay of itself (the same claim, claim id,
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
            time.sleep(pause)
    return call()


def _not_a_verdict(exc: StoreError) -> bool:
    return not isinstance(exc, VERDICTS)


def _retryable(exc: StoreError) -> bool:
    return isinstance(exc, RetryableStorage)


class DeltaBox:
    """Context deltas and usage of persisted terminal attempts, handed out once. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: dict[str, tuple[Any, dict[str, Any]]] = {}

    def put(self, attempt_id: str, delta: Any, usage: dict[str, Any]) -> None:
        with self._lock:
            self._items[attempt_id] = (delta, usage)

    def peek(self, attempt_id: str) -> tuple[Any, dict[str, Any]]:
        with self._lock:
            return self._items.get(attempt_id, (None, {}))

    def pop(self, attempt_id: str) -> None:
        with self._lock:
            self._items.pop(attempt_id, None)


class Deliverer:
    """Claims, builds and acknowledges deliveries of one namespace; safe to use from
    any thread.

    Store errors other than the claim outcomes surface as
    ``BackgroundSubagentError.Durability`` (the claim, if taken, expires at its
    deadline and the result can be claimed again); continuation admission
    raises the store's own errors (the host's next tick tries again).
    """

    def __init__(
        self,
        *,
        store: SessionStore,
        ids: IdSource,
        namespace_id: str,
        limits: SupervisorLimits | None = None,
        deltas: DeltaBox | None = None,
    ) -> None:
        self.store = store
        self.ids = ids
        self.limits = limits or SupervisorLimits()
        self.deltas = deltas or DeltaBox()
        self.namespace_id = namespace_id
        self.delivered: deque[str] = deque()
        """Attempt ids whose delivery this deliverer acknowledged, oldest first (any
        thread appends; the supervisor actor drains it when it prunes its table)."""

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
        return replayed(call, tries=DELIVERY_RETRIES, pause=pause, transient=_not_a_verdict)

    def claim(
        self, attempt_id: str, consumer: str, continuation_run_id: str | None = None
    ) -> tuple[str, AttemptRecord]:
        claim = DeliveryClaim(
            claim_id=f"{consumer}_{self.ids.uuid4()}",
            deadline=self.store.clock.now() + self.limits.claim_deadline,
            continuation_run_id=continuation_run_id,
        )
        try:
            record = self._retrying(lambda: self.store.claim_delivery(attempt_id, claim))
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
        return claim.claim_id, record

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
        self.deltas.pop(attempt_id)
        self.delivered.append(attempt_id)
        return record

    def release(self, attempt_id: str, claim_id: str) -> None:
        try:
            self._retrying(lambda: self.store.release_delivery(attempt_id, claim_id, Retryable()))
        except StoreError:
            # The claim then simply expires at its deadline.
            log.warning("attempt %s: could not release claim %s", attempt_id, claim_id)

    def deliver(
        self, attempt_id: str, consumer: str, continuation_run_id: str | None = None
    ) -> tuple[BackgroundResult, AttemptRecord]:
        """Claim, build and acknowledge in one go; the result carries the delta."""
        claim_id, record = self.claim(attempt_id, consumer, continuation_run_id)
        try:
            result = self.build(record, with_delta=True)
            if continuation_run_id is not None:
                fault_point("delivery.after_continuation_admitted_before_ack")
        except BaseException:
            self.release(attempt_id, claim_id)
            raise
        acknowledged = self.acknowledge(attempt_id, claim_id)
        return result, acknowledged

    def take_pending(self, session_id: str, run_id: str | None = None) -> list[BackgroundResult]:
        """Deliver every pending result of the session not claimed by someone else."""
        try:
            pending = self.store.list_pending_attempts(self.namespace_id, session_id)
        except StoreError as exc:
            raise BackgroundSubagentError.Durability("could not list pending results") from exc
        out: list[BackgroundResult] = []
        for record in pending:
            try:
                result, _ = self.deliver(record.attempt_id, "turn", run_id)
            except (
                BackgroundSubagentError.DeliveryClaimed,
                BackgroundSubagentError.Delivered,
            ):
                continue
            out.append(result)
        return out

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
    ) -> ContinuationReceipt:
        """Deliver ``record``'s result into a new run of its session, in one store
        transaction that claims the result, links the run and admits it.

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
        visible = retained_view(record, now)
        content = None
        if visible.retention_status == RetentionStatus.ARTIFACT and visible.result_ref:
            content = self.store.load_artifact(visible.result_ref.artifact_ref or "").content
        parts = continuation_input(visible, content)
        cause = continuation_cause(visible, parts)
        run = make_run(parts, now)
        request = AcquireContinuation(
            attempt_id=record.attempt_id,
            claim_id=f"claim_{self.ids.token_hex(8)}",
            claim_deadline=now + CONTINUATION_CLAIM_SECONDS,
            cause=cause,
            run=run,
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
