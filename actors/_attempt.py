"""One pykka actor per live background attempt.

The actor owns the attempt's execution machine (a plain model object bound to
``statemachines.EXECUTION``), its lease and heartbeat, its steering queue and
its cancellation receipts. It receives ``Start``, ``Steer``, ``Cancel``,
``Abort``, ``Tick`` (heartbeat / retry / cancellation grace), ``HeartbeatDone``,
``ChildProgress``, ``ChildFinished`` and ``Describe`` messages.

Rules it keeps:

- Persist, then apply: every execution transition and the terminal outcome
  are written to the store first; only then does the machine move, and only
  then does anyone (``Describe``, the supervisor, the callback) see it.
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
import inspect
import logging
import threading
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any

import msgspec
import pykka

from statemachines import EXECUTION, ExecutionStatus, InvalidTransition, RetentionStatus
from storage import (
    Artifact,
    ArtifactLimits,
    AttemptRecord,
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

from ._child import ChildControl, ChildOutcome, ChildProgress, ChildRequest, ChildRunner
from ._errors import BackgroundSubagentError, LeaseLost
from ._loop import ClosableInbox, Runtime
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
    RecordView,
    Rerouted,
    Start,
    Steer,
    Tick,
    resolve,
)
from ._results import CancelResult, SteerReceipt

log = logging.getLogger("actors")

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


class AttemptActor(pykka.ThreadingActor):
    """The owner of one live attempt. Only its own thread touches its state."""

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
        self.view = view
        self.rt = runtime
        self.record = record
        self.request = request
        self.runner = runner
        self.supervisor = supervisor
        self.attempt_id = record.attempt_id
        self.model, self.machine = runtime.machines.acquire(str(record.execution_status))
        self.control = ChildControl(
            attempt_id=record.attempt_id, notify=_teller(self._actor_ref), loop=runtime.loop
        )
        self.launched = False
        self.task: asyncio.Task[Any] | None = None  # loop thread only
        self.abort_requested = False  # loop thread only
        self.child_done = False
        self.child_run_id: str | None = record.child_run_id
        self.ops: deque[tuple[str, Any]] = deque()
        self.retry_armed = False
        self.decision: _Decision | None = None
        self.pending: TerminalCommit | None = None
        self.terminal = False
        self.lost = False
        self.cancel_requested = False
        self.cancel_reason: str | None = None
        self.cancellations: dict[str, str | None] = {}
        self.steering_receipts: dict[str, str] = {}
        self.context_delta: Any = None
        self.usage: dict[str, Any] = {}
        self.heartbeat_in_flight = False
        self.first_beat = False
        self.fallback = False
        self.thread: threading.Thread | None = None

    # -- pykka hooks -------------------------------------------------------------------------

    _create_actor_inbox = ClosableInbox

    def _start_actor_loop(self) -> None:
        # pykka's extension point: run this actor's loop on a reused thread (starting a
        # thread costs more than an attempt's own work). One loop per thread at a time.
        self.rt.actor_threads.run(self._actor_loop)

    def on_start(self) -> None:
        self.thread = threading.current_thread()

    def on_stop(self) -> None:
        # Nothing touches the machine once the actor stopped: lend it to the next attempt.
        self.rt.machines.release(self.model, self.machine)
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
            if not self.terminal and not self.lost:
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
        if isinstance(message, Start):
            self._on_start()
        elif isinstance(message, Steer):
            self._on_steer(message)
        elif isinstance(message, Cancel):
            self._on_cancel(message)
        elif isinstance(message, Abort):
            self._abort_child()
        elif isinstance(message, Tick):
            self._on_tick(message.kind)
        elif isinstance(message, HeartbeatDone):
            self._on_heartbeat_done(message)
        elif isinstance(message, ChildProgress):
            self._on_progress(message)
        elif isinstance(message, ChildFinished):
            self._on_child_finished(message)
        elif isinstance(message, Describe):
            resolve(message.reply, self.record)
        else:
            log.warning("attempt %s: unexpected message %r", self.attempt_id, message)

    def _tell_self(self, message: object) -> None:
        # A dead actor means the attempt already ended: late news from the child is moot.
        with contextlib.suppress(pykka.ActorDeadError):
            self._actor_ref.tell(message)

    # -- start and progress ------------------------------------------------------------------

    def _on_start(self) -> None:
        self.ops.append(("exec", ExecutionStatus.STARTING))
        # The first heartbeat timer rides along with the child's launch (one wake-up of
        # the loop instead of two); when the launch does not happen now, arm it here.
        self.first_beat = True
        try:
            self._pump()
        finally:
            if self.first_beat:
                self.first_beat = False
                self._schedule("heartbeat", self.rt.heartbeat_interval)

    def _launch_child(self) -> None:
        if self.launched or self.decision is not None or self.lost:
            return
        self.launched = True
        beat: Callable[[], None] | None = None
        if self.first_beat:
            beat = self._timer("heartbeat")
        try:
            self.rt.loop.call_soon_threadsafe(self._create_task, beat)
            self.first_beat = False
        except RuntimeError as exc:  # the loop is closed
            self.child_done = True
            self._decide(
                _Decision(
                    status=ExecutionStatus.FAILED,
                    error=f"Background subagent could not start: {type(exc).__name__}",
                    failure_category=EXECUTION_ERROR,
                )
            )

    # The three methods below run on the loop thread; ``self.task`` is only touched there.

    def _create_task(self, beat: Callable[[], None] | None = None) -> None:
        if beat is not None:
            self.rt.loop.call_later(self.rt.heartbeat_interval, beat)
        if self.abort_requested:
            self._tell_self(ChildFinished(outcome=None, error=None, cancelled=True))
            return
        try:
            work = self.runner(self.request, self.control)
            if not inspect.isawaitable(work):
                raise TypeError("a child runner must be an async callable")
            self.task = asyncio.ensure_future(work, loop=self.rt.loop)
        except Exception as exc:  # a runner that raised before its first await
            self._tell_self(ChildFinished(outcome=None, error=exc, cancelled=False))
            return
        self.task.add_done_callback(self._task_done)

    def _cancel_task(self) -> None:
        self.abort_requested = True
        if self.task is not None:
            self.task.cancel()

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        # Reported only once the task really ended, so "finished" means joined.
        if task.cancelled():
            self._tell_self(ChildFinished(outcome=None, error=None, cancelled=True))
            return
        exc = task.exception()
        if exc is not None:
            self._tell_self(ChildFinished(outcome=None, error=exc, cancelled=False))
        else:
            self._tell_self(ChildFinished(outcome=task.result(), error=None, cancelled=False))

    def _abort_task(self) -> None:
        """Cancel the child's task (from the actor thread)."""
        try:
            self.rt.loop.call_soon_threadsafe(self._cancel_task)
        except RuntimeError:
            # The loop is closed: the task is gone with it.
            self._tell_self(ChildFinished(outcome=None, error=None, cancelled=True))

    def _on_progress(self, message: ChildProgress) -> None:
        if self.decision is not None or self.lost:
            return
        if message.child_run_id is not None and message.child_run_id != self.child_run_id:
            self.child_run_id = message.child_run_id
            self.ops.append(("child_run_id", message.child_run_id))
        if message.status is not None:
            self.ops.append(("exec", ExecutionStatus(message.status)))
        self._pump()

    # -- steering and cancellation -----------------------------------------------------------

    def _on_steer(self, message: Steer) -> None:
        steering_id = message.steering_id
        if self.terminal or self.lost:
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
        if self.terminal or self.decision is not None or self.lost:
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
        if not self.control.push_steering(message.message, limit):
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
        if self.terminal or self.lost:
            resolve(message.reply, self._cancel_result(cid))
            return
        if not self.cancel_requested and self.decision is None:
            self.cancel_requested = True
            self.cancel_reason = message.reason or (
                "supervisor shutdown" if message.shutdown else "cancelled by the parent"
            )
            self.control.request_cancel(self.cancel_reason)
            if not self.launched or self.child_done:
                # No worker: nothing to wait for, terminalize now.
                self._decide(self._cancel_decision())
            elif not message.shutdown:
                grace = self.rt.limits.cancellation_grace
                if grace <= 0:
                    self._abort_child()
                else:
                    self._schedule("abort", grace)
        elif message.shutdown and self.decision is None and (not self.launched or self.child_done):
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
        status = str(self.record.execution_status) if self.terminal else "cancellation_requested"
        reason = self.record.cancellation_reason if self.terminal else self.cancel_reason
        return CancelResult(
            status=status,
            attempt_id=self.attempt_id,
            agent_id=self.record.agent_id,
            cancellation_id=cancellation_id,
            reason=reason,
        )

    def _abort_child(self) -> None:
        if self.launched and not self.child_done:
            self._abort_task()
            self._schedule("force", max(self.rt.limits.cancellation_grace, 0.0))
        elif not self.launched and self.decision is None and not self.lost:
            self.cancel_requested = True
            self.cancel_reason = self.cancel_reason or "supervisor shutdown"
            self.control.request_cancel(self.cancel_reason)
            self._decide(self._cancel_decision())
            self._pump()

    # -- the child's end ---------------------------------------------------------------------

    def _on_child_finished(self, message: ChildFinished) -> None:
        if self.child_done:
            return
        self.child_done = True
        if self.decision is not None or self.lost:
            return
        fault_point("actor.inside_finalizer")
        outcome = message.outcome
        if outcome is None and message.cancelled:
            # An aborted child may have handed over what it consumed (the task is done,
            # so the loop thread wrote this before the ChildFinished message was sent).
            outcome = self.control.handed_over
        if self.cancel_requested:
            # The cancelled result still carries what the child consumed and returned.
            self._keep_consumption(outcome)
            decision = self._cancel_decision()
        elif message.cancelled:
            self._keep_consumption(outcome)
            self.cancel_reason = "the child task was cancelled"
            decision = self._cancel_decision()
        elif message.error is not None:
            decision = _Decision(
                status=ExecutionStatus.FAILED,
                error=f"Background subagent raised {type(message.error).__name__}",
                failure_category=EXECUTION_ERROR,
            )
        elif isinstance(outcome, ChildOutcome.Completed) and isinstance(outcome.output, str):
            self._keep_consumption(outcome)
            decision = _Decision(status=ExecutionStatus.COMPLETED, output=outcome.output)
        elif isinstance(outcome, ChildOutcome.Failed) and isinstance(outcome.error, str):
            self._keep_consumption(outcome)
            decision = _Decision(
                status=ExecutionStatus.FAILED,
                error=outcome.error,
                failure_category=EXECUTION_ERROR,
            )
        else:
            decision = _Decision(
                status=ExecutionStatus.FAILED,
                error=f"Background subagent returned an invalid outcome ({type(outcome).__name__})",
                failure_category=EXECUTION_ERROR,
            )
        self._decide(decision)
        self._pump()

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
        if self.lost or self.terminal:
            return
        if self.decision is not None and not (force and self.pending is None):
            return
        self.decision = decision
        # Progress not yet persisted no longer matters: the terminal commit carries the
        # child_run_id, and persists ``running`` itself when completing needs it. So a
        # store that keeps refusing progress cannot hold the outcome back.
        self.ops = deque([("terminal", None)])
        if self.launched and not self.child_done:
            self._abort_task()

    # -- timers and heartbeats ---------------------------------------------------------------

    def _timer(self, kind: str) -> Callable[[], None]:
        """The loop-side callback of a timer: tell this actor ``Tick(kind)`` unless the
        attempt already ended (then the tick is moot and the actor may be gone).

        The loop's timer holds the actor only weakly: a heartbeat timer outlives its
        attempt by up to an interval, and an actor kept that long by the timer alone
        reaches the oldest GC generation, whose full collections then stall every
        thread. A collected actor had stopped (pykka's registry holds live ones).
        """
        actor = weakref.ref(self)
        tick = Tick(kind)

        def fire() -> None:
            me = actor()
            if me is None or me.terminal or me.lost:
                return
            with contextlib.suppress(pykka.ActorDeadError):
                me.actor_ref.tell(tick)

        return fire

    def _schedule(self, kind: str, delay: float) -> None:
        self.rt.later(delay, self._timer(kind))

    def _on_tick(self, kind: str) -> None:
        if self.terminal or self.lost:
            return
        if kind == "heartbeat":
            self._heartbeat()
            self._schedule("heartbeat", self.rt.heartbeat_interval)
        elif kind == "heartbeat-retry":
            self._heartbeat()
        elif kind == "retry":
            self.retry_armed = False
            self._pump()
        elif kind == "abort":
            if self.decision is None:
                self._abort_child()
        elif kind == "force" and self.decision is None and not self.child_done:
            # The child ignored cancellation: it is abandoned, the attempt still ends.
            self._decide(self._cancel_decision())
            self._pump()

    def _heartbeat(self) -> None:
        if self.heartbeat_in_flight:
            return
        self.heartbeat_in_flight = True
        rt = self.rt
        expires = rt.store.clock.now() + rt.lease_ttl  # store time decides lease expiry
        try:
            fut = rt.heartbeats.submit(
                _renew,
                rt.store.heartbeat_attempt,
                self.attempt_id,
                rt.owner.host_instance_id,
                rt.owner.fencing_generation,
                expires,
            )
        except RuntimeError:
            self.heartbeat_in_flight = False  # executor shut down: shutdown is finishing
            return

        def done(f: concurrent.futures.Future[AttemptRecord]) -> None:
            error = f.exception()
            self._tell_self(HeartbeatDone(record=None if error else f.result(), error=error))

        fut.add_done_callback(done)

    def _on_heartbeat_done(self, message: HeartbeatDone) -> None:
        self.heartbeat_in_flight = False
        if self.terminal or self.lost:
            return
        if message.record is not None:
            fresh = message.record.owner_lease
            if fresh.lease_expires_at > self.record.owner_lease.lease_expires_at:
                self.record = msgspec.structs.replace(self.record, owner_lease=fresh)
            return
        assert message.error is not None
        if not isinstance(message.error, RetryableStorage):
            self._confirm_owner(message.error)
            if self.terminal:
                return
        self._schedule("heartbeat-retry", self.rt.retry_interval)

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
        if not self.retry_armed and not self.terminal and not self.lost:
            self.retry_armed = True
            self._schedule("retry", self.rt.retry_interval)

    def _pump(self) -> None:
        """Write queued operations in order; stop at the first unconfirmed failure."""
        immediate = 2  # a confirmed-still-owner failure (lease race) retries at once, twice
        while self.ops and not self.lost and not self.terminal:
            kind, arg = op = self.ops.popleft()
            try:
                self._apply(kind, arg)
            except LeaseLost:
                raise
            except Exception as exc:
                if self._recover(kind, exc) == "done":
                    continue
                if not self.terminal and not self.lost:
                    self.ops.appendleft(op)
                if immediate > 0 and not isinstance(exc, RetryableStorage):
                    immediate -= 1
                    continue
                self._arm_retry()
                return

    def _apply(self, kind: str, arg: Any) -> None:
        if kind == "exec":
            self._persist_execution(ExecutionStatus(arg))
        elif kind == "child_run_id":
            if self.record.child_run_id != arg:
                self._write_execution(
                    msgspec.structs.replace(
                        self.record, child_run_id=arg, updated_at=self.rt.clock.now()
                    )
                )
        elif kind == "terminal":
            self._persist_terminal()

    def _persist_execution(self, target: ExecutionStatus) -> None:
        current = str(self.record.execution_status)
        if current == target or not EXECUTION.allows(current, target):
            if current == target == ExecutionStatus.STARTING:
                # Our own ``starting`` applied though its response was lost (the record
                # was adopted from the store): the child still has to be launched.
                self._launch_child()
            return  # a repeated or outdated progress report: nothing to persist
        record = msgspec.structs.replace(
            self.record,
            execution_status=target,
            child_run_id=self.child_run_id,
            updated_at=self.rt.clock.now(),
        )
        self._write_execution(record)
        # Persisted: now the machine moves, then the world sees it.
        self._move(target)
        if target == ExecutionStatus.STARTING:
            self._launch_child()

    def _move(self, target: ExecutionStatus) -> None:
        """Move the attempt's machine to ``target`` (already persisted) along an edge of
        the EXECUTION table.

        The edge is checked against the table (``EXECUTION.allows``, the check the
        store applies to the same write), then set on the machine directly. The
        machine stays the attempt's one state (each live attempt owns one, from
        :class:`~actors._machines.MachinePool`); only the trigger is skipped.
        A trigger (``model.start()`` and friends, through ``transitions``' event
        dispatch) costs several times the table check plus ``set_state``, on each
        of an attempt's three steps (``bench/supervisor.py`` reports the CPU time
        per attempt).
        """
        source = str(self.model.state)
        if source == target:
            return
        if not EXECUTION.allows(source, target):
            raise InvalidTransition(
                f"execution: {source} -> {target} is not in the table",
                machine=EXECUTION.name,
                source=source,
                dest=str(target),
            )
        self.machine.set_state(str(target), model=self.model)

    def _write_execution(self, record: AttemptRecord) -> None:
        stored = self.rt.store.update_attempt_execution(record)
        self.record = stored
        if self.view is not None:
            self.view.record = stored  # persisted: now the supervisor's view shows it
        else:
            self.supervisor.tell(AttemptUpdated(record=stored))

    def _persist_terminal(self) -> None:
        assert self.decision is not None
        status = str(self.record.execution_status)
        if self.decision.status == ExecutionStatus.COMPLETED and status in ("accepted", "starting"):
            # complete is only allowed from running/waiting: persist running first.
            if status == "accepted":
                self._persist_execution(ExecutionStatus.STARTING)
            self._persist_execution(ExecutionStatus.RUNNING)
        if self.pending is None:
            self.pending = self._build_commit(self.decision)
        stored = self.rt.store.commit_terminal(self.pending)
        fault_point("actor.after_terminal_commit_before_callback")
        self._finish_terminal(stored)

    def _finish_terminal(self, stored: AttemptRecord) -> None:
        self.record = stored
        self.terminal = True
        self.ops.clear()
        self._move(ExecutionStatus(stored.execution_status))
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
        return TerminalCommit(record=record, artifact=artifact, artifact_limits=artifact_limits)

    def _recover(self, kind: str, exc: Exception) -> str:
        """Classify a failed write: ``"done"`` when a fresh load shows it applied,
        ``"retry"`` while we still own the attempt; raises ``LeaseLost`` otherwise."""
        if isinstance(exc, RetryableStorage):
            return "retry"
        pending = self.pending
        if kind == "terminal" and isinstance(exc, QuotaExceeded) and pending is not None:
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
                return "retry"
        self._confirm_owner(exc)
        if self.terminal:
            return "done"
        if kind == "terminal" and isinstance(exc, InvalidRecord) and not self.fallback:
            # Still ours, yet the store refuses this projection: it would refuse every
            # retry too. Commit minimal failed evidence instead of hanging the attempt.
            log.error("attempt %s: terminal commit refused (%s); failing it", self.attempt_id, exc)
            self.fallback = True
            self.decision = _Decision(
                status=ExecutionStatus.FAILED,
                error="Background subagent result could not be recorded",
                failure_category=EXECUTION_ERROR,
            )
            self.pending = None
        return "retry"

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
        # the lease) and rebuild the commit from it; the old one provably did not apply.
        self.record = msgspec.structs.replace(stored, child_run_id=stored.child_run_id)
        if self.model.state != str(stored.execution_status):
            self.machine.set_state(str(stored.execution_status), model=self.model)
        self.pending = None

    def _abandon(self, reason: str) -> None:
        if self.lost or self.terminal:
            return
        log.warning("attempt %s: owner lease lost (%s); abandoning", self.attempt_id, reason)
        self.lost = True
        self.ops.clear()
        self.control.request_cancel("owner lease lost")
        if self.launched and not self.child_done:
            self._abort_task()
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
