"""The event loop children run on, and the runtime an attempt actor shares with its supervisor.

pykka has no asyncio: children run as tasks on an asyncio loop and talk to
actors only by ``tell``; actors schedule timers on the loop with
``call_soon_threadsafe``. No actor ever awaits or blocks on the loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from storage import Clock, IdSource, SessionStore

from ._config import OwnerIdentity, SupervisorLimits
from ._delivery import DeltaBox
from ._machines import MachinePool
from ._record_view import RecordView

log = logging.getLogger("subagents.actors")


def simple_inbox() -> Any:
    """An actor inbox on ``queue.SimpleQueue`` (C-implemented, unbounded, FIFO): it
    has the ``put``/``get``/``empty`` pykka needs and costs a fraction of
    ``queue.Queue``'s Condition-based handoff on every message."""
    inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
    return inbox


class ClosableInbox:
    """An attempt actor's inbox: ``queue.SimpleQueue`` plus :meth:`close`.

    Once closed (by its stopping actor), every message still queued and every
    message put later goes to the ``fallback`` instead, on the putting thread:
    no request a sender managed to queue is ever left unanswered, even when it
    raced the actor's stop.
    """

    __slots__ = ("_fallback", "_lock", "_queue")

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._fallback: Callable[[Any], None] | None = None

    def put(self, envelope: Any, /) -> None:
        with self._lock:
            fallback = self._fallback
            if fallback is None:
                self._queue.put(envelope)
                return
        fallback(envelope)

    def get(self) -> Any:
        return self._queue.get()

    def empty(self) -> bool:
        return self._queue.empty()

    def close(self, fallback: Callable[[Any], None]) -> None:
        """Hand every queued and every later message to ``fallback`` (called once,
        from the actor's own thread, as it stops)."""
        with self._lock:
            self._fallback = fallback
        while True:
            try:
                envelope = self._queue.get_nowait()
            except queue.Empty:
                return
            fallback(envelope)


class LoopThread:
    """An asyncio loop running forever on its own (non-daemon) thread.

    ``stop()`` cancels the tasks still on the loop, stops it, joins the thread
    within ``timeout`` and closes the loop; it returns whether the thread ended.
    """

    def __init__(self, name: str = "subagents-loop") -> None:
        self.loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self.thread = threading.Thread(target=self._main, name=name, daemon=False)
        self.thread.start()
        self._ready.wait()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._ready.set)
        try:
            self.loop.run_forever()
        finally:
            try:
                pending = [t for t in asyncio.all_tasks(self.loop) if not t.done()]
                for task in pending:
                    task.cancel()
                if pending:
                    self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
                self.loop.run_until_complete(self.loop.shutdown_asyncgens())
                self.loop.run_until_complete(self.loop.shutdown_default_executor())
            finally:
                self.loop.close()

    def stop(self, timeout: float | None) -> bool:
        if self.loop.is_closed():
            return not self.thread.is_alive()
        # RuntimeError: the loop closed between the check and the call.
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout)
        return not self.thread.is_alive()


class WorkerPool:
    """A few non-daemon worker threads running submitted callables in FIFO order.

    Unlike ``ThreadPoolExecutor`` it can be joined under a deadline:
    ``stop(timeout)`` refuses new work, lets queued work finish and returns
    whether every thread ended in time.
    """

    def __init__(self, name: str, size: int = 1) -> None:
        self._queue: queue.SimpleQueue[
            tuple[Callable[[], Any], concurrent.futures.Future[Any]] | None
        ] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._closed = False
        self._inflight: set[concurrent.futures.Future[Any]] = set()
        self.threads = [
            threading.Thread(target=self._main, name=f"{name}-{i}", daemon=False)
            for i in range(size)
        ]
        for thread in self.threads:
            thread.start()

    def submit(self, fn: Callable[..., Any], *args: Any) -> concurrent.futures.Future[Any]:
        """Queue ``fn(*args)``; ``RuntimeError`` once the pool is stopping."""
        fut: concurrent.futures.Future[Any] = concurrent.futures.Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("worker pool is stopped")
            self._inflight.add(fut)
        fut.add_done_callback(self._forget)
        self._queue.put((lambda: fn(*args), fut))
        return fut

    def _forget(self, fut: concurrent.futures.Future[Any]) -> None:
        with self._lock:
            self._inflight.discard(fut)

    def pending(self) -> list[concurrent.futures.Future[Any]]:
        with self._lock:
            return list(self._inflight)

    def _main(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            fn, fut = item
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                result = fn()
            except BaseException as exc:  # reported to the submitter, never lost
                fut.set_exception(exc)
            else:
                fut.set_result(result)

    def stop(self, timeout: float | None) -> bool:
        with self._lock:
            if not self._closed:
                self._closed = True
                for _ in self.threads:
                    self._queue.put(None)
        deadline = None if timeout is None else time.monotonic() + timeout
        for thread in self.threads:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            thread.join(remaining)
        return not any(t.is_alive() for t in self.threads)


class ThreadCache:
    """Reusable non-daemon threads for actor loops (one actor loop per thread at a time).

    Starting a thread costs far more than an attempt's own work, so a thread whose
    actor stopped waits ``keepalive`` seconds for the next actor before ending.
    :meth:`run` never queues: with no idle thread it starts a new one, so no actor
    ever waits for another to stop. ``stop(timeout)`` ends idle threads and joins
    every thread (their actors must be stopped first).
    """

    def __init__(self, name: str, keepalive: float = 30.0) -> None:
        self._name = name
        self._keepalive = keepalive
        self._lock = threading.Lock()
        self._idle: list[queue.SimpleQueue[Callable[[], None] | None]] = []
        self._threads: list[threading.Thread] = []
        self._closed = False
        self._count = 0

    def run(self, fn: Callable[[], None]) -> None:
        with self._lock:
            if self._closed:
                raise RuntimeError("thread cache is stopped")
            if self._idle:
                self._idle.pop().put(fn)
                return
            self._count += 1
            inbox: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
            thread = threading.Thread(
                target=self._main, args=(inbox, fn), name=f"{self._name}-{self._count}"
            )
            self._threads = [t for t in self._threads if t.is_alive()]
            self._threads.append(thread)
        thread.start()

    def _main(
        self, inbox: queue.SimpleQueue[Callable[[], None] | None], fn: Callable[[], None] | None
    ) -> None:
        while fn is not None:
            try:
                fn()
            except BaseException:  # an actor loop never raises; log and keep the thread
                log.exception("actor loop raised")
            with self._lock:
                if self._closed:
                    return
                self._idle.append(inbox)
            try:
                fn = inbox.get(timeout=self._keepalive)
            except queue.Empty:
                with self._lock:
                    if inbox in self._idle:
                        self._idle.remove(inbox)
                        return
                # ``run`` took this thread just as it timed out: the work is on its way.
                fn = inbox.get()

    def stop(self, timeout: float | None) -> bool:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
            threads = list(self._threads)
        for inbox in idle:
            inbox.put(None)
        deadline = None if timeout is None else time.monotonic() + timeout
        for thread in threads:
            if thread is threading.current_thread():
                continue
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            thread.join(remaining)
        return not any(t.is_alive() for t in threads if t is not threading.current_thread())


@dataclass
class Runtime:
    """What every actor of one supervisor shares. Immutable after construction,
    except the thread registry (guarded by its lock) and the machine pool."""

    store: SessionStore
    clock: Clock
    ids: IdSource
    limits: SupervisorLimits
    owner: OwnerIdentity
    namespace_id: str
    session_id: str
    loop: asyncio.AbstractEventLoop
    heartbeats: WorkerPool
    actor_threads: ThreadCache
    threads_lock: threading.Lock = field(default_factory=threading.Lock)
    threads: list[threading.Thread] = field(default_factory=list)
    machines: MachinePool = field(default_factory=MachinePool)
    deltas: DeltaBox = field(default_factory=DeltaBox)
    """Context deltas of persisted terminal attempts (each attempt actor puts its own)."""
    news: deque[Any] = field(default_factory=deque)
    """``AttemptTerminal`` news from attempt actors, appended without waking the
    supervisor actor, which drains it before it handles any message (so its table
    is current for every request; see ``news_wake``)."""
    news_wake: bool = False
    """Set by the supervisor actor while it must hear of every end at once (a
    completion callback, waiters on its table, shutdown): an attempt that appended
    news then also tells it ``NewsReady``. Appending before reading this flag, and
    the supervisor setting it before draining, means no news is ever missed."""
    views: dict[str, RecordView] = field(default_factory=dict)
    """attempt_id -> its shared view, for every attempt the supervisor knows.
    Written by the supervisor actor only (before it answers ``delegate``); read by
    ``wait`` without a round trip."""

    @property
    def lease_ttl(self) -> float:
        """The owner's lease TTL when it sets one, else the limits' TTL."""
        return self.owner.lease_ttl or self.limits.lease_ttl

    @property
    def heartbeat_interval(self) -> float:
        return self.limits.heartbeat_interval_for(self.lease_ttl)

    @property
    def retry_interval(self) -> float:
        return self.limits.retry_interval_for(self.lease_ttl)

    def register_thread(self) -> None:
        """Remember the calling actor thread so shutdown can join it."""
        with self.threads_lock:
            self.threads = [t for t in self.threads if t.is_alive()]
            self.threads.append(threading.current_thread())

    def later(self, delay: float, fn: Callable[[], Any]) -> None:
        """Run ``fn`` on the loop thread after ``delay`` seconds (thread-safe).

        A closed loop drops the timer: the actor it would wake is gone too.
        """

        def arm() -> None:
            self.loop.call_later(max(0.0, delay), fn)

        try:
            self.loop.call_soon_threadsafe(arm)
        except RuntimeError:
            log.debug("timer dropped: the event loop is closed")
