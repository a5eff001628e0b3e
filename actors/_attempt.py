"""One pykka actor per live background attempt.

The actor owns the attempt's lifecycle machine (a plain model object bound to
:data:`actors._machines.ATTEMPT`), its lease and heartbeat, its steering queue,
its cancellation receipts and the store writes it still owes (typed pending
operations, applied in order). It receives ``Start``, ``Steer``, ``Cancel``,
``Abort``, ``Tick`` (heartbeat / retry / cancellation grace), ``HeartbeatDone``,
``ChildProgress``, ``ChildFinished`` and ``Describe`` messages.

Rules it keeps:

- Persist, then apply: what anyone (``Describe``, the supervisor, a waiter,
  the callback) sees of the attempt is the persisted record, and the terminal
  outcome is visible only once committed.
- The durability budget (``docs/durability.md``): an attempt costs at most
  three durable commits on its critical path: acceptance (the supervisor's,
  before the parent sees the handle), the terminal commit (this actor's,
  before the result, the delta or the callback is visible) and the delivery
  (the consumer's). The intermediate statuses (``starting``, ``running``,
  ``waiting``) are never committed on their own: the child is launched as soon
  as ``Start`` arrives (the acceptance just committed is the fence check for
  the launch), what the child reports is noted here, and it is persisted in
  the same transaction as the next lease renewal (``advance_attempt``) or as
  the terminal commit (``TerminalCommit.via``), every edge checked by the
  store against the same ``EXECUTION`` table. This loses no safety: a
  lost attempt is reconciled to ``failed/host_process_lost`` from any active
  status, ``accepted`` included, and nothing ever relaunches an attempt
  because of the status it was recorded in; the record is only behind the
  child by less than one heartbeat interval.
- The mailbox never blocks on the child: the child is a task on the event
  loop and reports by ``tell``. Heartbeats run on a small executor, one in
  flight per attempt, so a slow heartbeat never starves completion or
  cancellation.
- Transient store failures keep local ownership and retry every
  ``retry_interval`` (at most the heartbeat interval). Any other store error is
  checked against a fresh load: only a missing record, another owner or
  generation, an expired lease or a terminal record that is not ours confirms
  owner loss (``LeaseLost``) and abandons local state.
- The terminal commit is built once and replayed exactly, so a commit whose
  response was lost is recovered (the store answers an exact replay with Ok).
- Any exception from the child, from its outcome or from a handler becomes
  ``failed`` terminal evidence; no handler lets an exception reach pykka (a
  ``BaseException`` there would stop every actor of the process).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import inspect
import logging
import threading
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any, assert_never

import msgspec
import pykka

from statemachines import EXECUTION, ExecutionStatus, InvalidTransition, RetentionStatus
from storage import (
    Artifact,
    ArtifactLimits,
    AttemptRecord,
    IllegalTransition,
    InvalidRecord,
    NotFound,
    QuotaExceeded,
    ResultRef,
    RetryableStorage,
    TerminalCommit,
    result_digest,
    terminal_fingerprint,
)
from storage._faultpoints import fault_point

from ._child import (
    ChildControl,
    ChildOutcome,
    ChildProgress,
    ChildRequest,
    ChildRunner,
    SteeringTaken,
)
from ._errors import BackgroundSubagentError, LeaseLost
from ._events import record_steering, record_steering_taken
from ._machines import ATTEMPT, COMMITTING, FINISHED, IDLE, LOST, RUNNING, STOPPING, TERMINAL
from ._messages import (
    Abort,
    AttemptLost,
    AttemptTerminal,
    AttemptUpdated,
    Cancel,
    ChildFinished,
    Describe,
    HeartbeatDone,
    NewsReady,
    Rerouted,
    Start,
    Steer,
    Tick,
    Timer,
    resolve,
)
from ._record_view import RecordView
from ._results import CancelResult, SteerReceipt
from ._runtime import ClosableInbox, PooledActor, Runtime

log = logging.getLogger("subagents.actors")

EXECUTION_ERROR = "execution_error"
CANCELLED = "cancelled"


def truncate_utf8(text: str, limit: int) -> str:
    """The longest prefix of ``text`` whose UTF-8 encoding fits ``limit`` bytes."""
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    return data[:limit].decode("utf-8", errors="ignore")


class _Decision(msgspec.Struct, frozen=True, kw_only=True):
    """The terminal outcome chosen for the attempt, before it is persisted."""

    status: ExecutionStatus
    output: str | None = None
    error: str | None = None
    failure_category: str | None = None
    cancellation_reason: str | None = None


class _Terminal(msgspec.Struct, frozen=True, kw_only=True):
    """Pending: persist the decided terminal outcome (always the last operation)."""


_Op = _Terminal
"""A store write the attempt still owes, applied in order by ``_pump``."""

_UNRECORDABLE = _Decision(
    status=ExecutionStatus.FAILED,
    error="Background subagent result could not be recorded",
    failure_category=EXECUTION_ERROR,
)
"""The fallback outcome when the store refuses the attempt's own terminal projection."""


class _ChildTask:
    """The child's asyncio task. Lives on the loop thread only: the actor reaches it by
    ``call_soon_threadsafe`` and hears of its end by ``ChildFinished`` (sent once the
    task really ended, so "finished" means joined)."""

    __slots__ = ("aborted", "control", "interval", "loop", "request", "runner", "task", "tell")

    def __init__(
        self,
        *,
        runtime: Runtime,
        request: ChildRequest,
        runner: ChildRunner,
        control: ChildControl,
        tell: Callable[[object], None],
    ) -> None:
        self.loop = runtime.loop
        self.interval = runtime.heartbeat_interval
        self.request = request
        self.runner = runner
        self.control = control
        self.tell = tell
        self.task: asyncio.Task[Any] | None = None
        self.aborted = False  # cancelled before the task existed

    def create(self, beat: Callable[[], None] | None = None) -> None:
        if beat is not None:
            self.loop.call_later(self.interval, beat)
        if self.aborted:
            self.tell(ChildFinished(outcome=None, error=None, cancelled=True))
            return
        try:
            work = self.runner(self.request, self.control)
            if not inspect.isawaitable(work):
                raise TypeError("a child runner must be an async callable")
            self.task = asyncio.ensure_future(work, loop=self.loop)
        except Exception as exc:  # a runner that raised before its first await
            self.tell(ChildFinished(outcome=None, error=exc, cancelled=False))
            return
        self.task.add_done_callback(self.done)

    def cancel(self) -> None:
        self.aborted = True
        if self.task is not None:
            self.task.cancel()

    def done(self, task: asyncio.Task[Any]) -> None:
        if task.cancelled():
            self.tell(ChildFinished(outcome=None, error=None, cancelled=True))
            return
        exc = task.exception()
        if exc is not None:
            self.tell(ChildFinished(outcome=None, error=exc, cancelled=False))
        else:
            self.tell(ChildFinished(outcome=task.result(), error=None, cancelled=False))


class AttemptActor(PooledActor):
    """The owner of one live attempt. Only its own thread touches its state.

    Where the attempt is lives in one place: its :data:`~actors._machines.ATTEMPT`
    machine (``self.model.state``: idle, running, finished, stopping, committing,
    terminal or lost), moved only after what the move stands for happened (the
    launch, the child's end, the decision, the persisted terminal commit, the
    confirmed loss). The execution status is the last persisted record.
    """

    def __init__(
        self,
        *,
        runtime: Runtime,
        record: AttemptRecord,
        request: ChildRequest,
        runner: ChildRunner,
        supervisor: pykka.ActorRef[Any],
        view: RecordView | None = None,
    ) -> None:
        # pykka's ``Actor.__init__`` sets exactly these four fields, drawing the urn
        # from ``uuid4()`` (a system call that drops the GIL, on the supervisor's hot
        # path); the attempt id is unique already. ``tests/actors`` checks the fields
        # against pykka's own (``test_an_attempt_actor_has_pykka_s_actor_fields``).
        self.actor_urn = f"urn:{record.attempt_id}"
        self.actor_inbox = ClosableInbox()
        self.actor_stopped = threading.Event()
        self._actor_ref = pykka.ActorRef(self)
        self.pool = runtime.pools.actors  # runs on the host's actor pool (no thread of its own)
        self.view = view
        self.rt = runtime
        self.record = record
        self.supervisor = supervisor
        self.attempt_id = record.attempt_id
        self.model, self.machine = runtime.machines.acquire(IDLE)
        self.control = ChildControl(
            attempt_id=record.attempt_id, notify=_teller(self._actor_ref), loop=runtime.loop
        )
        self.child = _ChildTask(
            runtime=runtime,
            request=request,
            runner=runner,
            control=self.control,
            tell=_teller(self._actor_ref),
        )
        self.child_run_id: str | None = record.child_run_id
        self.status = ExecutionStatus(record.execution_status)
        """The execution status reached here; the record holds the persisted one
        (behind it until the next heartbeat or the terminal commit persists it)."""
        self.stepwise = False  # the store refused a path in one commit: one per step
        self.plain_beats = False  # the store refused progress with a renewal
        self.renewing_progress = False  # the renewal in flight carries progress
        self.ops: deque[_Op] = deque()
        self.retry_armed = False  # one retry timer at a time
        self.renewal: concurrent.futures.Future[AttemptRecord] | None = None  # in flight
        self.decision: _Decision | None = None
        self.pending: TerminalCommit | None = None
        self.cancel_reason: str | None = None  # set once cancellation is requested
        self.cancellations: dict[str, str | None] = {}
        self.steering_receipts: dict[str, str] = {}
        self.context_delta: Any = None
        self.usage: dict[str, Any] = {}
        self.thread: threading.Thread | None = None
        self.slot_held = True  # the host-wide live-attempt slot the supervisor reserved

    def _release_slot(self) -> None:
        """Give the host-wide slot back, once: as the attempt ends (before anyone sees
        the end, so a waiter that saw it may delegate again at once), or as it stops."""
        if self.slot_held:
            self.slot_held = False
            self.rt.pools.release_attempt()

    # -- the lifecycle -----------------------------------------------------------------------

    def _to(self, dest: str) -> None:
        """Move the attempt's machine along an edge of :data:`ATTEMPT` (checked against
        the table, then ``set_state``: a trigger's event dispatch costs several times
        as much, on the hot path, for the same check)."""
        source = self.model.state
        if not ATTEMPT.allows(source, dest):
            raise InvalidTransition(
                f"attempt: {source} -> {dest} is not in the table",
                machine=ATTEMPT.name,
                source=source,
                dest=dest,
            )
        self.machine.set_state(dest, model=self.model)

    @property
    def _ended(self) -> bool:
        """Terminal (committed) or lost: nothing more happens to this attempt here."""
        return self.model.state in ATTEMPT.terminal

    @property
    def _child_running(self) -> bool:
        """The child's task was launched and has not reported its end."""
        return self.model.state in (RUNNING, STOPPING)

    # -- pykka hooks -------------------------------------------------------------------------

    _create_actor_inbox = ClosableInbox

    def on_start(self) -> None:
        self.thread = threading.current_thread()

    def on_stop(self) -> None:
        # Nothing touches the machine once the actor stopped: lend it to the next attempt.
        self.rt.machines.release(self.model, self.machine)
        self._release_slot()  # stopped before its end (shutdown)
        # The supervisor's table keeps this actor's ref until the supervisor next wakes
        # (for an idle session: as long as the host runs). A stopped actor needs only
        # its ref and its closed inbox: drop the rest (the child, its control, steering,
        # the delta, the commit) so an idle session does not hold its last attempt.
        self.child = self.control = self.view = None  # type: ignore[assignment]
        self.context_delta = self.pending = self.decision = self.renewal = None
        self.ops.clear()
        self.usage, self.cancellations, self.steering_receipts = {}, {}, {}
        # From now on the supervisor answers whatever still reaches this attempt.
        inbox = self.actor_inbox
        assert isinstance(inbox, ClosableInbox)
        inbox.close(_rerouter(self.attempt_id, self.supervisor))

    def on_receive(self, message: Any) -> Any:
        try:
            self._dispatch(message)
        except LeaseLost as lost:
            self._abandon(lost.message)
        except Exception as exc:
            # A bug or a raising finalizer: becomes failed evidence, never a hung attempt.
            log.exception("attempt %s: handler failed", self.attempt_id)
            if isinstance(message, Steer | Describe) or (
                isinstance(message, Cancel) and message.reply is not None
            ):
                resolve(getattr(message, "reply", None), error=exc)
            if not self._ended:
                self._decide(
                    _Decision(
                        status=ExecutionStatus.FAILED,
                        error=f"background attempt finalizer raised {type(exc).__name__}",
                        failure_category=EXECUTION_ERROR,
                    ),
                    force=True,
                )
                self._safe_pump()
        return None

    # -- dispatch ----------------------------------------------------------------------------

    def _dispatch(self, message: Any) -> None:
        match message:
            case Start():
                self._on_start()
            case Steer():
                self._on_steer(message)
            case Cancel():
                self._on_cancel(message)
            case Abort():
                self._abort_child()
            case Tick():
                self._on_tick(message.timer)
            case HeartbeatDone():
                self._on_heartbeat_done(message)
            case ChildProgress():
                self._on_progress(message)
            case SteeringTaken():
                record_steering_taken(self.rt.store, self.record, message.steering_ids)
            case ChildFinished():
                self._on_child_finished(message)
            case Describe():
                resolve(message.reply, self.record)
            case _:
                log.warning("attempt %s: unexpected message %r", self.attempt_id, message)

    def _tell_self(self, message: object) -> None:
        # A dead actor means the attempt already ended: late news from the child is moot.
        with contextlib.suppress(pykka.ActorDeadError):
            self._actor_ref.tell(message)

    # -- start and progress ------------------------------------------------------------------

    def _on_start(self) -> None:
        # Acceptance is durable (the supervisor committed it before ``Start``): the
        # child is launched now. ``starting`` is reached, not committed on its own: the
        # next heartbeat or the terminal commit persists it (docs/durability.md).
        if self.status == ExecutionStatus.ACCEPTED:
            self.status = ExecutionStatus.STARTING
        # The first heartbeat timer rides along with the launch (one wake-up of the
        # loop instead of two); when the launch does not happen now, arm it here.
        self._launch_child(first_beat=True)
        if self.model.state != RUNNING:  # not launched: no beat rode along
            self._schedule(Timer.HEARTBEAT, self.rt.heartbeat_interval)

    def _launch_child(self, first_beat: bool) -> None:
        if self.model.state != IDLE:  # launched already, decided or lost
            return
        beat = self._timer(Timer.HEARTBEAT) if first_beat else None
        self._to(RUNNING)
        try:
            self.rt.loop.call_soon_threadsafe(self.child.create, beat)
        except RuntimeError as exc:  # the loop is closed
            self._to(FINISHED)
            self._decide(
                _Decision(
                    status=ExecutionStatus.FAILED,
                    error=f"Background subagent could not start: {type(exc).__name__}",
                    failure_category=EXECUTION_ERROR,
                )
            )

    def _abort_task(self) -> None:
        """Cancel the child's task (from the actor thread)."""
        try:
            self.rt.loop.call_soon_threadsafe(self.child.cancel)
        except RuntimeError:
            # The loop is closed: the task is gone with it.
            self._tell_self(ChildFinished(outcome=None, error=None, cancelled=True))

    def _on_progress(self, message: ChildProgress) -> None:
        """Note what the child reports; nothing is written now. The next heartbeat
        tick persists it (with every status in between, each checked against
        ``EXECUTION`` by the store), or the terminal commit carries it (``via``).
        A report the table does not allow from the status reached is outdated."""
        if self.decision is not None or self._ended:
            return
        if message.child_run_id is not None:
            self.child_run_id = message.child_run_id
        if message.status is not None:
            status = ExecutionStatus(message.status)
            if status not in EXECUTION.terminal and EXECUTION.allows(self.status, status):
                self.status = status

    # -- steering and cancellation -----------------------------------------------------------

    def _on_steer(self, message: Steer) -> None:
        steering_id = message.steering_id
        if self._ended:
            # Ended: every steer is refused alike, replays included (as the supervisor
            # answers once this actor stopped).
            raise_reply(
                message.reply,
                BackgroundSubagentError.Terminal(
                    "the attempt already ended", attempt_id=self.attempt_id
                ),
            )
            return
        if steering_id is not None and steering_id in self.steering_receipts:
            if self.steering_receipts[steering_id] != message.message:
                raise_reply(
                    message.reply,
                    BackgroundSubagentError.IdempotencyConflict(
                        "steering_id was already used with another message",
                        attempt_id=self.attempt_id,
                        steering_id=steering_id,
                    ),
                )
                return
            resolve(message.reply, self._steer_receipt(steering_id))
            return
        if self.decision is not None:
            raise_reply(
                message.reply,
                BackgroundSubagentError.Terminal(
                    "the attempt already ended", attempt_id=self.attempt_id
                ),
            )
            return
        if steering_id is None:
            steering_id = f"steer_{self.rt.ids.uuid4()}"
        limit = self.rt.limits.max_queued_steering
        if not self.control.push_steering(steering_id, message.message, limit):
            raise_reply(
                message.reply,
                BackgroundSubagentError.SteeringQueueFull(
                    "too many steering messages are queued",
                    attempt_id=self.attempt_id,
                    limit=limit,
                ),
            )
            return
        self.steering_receipts[steering_id] = message.message
        resolve(message.reply, self._steer_receipt(steering_id))
        record_steering(self.rt.store, self.record, steering_id, message.message)

    def _steer_receipt(self, steering_id: str) -> SteerReceipt:
        return SteerReceipt(status="queued", attempt_id=self.attempt_id, steering_id=steering_id)

    def _on_cancel(self, message: Cancel) -> None:
        cid = message.cancellation_id
        if cid is not None and cid in self.cancellations:
            if self.cancellations[cid] != message.reason:
                raise_reply(
                    message.reply,
                    BackgroundSubagentError.IdempotencyConflict(
                        "cancellation_id was already used with another reason",
                        attempt_id=self.attempt_id,
                        cancellation_id=cid,
                    ),
                )
                return
            resolve(message.reply, self._cancel_result(cid))
            return
        if cid is not None:
            self.cancellations[cid] = message.reason
        if self._ended:
            resolve(message.reply, self._cancel_result(cid))
            return
        if self.cancel_reason is None and self.decision is None:
            self.cancel_reason = message.reason or (
                "supervisor shutdown" if message.shutdown else "cancelled by the parent"
            )
            self.control.request_cancel(self.cancel_reason)
            if not self._child_running:
                # No worker: nothing to wait for, terminalize now.
                self._decide(self._cancel_decision())
            elif not message.shutdown:
                grace = self.rt.limits.cancellation_grace
                if grace <= 0:
                    self._abort_child()
                else:
                    self._schedule(Timer.ABORT, grace)
        elif message.shutdown and self.decision is None and not self._child_running:
            self._decide(self._cancel_decision())
        resolve(message.reply, self._cancel_result(cid))
        self._pump()

    def _cancel_decision(self) -> _Decision:
        reason = self.cancel_reason or "cancelled"
        return _Decision(
            status=ExecutionStatus.CANCELLED,
            error=f"Background subagent was cancelled: {reason}",
            failure_category=CANCELLED,
            cancellation_reason=reason,
        )

    def _cancel_result(self, cancellation_id: str | None) -> CancelResult:
        terminal = self.model.state == TERMINAL
        status = str(self.record.execution_status) if terminal else "cancellation_requested"
        reason = self.record.cancellation_reason if terminal else self.cancel_reason
        return CancelResult(
            status=status,
            attempt_id=self.attempt_id,
            agent_id=self.record.agent_id,
            cancellation_id=cancellation_id,
            reason=reason,
        )

    def _abort_child(self) -> None:
        if self._child_running:
            self._abort_task()
            self._schedule(Timer.FORCE, max(self.rt.limits.cancellation_grace, 0.0))
        elif self.model.state == IDLE:
            self.cancel_reason = self.cancel_reason or "supervisor shutdown"
            self.control.request_cancel(self.cancel_reason)
            self._decide(self._cancel_decision())
            self._pump()

    # -- the child's end ---------------------------------------------------------------------

    def _on_child_finished(self, message: ChildFinished) -> None:
        if not self._child_running:
            return  # a repeated report, or the attempt was lost meanwhile
        if self.model.state == STOPPING:
            self._to(COMMITTING)  # the outcome was chosen already
            return
        self._to(FINISHED)
        fault_point("actor.inside_finalizer")
        self._decide(self._outcome_decision(message))
        self._pump()

    def _outcome_decision(self, message: ChildFinished) -> _Decision:
        """The terminal outcome of a child that ended on its own (or was cancelled)."""
        outcome = message.outcome
        if outcome is None and message.cancelled:
            # An aborted child may have handed over what it consumed (the task is done,
            # so the loop thread wrote this before the ChildFinished message was sent).
            outcome = self.control.handed_over
        if self.cancel_reason is not None:
            # The cancelled result still carries what the child consumed and returned.
            self._keep_consumption(outcome)
            return self._cancel_decision()
        if message.cancelled:
            self._keep_consumption(outcome)
            self.cancel_reason = "the child task was cancelled"
            return self._cancel_decision()
        if message.error is not None:
            return _Decision(
                status=ExecutionStatus.FAILED,
                error=f"Background subagent raised {type(message.error).__name__}",
                failure_category=EXECUTION_ERROR,
            )
        if isinstance(outcome, ChildOutcome.Completed) and isinstance(outcome.output, str):
            self._keep_consumption(outcome)
            return _Decision(status=ExecutionStatus.COMPLETED, output=outcome.output)
        if isinstance(outcome, ChildOutcome.Failed) and isinstance(outcome.error, str):
            self._keep_consumption(outcome)
            return _Decision(
                status=ExecutionStatus.FAILED,
                error=outcome.error,
                failure_category=EXECUTION_ERROR,
            )
        return _Decision(
            status=ExecutionStatus.FAILED,
            error=f"Background subagent returned an invalid outcome ({type(outcome).__name__})",
            failure_category=EXECUTION_ERROR,
        )

    def _keep_consumption(self, outcome: ChildOutcome | None) -> None:
        """Keep the context delta, usage and child run id of a completed or failed outcome."""
        if not isinstance(outcome, (ChildOutcome.Completed, ChildOutcome.Failed)):
            return
        self.context_delta = outcome.context_delta
        self.usage = dict(outcome.usage)
        if outcome.child_run_id is not None:
            self.child_run_id = outcome.child_run_id

    def _decide(self, decision: _Decision, *, force: bool = False) -> None:
        """Choose the terminal outcome once; a forced decision (a raising finalizer)
        replaces one whose commit has not been built yet."""
        if self._ended:
            return
        if self.decision is not None and not (force and self.pending is None):
            return
        self.decision = decision
        # Progress not yet persisted goes with the terminal commit (its ``via`` and
        # child_run_id), which persists ``running`` itself when completing needs it. So
        # a store that keeps refusing progress cannot hold the outcome back.
        self.ops = deque([_Terminal()])
        state = self.model.state
        if state == RUNNING:
            self._to(STOPPING)
        elif state in (IDLE, FINISHED):
            self._to(COMMITTING)
        if self.model.state == STOPPING:
            self._abort_task()

    # -- timers and heartbeats ---------------------------------------------------------------

    def _timer(self, timer: Timer) -> Callable[[], None]:
        """The loop-side callback of a timer: tell this actor ``Tick(timer)`` unless the
        attempt already ended (then the tick is moot and the actor may be gone).

        The loop's timer holds the actor only weakly: a heartbeat timer outlives its
        attempt by up to an interval, and an actor kept that long by the timer alone
        reaches the oldest GC generation, whose full collections then stall every
        thread. A collected actor had stopped (pykka's registry holds live ones).
        """
        actor = weakref.ref(self)
        tick = Tick(timer=timer)

        def fire() -> None:
            me = actor()
            if me is None or me._ended:
                return
            with contextlib.suppress(pykka.ActorDeadError):
                me.actor_ref.tell(tick)

        return fire

    def _schedule(self, timer: Timer, delay: float) -> None:
        self.rt.later(delay, self._timer(timer))

    def _on_tick(self, timer: Timer) -> None:
        if self._ended:
            return
        match timer:
            case Timer.HEARTBEAT:
                self._heartbeat()
                self._schedule(Timer.HEARTBEAT, self.rt.heartbeat_interval)
            case Timer.HEARTBEAT_RETRY:
                self._heartbeat()
            case Timer.RETRY:
                self.retry_armed = False
                self._pump()
            case Timer.ABORT:
                if self.decision is None:
                    self._abort_child()
            case Timer.FORCE:
                if self.model.state == RUNNING:
                    # The child ignored cancellation: it is abandoned, the attempt still ends.
                    self._decide(self._cancel_decision())
                    self._pump()
            case _:
                assert_never(timer)

    def _heartbeat(self) -> None:
        """Renew the lease on a heartbeat thread (one renewal in flight). When the
        record is behind what the child reached, the renewal carries that progress
        (``advance_attempt``: every status in between checked by the store, one
        transaction with the renewal)."""
        if self.renewal is not None:
            return
        rt = self.rt
        expires = rt.store.clock.now() + rt.lease_ttl  # store time decides lease expiry
        progress = None if self.plain_beats else self._progress()
        try:
            if progress is None:
                fut = rt.heartbeats.submit(
                    _renew,
                    rt.store.heartbeat_attempt,
                    self.attempt_id,
                    rt.owner.host_instance_id,
                    rt.owner.fencing_generation,
                    expires,
                )
            else:
                advance = functools.partial(
                    rt.store.advance_attempt, via=progress[1], lease_expires_at=expires
                )
                fut = rt.heartbeats.submit(_renew, advance, progress[0])
        except RuntimeError:
            return  # executor shut down: shutdown is finishing
        self.renewal = fut
        self.renewing_progress = progress is not None

        def done(f: concurrent.futures.Future[AttemptRecord]) -> None:
            error = f.exception()
            self._tell_self(HeartbeatDone(record=None if error else f.result(), error=error))

        fut.add_done_callback(done)

    def _progress(self) -> tuple[AttemptRecord, tuple[ExecutionStatus, ...]] | None:
        """What the next renewal persists with it, if the record is behind the status or
        child run id reached and no outcome is decided (its terminal commit carries
        them): the record to store and the statuses on the way to it."""
        record, rt = self.record, self.rt
        child = record.child_run_id or self.child_run_id
        if self.decision is not None or (
            self.status == record.execution_status and child == record.child_run_id
        ):
            return None
        try:
            via = EXECUTION.path(str(record.execution_status), str(self.status))
        except InvalidTransition:
            return None
        lease = msgspec.structs.replace(
            record.owner_lease,
            host_instance_id=rt.owner.host_instance_id,
            fencing_generation=rt.owner.fencing_generation,
        )
        target = msgspec.structs.replace(
            record, execution_status=self.status, child_run_id=child, owner_lease=lease
        )
        return target, tuple(ExecutionStatus(s) for s in via)

    def _adopt_progress(self, stored: AttemptRecord) -> None:
        """A renewal's answer: the persisted status and child run id, once they are
        ahead of the record (the record is what anyone sees: now they see them)."""
        record = self.record
        status, known = str(stored.execution_status), str(record.execution_status)
        if status in EXECUTION.terminal or (
            status == known and stored.child_run_id == record.child_run_id
        ):
            return
        if status != known:
            try:
                EXECUTION.path(known, status)
            except InvalidTransition:
                return  # older than what this actor persisted since
        self.record = msgspec.structs.replace(
            record,
            execution_status=stored.execution_status,
            child_run_id=stored.child_run_id,
            updated_at=stored.updated_at,
        )
        self._show(self.record)

    def _on_heartbeat_done(self, message: HeartbeatDone) -> None:
        self.renewal = None
        if self._ended:
            return
        if message.record is not None:
            fresh = message.record.owner_lease
            if fresh.lease_expires_at > self.record.owner_lease.lease_expires_at:
                self.record = msgspec.structs.replace(self.record, owner_lease=fresh)
            self._adopt_progress(message.record)
            return
        assert message.error is not None
        refused = (InvalidRecord, IllegalTransition, InvalidTransition)
        if self.renewing_progress and isinstance(message.error, refused):
            # The store refused the progress (not the renewal): renew plainly from now on;
            # the terminal commit still carries what the child reached.
            self.plain_beats = True
        if not isinstance(message.error, RetryableStorage):
            self._confirm_owner(message.error)
            if self._ended:
                return
        self._schedule(Timer.HEARTBEAT_RETRY, self.rt.retry_interval)

    # -- persistence -------------------------------------------------------------------------

    def _safe_pump(self) -> None:
        try:
            self._pump()
        except LeaseLost as lost:
            self._abandon(lost.message)
        except Exception:
            log.exception("attempt %s: pump failed; retrying later", self.attempt_id)
            self._arm_retry()

    def _arm_retry(self) -> None:
        if not self.retry_armed and not self._ended:
            self.retry_armed = True
            self._schedule(Timer.RETRY, self.rt.retry_interval)

    def _pump(self) -> None:
        """Write queued operations in order; stop at the first unconfirmed failure."""
        immediate = 2  # a confirmed-still-owner failure (lease race) retries at once, twice
        while self.ops and not self._ended:
            op = self.ops.popleft()
            try:
                self._apply(op)
            except LeaseLost:
                raise
            except Exception as exc:
                if self._recover(op, exc):
                    continue  # it applied after all
                if not self._ended:
                    self.ops.appendleft(op)
                if immediate > 0 and not isinstance(exc, RetryableStorage):
                    immediate -= 1
                    continue
                self._arm_retry()
                return

    def _apply(self, op: _Op) -> None:
        match op:
            case _Terminal():
                self._persist_terminal()
            case _:
                assert_never(op)

    def _persist_execution(self, target: ExecutionStatus) -> None:
        """Persist ``target`` and the child's run id: one write per edge of
        ``EXECUTION`` from the record's status (the check the store applies to each
        write), for a store that refused a path in one commit. A target the table
        cannot reach from there is outdated: only the run id is written then."""
        current = str(self.record.execution_status)
        try:
            steps = (*EXECUTION.path(current, target), target) if current != target else ()
        except InvalidTransition:
            steps = ()
        if not steps and self.child_run_id in (None, self.record.child_run_id):
            return  # a repeated or outdated progress report: nothing to persist
        for step in steps or (ExecutionStatus(current),):
            record = msgspec.structs.replace(
                self.record,
                execution_status=step,
                child_run_id=self.child_run_id,
                updated_at=self.rt.clock.now(),
            )
            self._write_execution(record)

    def _write_execution(self, record: AttemptRecord) -> None:
        stored = self.rt.store.update_attempt_execution(record)
        self.record = stored
        self._show(stored)

    def _show(self, stored: AttemptRecord) -> None:
        if self.view is not None:
            self.view.record = stored  # persisted: now the supervisor's view shows it
        else:
            self.supervisor.tell(AttemptUpdated(record=stored))

    def _persist_terminal(self) -> None:
        """Commit the decided outcome; the statuses reached but not persisted (and
        what ``completed`` needs: ``running``) go with it in the same transaction
        (``TerminalCommit.via``), unless the store refused that path once."""
        assert self.decision is not None
        if self.stepwise and self.pending is None:
            via = self._via(self.decision.status)
            if via:
                self._persist_execution(via[-1])
        if self.pending is None:
            self.pending = self._build_commit(self.decision)
        stored = self.rt.store.commit_terminal(self.pending)
        fault_point("actor.after_terminal_commit_before_callback")
        self._finish_terminal(stored)

    def _finish_terminal(self, stored: AttemptRecord) -> None:
        self.record = stored
        self.ops.clear()
        self._to(TERMINAL)
        rt = self.rt
        news = AttemptTerminal(
            attempt_id=self.attempt_id,
            record=stored,
            context_delta=self.context_delta,
            usage=dict(self.usage),
            cancellation_receipts=dict(self.cancellations),
        )
        # Persisted: now it becomes visible. The delta first; then the supervisor's
        # table (anything that goes through its mailbox after this sees the end); then
        # the waiters, whom this wakes directly.
        rt.deltas.put(self.attempt_id, self.context_delta, news.usage)
        self._release_slot()
        view = self.view
        if view is None:
            self.supervisor.tell(news)
        else:
            view.record = stored
            rt.news.append(news)
            if rt.news_wake:
                with contextlib.suppress(pykka.ActorDeadError):
                    self.supervisor.tell(NewsReady())
            view.end("terminal")
        # The end is told; the actor stops once this message is handled. Requests
        # queued before the stop are still answered here, later ones by the supervisor.
        self.stop()

    def _build_commit(self, decision: _Decision) -> TerminalCommit:
        rt = self.rt
        limits = rt.limits
        now = rt.clock.now()
        artifact: Artifact | None = None
        artifact_limits: ArtifactLimits | None = None
        retention = RetentionStatus.INLINE
        status = decision.status
        failure_category = decision.failure_category
        error = decision.error
        if status == ExecutionStatus.COMPLETED:
            output = decision.output or ""
            size = len(output.encode("utf-8"))
            digest = result_digest(output)
            if size <= limits.inline_preview_bytes:
                ref = ResultRef(content=output, digest=digest, size_bytes=size)
            elif size > limits.max_artifact_bytes:
                status = ExecutionStatus.FAILED
                failure_category = EXECUTION_ERROR
                error = (
                    f"Background subagent output of {size} bytes exceeds the artifact "
                    f"limit of {limits.max_artifact_bytes} bytes"
                )
            else:
                artifact_ref = f"artifact_{self.attempt_id}"
                artifact = Artifact(
                    artifact_ref=artifact_ref,
                    namespace_id=rt.namespace_id,
                    attempt_id=self.attempt_id,
                    content=output,
                    digest=digest,
                    size_bytes=size,
                    created_at=now,
                    expires_at=now + limits.retention,
                )
                artifact_limits = ArtifactLimits(
                    max_single_bytes=limits.max_artifact_bytes,
                    max_retained_bytes=limits.max_namespace_artifact_bytes,
                )
                retention = RetentionStatus.ARTIFACT
                ref = ResultRef(
                    content=truncate_utf8(output, limits.inline_preview_bytes),
                    artifact_ref=artifact_ref,
                    digest=digest,
                    size_bytes=size,
                )
        if status != ExecutionStatus.COMPLETED:
            # Error text is stored inline in full, so it is bounded first and the
            # digest covers exactly what is stored.
            text = truncate_utf8(
                error or f"Background subagent ended with status {status}",
                limits.inline_preview_bytes,
            )
            ref = ResultRef(
                error=text, digest=result_digest(None, text), size_bytes=len(text.encode("utf-8"))
            )
        record = msgspec.structs.replace(
            self.record,
            execution_status=status,
            child_run_id=self.child_run_id,
            result_ref=ref,
            failure_category=failure_category,
            cancellation_reason=decision.cancellation_reason,
            retention_status=retention,
            retention_expires_at=now + limits.retention,
            terminal_at=now,
            updated_at=now,
            terminal_fingerprint=None,
        )
        return TerminalCommit(
            record=record,
            artifact=artifact,
            artifact_limits=artifact_limits,
            via=self._via(status),
            deliver_claim_id=self._hand_over(artifact),
        )

    def _hand_over(self, artifact: Artifact | None) -> str | None:
        """The claim id of a waiter that offered to take the result in the terminal
        commit (taken once: this commit is built once and replayed as it is). Not for
        a result kept in an artifact: handing that over reads the store again, which
        may fail after the commit delivered it, so that waiter claims it itself."""
        if artifact is not None or self.view is None:
            return None
        return self.view.take_offer()

    def _via(self, terminal: ExecutionStatus) -> tuple[ExecutionStatus, ...]:
        """The statuses from the persisted one to ``terminal``, exclusive: through the
        status reached here, along the shortest walks of ``EXECUTION``."""
        persisted, reached = str(self.record.execution_status), str(self.status)
        try:
            steps = [*EXECUTION.path(persisted, reached), reached] if reached != persisted else []
            steps += EXECUTION.path(reached, terminal)
        except InvalidTransition:
            return tuple(ExecutionStatus(s) for s in EXECUTION.path(persisted, terminal))
        return tuple(ExecutionStatus(s) for s in steps)

    def _recover(self, op: _Op, exc: Exception) -> bool:
        """Classify a failed write: true when a fresh load shows it applied, false
        while we still own the attempt (retry it); raises ``LeaseLost`` otherwise."""
        if isinstance(exc, RetryableStorage):
            return False
        terminal = isinstance(op, _Terminal)
        pending = self.pending
        if terminal and isinstance(exc, QuotaExceeded) and pending is not None:
            artifact = pending.artifact
            if artifact is not None:
                # The namespace has no room for the artifact: the attempt fails instead.
                self.decision = _Decision(
                    status=ExecutionStatus.FAILED,
                    error=f"Background subagent output of {artifact.size_bytes} bytes exceeds "
                    "the namespace's retained artifact quota",
                    failure_category=EXECUTION_ERROR,
                )
                self.pending = None
                return False
        self._confirm_owner(exc)
        if self.model.state == TERMINAL:
            return True
        if terminal and isinstance(exc, IllegalTransition):
            # Still ours, yet the store refused the move (a store that does not take
            # ``via``): persist the path one status per commit, then the outcome.
            self.stepwise = True
        if terminal and isinstance(exc, InvalidRecord) and self.decision is not _UNRECORDABLE:
            # Still ours, yet the store refuses this projection: it would refuse every
            # retry too. Commit minimal failed evidence instead of hanging the attempt.
            log.error("attempt %s: terminal commit refused (%s); failing it", self.attempt_id, exc)
            self.decision = _UNRECORDABLE
            self.pending = None
        return False

    def _confirm_owner(self, cause: BaseException) -> None:
        """Load the record and decide: still ours (keep going), ours and terminal
        (finish), or confirmed lost (raise ``LeaseLost``). A failed load confirms nothing."""
        rt = self.rt
        try:
            stored = rt.store.load_attempt(self.attempt_id)
        except NotFound:
            raise LeaseLost("the attempt record is missing", attempt_id=self.attempt_id) from cause
        except Exception:
            log.debug("attempt %s: ownership unconfirmed; retrying", self.attempt_id)
            return
        if not stored.execution_status or str(stored.execution_status) in EXECUTION.terminal:
            if self.pending is not None and stored.terminal_fingerprint == terminal_fingerprint(
                self.pending
            ):
                self._finish_terminal(stored)
                return
            raise LeaseLost(
                "the attempt was terminalized by someone else",
                attempt_id=self.attempt_id,
                execution_status=str(stored.execution_status),
            ) from cause
        lease = stored.owner_lease
        if (
            lease.host_instance_id != rt.owner.host_instance_id
            or lease.fencing_generation != rt.owner.fencing_generation
        ):
            raise LeaseLost(
                "the attempt has another owner",
                attempt_id=self.attempt_id,
                owner=lease.host_instance_id,
                fencing_generation=lease.fencing_generation,
            ) from cause
        if lease.lease_expires_at <= rt.store.clock.now():
            raise LeaseLost(
                "the owner lease expired",
                attempt_id=self.attempt_id,
                lease_expires_at=lease.lease_expires_at,
            ) from cause
        # Still ours: adopt the stored projection (a concurrent heartbeat may have moved
        # the lease, a lost response may hide an applied write) and rebuild the commit
        # from it; the old one provably did not apply.
        self.record = stored
        self.pending = None

    def _abandon(self, reason: str) -> None:
        if self._ended:
            return
        log.warning("attempt %s: owner lease lost (%s); abandoning", self.attempt_id, reason)
        child_running = self._child_running
        self._to(LOST)
        self.ops.clear()
        self.control.request_cancel("owner lease lost")
        if child_running:
            self._abort_task()
        self._release_slot()
        self.supervisor.tell(
            AttemptLost(
                attempt_id=self.attempt_id,
                reason=reason,
                cancellation_receipts=dict(self.cancellations),
            )
        )
        self.stop()


# The two callables below outlive the actor (held by its child's control and by its
# closed inbox) without holding it: a reference cycle through the actor would leave
# every ended attempt (~30 objects) to the cyclic garbage collector.


def _teller(ref: pykka.ActorRef[Any]) -> Callable[[object], None]:
    """``ref.tell`` that ignores a stopped actor (late news from the child is moot)."""

    def tell(message: object) -> None:
        with contextlib.suppress(pykka.ActorDeadError):
            ref.tell(message)

    return tell


def _rerouter(attempt_id: str, supervisor: pykka.ActorRef[Any]) -> Callable[[Any], None]:
    """The closed inbox's fallback: a message that reached the stopped actor (on the
    sender's thread). Requests go to the supervisor, which answers them from its
    table; the rest is moot."""

    def reroute(envelope: Any) -> None:
        message = envelope.message
        if envelope.reply_to is not None:  # a pykka ask (only ``stop`` is asked of us)
            dead = pykka.ActorDeadError(f"attempt {attempt_id} stopped before handling it")
            envelope.reply_to.set_exception(exc_info=(type(dead), dead, None))
            return
        reply = getattr(message, "reply", None)
        if reply is None:
            return  # news from the child, a timer or a heartbeat: the attempt ended
        try:
            supervisor.tell(Rerouted(attempt_id=attempt_id, message=message))
        except pykka.ActorDeadError:
            resolve(reply, error=BackgroundSubagentError.Closing("the supervisor is shut down"))

    return reroute


def _renew(heartbeat: Callable[..., AttemptRecord], *args: Any) -> AttemptRecord:
    """One lease renewal, on a heartbeat thread, behind the ``actor.mid_heartbeat`` point
    (an injected error there reaches ``HeartbeatDone`` like a store error)."""
    fault_point("actor.mid_heartbeat")
    return heartbeat(*args)


def raise_reply(reply: concurrent.futures.Future[Any] | None, error: BaseException) -> None:
    resolve(reply, error=error)
