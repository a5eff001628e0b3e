"""The shared view of one attempt: its last persisted record, and a future for its end."""

from __future__ import annotations

import concurrent.futures
import threading

from statemachines import DeliveryStatus
from storage import AttemptRecord

from ._messages import Reply, resolve


class RecordView:
    """The last persisted projection of one attempt, shared by its actor, the supervisor
    and the callers waiting on it.

    The attempt actor publishes each non-terminal record here right after the
    store committed it (one reference assignment, atomic under the GIL), so the
    supervisor's view stays current without a message per transition; the
    supervisor itself publishes the terminal (or lost) record once it handles
    the attempt's end, then :meth:`end` it. A caller waits on :meth:`waiter`
    without a round trip through the supervisor's mailbox.

    The hand-over offer: one in-process waiter (no durable run) may :meth:`offer`
    to take the result in the terminal commit itself (one durable commit instead
    of two, ``docs/durability.md``). The attempt's actor :meth:`take_offer` s it
    once, as it builds that commit; from then on the waiter cannot
    :meth:`withdraw` and must wait for the end, since the commit may hand it the
    result. Every method here is thread-safe and never blocks.
    """

    __slots__ = ("_done", "_offer", "_taken", "ended", "record")

    def __init__(self, record: AttemptRecord) -> None:
        self.record = record
        self.ended: str | None = None
        """``terminal`` or ``lost`` once the supervisor handled the attempt's end."""
        self._done: Reply | None = None
        self._offer: str | None = None
        self._taken = False

    def waiter(self) -> Reply:
        """A future resolved with ``ended`` once the supervisor handled the end (at once
        when it already did). Any thread; created on first use, so an attempt nobody
        waits on costs no future."""
        with _VIEW_LOCK:
            done = self._done
            if done is None:
                done = self._done = concurrent.futures.Future()
                if self.ended is not None:
                    done.set_result(self.ended)
            return done

    def offer(self, claim_id: str) -> bool:
        """Offer to take the result under ``claim_id`` in the terminal commit (a
        waiter). ``False`` when the attempt ended already or another waiter offered."""
        with _VIEW_LOCK:
            if self.ended is not None or self._offer is not None:
                return False
            self._offer = claim_id
            return True

    def take_offer(self) -> str | None:
        """The offered claim id, taken for the terminal commit now being built (the
        attempt's actor, once); ``None`` when nobody offers."""
        with _VIEW_LOCK:
            if self._offer is None or self._taken:
                return None
            self._taken = True
            return self._offer

    def withdraw(self, claim_id: str) -> bool:
        """Withdraw an offer (a waiter giving up). ``False`` when the offer was taken:
        the terminal commit may hand this waiter the result, so it must wait for the end."""
        with _VIEW_LOCK:
            if self._offer != claim_id:
                return True
            if self._taken:
                return False
            self._offer = None
            return True

    def handed_to(self, claim_id: str) -> bool:
        """Whether the published record was delivered under ``claim_id``."""
        record = self.record
        return (
            record.delivered_claim_id == claim_id
            and record.delivery_status == DeliveryStatus.DELIVERED
        )

    def end(self, state: str) -> None:
        """Record how the attempt ended and wake its waiters (the supervisor actor only)."""
        with _VIEW_LOCK:
            self.ended = state
            done = self._done
        if done is not None:
            resolve(done, state)


_VIEW_LOCK = threading.Lock()
"""Orders ``RecordView.end`` against ``RecordView.waiter`` (a short critical section,
so one lock for every view is enough)."""
