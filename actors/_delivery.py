"""Exactly-once delivery of terminal results to the parent.

A result reaches the parent through the completion callback, a ``wait`` or the
parent's next turn (:meth:`Deliverer.take_pending`), whichever claims it
first in the store; the store's claim is the only arbiter, so the others see
``DeliveryClaimed`` or ``Delivered``. The child's context delta lives in
memory (:class:`DeltaBox`) from the moment the terminal state is persisted and
is handed out with the one delivery that acknowledges the claim.
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
    AttemptRecord,
    Conflict,
    Delivered,
    DeliveryClaim,
    DeliveryClaimed,
    IdSource,
    NotFound,
    Retryable,
    SessionStore,
    StoreError,
    continuation_outcome,
)
from storage._faultpoints import fault_point

from ._config import SupervisorLimits
from ._errors import BackgroundSubagentError
from ._results import BackgroundResult

log = logging.getLogger("actors")
T = TypeVar("T")

DELIVERY_RETRIES = 8
"""Tries of one claim, acknowledgement or release before its failure surfaces."""
VERDICTS = (Delivered, DeliveryClaimed, Conflict, NotFound)
"""Store answers about the delivery itself: never retried."""


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
    """Claims, builds and acknowledges deliveries; safe to use from any thread.

    Store errors other than the claim outcomes surface as
    ``BackgroundSubagentError.Durability`` (the claim, if taken, expires at its
    deadline and the result can be claimed again).
    """

    def __init__(
        self,
        *,
        store: SessionStore,
        ids: IdSource,
        limits: SupervisorLimits,
        deltas: DeltaBox,
        namespace_id: str,
        session_id: str,
    ) -> None:
        self.store = store
        self.ids = ids
        self.limits = limits
        self.deltas = deltas
        self.namespace_id = namespace_id
        self.session_id = session_id
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
        for _ in range(DELIVERY_RETRIES - 1):
            try:
                return call()
            except VERDICTS:
                raise
            except StoreError:
                time.sleep(pause)
        return call()

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

    def take_pending(self, run_id: str | None = None) -> list[BackgroundResult]:
        """Deliver every pending result of the session not claimed by someone else."""
        try:
            pending = self.store.list_pending_attempts(self.namespace_id, self.session_id)
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


def msgspec_replace_retention_expired(record: AttemptRecord) -> AttemptRecord:
    return msgspec.structs.replace(record, retention_status=RetentionStatus.EXPIRED)
