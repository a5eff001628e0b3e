"""The event loop children run on, and the runtime an attempt actor shares with its supervisor.

pykka has no asyncio: children run as tasks on an asyncio loop and talk to
actors only by ``tell``; actors schedule timers on the loop with
``call_soon_threadsafe``. No actor ever awaits or blocks on the loop.

Every thread is host-wide (:class:`SupervisorPools`): the loop, a pool that runs
the actors (:class:`PooledActor`: an actor holds a pool thread only while it has
messages, so an idle supervisor costs a small record and no thread), a heartbeat
pool and a delivery pool. The loop's timer heap is the only timer: there is no
per-session or per-attempt ticker thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import queue
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pykka

from storage import Clock, IdSource, SessionStore

from ._config import OwnerIdentity, PoolLimits, SupervisorLimits
from ._delivery import DeltaBox
from ._errors import BackgroundSubagentError
from ._machines import MachinePool
from ._record_view import RecordView

log = logging.getLogger("subagents.actors")


def simple_inbox() -> Any:
    """An actor inbox on ``queue.SimpleQueue`` (C-implemented, unbounded, FIFO): it
    has the ``put``/``get``/``empty`` pykka needs and costs a fraction of
    ``queue.Queue``'s Condition-based handoff on every message."""
    inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
    return inbox


class PooledInbox:
    """A :class:`PooledActor`'s inbox: a FIFO that schedules the actor's next burst on
    its pool when a message reaches an idle actor, plus :meth:`close`.

    Once closed (by its stopping actor), every message still queued and every
    message put later goes to the ``fallback`` instead, on the putting thread:
    no request a sender managed to queue is ever left unanswered, even when it
    raced the actor's stop.
    """

    __slots__ = ("_fallback", "_lock", "_pool", "_queue", "_scheduled", "burst")

    def __init__(self) -> None:
        self._queue: deque[Any] = deque()
        self._lock = threading.Lock()
        self._fallback: Callable[[Any], None] | None = None
        self._pool: WorkerPool | None = None
        self._scheduled = True  # until attached: the first burst is scheduled by attach
        self.burst: Callable[[], None] | None = None

    def attach(self, first: Callable[[], None], pool: WorkerPool) -> None:
        """Bind the pool and schedule the actor's first burst (``on_start``, then messages)."""
        self._pool = pool
        self.burst = first
        self._submit(soon=True)

    def _submit(self, *, soon: bool) -> None:
        """Queue the actor's next burst: ``soon`` (a message woke the actor) lets a
        sender on this pool's own worker run it right after its current item
        (:meth:`WorkerPool.run_next`); a burst that used up its turn queues behind
        the other actors."""
        assert self._pool is not None and self.burst is not None
        try:
            if soon:
                self._pool.run_next(self.burst)
            else:
                self._pool.run(self.burst)
        except RuntimeError:  # the pool stopped: the host is gone, the actor with it
            log.debug("actor burst dropped: its pool is stopped")

    def put(self, envelope: Any, /) -> None:
        with self._lock:
            fallback = self._fallback
            if fallback is None:
                self._queue.append(envelope)
                if self._scheduled:
                    return
                self._scheduled = True
        if fallback is not None:
            fallback(envelope)
            return
        self._submit(soon=True)

    def take(self) -> Any | None:
        """The next envelope, or ``None`` when empty (the burst's own thread only)."""
        with self._lock:
            return self._queue.popleft() if self._queue else None

    def rest(self) -> None:
        """End a burst: go idle if nothing is queued, else queue the next burst."""
        with self._lock:
            if not self._queue:
                self._scheduled = False
                return
        self._submit(soon=False)

    def get(self) -> Any:
        # pykka's teardown calls get() only after empty() said False.
        with self._lock:
            return self._queue.popleft()

    def empty(self) -> bool:
        with self._lock:
            return not self._queue

    def close(self, fallback: Callable[[Any], None]) -> None:
        """Hand every queued and every later message to ``fallback`` (called once,
        from the actor's own burst, as it stops)."""
        with self._lock:
            self._fallback = fallback
            queued, self._queue = list(self._queue), deque()
        for envelope in queued:
            fallback(envelope)


ClosableInbox = PooledInbox


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


NEXT_CHAIN = 8
"""Items a worker runs from its *next* slot in a row before it hands the next one on."""


class WorkerPool:
    """At most ``size`` non-daemon worker threads running submitted callables in FIFO order.

    Threads start on demand (one more whenever work arrives and none is idle, up
    to ``size``) and then stay until :meth:`stop`. Unlike ``ThreadPoolExecutor``
    it can be joined under a deadline: ``stop(timeout)`` refuses new work, lets
    queued work finish and returns whether every thread ended in time.

    Each worker has a *next* slot (:meth:`run_next`): work one of its own items
    queues there runs on the same thread as soon as that item returns, instead
    of waking another worker that would contend with it for the GIL while it
    finishes (an actor that tells another one, then returns). Whatever sits in
    the slot is handed to every worker (:meth:`release_next`) before its worker
    starts anything else that could take long.
    """

    def __init__(self, name: str, size: int = 1) -> None:
        self._name = name
        self._size = size
        self._queue: queue.SimpleQueue[
            tuple[Callable[[], Any], concurrent.futures.Future[Any] | None] | None
        ] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._closed = False
        self._idle = 0
        self._inflight: set[concurrent.futures.Future[Any]] = set()
        self._worker = threading.local()  # on each worker: ``next``, its slot
        self.threads: list[threading.Thread] = []

    def submit(self, fn: Callable[..., Any], *args: Any) -> concurrent.futures.Future[Any]:
        """Queue ``fn(*args)``; ``RuntimeError`` once the pool is stopping."""
        fut: concurrent.futures.Future[Any] = concurrent.futures.Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("worker pool is stopped")
            self._inflight.add(fut)
        fut.add_done_callback(self._forget)
        self._put((lambda: fn(*args), fut))
        return fut

    def run(self, fn: Callable[[], Any]) -> None:
        """Queue ``fn()`` with no future (its errors are logged); ``RuntimeError`` once
        the pool is stopping. The actors' dispatch path: no future, no callback."""
        with self._lock:
            if self._closed:
                raise RuntimeError("worker pool is stopped")
        self._put((fn, None))

    def run_next(self, fn: Callable[[], Any]) -> None:
        """Like :meth:`run`, but on one of this pool's workers whose *next* slot is
        free, ``fn`` goes there: it runs on that worker right after the item it is
        running returns (or is handed to every worker by :meth:`release_next`).

        Only for work nobody blocks on from inside the same pool (an actor's burst:
        actors never wait on actors), since the worker that queued it runs it only
        once its own item returns. Elsewhere, or with the slot taken, this is :meth:`run`.
        """
        worker = self._worker
        if getattr(worker, "next", False) is None:
            with self._lock:
                if self._closed:
                    raise RuntimeError("worker pool is stopped")
            worker.next = fn
            return
        self.run(fn)

    def release_next(self) -> None:
        """Hand the calling worker's *next* item, if any, to whichever worker is free
        (the caller is about to do more than return). A no-op off the pool's workers.
        Once the pool is stopping, the item runs here instead: the workers may have
        taken their last item, and it was accepted before the stop."""
        worker = self._worker
        fn = getattr(worker, "next", None)
        if fn is None:
            return
        worker.next = None
        with self._lock:
            closed = self._closed
        if closed:
            self._run_logged(fn)
        else:
            self._put((fn, None))

    def _put(self, item: tuple[Callable[[], Any], concurrent.futures.Future[Any] | None]) -> None:
        self._queue.put(item)
        with self._lock:
            if self._idle > 0 or len(self.threads) >= self._size or self._closed:
                return
            thread = threading.Thread(
                target=self._main, name=f"{self._name}-{len(self.threads)}", daemon=False
            )
            self.threads.append(thread)
        thread.start()

    def _forget(self, fut: concurrent.futures.Future[Any]) -> None:
        with self._lock:
            self._inflight.discard(fut)

    def pending(self) -> list[concurrent.futures.Future[Any]]:
        with self._lock:
            return list(self._inflight)

    def _main(self) -> None:
        self._worker.next = None
        while True:
            with self._lock:
                self._idle += 1
            item = self._queue.get()
            with self._lock:
                self._idle -= 1
            if item is None:
                return
            fn, fut = item
            if fut is None:
                self._run_logged(fn)
            elif fut.set_running_or_notify_cancel():
                try:
                    result = fn()
                except BaseException as exc:  # reported to the submitter, never lost
                    fut.set_exception(exc)
                else:
                    fut.set_result(result)
            self._run_slot()

    def _run_slot(self) -> None:
        """Run what the finished item left in this worker's *next* slot: a chain of at
        most :data:`NEXT_CHAIN` such items, then the rest goes to the shared queue
        (two actors telling each other forever must not keep one worker to themselves)."""
        worker = self._worker
        for _ in range(NEXT_CHAIN):
            fn = worker.next
            if fn is None:
                return
            worker.next = None
            self._run_logged(fn)
        self.release_next()

    @staticmethod
    def _run_logged(fn: Callable[[], Any]) -> None:
        try:
            fn()
        except BaseException:  # an actor burst never raises; log and keep the thread
            log.exception("pooled work raised")

    def stop(self, timeout: float | None) -> bool:
        with self._lock:
            if not self._closed:
                self._closed = True
                for _ in self.threads:
                    self._queue.put(None)
            threads = list(self.threads)
        deadline = None if timeout is None else time.monotonic() + timeout
        for thread in threads:
            if thread is threading.current_thread():
                continue
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            thread.join(remaining)
        return not any(t.is_alive() for t in threads if t is not threading.current_thread())


class Strand:
    """Callables run one at a time, in submission order, on a shared :class:`WorkerPool`
    (a supervisor's completion callbacks: one result at a time per supervisor, with
    no thread of its own)."""

    def __init__(self, pool: WorkerPool) -> None:
        self._pool = pool
        self._lock = threading.Lock()
        self._queue: deque[tuple[Callable[[], Any], concurrent.futures.Future[Any]]] = deque()
        self._running = False
        self._inflight: set[concurrent.futures.Future[Any]] = set()

    def submit(self, fn: Callable[..., Any], *args: Any) -> concurrent.futures.Future[Any]:
        """Queue ``fn(*args)``; ``RuntimeError`` once the pool is stopping."""
        fut: concurrent.futures.Future[Any] = concurrent.futures.Future()
        with self._lock:
            self._queue.append((lambda: fn(*args), fut))
            self._inflight.add(fut)
            start, self._running = not self._running, True
        if start:
            try:
                self._pool.run(self._drain)
            except RuntimeError:
                with self._lock:
                    self._running = False
                    self._queue.clear()
                    self._inflight.clear()
                raise
        return fut

    def _drain(self) -> None:
        while True:
            with self._lock:
                if not self._queue:
                    self._running = False
                    return
                fn, fut = self._queue.popleft()
            if fut.set_running_or_notify_cancel():
                try:
                    result = fn()
                except BaseException as exc:  # reported to the submitter, never lost
                    fut.set_exception(exc)
                else:
                    fut.set_result(result)
            with self._lock:
                self._inflight.discard(fut)

    def pending(self) -> list[concurrent.futures.Future[Any]]:
        with self._lock:
            return list(self._inflight)


BURST = 64
"""Messages a pooled actor handles before it yields its pool thread to the next actor."""


class PooledActor(pykka.ThreadingActor):
    """A pykka actor run by a shared :class:`WorkerPool` instead of a thread of its own.

    Its inbox (:class:`PooledInbox`) schedules a burst on the pool when a message
    arrives at an idle actor; the burst handles up to :data:`BURST` messages
    exactly as pykka's own loop does (replies, ``_ActorStop``, failures), then
    either goes idle (no thread held) or queues itself again behind the other
    actors. One burst at a time per actor, so the actor still sees one message
    at a time, in order. A handler must never block on another pooled actor (a
    pool of ``n`` threads would deadlock on ``n`` such waits): the actors here
    only ``tell``.
    """

    _create_actor_inbox = staticmethod(PooledInbox)

    pool: WorkerPool
    """Set by the subclass before ``start``: the pool that runs this actor."""

    def _start_actor_loop(self) -> None:
        inbox = self.actor_inbox
        assert isinstance(inbox, PooledInbox)
        inbox.attach(self._first_burst, self.pool)

    def _first_burst(self) -> None:
        self._actor_loop_setup()
        inbox = self.actor_inbox
        assert isinstance(inbox, PooledInbox)
        inbox.burst = self._burst
        self._burst()

    def _burst(self) -> None:
        inbox = self.actor_inbox
        assert isinstance(inbox, PooledInbox)
        pool = self.pool
        for _ in range(BURST):
            if self.actor_stopped.is_set():
                break
            envelope = inbox.take()
            if envelope is None:
                break
            # An actor this one woke while handling the previous message waits in
            # this worker's next slot: not behind this message too.
            pool.release_next()
            self._handle_envelope(envelope)
        if self.actor_stopped.is_set():
            self._actor_loop_teardown()
            # Never scheduled again (``rest`` is not called, so the inbox stays
            # "scheduled" and a late ``put`` only queues). Dropping the bound method
            # breaks the actor -> inbox -> burst -> actor cycle, so a stopped actor
            # (a hibernated supervisor's, an ended attempt's) and all it holds are
            # freed at once by reference counting instead of waiting for the cyclic
            # collector, meanwhile growing the heap (issue 16).
            inbox.burst = None
            return
        inbox.rest()

    def _handle_envelope(self, envelope: Any) -> None:
        """One message, as pykka's ``_actor_loop_running`` handles it."""
        try:
            response = self._handle_receive(envelope.message)
            if envelope.reply_to is not None:
                envelope.reply_to.set(response)
        except Exception:
            if envelope.reply_to is not None:
                envelope.reply_to.set_exception()
            else:
                self._handle_failure(*sys.exc_info())
                try:
                    self.on_failure(*sys.exc_info())
                except Exception:
                    self._handle_failure(*sys.exc_info())
        except BaseException:
            log.debug("%r in %s: stopping all actors", sys.exc_info()[1], self)
            self._stop()
            # Never block a pool thread on other actors' stops: they may need this thread.
            pykka.ActorRegistry.stop_all(block=False)


class SupervisorPools:
    """The threads every supervisor of one process shares, sized by :class:`PoolLimits`.

    A host makes one and passes it to each session's supervisor; a supervisor
    made without one owns a private set (stopped by its shutdown). Threads start
    on first use, up to each pool's size: the children's event loop (one
    thread, unless ``loop`` is given), the actor pool (``actor_threads``), the
    heartbeat pool and the delivery pool. ``max_live_attempts`` is counted here:
    :meth:`reserve_attempt` refuses the next attempt with
    ``BackgroundSubagentError.HostBusy``. :meth:`stop` ends every thread under
    one deadline (after the supervisors' own shutdowns).
    """

    def __init__(
        self,
        limits: PoolLimits | None = None,
        *,
        loop: asyncio.AbstractEventLoop | None = None,
        name: str = "subagents",
    ) -> None:
        self.limits = limits or PoolLimits()
        self._name = name
        self._given_loop = loop
        self._lock = threading.Lock()
        self._loop_thread: LoopThread | None = None
        self._actors: WorkerPool | None = None
        self._heartbeats: WorkerPool | None = None
        self._delivery: WorkerPool | None = None
        self._closed = False
        self.extension: object = None
        """The state of the layer built on these pools, shared by every supervisor on
        them (the SDK keeps its bounded child conversations here), ``None`` until it
        makes it; never read here."""
        self.machines = MachinePool()
        """Idle attempt machines, lent to the next attempt of any session (an idle
        session keeps none: a ``transitions`` machine is about 16 KiB)."""
        self.live_attempts = 0
        self.ended_attempts = 0
        """Attempts that ended (or stopped) so far: a host polls it to learn, without
        any callback, that something ended since it last looked."""

    def _start(self) -> None:
        with self._lock:
            if self._closed:
                raise BackgroundSubagentError.Closing("the host's supervisor pools are stopped")
            if self._actors is not None:
                return
            limits = self.limits
            if self._given_loop is None:
                self._loop_thread = LoopThread(name=f"{self._name}-loop")
            self._heartbeats = WorkerPool(f"{self._name}-heartbeat", limits.heartbeat_threads)
            self._delivery = WorkerPool(f"{self._name}-delivery", limits.delivery_threads)
            self._actors = WorkerPool(f"{self._name}-actor", limits.actor_threads)

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        self._start()
        if self._given_loop is not None:
            return self._given_loop
        assert self._loop_thread is not None
        return self._loop_thread.loop

    @property
    def actors(self) -> WorkerPool:
        self._start()
        assert self._actors is not None
        return self._actors

    @property
    def heartbeats(self) -> WorkerPool:
        self._start()
        assert self._heartbeats is not None
        return self._heartbeats

    @property
    def delivery(self) -> WorkerPool:
        self._start()
        assert self._delivery is not None
        return self._delivery

    def reserve_attempt(self) -> None:
        """Count one more live attempt, or raise ``HostBusy`` at ``max_live_attempts``."""
        limit = self.limits.max_live_attempts
        with self._lock:
            if self.live_attempts >= limit:
                raise BackgroundSubagentError.HostBusy(
                    "the host runs its maximum of live background attempts; retry later",
                    bound="max_live_attempts",
                    limit=limit,
                    retry_after_seconds=self.limits.retry_after_seconds,
                )
            self.live_attempts += 1

    def release_attempt(self) -> None:
        with self._lock:
            self.live_attempts = max(0, self.live_attempts - 1)
            self.ended_attempts += 1

    def threads(self) -> list[threading.Thread]:
        """Every thread the pools started (live or ended)."""
        with self._lock:
            pools = (self._actors, self._heartbeats, self._delivery)
            found = [t for p in pools if p is not None for t in p.threads]
            if self._loop_thread is not None:
                found.append(self._loop_thread.thread)
        return found

    def stop(self, timeout: float | None) -> bool:
        """Refuse new work, finish queued work, stop the loop; whether every thread ended."""
        with self._lock:
            self._closed = True
            pools = [p for p in (self._actors, self._heartbeats, self._delivery) if p is not None]
            loop_thread = self._loop_thread
        deadline = None if timeout is None else time.monotonic() + timeout

        def remaining() -> float | None:
            return None if deadline is None else max(0.0, deadline - time.monotonic())

        stopped = True
        for pool in pools:
            stopped = pool.stop(remaining()) and stopped
        if loop_thread is not None:
            stopped = loop_thread.stop(remaining()) and stopped
        return stopped


@dataclass
class Runtime:
    """What every actor of one supervisor shares. Immutable after construction,
    except the machine pool. Its threads are the host's (``pools``)."""

    store: SessionStore
    clock: Clock
    ids: IdSource
    limits: SupervisorLimits
    owner: OwnerIdentity
    namespace_id: str
    session_id: str
    loop: asyncio.AbstractEventLoop
    pools: SupervisorPools
    """The host-wide threads: actors run on ``pools.actors``, heartbeats on ``pools.heartbeats``."""
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

    @property
    def heartbeats(self) -> WorkerPool:
        return self.pools.heartbeats

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
