"""The shared view of one attempt: its last persisted record, and a future for its end."""

from __future__ import annotations

import concurrent.futures
import threading

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
    """

    __slots__ = ("_done", "ended", "record")

    def __init__(self, record: AttemptRecord) -> None:
        self.record = record
        self.ended: str | None = None
        """``terminal`` or ``lost`` once the supervisor handled the attempt's end."""
        self._done: Reply | None = None

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
