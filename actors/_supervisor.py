"""The supervisor actor and its thread-safe, asyncio-friendly facade.

:class:`BackgroundSubagentSupervisor` is what hosts and the SDK hold. Its
methods are coroutines with ``_sync`` twins, both built from one body (see
:mod:`actors._twins`); both talk to one pykka ``SupervisorActor`` in typed
requests (:data:`~actors._messages.SupervisorRequest`, dispatched by type) and
wait on a ``concurrent.futures.Future`` (awaited through
``asyncio.wrap_future``, never by blocking a loop on a pykka future). The
supervisor actor owns admission, ids, the attempt table, limits, the
completion callback and checked shutdown; one :class:`AttemptActor` per live
attempt owns that attempt.

Threads (all non-daemon, named ``subagents-*``) belong to a
:class:`~actors._runtime.SupervisorPools`, shared by every supervisor of a host
(or private to a supervisor made without one): the event loop the children run
on (``subagents-loop``), the actor pool that runs the supervisor actors and the
attempt actors while they have messages (``subagents-actor-N``), the heartbeat
pool (``subagents-heartbeat-N``) and the delivery pool that runs completion
callbacks (``subagents-delivery-N``, one callback at a time per supervisor).
Each pool starts its threads on demand up to its configured size; an idle
supervisor holds none. A private set ends when
:meth:`~BackgroundSubagentSupervisor.shutdown_checked` completes; a shared set
when its owner calls :meth:`~actors._runtime.SupervisorPools.stop`.

Hand-offs of one attempt (each wakes a sleeping thread, the dominant cost in
memory mode): the caller's ``delegate`` to the supervisor actor and its answer;
the attempt actor's first burst on the actor pool; its ``call_soon_threadsafe`` onto
the loop and the child's ``ChildFinished`` back. The attempt's end reaches the
supervisor through ``Runtime.news`` without waking it (it drains the news
before any request, and asks for a wake-up only while a callback, a waiter on
its table or shutdown needs the news at once); a ``wait`` blocks on the
attempt's shared view, which the attempt actor itself ends, with no round trip
through the supervisor; an ended attempt actor stops itself (late requests are
rerouted to the supervisor by its closed inbox).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import inspect
import logging
import math
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, assert_never

import msgspec
import pykka

from statemachines import DeliveryStatus, derive_phase, is_active_execution
from storage import (
    AnchoredClock,
    AttemptRecord,
    Clock,
    Conflict,
    IdSource,
    MemorySessionStore,
    NotFound,
    OwnerLease,
    SessionRecord,
    SessionStore,
    StoreError,
)

from ._attempt import AttemptActor
from ._buffered_random_ids import BufferedRandomIds
from ._child import ChildRequest, ChildRunner
from ._config import OwnerIdentity, PoolLimits, SupervisorLimits
from ._delivery import Deliverer, DeltaBox
from ._errors import BackgroundSubagentError
from ._messages import (
    Abort,
    Accepted,
    Ask,
    AttemptLost,
    AttemptTerminal,
    AttemptUpdated,
    BeginShutdownRequest,
    Cancel,
    CancelRequest,
    DelegateRequest,
    Describe,
    DescribeRequest,
    HibernateRequest,
    NewsReady,
    Reply,
    Rerouted,
    SnapshotRequest,
    Start,
    Steer,
    SteerRequest,
    SupervisorRequest,
    UnfinishedRequest,
    WatchRequest,
    resolve,
)
from ._record_view import RecordView
from ._results import (
    AttemptSummary,
    BackgroundResult,
    CancelResult,
    DelegateResult,
    InfoResult,
    SteerReceipt,
    WaitResult,
)
from ._runtime import PooledActor, Runtime, Strand, SupervisorPools
from ._twins import Await, Blocking, Detached, DetachedThreads, Steps, twins

log = logging.getLogger("subagents.actors")

MAX_WAIT_SECONDS = 300.0
HIBERNATE_WAIT = 5.0
"""Seconds :meth:`BackgroundSubagentSupervisor.hibernate` waits for the actor's answer."""
CompletionCallback = Callable[[BackgroundResult], Any]


def clamp_wait(timeout_seconds: float | None) -> float:
    """``wait``'s timeout: clamped to [0, 300]; ``None`` or non-finite means 300."""
    if timeout_seconds is None:
        return MAX_WAIT_SECONDS
    try:
        value = float(timeout_seconds)
    except (TypeError, ValueError):
        return MAX_WAIT_SECONDS
    if not math.isfinite(value):
        return MAX_WAIT_SECONDS
    return min(max(value, 0.0), MAX_WAIT_SECONDS)


@dataclass
class _Entry:
    attempt_id: str
    agent_id: str
    subagent_name: str
    linked_task_id: str | None
    view: RecordView  # the last persisted record (its actor publishes transitions here)
    ref: pykka.ActorRef[Any] | None
    state: str  # "active" | "terminal" | "lost"
    watchers: list[Reply] = field(default_factory=list)
    cancellations: dict[str, str | None] = field(default_factory=dict)

    @property
    def record(self) -> AttemptRecord:
        return self.view.record

    @record.setter
    def record(self, record: AttemptRecord) -> None:
        self.view.record = record


def _summary(record: AttemptRecord) -> AttemptSummary:
    return AttemptSummary(
        attempt_id=record.attempt_id,
        agent_id=record.agent_id,
        subagent_name=record.subagent_name,
        linked_task_id=record.linked_task_id,
        execution_status=str(record.execution_status),
        delivery_status=str(record.delivery_status),
        retention_status=str(record.retention_status),
        phase=str(
            derive_phase(
                str(record.execution_status),
                str(record.delivery_status),
                str(record.retention_status),
            )
        ),
    )


class SupervisorActor(PooledActor):
    """Admission, ids, the attempt table and shutdown bookkeeping. Never blocks on
    an attempt actor: requests for an attempt are forwarded with their reply.

    It runs on the host's actor pool: an idle supervisor (no message queued)
    holds no thread, only this object and its tables."""

    def __init__(
        self,
        *,
        runtime: Runtime,
        deliverer: Deliverer,
        deltas: DeltaBox,
        default_runner: ChildRunner | None,
        on_complete: CompletionCallback | None,
        delivery: Strand,
    ) -> None:
        super().__init__()
        self.pool = runtime.pools.actors
        self.rt = runtime
        self.deliverer = deliverer
        self.deltas = deltas
        self.default_runner = default_runner
        self.on_complete = on_complete
        self.delivery = delivery
        self.entries: dict[str, _Entry] = {}
        self.active: dict[str, _Entry] = {}  # the entries whose state is "active"
        # agent_id -> subagent_name, least recently used first (bounded: max_known_agents)
        self.agents: OrderedDict[str, str] = OrderedDict()
        # Ended attempts in the order they ended, and the ids the deliverer acknowledged
        # that are still in the table (bounded: max_retained_attempts).
        self.ended_order: deque[str] = deque()
        self.delivered_ids: set[str] = set()
        self.active_by_agent: dict[str, str] = {}  # agent_id -> attempt_id
        # Acceptances handed to a pool thread and not answered yet: agent_id -> attempt_id.
        self.accepting: dict[str, str] = {}
        self.closing = False
        self.aborting = False  # the shutdown's mode, for attempts accepted after it began
        # The ids of this session's results believed undelivered: the store's pending
        # set at the last recount plus every attempt since that ended without being
        # handed over, was lost (reconciliation makes it a pending result) or may hide
        # behind a lost acceptance response. Admission checks it only at the limit
        # (_undelivered_at_limit). Results of other supervisors of the same session
        # are counted only at a recount.
        self.undelivered: set[str] = set()
        self.recount_due = False
        self.settle_watchers: list[Reply] = []
        self.any_watchers: list[Reply] = []
        self.watched = 0  # watchers waiting in entries
        runtime.news_wake = on_complete is not None

    def _recount(self) -> None:
        """Replace :attr:`undelivered` with the store's pending set of this session (a
        read of every retained entry of the session: O(its history))."""
        rt = self.rt
        try:
            pending = rt.store.list_pending_attempts(rt.namespace_id, rt.session_id)
        except StoreError as exc:
            raise BackgroundSubagentError.Durability("could not count pending results") from exc
        self.undelivered = {record.attempt_id for record in pending}
        self.recount_due = False

    def _undelivered_at_limit(self) -> int:
        """How many results are undelivered, asked when :attr:`undelivered` reached the
        limit: first without the ones this supervisor's deliverer acknowledged, then
        without the ones the store says are delivered (or unknown: an acceptance whose
        response was lost and that never applied), and only when that still leaves it
        at the limit, the store's recount. Costs O(limit) point reads, not O(history),
        unless the limit is really reached."""
        limit = self.rt.limits.max_undelivered_results
        if not self.recount_due:
            self._take_delivered()
            if len(self.undelivered) >= limit:
                self._drop_delivered_in_store()
            if len(self.undelivered) < limit:
                return len(self.undelivered)
        self._recount()
        return len(self.undelivered)

    def _drop_delivered_in_store(self) -> None:
        store = self.rt.store
        for attempt_id in list(self.undelivered):
            try:
                record = store.load_attempt(attempt_id)
            except NotFound:
                self.undelivered.discard(attempt_id)  # never accepted
                continue
            except StoreError as exc:
                raise BackgroundSubagentError.Durability("could not count pending results") from exc
            if record.delivery_status == DeliveryStatus.DELIVERED:
                self.undelivered.discard(attempt_id)

    def on_start(self) -> None:
        try:
            self._recount()
        except BackgroundSubagentError:
            self.recount_due = True  # at the next admission
        # Agents of earlier attempts are looked up when one is continued
        # (_lookup_agent), not loaded here: every start (a new session, a wake from
        # hibernation) would otherwise read the store's whole attempt history.

    def on_receive(self, message: Any) -> Any:
        if self.rt.news:
            # Ends the attempts appended without waking us: every request sees them.
            self._drain_news()
        if isinstance(message, Ask):
            try:
                self._handle(message.request, message.reply)
            except BaseException as exc:  # answered to the caller, never raised into pykka
                resolve(message.reply, error=exc)
        elif isinstance(message, AttemptTerminal):
            self._on_terminal(message)
        elif isinstance(message, Accepted):
            self._on_accepted(message)
        elif isinstance(message, AttemptLost):
            self._on_lost(message)
        elif isinstance(message, NewsReady):
            pass  # drained above
        elif isinstance(message, Rerouted):
            self._on_rerouted(message)
        elif isinstance(message, AttemptUpdated):
            entry = self.entries.get(message.record.attempt_id)
            if entry is not None and entry.state == "active":
                entry.record = message.record
        return None

    def _handle(self, request: SupervisorRequest, reply: Reply) -> None:
        """Run one facade request on this actor's thread; the handler resolves ``reply``
        (or hands it to the attempt's actor). What it raises is answered to the caller."""
        match request:
            case DelegateRequest():
                self._delegate(request, reply)
            case SteerRequest():
                self._steer(request, reply)
            case CancelRequest():
                self._cancel(request, reply)
            case WatchRequest():
                self._watch(request.attempt_id, reply)
            case DescribeRequest():
                resolve(reply, self._entry(request.attempt_id).record)
            case SnapshotRequest():
                resolve(reply, [(e.state, e.record, e.ref) for e in self.entries.values()])
            case BeginShutdownRequest():
                self._begin_shutdown(request.abort, reply)
            case UnfinishedRequest():
                resolve(reply, sorted(self.active))
            case HibernateRequest():
                resolve(reply, self._idle())
            case _:
                assert_never(request)

    # -- admission ---------------------------------------------------------------------------

    def _delegate(self, req: DelegateRequest, reply: Reply) -> None:
        """Admit, accept in the store, start the attempt's actor, then answer.

        The acceptance runs here when nothing else waits for this actor. Otherwise it
        goes to the heartbeat pool, so this actor admits the next requests while the
        store commits (their acceptances then share durable commits) and
        :meth:`_on_accepted` goes on when the store answered."""
        runner = self._admit(req)
        rt = self.rt
        agent_id = req.agent_id or f"{req.subagent_name}-bg-{rt.ids.token_hex(4)}"
        # The host-wide bound: HostBusy, nothing accepted. The attempt's actor gives the
        # slot back as it stops (its end needs no wake-up of this actor).
        rt.pools.reserve_attempt()
        try:
            pending = Accepted(
                request=req, reply=reply, runner=runner, record=self._acceptance(req, agent_id)
            )
            if self.accepting or not self.actor_inbox.empty():
                self._accept_aside(pending)
                return
            stored = self._accept(pending.record)
        except BaseException:
            rt.pools.release_attempt()
            raise
        self._start_attempt(pending, stored)

    def _accept_aside(self, pending: Accepted) -> None:
        """Accept ``pending`` on a heartbeat thread (store work only, like a heartbeat),
        which tells this actor the answer as :class:`Accepted`."""
        record = pending.record
        self.accepting[record.agent_id] = record.attempt_id
        store, me, pools = self.rt.store, self.actor_ref, self.rt.pools

        def tell(answer: Accepted) -> None:
            try:
                me.tell(answer)
            except pykka.ActorDeadError:
                # Stopped without a shutdown: an accepted record expires and is reconciled.
                pools.release_attempt()
                resolve(
                    pending.reply,
                    error=BackgroundSubagentError.Closing(
                        "the supervisor stopped before the store answered"
                    ),
                )

        def accept() -> None:
            try:
                stored = store.accept_attempt(record)
            except BaseException as exc:
                tell(msgspec.structs.replace(pending, error=exc))
                if not isinstance(exc, Exception):
                    raise
                return
            tell(msgspec.structs.replace(pending, stored=stored))

        pools.heartbeats.run(accept)

    def _on_accepted(self, answer: Accepted) -> None:
        """The store answered an acceptance made aside: start the attempt, or answer
        the refusal (and settle whoever waited for nothing to be active)."""
        record = answer.record
        if self.accepting.get(record.agent_id) == record.attempt_id:
            del self.accepting[record.agent_id]
        if answer.stored is None:
            self.rt.pools.release_attempt()
            assert answer.error is not None
            resolve(answer.reply, error=self._refusal(answer.error, record))
            if self.any_watchers and not (self.active_by_agent or self.accepting):
                self._answer_any_watchers()  # nothing is active any more: as watch(None) does
            self._check_settled()
            return
        try:
            self._start_attempt(answer, answer.stored)
        except BaseException as exc:  # answered to the caller, never raised into pykka
            resolve(answer.reply, error=exc)
            return
        if self.closing:  # the shutdown began while the store committed it
            self._stop_for_shutdown(self.active[record.attempt_id])

    def _start_attempt(self, pending: Accepted, stored: AttemptRecord) -> None:
        """Start the actor of the accepted ``stored``, enter it in the tables, answer."""
        req, rt, agent_id = pending.request, self.rt, stored.agent_id
        attempt_id = stored.attempt_id
        request = ChildRequest(
            subagent_name=req.subagent_name,
            prompt=req.prompt,
            agent_id=agent_id,
            attempt_id=attempt_id,
            linked_task_id=req.linked_task_id,
            parent_run_id=req.parent_run_id,
            continued=req.agent_id is not None,
            metadata=dict(req.metadata),
        )
        view = RecordView(stored)
        ref = AttemptActor.start(
            runtime=rt,
            record=stored,
            request=request,
            runner=pending.runner,
            supervisor=self.actor_ref,
            view=view,
        )
        self._know_agent(agent_id, req.subagent_name)
        self.active_by_agent[agent_id] = attempt_id
        rt.views[attempt_id] = view
        self.entries[attempt_id] = self.active[attempt_id] = _Entry(
            attempt_id=attempt_id,
            agent_id=agent_id,
            subagent_name=req.subagent_name,
            linked_task_id=req.linked_task_id,
            view=view,
            ref=ref,
            state="active",
        )
        ref.tell(Start())
        resolve(
            pending.reply,
            DelegateResult(
                status="continued" if req.agent_id is not None else "accepted",
                subagent_name=req.subagent_name,
                attempt_id=attempt_id,
                agent_id=agent_id,
                linked_task_id=req.linked_task_id,
            ),
        )

    def _admit(self, req: DelegateRequest) -> ChildRunner:
        """The runner of an admissible request; raises what refuses it (``Closing``,
        ``NotFound``, ``PromptTooLarge``, ``ActiveConversation``, ``QuotaExceeded``)."""
        limits = self.rt.limits
        if self.closing:
            raise BackgroundSubagentError.Closing("the supervisor is shutting down")
        runner = req.runner or self.default_runner
        if runner is None:
            raise BackgroundSubagentError.NotFound(
                "no child runner for this subagent", subagent_name=req.subagent_name
            )
        size = len(req.prompt.encode("utf-8"))
        if size > limits.max_prompt_bytes:
            raise BackgroundSubagentError.PromptTooLarge(
                "the prompt is too large", size_bytes=size, limit=limits.max_prompt_bytes
            )
        if req.agent_id is not None:
            self._admit_continued(req.agent_id, req.subagent_name)
        active = len(self.active_by_agent) + len(self.accepting)
        if active >= limits.max_active_attempts:
            raise BackgroundSubagentError.QuotaExceeded(
                "too many active background attempts",
                active=active,
                limit=limits.max_active_attempts,
            )
        pending = len(self.undelivered)
        if self.recount_due or pending >= limits.max_undelivered_results:
            # The set only over-counts (deliveries happen elsewhere): check it.
            pending = self._undelivered_at_limit()
        if pending >= limits.max_undelivered_results:
            raise BackgroundSubagentError.QuotaExceeded(
                "too many undelivered background results are retained",
                undelivered=pending,
                limit=limits.max_undelivered_results,
            )
        return runner

    def _admit_continued(self, agent_id: str, subagent_name: str) -> None:
        """A continued agent must be known, bound to this subagent and idle."""
        bound = self.agents.get(agent_id) or self._lookup_agent(agent_id)
        if bound is None or bound != subagent_name:
            raise BackgroundSubagentError.NotFound(
                "unknown agent_id for this subagent",
                agent_id=agent_id,
                subagent_name=subagent_name,
            )
        holder = self.active_by_agent.get(agent_id) or self.accepting.get(agent_id)
        if holder is not None:
            raise BackgroundSubagentError.ActiveConversation(
                "the agent already has an active attempt", agent_id=agent_id, attempt_id=holder
            )

    def _acceptance(self, req: DelegateRequest, agent_id: str) -> AttemptRecord:
        """The record to accept, under this owner's lease (ids and store time read here)."""
        rt = self.rt
        attempt_id = f"subattempt_{rt.ids.uuid4()}"
        now = rt.store.clock.now()  # the lease runs on store time, not this host's clock
        return AttemptRecord(
            attempt_id=attempt_id,
            agent_id=agent_id,
            subagent_name=req.subagent_name,
            namespace_id=rt.namespace_id,
            parent_session_id=rt.session_id,
            parent_run_id=req.parent_run_id,
            linked_task_id=req.linked_task_id,
            owner_lease=OwnerLease(
                host_instance_id=rt.owner.host_instance_id,
                fencing_generation=rt.owner.fencing_generation,
                heartbeat_at=now,
                lease_expires_at=now + rt.lease_ttl,
            ),
            accepted_at=now,
            updated_at=now,
            profile=req.profile or "",
        )

    def _accept(self, record: AttemptRecord) -> AttemptRecord:
        """``record``, accepted by the store on this thread (its errors mapped)."""
        try:
            return self.rt.store.accept_attempt(record)
        except BaseException as exc:
            error = self._refusal(exc, record)
            if error is exc:
                raise
            raise error from exc

    def _refusal(self, exc: BaseException, record: AttemptRecord) -> BaseException:
        """Our error for what the store's ``accept_attempt(record)`` raised (``exc``
        itself when it is not the store's), its cause set to ``exc``."""
        ids = {"attempt_id": record.attempt_id, "agent_id": record.agent_id}
        if isinstance(exc, Conflict) and "holder" in exc.fields:
            # Another non-terminal attempt of this agent exists in the store (one this
            # supervisor abandoned after losing its lease, or another host's).
            error: BaseException = BackgroundSubagentError.ActiveConversation(
                "the agent already has an active attempt",
                agent_id=record.agent_id,
                attempt_id=exc.fields["holder"],
            )
        elif isinstance(exc, Conflict):
            error = BackgroundSubagentError.Durability("the store refused the attempt", **ids)
        elif isinstance(exc, StoreError):
            # A lost response may hide an applied acceptance: it then stays in the store
            # under our lease, expires and is reconciled as host_process_lost (a pending
            # result the bound must cover).
            self.undelivered.add(record.attempt_id)
            error = BackgroundSubagentError.Durability(
                "the store did not accept the attempt", **ids
            )
        else:
            return exc
        error.__cause__ = exc
        return error

    # -- requests for one attempt ------------------------------------------------------------

    def _entry(self, attempt_id: str) -> _Entry:
        entry = self.entries.get(attempt_id) or self._forgotten(attempt_id)
        if entry is None:
            raise BackgroundSubagentError.NotFound(
                "no such background attempt",
                attempt_id=attempt_id,
                known_attempt_ids=sorted(self.entries),
            )
        return entry

    def _forward(self, entry: _Entry, message: Steer | Cancel) -> None:
        """Tell an active attempt's actor; one that already stopped (its end is ahead
        of this in the mailbox) is answered from the table once that end is handled."""
        assert entry.ref is not None
        try:
            entry.ref.tell(message)
        except pykka.ActorDeadError:
            self.actor_ref.tell(Rerouted(attempt_id=entry.attempt_id, message=message))

    def _on_rerouted(self, rerouted: Rerouted) -> None:
        message = rerouted.message
        try:
            if isinstance(message, Steer):
                request = SteerRequest(
                    attempt_id=rerouted.attempt_id,
                    message=message.message,
                    steering_id=message.steering_id,
                )
                self._steer(request, message.reply)
            elif isinstance(message, Cancel):
                if message.reply is not None:  # shutdown's own cancel needs no answer
                    cancel = CancelRequest(
                        attempt_id=rerouted.attempt_id,
                        reason=message.reason,
                        cancellation_id=message.cancellation_id,
                    )
                    self._cancel(cancel, message.reply)
            elif isinstance(message, Describe):
                resolve(message.reply, self._entry(rerouted.attempt_id).record)
        except BaseException as exc:  # answered to the caller, never raised into pykka
            resolve(getattr(message, "reply", None), error=exc)

    def _steer(self, request: SteerRequest, reply: Reply) -> None:
        entry = self._entry(request.attempt_id)
        if entry.state == "active" and entry.ref is not None:
            steer = Steer(message=request.message, steering_id=request.steering_id, reply=reply)
            self._forward(entry, steer)
            return
        raise BackgroundSubagentError.Terminal(
            "the attempt already ended",
            attempt_id=request.attempt_id,
            execution_status=str(entry.record.execution_status),
        )

    def _cancel(self, request: CancelRequest, reply: Reply) -> None:
        attempt_id, reason = request.attempt_id, request.reason
        cancellation_id = request.cancellation_id
        entry = self._entry(attempt_id)
        if entry.state == "active" and entry.ref is not None:
            self._forward(
                entry, Cancel(reason=reason, cancellation_id=cancellation_id, reply=reply)
            )
            return
        if entry.state == "lost":
            # Not ours any more: answer what the store says now (reconciliation or the
            # new owner may have ended it since).
            with contextlib.suppress(StoreError):
                entry.record = self.rt.store.load_attempt(attempt_id)
        if cancellation_id is not None:
            known = entry.cancellations.get(cancellation_id, reason)
            if cancellation_id in entry.cancellations and known != reason:
                raise BackgroundSubagentError.IdempotencyConflict(
                    "cancellation_id was already used with another reason",
                    attempt_id=attempt_id,
                    cancellation_id=cancellation_id,
                )
            entry.cancellations.setdefault(cancellation_id, reason)
        resolve(
            reply,
            CancelResult(
                status=str(entry.record.execution_status),
                attempt_id=attempt_id,
                agent_id=entry.agent_id,
                cancellation_id=cancellation_id,
                reason=entry.record.cancellation_reason,
            ),
        )

    def _watch(self, attempt_id: str | None, reply: Reply) -> None:
        """Answer ``(entry_state, record, future)``; the future resolves with the
        entry state once the attempt is terminal (persisted) or lost, and at once
        (``not_found``) for an attempt this supervisor does not know."""
        done: Reply = concurrent.futures.Future()
        if attempt_id is None:
            if not (self.active_by_agent or self.accepting) or any(
                e.state == "terminal" and str(e.record.delivery_status) == "undelivered"
                for e in self.entries.values()
            ):
                resolve(done, "any")
            else:
                self.any_watchers.append(done)
                self._hear_every_end()
            resolve(reply, ("summary", None, done))
            return
        entry = self.entries.get(attempt_id) or self._forgotten(attempt_id)
        if entry is None:
            resolve(done, "not_found")  # nothing to wait for: the wait answers at once
            resolve(reply, ("not_found", sorted(self.entries), done))
            return
        if entry.state == "active":
            entry.watchers.append(done)
            self.watched += 1
            self._hear_every_end()  # may end it (and resolve ``done``) right here
        else:
            resolve(done, entry.state)
        resolve(reply, (entry.state, entry.record, done))

    # -- terminal news -----------------------------------------------------------------------

    def _on_terminal(self, message: AttemptTerminal) -> None:
        entry = self.entries.get(message.attempt_id)
        if entry is None or entry.state != "active":
            return
        # Persisted already, and its delta put by the attempt.
        entry.record = message.record
        entry.state = "terminal"
        if message.record.delivery_status != DeliveryStatus.DELIVERED:  # not handed over
            self.undelivered.add(message.attempt_id)
        entry.cancellations.update(message.cancellation_receipts)
        self._retire(entry)
        if self.on_complete is not None:
            callback = self.on_complete
            try:
                self.delivery.submit(self._run_callback, message.attempt_id, callback)
            except RuntimeError:
                log.warning("attempt %s: delivery pool stopped; callback skipped", entry.attempt_id)

    def _run_callback(self, attempt_id: str, callback: CompletionCallback) -> None:
        # Runs on the delivery thread.
        if inspect.iscoroutinefunction(callback):
            loop = self.rt.loop

            def sync(result: BackgroundResult) -> None:
                coro: Awaitable[Any] = callback(result)
                asyncio.run_coroutine_threadsafe(coro, loop).result()  # type: ignore[arg-type]

            self.deliverer.run_callback(attempt_id, sync)
        else:
            self.deliverer.run_callback(attempt_id, callback)

    def _on_lost(self, message: AttemptLost) -> None:
        entry = self.entries.get(message.attempt_id)
        if entry is None or entry.state != "active":
            return
        entry.state = "lost"
        # Reconciliation (here or by another host) turns it into a pending result.
        self.undelivered.add(message.attempt_id)
        entry.cancellations.update(message.cancellation_receipts)
        with contextlib.suppress(StoreError):
            entry.record = self.rt.store.load_attempt(message.attempt_id)
        self._retire(entry)

    def _retire(self, entry: _Entry) -> None:
        self.active.pop(entry.attempt_id, None)
        if entry.view.ended is None:  # a terminal attempt ended its view itself
            entry.view.end(entry.state)
        self.ended_order.append(entry.attempt_id)
        self._prune()
        if self.active_by_agent.get(entry.agent_id) == entry.attempt_id:
            del self.active_by_agent[entry.agent_id]
        # The attempt's actor stops itself once it told its end; requests that reach
        # it later come back here as ``Rerouted``.
        entry.ref = None
        if entry.watchers or self.any_watchers:
            self.watched -= len(entry.watchers)
            for watcher in entry.watchers:
                resolve(watcher, entry.state)
            entry.watchers.clear()
            self._answer_any_watchers()
        self._check_settled()

    def _answer_any_watchers(self) -> None:
        """Answer every ``watch(None)`` waiter with ``"any"``; ends may be heard lazily again."""
        for watcher in self.any_watchers:
            resolve(watcher, "any")
        self.any_watchers.clear()
        self.rt.news_wake = self._wants_news()

    # -- news of ended attempts --------------------------------------------------------------

    def _drain_news(self) -> None:
        news = self.rt.news
        while news:
            self._on_terminal(news.popleft())

    def _wants_news(self) -> bool:
        """Whether every end must reach this actor at once (not at its next message)."""
        return (
            self.on_complete is not None
            or self.closing
            or bool(self.any_watchers)
            or self.watched > 0
        )

    def _hear_every_end(self) -> None:
        """Ask attempts to wake this actor on every end from now on, then drain what
        they appended before they could see the request."""
        self.rt.news_wake = True
        self._drain_news()

    # -- bounded tables ----------------------------------------------------------------------

    def _know_agent(self, agent_id: str, subagent_name: str) -> None:
        agents = self.agents
        agents[agent_id] = subagent_name
        agents.move_to_end(agent_id)
        # Least recently used first; an agent with an active attempt stays.
        for _ in range(len(agents) - self.rt.limits.max_known_agents):
            oldest = next(iter(agents))
            if oldest in self.active_by_agent:
                agents.move_to_end(oldest)
            else:
                del agents[oldest]

    def _lookup_agent(self, agent_id: str) -> str | None:
        """A forgotten (or never loaded) agent of this session, from the store."""
        try:
            return self.rt.store.find_agent(self.rt.namespace_id, self.rt.session_id, agent_id)
        except StoreError as exc:
            raise BackgroundSubagentError.Durability(
                "could not look up the agent", agent_id=agent_id
            ) from exc

    def _forgotten(self, attempt_id: str) -> _Entry | None:
        """An ended attempt the table forgot, rebuilt from the store (not re-inserted):
        one of this session owned under this supervisor's owner identity (another
        supervisor's attempts stay unknown here). ``None`` otherwise."""
        try:
            record = self.rt.store.load_attempt(attempt_id)
        except StoreError:
            return None
        lease, owner = record.owner_lease, self.rt.owner
        if (
            record.namespace_id != self.rt.namespace_id
            or record.parent_session_id != self.rt.session_id
            or lease.host_instance_id != owner.host_instance_id
            or lease.fencing_generation != owner.fencing_generation
            or is_active_execution(str(record.execution_status))
        ):
            return None
        view = RecordView(record)
        view.ended = "terminal"
        return _Entry(
            attempt_id=attempt_id,
            agent_id=record.agent_id,
            subagent_name=record.subagent_name,
            linked_task_id=record.linked_task_id,
            view=view,
            ref=None,
            state="terminal",
        )

    def _prune(self) -> None:
        """Forget the oldest ended attempts whose result was delivered, beyond
        ``max_retained_attempts``; runs once per quarter of the limit (amortized O(1))."""
        limit = self.rt.limits.max_retained_attempts
        order = self.ended_order
        if len(order) <= limit + max(1, limit // 4):
            return
        self._take_delivered()
        excess = len(order) - limit
        kept: deque[str] = deque()
        for attempt_id in order:  # oldest first
            if excess > 0 and self._was_delivered(attempt_id):
                self._forget(attempt_id)
                excess -= 1
            else:
                kept.append(attempt_id)
        self.ended_order = kept

    def _take_delivered(self) -> None:
        """Take the ids the deliverer acknowledged since the last call: delivered, so
        neither undelivered nor (while in the table) in need of a store read to prune."""
        drained, self.deliverer.delivered = self.deliverer.delivered, []
        for attempt_id in drained:
            self.undelivered.discard(attempt_id)
            if attempt_id in self.entries:
                self.delivered_ids.add(attempt_id)

    def _was_delivered(self, attempt_id: str) -> bool:
        if attempt_id in self.delivered_ids:
            return True
        # Delivered by someone else (another supervisor's turn)? Only the store knows.
        try:
            record = self.rt.store.load_attempt(attempt_id)
        except StoreError:
            return False
        return str(record.delivery_status) == "delivered"

    def _forget(self, attempt_id: str) -> None:
        self.entries.pop(attempt_id, None)
        self.rt.views.pop(attempt_id, None)
        self.delivered_ids.discard(attempt_id)
        self.deltas.pop(attempt_id)

    # -- shutdown ----------------------------------------------------------------------------

    def _begin_shutdown(self, abort: bool, reply: Reply) -> None:
        """Close admission, ask every live attempt to stop (``abort``: now), and
        answer a future that resolves once no attempt is active."""
        self.closing = True
        self.aborting = abort
        self._hear_every_end()
        for entry in self.active.values():
            self._stop_for_shutdown(entry)
        settled: Reply = concurrent.futures.Future()
        self.settle_watchers.append(settled)
        self._check_settled()
        resolve(reply, settled)

    def _stop_for_shutdown(self, entry: _Entry) -> None:
        """Ask an active attempt to stop as the shutdown asked (abort, or cancel)."""
        if entry.ref is None:
            return
        # An actor that already stopped has told its end: it is ahead in the mailbox.
        with contextlib.suppress(pykka.ActorDeadError):
            if self.aborting:
                entry.ref.tell(Abort())
            else:
                entry.ref.tell(
                    Cancel(
                        reason="supervisor shutdown",
                        cancellation_id=None,
                        reply=None,
                        shutdown=True,
                    )
                )

    def _idle(self) -> bool:
        """Whether nothing here needs this actor: no active attempt, no waiter, no
        completion callback queued or running, not shutting down (news is drained
        before every request, so ended attempts are retired already)."""
        return not (
            self.closing
            or self.active
            or self.active_by_agent
            or self.accepting
            or self.watched
            or self.settle_watchers
            or self.any_watchers
            or self.rt.news
            or self.delivery.pending()
        )

    def _check_settled(self) -> None:
        if self.active or self.accepting:
            return
        for watcher in self.settle_watchers:
            resolve(watcher, None)
        self.settle_watchers.clear()


class BackgroundSubagentSupervisor:
    """Runs background subagent attempts; safe to use from any thread and from asyncio.

    Without a ``store`` it keeps attempts in an internal
    :class:`~storage.MemorySessionStore`; with a durable store and an
    ``owner`` identity every acceptance, execution transition, heartbeat and
    terminal outcome is committed there before anyone sees it. Both modes run
    the same code.

    ``runner`` is the default child runner (see :mod:`actors._child`);
    ``delegate`` may pass one per call. ``on_complete(result)`` is the
    completion callback: it runs on the supervisor's delivery thread (a coroutine
    function runs on the supervisor's loop, the delivery thread waiting for it),
    one result at a time, only for results it claims first. When it returns, the
    result counts as delivered; when it raises, the exception is logged, the
    claim is released and the result stays pending for ``wait`` or
    :meth:`take_pending`. It must not block on this supervisor's own ``_sync``
    calls for long (they work, but they hold the delivery thread).

    Every coroutine method has a ``_sync`` twin, made from the same body, so the
    two behave alike. Do not call a ``_sync`` method on the supervisor's own
    event loop thread (it would block the loop the children run on); call the
    coroutine there.

    Real time (thread joins, wait and shutdown deadlines) uses
    ``time.monotonic``; record time and leases use ``clock`` (the store's clock
    when none is given).
    """

    # Slots: a host keeps one per durable session for its lifetime, idle ones
    # included (issue 16).
    __slots__ = (
        "__weakref__",
        "_closed",
        "_delivery",
        "_detached",
        "_drained",
        "_lock",
        "_on_complete",
        "_own_pools",
        "_own_store",
        "_ref",
        "_runner",
        "_runtime",
        "_shutdown_lock",
        "_started",
        "clock",
        "deliverer",
        "deltas",
        "extension",
        "ids",
        "limits",
        "namespace_id",
        "owner",
        "parent_run_id",
        "pools",
        "session_id",
        "store",
    )

    def __init__(
        self,
        *,
        runner: ChildRunner | None = None,
        store: SessionStore | None = None,
        owner: OwnerIdentity | None = None,
        namespace_id: str = "default",
        session_id: str = "background-default",
        limits: SupervisorLimits | None = None,
        clock: Clock | None = None,
        ids: IdSource | None = None,
        on_complete: CompletionCallback | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
        parent_run_id: str = "run-background-default",
        pools: SupervisorPools | None = None,
    ) -> None:
        self.limits = limits or SupervisorLimits()
        self.ids: IdSource = ids or BufferedRandomIds()
        if store is None:
            # Store time anchored at start, so a wall-clock step never expires a live lease.
            self.clock: Clock = clock or AnchoredClock()
            self.store: SessionStore = MemorySessionStore(
                clock=self.clock, retention_seconds=self.limits.retention
            )
            self._own_store = True
        else:
            self.clock = clock or store.clock
            self.store = store
            self._own_store = False
        self.owner = owner or OwnerIdentity(
            host_instance_id=f"host-{self.ids.token_hex(8)}", fencing_generation=1
        )
        self.namespace_id = namespace_id
        self.session_id = session_id
        self.parent_run_id = parent_run_id
        self._runner = runner
        self._on_complete = on_complete
        if pools is not None and loop is not None:
            raise ValueError("pass the loop to the SupervisorPools, not to each supervisor")
        # A host shares one set of pools between its supervisors (and stops it itself);
        # without one the supervisor owns a private set, stopped by its shutdown.
        self._own_pools = pools is None
        # A private set never bounds live attempts below this supervisor's own limit.
        own = PoolLimits(max_live_attempts=max(1024, self.limits.max_active_attempts))
        self.pools = pools or SupervisorPools(own, loop=loop)
        self.deltas = DeltaBox()
        self.deliverer = Deliverer(
            store=self.store,
            ids=self.ids,
            limits=self.limits,
            deltas=self.deltas,
            namespace_id=namespace_id,
        )
        self._lock = threading.Lock()
        self._shutdown_lock = threading.Lock()
        self._started = False
        self._closed = False
        self._delivery: Strand | None = None
        self._runtime: Runtime | None = None
        self._ref: pykka.ActorRef[Any] | None = None
        self._detached: DetachedThreads | None = None  # made by the first shutdown call
        self._drained = False
        self.extension: object = None
        """The state of the layer built on this supervisor (the SDK's delegation keeps
        its child conversations and launched attempts here), ``None`` until it makes
        it; never read by the supervisor. Shares the supervisor's lifetime."""

    def __repr__(self) -> str:
        state = "closed" if self._closed else "started" if self._started else "idle"
        return (
            f"BackgroundSubagentSupervisor(namespace_id={self.namespace_id!r}, "
            f"session_id={self.session_id!r}, {state})"
        )

    @classmethod
    def new(cls) -> BackgroundSubagentSupervisor:
        """The spec's ``BackgroundSubagentSupervisor::new()``: all defaults."""
        return cls()

    # -- plumbing ----------------------------------------------------------------------------

    def _ensure_started(self) -> pykka.ActorRef[Any]:
        with self._lock:
            return self._started_locked()

    def _started_locked(self) -> pykka.ActorRef[Any]:
        """The supervisor actor, started (again, after :meth:`hibernate`) if need be;
        the caller holds ``_lock``."""
        if self._closed:
            raise BackgroundSubagentError.Closing("the supervisor is shut down")
        if self._ref is not None:
            return self._ref
        self._ensure_session()
        pools = self.pools
        self._delivery = Strand(pools.delivery)  # one callback at a time, no own thread
        self._runtime = Runtime(
            store=self.store,
            clock=self.clock,
            ids=self.ids,
            limits=self.limits,
            owner=self.owner,
            namespace_id=self.namespace_id,
            session_id=self.session_id,
            loop=pools.loop,
            pools=pools,
            machines=pools.machines,
            deltas=self.deltas,
        )
        self._ref = SupervisorActor.start(
            runtime=self._runtime,
            deliverer=self.deliverer,
            deltas=self.deltas,
            default_runner=self._runner,
            on_complete=self._on_complete,
            delivery=self._delivery,
        )
        self._started = True
        return self._ref

    def _keep_pending_deltas(self) -> None:
        """Forget the context deltas of results no longer pending (delivered by another
        engine, such as a host's continuation admission, which never asks this box)."""
        try:
            pending = self.store.list_pending_attempts(self.namespace_id, self.session_id)
        except StoreError:
            return  # keep them all; the next hibernation tries again
        self.deltas.keep_only({record.attempt_id for record in pending})

    @property
    def awake(self) -> bool:
        """Whether the supervisor actor is running (started and not hibernating)."""
        return self._ref is not None

    def hibernate(self, timeout: float = HIBERNATE_WAIT) -> bool:
        """Stop the supervisor actor if it is idle; whether it stopped one.

        Idle: no active attempt, no ``wait`` waiting on it, no completion callback
        queued or running, no shutdown begun. What it drops (its actor, runtime and
        attempt table, the acknowledged-delivery ids) is rebuilt from the store by
        the next call, which starts a fresh actor (known agents and the undelivered
        count are reloaded, an ended attempt is rebuilt on demand), so the
        supervisor stays one logical object with the same identity and store state:
        an idle session then costs this facade only, no actor. Undelivered results
        and their context deltas stay (deltas live here, not in the actor).

        Blocking (up to ``timeout`` for the actor's answer; not idle in time means
        not stopped); call it from any thread but the supervisor's own loop. A
        concurrent call of this supervisor waits for it (``_lock``); a shutdown in
        progress makes it return ``False`` at once.
        """
        if not self._shutdown_lock.acquire(blocking=False):
            return False
        try:
            with self._lock:
                ref = self._ref
                if self._closed or ref is None:
                    return False
                reply: Reply = concurrent.futures.Future()
                try:
                    ref.tell(Ask(request=HibernateRequest(), reply=reply))
                    idle = bool(reply.result(timeout=timeout))
                except (pykka.ActorDeadError, concurrent.futures.TimeoutError):
                    return False
                if not idle:
                    return False
                # Every request sent before this one was handled, and none can be sent
                # while ``_lock`` is held: nothing reaches the old actor any more.
                self._ref = self._runtime = self._delivery = None
                self.deliverer.delivered = []
                self._keep_pending_deltas()
            with contextlib.suppress(pykka.Timeout):
                ref.stop(block=True, timeout=timeout)  # idle: only the stop is queued
            return True
        finally:
            self._shutdown_lock.release()

    def _ensure_session(self) -> None:
        try:
            self.store.load_session(self.session_id)
            return
        except NotFound:
            pass
        except StoreError as exc:
            raise BackgroundSubagentError.Durability(
                "could not load the parent session", session_id=self.session_id
            ) from exc
        now = self.clock.now()
        try:
            self.store.create_session(
                SessionRecord(
                    session_id=self.session_id,
                    namespace_id=self.namespace_id,
                    created_at=now,
                    updated_at=now,
                )
            )
        except StoreError as exc:
            raise BackgroundSubagentError.Durability(
                "could not create the parent session", session_id=self.session_id
            ) from exc

    def _ask(self, request: SupervisorRequest) -> Reply:
        """Send ``request`` to the supervisor actor; the future it will answer on."""
        reply: Reply = concurrent.futures.Future()
        # Told under ``_lock``, so :meth:`hibernate` never stops an actor a request is
        # on its way to.
        with self._lock:
            ref = self._started_locked()
            try:
                ref.tell(Ask(request=request, reply=reply))
            except pykka.ActorDeadError as exc:
                raise BackgroundSubagentError.Closing("the supervisor is shut down") from exc
        return reply

    # Every public operation below is one body (a generator of steps, see
    # ``actors._twins``); ``twins`` makes its ``_sync`` and coroutine methods.

    # -- delegate ----------------------------------------------------------------------------

    def _delegate(
        self,
        subagent_name: str,
        prompt: str,
        agent_id: str | None = None,
        linked_task_id: str | None = None,
        *,
        runner: ChildRunner | None = None,
        parent_run_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        profile: str | None = None,
    ) -> Steps[DelegateResult]:
        """Accept a background attempt and return at once (it runs on the loop).

        ``agent_id`` continues a known background agent (``status ==
        "continued"``, fresh ``attempt_id``); an unknown one, or one bound to
        another subagent, is ``NotFound``; one with an active attempt is
        ``ActiveConversation``. Also ``Closing``, ``QuotaExceeded``,
        ``PromptTooLarge``, ``Durability``. ``profile`` is recorded in the durable
        attempt record (``AttemptRecord.profile``, ``""`` when not given), so a
        continuation run of its result runs with it.
        """
        request = DelegateRequest(
            subagent_name=subagent_name,
            prompt=prompt,
            agent_id=agent_id,
            linked_task_id=linked_task_id,
            runner=runner,
            parent_run_id=parent_run_id or self.parent_run_id,
            metadata=dict(metadata or {}),
            profile=profile,
        )
        result: DelegateResult = yield Await(self._ask(request))
        return result

    delegate_sync, delegate = twins(_delegate)

    # -- steer / cancel ----------------------------------------------------------------------

    def _steer(
        self, attempt_id: str, message: str, steering_id: str | None = None
    ) -> Steps[SteerReceipt]:
        """Queue ``message`` for the child's next turn boundary.

        The same ``steering_id`` and message return the same receipt and queue
        once; the same id with another message is ``IdempotencyConflict``.
        ``SteeringTooLarge``, ``SteeringQueueFull``, ``Terminal``, ``NotFound``.
        """
        size = len(message.encode("utf-8"))
        if size > self.limits.max_steering_bytes:
            raise BackgroundSubagentError.SteeringTooLarge(
                "the steering message is too large",
                attempt_id=attempt_id,
                size_bytes=size,
                limit=self.limits.max_steering_bytes,
            )
        request = SteerRequest(attempt_id=attempt_id, message=message, steering_id=steering_id)
        receipt: SteerReceipt = yield Await(self._ask(request))
        return receipt

    steer_sync, steer = twins(_steer)

    def _cancel(
        self, attempt_id: str, reason: str | None = None, cancellation_id: str | None = None
    ) -> Steps[CancelResult]:
        """Request cancellation: ``cancellation_requested``, or the terminal status.

        The child is asked to stop cooperatively and its task is cancelled after
        ``cancellation_grace``. The first reason is kept; the same
        ``cancellation_id`` with another reason is ``IdempotencyConflict``. A
        child that finished before the request was processed keeps its outcome
        (the race is visible: ``wait`` reports ``completed``).
        """
        if reason is not None:
            size = len(reason.encode("utf-8"))
            if size > self.limits.max_cancellation_reason_bytes:
                raise BackgroundSubagentError.CancellationReasonTooLarge(
                    "the cancellation reason is too large",
                    attempt_id=attempt_id,
                    size_bytes=size,
                    limit=self.limits.max_cancellation_reason_bytes,
                )
        request = CancelRequest(
            attempt_id=attempt_id, reason=reason, cancellation_id=cancellation_id
        )
        result: CancelResult = yield Await(self._ask(request))
        return result

    cancel_sync, cancel = twins(_cancel)

    # -- wait --------------------------------------------------------------------------------

    def _wait(
        self,
        attempt_id: str | None = None,
        timeout_seconds: float | None = 30.0,
        consumer_run_id: str | None = None,
    ) -> Steps[WaitResult]:
        """One bounded wait (clamped to [0, 300] s, one absolute deadline).

        With an attempt: ``not_found``, still running (``timed_out``), the
        terminal result delivered by this wait, or owned elsewhere. Without:
        waits for the next terminal attempt (if any is active) and returns a
        summary of all. ``Closing`` once shutdown completed (pending results
        stay available through :meth:`take_pending_sync`).

        ``consumer_run_id`` names the durable run the caller is (a host's
        run): the result is then claimed for that run and only its completion
        acknowledges it (``delivery_status`` ``delivered`` here means handed to
        this run); if the run fails, is cancelled or dies with its host, the
        result is offered again. Without, the wait acknowledges at once.
        """
        deadline = time.monotonic() + clamp_wait(timeout_seconds)
        view = self._view(attempt_id)
        payload: Any = None
        offer: str | None = None
        outcome: str | None
        if view is not None and view.ended is not None:
            state = outcome = view.ended
        else:
            if view is not None:
                # An attempt this supervisor runs: wait on its view, no round trip; a
                # wait with no durable run offers to take the result in its terminal commit.
                done = view.waiter()
                state = "active"
                if consumer_run_id is None:
                    offer = self.deliverer.claim_id("wait")
                    offer = offer if view.offer(offer) else None
            else:
                state, payload, done = yield Await(self._ask(WatchRequest(attempt_id=attempt_id)))
            outcome = yield from self._until_end(done, deadline, view, offer)
        if view is not None and offer is not None and outcome is not None and view.handed_to(offer):
            # The terminal commit delivered the result to this wait: no store call left.
            assert attempt_id is not None
            record = view.record
            return self._delivered(attempt_id, self.deliverer.handed_over(record), record)
        # A timed-out wait reports the latest persisted projection.
        payload = view.record if view is not None else None if state != "not_found" else payload
        finish = functools.partial(self._finish_wait, consumer_run_id=consumer_run_id, offer=offer)
        result: WaitResult = yield Blocking(finish, attempt_id, state, payload, outcome)
        return result

    def _until_end(
        self,
        done: concurrent.futures.Future[Any],
        deadline: float,
        view: RecordView | None,
        offer: str | None,
    ) -> Steps[str | None]:
        """How the attempt ended, or ``None`` at ``deadline``. An offer is withdrawn
        then, unless the terminal commit took it: that commit may hand this wait the
        result, so the wait goes on until it answered (at most a lease: past it the
        owner's writes are fenced and the attempt ends lost)."""
        try:
            ended: str = yield Await(done, timeout=max(0.0, deadline - time.monotonic()))
            return ended
        except TimeoutError:
            if view is None or offer is None or view.withdraw(offer):
                return None
        except BaseException:
            if view is not None and offer is not None and not view.withdraw(offer):
                log.warning(
                    "a wait left while the terminal commit of %s could hand it the result;"
                    " if it did, the result is delivered and this caller does not have it",
                    view.record.attempt_id,
                )
            raise
        try:
            ended = yield Await(done, timeout=self.limits.lease_ttl)
            return ended
        except TimeoutError:
            log.warning(
                "a wait gave up on the terminal commit of %s after a lease; if that commit"
                " still succeeds, the result is delivered and this caller does not have it",
                view.record.attempt_id,
            )
            return None

    wait_sync, wait = twins(_wait)

    def _view(self, attempt_id: str | None) -> RecordView | None:
        """The shared view of an attempt this supervisor knows, else ``None`` (then the
        supervisor actor answers). Raises ``Closing`` after shutdown, like every call."""
        if attempt_id is None:
            return None
        with self._lock:
            self._started_locked()
            runtime = self._runtime
        return None if runtime is None else runtime.views.get(attempt_id)

    def _finish_wait(
        self,
        attempt_id: str | None,
        state: str,
        payload: Any,
        outcome: str | None,
        *,
        consumer_run_id: str | None = None,
        offer: str | None = None,
    ) -> WaitResult:
        """The answer of a wait that was not handed its result by the terminal commit:
        it claims the result itself, under its ``offer`` when it made one (so when that
        commit did deliver under it, unseen here, the claim is an exact repeat)."""
        if state == "not_found":
            return WaitResult(
                status="not_found",
                attempt_id=attempt_id,
                known_attempt_ids=list(payload),
                message="No background attempt has this id.",
            )
        if attempt_id is None:
            info = self.info_sync()
            return WaitResult(
                status="summary",
                timed_out=outcome is None,
                attempts=[*info.active, *info.retained],
            )
        if outcome is None:
            # The last persisted projection (the attempt's view, or the supervisor's).
            record: AttemptRecord = (
                payload
                if isinstance(payload, AttemptRecord)
                else self._ask(DescribeRequest(attempt_id=attempt_id)).result()
            )
            return WaitResult.still_running(
                record, "Still running. Do not poll; its result will be delivered to you."
            )
        try:
            result, record = self.deliverer.deliver(attempt_id, "wait", consumer_run_id, offer)
        except BackgroundSubagentError.DeliveryClaimed:
            return self._elsewhere(attempt_id, "claimed")
        except BackgroundSubagentError.Delivered:
            return self._elsewhere(attempt_id, "delivered")
        except BackgroundSubagentError.Durability:
            # Not terminal in the store (lost to another owner) or the store failed.
            return self._elsewhere(attempt_id, None)
        return self._delivered(attempt_id, result, record, consumer_run_id)

    @staticmethod
    def _delivered(
        attempt_id: str,
        result: BackgroundResult,
        record: AttemptRecord,
        consumer_run_id: str | None = None,
    ) -> WaitResult:
        """The answer of a wait that was handed ``result`` (``record`` as stored)."""
        return WaitResult(
            status=result.status,
            attempt_id=attempt_id,
            agent_id=result.agent_id,
            subagent_name=result.subagent_name,
            linked_task_id=result.linked_task_id,
            # Handed to this caller; a durable consumer run's completion acknowledges it.
            delivery_status="delivered" if consumer_run_id else str(record.delivery_status),
            retention_status=result.retention_status,
            failure_category=result.failure_category,
            cancellation_reason=result.cancellation_reason,
            result=result.output,
            error=result.error,
            context_delta=result.context_delta,
        )

    def _elsewhere(self, attempt_id: str, delivery: str | None) -> WaitResult:
        try:
            record = self.store.load_attempt(attempt_id)
        except StoreError as exc:
            raise BackgroundSubagentError.Durability(
                "could not load the attempt", attempt_id=attempt_id
            ) from exc
        return WaitResult(
            status=str(record.execution_status),
            attempt_id=attempt_id,
            agent_id=record.agent_id,
            subagent_name=record.subagent_name,
            linked_task_id=record.linked_task_id,
            owned_elsewhere=True,
            delivery_status=delivery or str(record.delivery_status),
            retention_status=str(record.retention_status),
            failure_category=record.failure_category,
            cancellation_reason=record.cancellation_reason,
            message="Another consumer owns this result."
            if is_active_execution(str(record.execution_status)) is False
            else "Another host owns this attempt.",
        )

    # -- info and pending --------------------------------------------------------------------

    def _info(self) -> Steps[InfoResult]:
        """``{active: [...], retained: [...]}``: live attempts and undelivered results."""
        entries = yield Await(self._ask(SnapshotRequest()))
        active = [_summary(record) for state, record, _ in entries if state == "active"]
        retained: list[AttemptSummary] = yield Blocking(self._retained)
        return InfoResult(active=active, retained=retained)

    info_sync, info = twins(_info)

    def _retained(self) -> list[AttemptSummary]:
        try:
            pending = self.store.list_pending_attempts(self.namespace_id, self.session_id)
        except StoreError as exc:
            raise BackgroundSubagentError.Durability("could not list pending results") from exc
        return [_summary(r) for r in pending]

    def _take_pending(self, run_id: str | None = None) -> Steps[list[BackgroundResult]]:
        """The parent's next turn: deliver every pending result nobody else claimed.

        Each result comes once, with its context delta (when this process has
        it). With ``run_id`` (an admitted, live durable run of this session) the
        results are claimed for that run in one store transaction, including
        results suppressed for automatic continuation and those an earlier
        process launched; the run's completion acknowledges them. Without, each
        is acknowledged at once (an SDK parent with no durable run). Works after
        shutdown too (it only needs the store).
        """
        results: list[BackgroundResult] = yield Blocking(
            self.deliverer.take_pending, self.session_id, run_id
        )
        return results

    take_pending_sync, take_pending = twins(_take_pending)

    # -- shutdown ----------------------------------------------------------------------------

    def _shutdown_checked(self, timeout: float | None = None) -> Steps[None]:
        """Stop admission, finish or cancel every attempt, drain, stop every thread.

        Within one absolute deadline (default ``shutdown_grace``): ask children
        to stop cooperatively for most of it (80 %), then cancel their tasks;
        wait until every attempt's terminal outcome is persisted; drain the
        completion callbacks and the store (``store.drain()``); stop every
        actor, the pools and the owned loop and join their threads. On deadline
        it raises ``BackgroundSubagentError.ShutdownDeadline`` (field
        ``unfinished``) and keeps every unfinished attempt owned and running:
        keep the supervisor alive and call it again. Concurrent calls
        serialize; after a completed shutdown it returns at once. Admission
        stays closed (``Closing``) from the first call on. The coroutine runs
        it on a thread of its own, so cancelling the coroutine loses nothing:
        the shutdown goes on and a later call serializes behind it.
        """
        yield Detached(
            lambda: self._shutdown_now(timeout),
            name="subagents-shutdown",
            owner=self._detached_threads(),
        )

    shutdown_checked_sync, shutdown_checked = twins(_shutdown_checked)

    def _detached_threads(self) -> DetachedThreads:
        """The shutdown's detached threads, made on first need (an idle session's
        supervisor is never shut down but by its host's close)."""
        with self._lock:
            if self._detached is None:
                self._detached = DetachedThreads()
            return self._detached

    def _shutdown_now(self, timeout: float | None) -> None:
        budget = self.limits.shutdown_grace if timeout is None else max(0.0, float(timeout))
        start = time.monotonic()
        deadline = start + budget
        if not self._shutdown_lock.acquire(timeout=budget):
            raise BackgroundSubagentError.ShutdownDeadline(
                "another shutdown is still running", unfinished=[]
            )
        try:
            self._shutdown_locked(start, deadline, budget)
        finally:
            self._shutdown_lock.release()

    def _shutdown_locked(self, start: float, deadline: float, budget: float) -> None:
        with self._lock:
            if self._closed:
                return
            ref = self._ref
            if ref is None:
                self._closed = True
                return

        def remaining() -> float:
            return max(0.0, deadline - time.monotonic())

        def unfinished() -> list[str]:
            try:
                ids: list[str] = self._ask(UnfinishedRequest()).result(
                    timeout=max(remaining(), 0.5)
                )
            except (concurrent.futures.TimeoutError, BackgroundSubagentError):
                return []
            return ids

        if not self._drained:
            # Settle, drain callbacks and the store once; a retry after a deadline in
            # the thread-stopping phase goes straight to it.
            settled: Reply = self._ask_within(BeginShutdownRequest(abort=False), remaining())
            cooperative = start + 0.8 * budget
            try:
                settled.result(timeout=max(0.0, cooperative - time.monotonic()))
            except concurrent.futures.TimeoutError:
                settled = self._ask_within(BeginShutdownRequest(abort=True), remaining())
                try:
                    settled.result(timeout=remaining())
                except concurrent.futures.TimeoutError:
                    raise BackgroundSubagentError.ShutdownDeadline(
                        "shutdown deadline: attempts are still finishing; retry",
                        unfinished=unfinished(),
                    ) from None
            delivery = self._delivery
            if delivery is not None:
                pending = delivery.pending()
                _, not_done = concurrent.futures.wait(pending, timeout=remaining())
                if not_done:
                    raise BackgroundSubagentError.ShutdownDeadline(
                        "shutdown deadline: completion callbacks are still running; retry",
                        unfinished=[],
                    )
            try:
                self.store.drain()
            except StoreError as exc:
                raise BackgroundSubagentError.Durability(
                    "the store could not drain its background work"
                ) from exc
            self._drained = True
        self._stop_threads(remaining)

    def _ask_within(self, request: SupervisorRequest, timeout: float) -> Any:
        """A supervisor-actor operation answered within ``timeout``, else ShutdownDeadline."""
        try:
            return self._ask(request).result(timeout=timeout)
        except concurrent.futures.TimeoutError:
            raise BackgroundSubagentError.ShutdownDeadline(
                "shutdown deadline: the supervisor actor is busy; retry", unfinished=[]
            ) from None

    def _stop_threads(self, remaining: Callable[[], float]) -> None:
        ref = self._ref
        assert ref is not None and self._runtime is not None
        if ref.is_alive():
            snapshot = self._ask_within(SnapshotRequest(), remaining())
            for attempt_ref in [r for _, _, r in snapshot if r is not None]:
                attempt_ref.stop(block=False)
            try:
                ref.stop(block=True, timeout=remaining() or 0.001)
            except pykka.Timeout:
                raise BackgroundSubagentError.ShutdownDeadline(
                    "shutdown deadline: the supervisor actor did not stop; retry", unfinished=[]
                ) from None
        # Shared pools are the host's to stop (after every supervisor's shutdown).
        stopped = self.pools.stop(remaining()) if self._own_pools else True
        with self._lock:
            self._closed = True
            self._ref = None
        if not stopped:
            raise BackgroundSubagentError.ShutdownDeadline(
                "shutdown deadline: some threads are still ending", unfinished=[]
            )

    def shutdown(self, timeout: float | None = None) -> None:
        """Best-effort compatibility helper: a checked shutdown whose deadline
        error is logged, then every thread is stopped anyway. Unfinished
        attempts stay in the store under a lease that will expire (reconcile
        records them as ``host_process_lost``)."""
        try:
            self.shutdown_checked_sync(timeout)
            return
        except BackgroundSubagentError as exc:
            log.warning("best-effort shutdown: %s", exc)
        with self._lock:
            ref, self._ref = self._ref, None
            self._closed = True
        if ref is not None:
            try:
                reply: Reply = concurrent.futures.Future()
                ref.tell(Ask(request=SnapshotRequest(), reply=reply))
                for _, _, attempt_ref in reply.result(timeout=1.0):
                    if attempt_ref is not None:
                        attempt_ref.stop(block=False)
            except (pykka.ActorDeadError, concurrent.futures.TimeoutError):
                pass
            with contextlib.suppress(pykka.Timeout):
                ref.stop(block=True, timeout=1.0)
        if self._own_pools:
            self.pools.stop(1.0)
