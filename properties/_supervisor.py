"""The supervisor machine: the pykka runtime of background subagents under stateful testing.

Hypothesis drives one :class:`~actors.BackgroundSubagentSupervisor` per example
over a store from the factory (wrapped in a :class:`~properties.FaultyStore`):
delegate (new and continued agents, unknown agent ids), steer (idempotent ids,
conflicts, a full queue), cancel (idempotent ids, conflicting reasons), wait
(one attempt, unknown ids, all), the parent's next turn (``take_pending``),
``subagent_info``, children that take a turn, complete, fail or raise, injected
store faults (transient failures before the write, lost responses after it,
typed as transient or untyped, slow calls that move store time),
store time moving (within the lease, and past it so every live attempt is
lost and reconciled) and checked shutdown.

Children are controllable async runners: each waits for a command a rule sends
(or for its cancellation), and every rule waits until the supervisor has acted
on it (a terminal outcome persisted and announced, a turn taken) before it
returns, so each step starts from a settled state.

Checked after every step: the store holds at most one terminal outcome per
attempt and never changes it (status and fingerprint); the completion callback
fired at most once per attempt, and exactly once for every result the store
records as delivered by the callback; each result reached the parent at most
once over callback, ``wait`` and ``take_pending`` together, and each context
delta (whichever channel carried it) at most once. Checked at teardown, which
always shuts the supervisor down and closes the store: every terminal result
was delivered exactly once and matches what its child did; no pykka actor and
no ``subagents-*`` thread of this supervisor outlives the shutdown.

Lease timing uses the example's :class:`~storage.ManualClock`; heartbeats and
retries run on real time (milliseconds), so a clock advance within the lease
waits for every live lease to be renewed before the next step. The store is
never reopened between steps (a live supervisor holds it), so the
``lmdb-reopen`` factory runs like ``lmdb`` here. Injected faults are finite
(fewer per example than the delivery retries), so every fault is transient.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, ClassVar

import msgspec
import pykka
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from actors import (
    BackgroundResult,
    BackgroundSubagentError,
    BackgroundSubagentSupervisor,
    ChildControl,
    ChildOutcome,
    ChildRequest,
    OwnerIdentity,
    SupervisorLimits,
    WaitResult,
)
from actors._attempt import AttemptActor
from actors._messages import WatchRequest
from actors._supervisor import SupervisorActor
from statemachines import EXECUTION
from storage import (
    AttemptRecord,
    Delivered,
    DeliveryClaim,
    Failed,
    ManualClock,
    SeededIds,
    SessionStore,
)

from ._factories import StoreFactory, StoreHandle
from ._faults import Fault, FaultyStore
from ._harness import Stats
from ._planted import StoreProxy

NS = "ns-supervisor"
SESSION = "session-supervisor"
HOST = "host-supervisor"
START = 1_700_000_000.0
LEASE_TTL = 30.0
CLAIM_DEADLINE = 60.0
SETTLE = 10.0
"""Real seconds a rule waits for the supervisor to act (a generous bound, never a pace)."""

LIMITS = SupervisorLimits(
    lease_ttl=LEASE_TTL,
    heartbeat_interval=0.005,
    retry_interval=0.002,
    claim_deadline=CLAIM_DEADLINE,
    cancellation_grace=0.05,
    shutdown_grace=5.0,
    max_active_attempts=3,
    max_undelivered_results=4,
    max_prompt_bytes=256,
    max_steering_bytes=64,
    max_queued_steering=3,
    max_cancellation_reason_bytes=64,
)
SUBAGENTS = ("alpha", "beta")
FAULT_OPS = (
    "accept_attempt",
    "update_attempt_execution",
    "heartbeat_attempt",
    "advance_attempt",
    "commit_terminal",
    "claim_delivery",
    "acknowledge_delivery",
    "claim_and_acknowledge",
    "release_delivery",
)
FAULT_BUDGET = 6
SLOW_CALL = 1.0
"""Store seconds one slow call takes (FAULT_BUDGET of them stay well within the lease)."""
"""Injected failures per example (fewer than the delivery retries, so none is permanent)."""
SHUTDOWN_AFTER = 25
"""Steps an example runs before shutdown may be chosen (after it, most rules only check
that the closed supervisor refuses them, once each)."""
RARELY = st.integers(0, 3).map(lambda n: n == 3)
OUR_THREADS = ("subagents-",)
ACTORS_LOG = logging.getLogger("subagents.actors")
TERMINAL = frozenset(EXECUTION.terminal)


class SupervisorViolation(AssertionError):
    """The supervisor broke one of its guarantees."""


# -- controllable children ------------------------------------------------------------------


class Child:
    """The script of one child run: it waits for commands sent from rules (any thread)."""

    def __init__(self, attempt_id: str) -> None:
        self.attempt_id = attempt_id
        self.delta = f"delta-{attempt_id}"
        self.lock = threading.Lock()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.inbox: asyncio.Queue[tuple[str, str]] | None = None
        self.started = threading.Event()
        self.ended = threading.Event()
        self.turns = 0
        self.turn_taken = threading.Condition(self.lock)
        self.steering: list[str] = []
        self.runs = 0

    def send(self, kind: str, text: str = "") -> bool:
        """Queue a command for the child; False when it is not running (any more)."""
        with self.lock:
            loop, inbox = self.loop, self.inbox
        if loop is None or inbox is None or self.ended.is_set():
            return False
        try:
            loop.call_soon_threadsafe(inbox.put_nowait, (kind, text))
        except RuntimeError:
            return False
        return True

    def take_turn(self, timeout: float) -> bool:
        """Send a turn and wait until the child has taken it."""
        with self.lock:
            before = self.turns
        if not self.send("turn"):
            return False
        deadline = time.monotonic() + timeout
        with self.turn_taken:
            while self.turns == before and not self.ended.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.turn_taken.wait(left)
            return self.turns > before

    def seen_steering(self) -> list[str]:
        with self.lock:
            return list(self.steering)

    def open_inbox(self) -> asyncio.Queue[tuple[str, str]]:
        """A fresh command inbox for this run (on the loop thread); the child counts as
        started."""
        inbox: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
        with self.lock:
            self.runs += 1
            self.loop = asyncio.get_running_loop()
            self.inbox = inbox
        self.started.set()
        return inbox

    async def run(self, request: ChildRequest, control: ChildControl) -> ChildOutcome:
        inbox = self.open_inbox()
        try:
            while True:
                command = asyncio.ensure_future(inbox.get())
                cancelled = asyncio.ensure_future(control.wait_cancelled())
                done, _ = await asyncio.wait(
                    {command, cancelled}, return_when=asyncio.FIRST_COMPLETED
                )
                for task in (command, cancelled):
                    if task not in done:
                        task.cancel()
                drained = control.steering()
                with self.lock:
                    self.steering.extend(drained)
                if command not in done:
                    return ChildOutcome.failed("stopped on cancellation", context_delta=self.delta)
                kind, text = command.result()
                if kind == "turn":
                    control.report_progress("waiting")
                    control.report_progress("running")
                    with self.turn_taken:
                        self.turns += 1
                        self.turn_taken.notify_all()
                    continue
                if kind == "complete":
                    return ChildOutcome.completed(
                        text, usage={"turns": self.turns}, context_delta=self.delta
                    )
                if kind == "fail":
                    return ChildOutcome.failed(text, context_delta=self.delta)
                raise RuntimeError(text)
        finally:
            self.ended.set()
            with self.turn_taken:
                self.turn_taken.notify_all()


class Children:
    """Every child script of one example, by attempt id; the supervisor's runner."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.scripts: dict[str, Child] = {}

    def get(self, attempt_id: str) -> Child:
        with self.lock:
            child = self.scripts.get(attempt_id)
            if child is None:
                child = self.scripts[attempt_id] = Child(attempt_id)
            return child

    async def __call__(self, request: ChildRequest, control: ChildControl) -> ChildOutcome:
        return await self.get(request.attempt_id).run(request, control)


class Callback:
    """The completion callback: records every call; raises once when told to."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls: Counter[str] = Counter()
        self.accepted: list[BackgroundResult] = []
        self.raise_next = False

    def __call__(self, result: BackgroundResult) -> None:
        with self.lock:
            self.calls[result.attempt_id] += 1
            if self.raise_next:
                self.raise_next = False
                raise RuntimeError("the parent's callback failed")
            self.accepted.append(result)


# -- the model ------------------------------------------------------------------------------


@dataclass
class Tracked:
    """What the machine knows of one attempt the supervisor accepted."""

    attempt_id: str
    agent_id: str
    subagent: str
    state: str = "active"  # active | terminal | lost
    expect: tuple[str, str | None, str | None] | None = None
    """Expected terminal (status, output, error) once the child's end is decided."""
    steering: dict[str, str] = field(default_factory=dict)
    sent: list[str] = field(default_factory=list)
    queued: int = 0
    cancellations: dict[str, str | None] = field(default_factory=dict)
    cancel_reason: str | None = None


@dataclass
class Delivery:
    attempt_id: str
    channel: str  # callback | wait | turn
    status: str
    output: str | None
    error: str | None
    delta: Any = None


class SupervisorMachine(RuleBasedStateMachine):
    """Drives one supervisor over one store per example. Built per store factory."""

    factory: ClassVar[StoreFactory]
    stats: ClassVar[Stats] = Stats()

    def __init__(self) -> None:
        super().__init__()
        type(self).stats.examples += 1
        self.clock = ManualClock(START)
        self.handle: StoreHandle = type(self).factory(self.clock)
        self.faulty = FaultyStore(self.handle.store, clock=self.clock)
        self.children = Children()
        self.callback = Callback()
        self.supervisor: BackgroundSubagentSupervisor | None = None
        self.tracked: dict[str, Tracked] = {}
        self.agents: dict[str, str] = {}  # agent_id -> subagent
        self.deliveries: list[Delivery] = []
        self.terminal_seen: dict[str, tuple[str, str | None]] = {}
        self.closed = False
        self.drift = 0.0
        self.lapses = 0
        self.counter = 0
        self.threads_before = {t.ident for t in threading.enumerate()}
        self.with_callback = True
        self.callback_noted = 0
        self.steps = 0
        self.fault_budget = FAULT_BUDGET
        self.callback_failures = 0
        self.after_close: set[str] = set()
        self.violated = False
        self.log_level = ACTORS_LOG.level
        ACTORS_LOG.setLevel(logging.CRITICAL)  # lost leases and failing callbacks are planned

    # -- plumbing ---------------------------------------------------------------------------

    @property
    def store(self) -> SessionStore:
        """The store without injected faults (the machine's own view of the truth)."""
        return self.handle.store

    @property
    def sup(self) -> BackgroundSubagentSupervisor:
        assert self.supervisor is not None
        return self.supervisor

    def violation(self, message: str) -> SupervisorViolation:
        """The exception to raise for a broken guarantee (once one was made, teardown
        skips its final checks: the example failed already, and a check failing after
        it would replace the first, telling failure)."""
        self.violated = True
        return SupervisorViolation(f"[{self.factory.name}] {message}")

    def path(self, op: str, outcome: str) -> None:
        stats = type(self).stats
        stats.operations += 1
        stats.paths[f"{op}: {outcome}"] += 1

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}-{self.counter}"

    def by_state(self, state: str) -> list[str]:
        return sorted(a for a, t in self.tracked.items() if t.state == state)

    def pick(self, ids: list[str], index: int) -> Tracked:
        return self.tracked[ids[index % len(ids)]]

    def faults_planned(self, op: str) -> bool:
        with self.faulty.lock:
            return bool(self.faulty.faults.get(op))

    def ended(self, attempt_id: str, timeout: float = SETTLE) -> str:
        """Block until the supervisor announced the attempt's end: ``terminal`` or ``lost``."""
        state, _, done = self.sup._ask(WatchRequest(attempt_id=attempt_id)).result(timeout=timeout)
        if state == "not_found":
            raise self.violation(f"the supervisor forgot attempt {attempt_id}")
        try:
            return str(done.result(timeout=timeout))
        except TimeoutError:
            raise self.violation(
                f"attempt {attempt_id} did not end within {timeout}s "
                f"(store: {self._load(attempt_id)!r})"
            ) from None

    def _load(self, attempt_id: str) -> AttemptRecord | None:
        try:
            return self.store.load_attempt(attempt_id)
        except Exception:
            return None

    def settle_end(self, tracked: Tracked) -> None:
        """After its child's end was decided: wait for the supervisor, then check the store."""
        state = self.ended(tracked.attempt_id)
        tracked.state = state
        if state == "lost":
            raise self.violation(
                f"attempt {tracked.attempt_id} was lost though its lease never lapsed"
            )
        self.check_terminal(tracked)
        if self.with_callback:
            self.callback_settled(tracked.attempt_id)

    def callback_settled(self, attempt_id: str) -> None:
        """Wait until the completion callback was offered the result and its claim is
        settled (acknowledged, or released when the callback raised)."""
        deadline = time.monotonic() + SETTLE
        while time.monotonic() < deadline:
            with self.callback.lock:
                called = self.callback.calls[attempt_id] > 0
            record = self._load(attempt_id)
            if called and record is not None and str(record.delivery_status) != "claimed":
                return
            time.sleep(0.001)
        raise self.violation(
            f"the completion callback never settled {attempt_id} ({self._load(attempt_id)!r})"
        )

    def check_terminal(self, tracked: Tracked) -> None:
        record = self._load(tracked.attempt_id)
        if record is None or str(record.execution_status) not in TERMINAL:
            raise self.violation(
                f"{tracked.attempt_id} is announced terminal but the store has {record!r}"
            )
        if tracked.expect is None:
            return
        status, output, error = tracked.expect
        ref = record.result_ref
        got = (
            str(record.execution_status),
            ref.content if ref is not None and status == "completed" else None,
            ref.error if ref is not None and status != "completed" else None,
        )
        if (
            got[0] != status
            or (output is not None and got[1] != output)
            or (error is not None and got[2] != error)
        ):
            raise self.violation(
                f"{tracked.attempt_id}: expected {tracked.expect}, the store has {got}"
            )

    def note_delivery(self, delivery: Delivery) -> None:
        self.deliveries.append(delivery)
        tracked = self.tracked.get(delivery.attempt_id)
        if tracked is None:
            return  # an orphan the store reconciled: no child script to compare with
        if tracked.expect is not None:
            status, output, error = tracked.expect
            if delivery.status != status or (
                status == "completed" and output is not None and delivery.output != output
            ):
                raise self.violation(
                    f"{delivery.channel} delivered {delivery.attempt_id} as "
                    f"({delivery.status}, {delivery.output!r}, {delivery.error!r}), "
                    f"expected {tracked.expect}"
                )
            if error is not None and delivery.error != error:
                raise self.violation(
                    f"{delivery.channel} delivered error {delivery.error!r} for "
                    f"{delivery.attempt_id}, expected {error!r}"
                )

    # -- set-up -----------------------------------------------------------------------------

    @initialize(with_callback=st.booleans(), seed=st.integers(0, 3))
    def start_supervisor(self, with_callback: bool, seed: int) -> None:
        self.with_callback = with_callback
        self.supervisor = BackgroundSubagentSupervisor(
            runner=self.children,
            store=self.faulty,
            owner=OwnerIdentity(host_instance_id=HOST, fencing_generation=1),
            namespace_id=NS,
            session_id=SESSION,
            limits=LIMITS,
            clock=self.clock,
            ids=SeededIds(seed),
            on_complete=self.callback if with_callback else None,
        )

    def teardown(self) -> None:
        try:
            if self.supervisor is not None and not self.violated:
                self._final_checks()
        finally:
            try:
                if self.supervisor is not None:
                    self.faulty.clear()
                    self.supervisor.shutdown(2.0)
            finally:
                ACTORS_LOG.setLevel(self.log_level)
                self.handle.close()

    def _shutdown_checked(self) -> None:
        for _ in range(3):
            try:
                self.sup.shutdown_checked_sync(LIMITS.shutdown_grace)
                return
            except BackgroundSubagentError.ShutdownDeadline:
                continue  # a retry finishes what the deadline left (it keeps them owned)
        raise self.violation("shutdown_checked did not complete in three tries")

    def _final_checks(self) -> None:
        self.faulty.clear()
        if not self.closed:
            self._shutdown_checked()
            self._after_shutdown()
        # Claims a failed step left behind lapse; then the parent's next turn takes the rest.
        self.clock.advance(CLAIM_DEADLINE + 1)
        for result in self.sup.take_pending_sync():
            self.note_delivery(_from_result(result, "turn"))
        self.check_delivery()
        delivered = Counter(d.attempt_id for d in self.deliveries)
        for record in self.store.list_attempts(NS, SESSION):
            if str(record.execution_status) not in TERMINAL:
                continue
            if str(record.delivery_status) != "delivered":
                raise self.violation(
                    f"{record.attempt_id} ended but was never delivered "
                    f"({record.delivery_status}, claim {record.delivery_claim!r})"
                )
            if delivered[record.attempt_id] != 1:
                raise self.violation(
                    f"{record.attempt_id} is delivered in the store but reached the parent "
                    f"{delivered[record.attempt_id]} times"
                )
        self.check_no_leaks()

    def _after_shutdown(self) -> None:
        self.closed = True
        for tracked in self.tracked.values():
            if tracked.state != "active":
                continue
            tracked.state = "terminal"
            if tracked.expect is None:
                reason = tracked.cancel_reason or "supervisor shutdown"
                tracked.expect = ("cancelled", None, f"Background subagent was cancelled: {reason}")
            self.check_terminal(tracked)
        self.check_no_leaks()

    def check_no_leaks(self) -> None:
        actors = [
            ref
            for ref in pykka.ActorRegistry.get_all()
            if ref.actor_class in (AttemptActor, SupervisorActor)
        ]
        if actors:
            raise self.violation(f"actors outlived the shutdown: {actors}")
        threads = [
            t.name
            for t in threading.enumerate()
            if t.ident not in self.threads_before and t.name.startswith(OUR_THREADS)
        ]
        if threads:
            raise self.violation(f"threads outlived the shutdown: {threads}")

    # -- delegate ---------------------------------------------------------------------------

    @precondition(lambda self: self.may("delegate"))
    @rule(
        subagent=st.sampled_from(SUBAGENTS),
        agent=st.integers(0, 9),
        big=RARELY,
    )
    def delegate(self, subagent: str, agent: int, big: bool) -> None:
        """``agent``: 0-5 a new agent, 6-8 continue a known one, 9 an unknown agent_id."""
        known = sorted(self.agents)
        agent_id: str | None = None
        if agent == 9:
            agent_id = f"{subagent}-bg-00000000"  # never generated by SeededIds here
        elif agent >= 6 and known:
            agent_id = known[agent % len(known)]
        prompt = "p" * (LIMITS.max_prompt_bytes + 1) if big else self.fresh("prompt")
        active = self.by_state("active")
        active_agents = {self.tracked[a].agent_id for a in active}
        accept_faults = self.faults_planned("accept_attempt")
        pending_before = len(self.store.list_pending_attempts(NS, SESSION))
        try:
            result = self.sup.delegate_sync(subagent, prompt, agent_id=agent_id)
        except BackgroundSubagentError.Closing:
            self._allow("delegate", "Closing", self.closed)
            return
        except BackgroundSubagentError.PromptTooLarge:
            self._allow("delegate", "PromptTooLarge", big)
            return
        except BackgroundSubagentError.NotFound:
            self._allow(
                "delegate",
                "NotFound",
                agent_id is not None and self.agents.get(agent_id) != subagent,
            )
            return
        except BackgroundSubagentError.ActiveConversation:
            orphan = agent_id is not None and self._orphan_holds(agent_id)
            self._allow("delegate", "ActiveConversation", agent_id in active_agents or orphan)
            return
        except BackgroundSubagentError.QuotaExceeded as exc:
            full = len(active) >= LIMITS.max_active_attempts
            backlog = pending_before >= LIMITS.max_undelivered_results
            self._allow("delegate", f"QuotaExceeded ({sorted(exc.fields)[0]})", full or backlog)
            return
        except BackgroundSubagentError.Durability:
            self._allow("delegate", "Durability", accept_faults)
            return
        refusal = (
            self.closed
            or big
            or (agent_id is not None and self.agents.get(agent_id) != subagent)
            or agent_id in active_agents
            or len(active) >= LIMITS.max_active_attempts
            or pending_before >= LIMITS.max_undelivered_results
        )
        if refusal:
            raise self.violation(
                f"delegate({subagent}, agent_id={agent_id}) was accepted: {result!r} "
                f"(closed={self.closed}, active={active}, undelivered={pending_before})"
            )
        if result.status != ("continued" if agent_id is not None else "accepted"):
            raise self.violation(f"delegate answered {result.status} for agent_id={agent_id}")
        if agent_id is not None and result.agent_id != agent_id:
            raise self.violation(f"continuing {agent_id} gave agent {result.agent_id}")
        if agent_id is None and not result.agent_id.startswith(f"{subagent}-bg-"):
            raise self.violation(f"generated agent id {result.agent_id!r}")
        if result.attempt_id in self.tracked or not result.attempt_id.startswith("subattempt_"):
            raise self.violation(f"attempt id {result.attempt_id!r} is not fresh")
        self.path("delegate", result.status)
        self.agents[result.agent_id] = subagent
        self.tracked[result.attempt_id] = Tracked(
            attempt_id=result.attempt_id, agent_id=result.agent_id, subagent=subagent
        )

    def may(self, op: str) -> bool:
        """Whether rule ``op`` may run: always while open, once after shutdown."""
        return not self.closed or op not in self.after_close

    def _allow(self, op: str, outcome: str, allowed: bool) -> None:
        if self.closed:
            self.after_close.add(op)
        if not allowed:
            raise self.violation(f"{op}: unexpected {outcome}")
        type(self).stats.refusals += 1
        self.path(op, outcome)

    def _orphan_holds(self, agent_id: str) -> bool:
        """A non-terminal attempt of ``agent_id`` in the store: one the supervisor lost
        (not reconciled yet), or one it never learned of (its acceptance applied
        though the response was lost)."""
        return any(
            r.agent_id == agent_id and str(r.execution_status) not in TERMINAL
            for r in self.store.list_attempts(NS, SESSION)
        )

    # -- children ---------------------------------------------------------------------------

    def _started(self, tracked: Tracked) -> Child:
        child = self.children.get(tracked.attempt_id)
        if not child.started.wait(SETTLE):
            raise self.violation(
                f"the child of {tracked.attempt_id} never started "
                f"(store: {self._load(tracked.attempt_id)!r})"
            )
        return child

    @precondition(lambda self: not self.closed and self.by_state("active"))
    @rule(
        index=st.integers(0, 7),
        how=st.sampled_from(["complete", "fail", "raise"]),
        waited=st.booleans(),
    )
    def child_ends(self, index: int, how: str, waited: bool = False) -> None:
        """A child ends; ``waited``: while the parent waits for it on another thread (the
        wait may be handed the result by the terminal commit, or claim it after it).
        Not beside a completion callback, which may lose that race and never be called."""
        tracked = self.pick(self.by_state("active"), index)
        child = self._started(tracked)
        text = self.fresh(f"{how}-text")
        if how == "complete":
            tracked.expect = ("completed", text, None)
        elif how == "fail":
            tracked.expect = ("failed", None, text)
        else:
            tracked.expect = ("failed", None, "Background subagent raised RuntimeError")
        waiting = self._waiting(tracked.attempt_id) if waited and not self.with_callback else None
        load_faults = self.faults_planned("load_attempt")
        if not child.send(how, text):
            raise self.violation(f"the child of {tracked.attempt_id} is not running")
        tracked.queued = 0
        self.settle_end(tracked)
        if waiting is not None:
            try:
                result = waiting.result(SETTLE)
            except BackgroundSubagentError.Durability:
                # Claimed after the end (not handed over), through a planned fault.
                self._allow("wait while ending", "Durability", load_faults)
            else:
                self.judge_wait(result, tracked.attempt_id, "wait while ending")
        self.path("child", how + (" while waited" if waiting is not None else ""))

    def _waiting(self, attempt_id: str) -> concurrent.futures.Future[WaitResult]:
        """``wait_sync(attempt_id)`` on a thread of its own, bounded by :data:`SETTLE`."""
        answer: concurrent.futures.Future[WaitResult] = concurrent.futures.Future()

        def main() -> None:
            try:
                answer.set_result(self.sup.wait_sync(attempt_id, timeout_seconds=SETTLE))
            except BaseException as exc:  # judged by the rule, on its own thread
                answer.set_exception(exc)

        threading.Thread(target=main, name="machine-waiter").start()
        return answer

    @precondition(lambda self: not self.closed and self.by_state("active"))
    @rule(index=st.integers(0, 7))
    def child_turn(self, index: int) -> None:
        tracked = self.pick(self.by_state("active"), index)
        child = self._started(tracked)
        if not child.take_turn(SETTLE):
            raise self.violation(f"the child of {tracked.attempt_id} did not take its turn")
        tracked.queued = 0
        self.path("child", "turn")

    # -- steer and cancel -------------------------------------------------------------------

    @precondition(lambda self: bool(self.tracked) and self.may("steer"))
    @rule(
        index=st.integers(0, 7),
        reuse=st.sampled_from(["new", "new-anonymous", "same", "conflict"]),
        big=RARELY,
    )
    def steer(self, index: int, reuse: str, big: bool) -> None:
        tracked = self.pick(sorted(self.tracked), index)
        known = sorted(tracked.steering)
        if reuse in ("same", "conflict") and known:
            steering_id: str | None = known[index % len(known)]
            assert steering_id is not None
            message = tracked.steering[steering_id]
            if reuse == "conflict":
                message += "-other"
        else:
            steering_id = None if reuse == "new-anonymous" else self.fresh("steer-id")
            message = self.fresh("steering")
            reuse = "new"
        if big:
            message = "s" * (LIMITS.max_steering_bytes + 1)
        try:
            receipt = self.sup.steer_sync(tracked.attempt_id, message, steering_id)
        except BackgroundSubagentError.Closing:
            self._allow("steer", "Closing", self.closed)
            return
        except BackgroundSubagentError.SteeringTooLarge:
            self._allow("steer", "SteeringTooLarge", big)
            return
        except BackgroundSubagentError.Terminal:
            self._allow("steer", "Terminal", tracked.state != "active")
            return
        except BackgroundSubagentError.IdempotencyConflict:
            self._allow("steer", "IdempotencyConflict", reuse == "conflict")
            return
        except BackgroundSubagentError.SteeringQueueFull:
            self._allow("steer", "SteeringQueueFull", tracked.queued >= LIMITS.max_queued_steering)
            return
        if self.closed or big or tracked.state != "active" or reuse == "conflict":
            raise self.violation(f"steer({reuse}) on {tracked.state} attempt returned {receipt!r}")
        if receipt.status != "queued" or receipt.attempt_id != tracked.attempt_id:
            raise self.violation(f"steer receipt {receipt!r}")
        if steering_id is not None and receipt.steering_id != steering_id:
            raise self.violation(f"steer receipt for {steering_id} names {receipt.steering_id}")
        if reuse == "new":
            if tracked.queued >= LIMITS.max_queued_steering:
                raise self.violation("a steering message was queued beyond the queue limit")
            tracked.queued += 1
            tracked.steering[receipt.steering_id] = message
            tracked.sent.append(message)
        self.path("steer", f"queued ({reuse})")

    @precondition(lambda self: bool(self.tracked) and self.may("cancel"))
    @rule(
        index=st.integers(0, 7),
        reason=st.sampled_from([None, "changed plans", "too slow"]),
        reuse=st.sampled_from(["new", "none", "same", "conflict"]),
        big=RARELY,
    )
    def cancel(self, index: int, reason: str | None, reuse: str, big: bool) -> None:
        tracked = self.pick(sorted(self.tracked), index)
        known = sorted(tracked.cancellations)
        cancellation_id: str | None
        if reuse in ("same", "conflict") and known:
            cancellation_id = known[index % len(known)]
            reason = tracked.cancellations[cancellation_id]
            if reuse == "conflict":
                reason = (reason or "") + "-other"
        else:
            cancellation_id = None if reuse == "none" else self.fresh("cancel-id")
            reuse = "new"
        if big:
            reason = "r" * (LIMITS.max_cancellation_reason_bytes + 1)
        was = tracked.state
        try:
            result = self.sup.cancel_sync(tracked.attempt_id, reason, cancellation_id)
        except BackgroundSubagentError.Closing:
            self._allow("cancel", "Closing", self.closed)
            return
        except BackgroundSubagentError.CancellationReasonTooLarge:
            self._allow("cancel", "CancellationReasonTooLarge", big)
            return
        except BackgroundSubagentError.IdempotencyConflict:
            self._allow("cancel", "IdempotencyConflict", reuse == "conflict")
            return
        if self.closed or big or reuse == "conflict":
            raise self.violation(f"cancel({reuse}) returned {result!r}")
        if cancellation_id is not None:
            tracked.cancellations.setdefault(cancellation_id, reason)
        if was == "active":
            if result.status != "cancellation_requested":
                raise self.violation(f"cancel of an active attempt answered {result.status}")
            if tracked.cancel_reason is None:
                tracked.cancel_reason = reason or "cancelled by the parent"
            if result.reason != tracked.cancel_reason:
                raise self.violation(
                    f"cancel kept reason {result.reason!r}, first was {tracked.cancel_reason!r}"
                )
            first = tracked.cancel_reason
            tracked.expect = ("cancelled", None, f"Background subagent was cancelled: {first}")
            self.settle_end(tracked)
            record = self._load(tracked.attempt_id)
            assert record is not None
            if record.cancellation_reason != first:
                raise self.violation(
                    f"cancelled with reason {record.cancellation_reason!r}, expected {first!r}"
                )
            self.path("cancel", "cancellation_requested")
            return
        record = self._load(tracked.attempt_id)
        if record is None or result.status != str(record.execution_status):
            raise self.violation(
                f"cancel of an ended attempt answered {result!r}, store {record!r}"
            )
        self.path("cancel", f"already {result.status}")

    # -- delivery ---------------------------------------------------------------------------

    @precondition(lambda self: self.may("wait"))
    @rule(index=st.integers(0, 7), unknown=RARELY)
    def wait(self, index: int, unknown: bool) -> None:
        if unknown or not self.tracked:
            attempt_id = "subattempt_00000000-0000-4000-8000-000000000000"
        else:
            attempt_id = self.pick(sorted(self.tracked), index).attempt_id
        load_faults = self.faults_planned("load_attempt")
        try:
            result = self.sup.wait_sync(attempt_id, timeout_seconds=0)
        except BackgroundSubagentError.Closing:
            self._allow("wait", "Closing", self.closed)
            return
        except BackgroundSubagentError.Durability:
            self._allow("wait", "Durability", load_faults)
            return
        if self.closed:
            raise self.violation(f"wait after shutdown returned {result!r}")
        tracked = self.tracked.get(attempt_id)
        if tracked is None:
            if result.status != "not_found" or set(result.known_attempt_ids or []) != set(
                self.tracked
            ):
                raise self.violation(f"wait on an unknown attempt returned {result!r}")
            self.path("wait", "not_found")
            return
        if result.timed_out:
            if tracked.state != "active" or result.status in TERMINAL:
                raise self.violation(f"wait timed out on a {tracked.state} attempt: {result!r}")
            self.path("wait", "timed out")
            return
        self.judge_wait(result, attempt_id, "wait")

    def judge_wait(self, result: WaitResult, attempt_id: str, op: str) -> None:
        """A wait's answer on a known attempt that did not time out: another consumer's,
        or a delivery (then counted towards "reached the parent exactly once")."""
        if result.owned_elsewhere:
            self.path(op, f"owned elsewhere ({result.delivery_status})")
            return
        if result.status not in TERMINAL or result.delivery_status != "delivered":
            raise self.violation(f"{op} returned {result!r}")
        self.note_delivery(_from_wait(result, attempt_id))
        self.path(op, "delivered")

    @rule(kind=st.sampled_from(["take_pending", "info", "wait_any"]))
    def observe(self, kind: str) -> None:
        """The parent looks: its next turn takes pending results, or it lists its
        background attempts, or waits on none in particular."""
        if kind == "take_pending":
            for result in self.sup.take_pending_sync():
                self.note_delivery(_from_result(result, "turn"))
            self.path("take_pending", "ok")
            return
        if self.closed:
            try:
                self.sup.wait_sync(None, timeout_seconds=0)
            except BackgroundSubagentError.Closing:
                self._allow("observe", "Closing", True)
                return
            raise self.violation("wait after shutdown did not refuse with Closing")
        if kind == "info":
            info = self.sup.info_sync()
            active = {s.attempt_id for s in info.active}
            if active != set(self.by_state("active")):
                raise self.violation(
                    f"info lists active {sorted(active)}, expected {self.by_state('active')}"
                )
            self.path("info", "ok")
            return
        summary = self.sup.wait_sync(None, timeout_seconds=0)
        if summary.status != "summary":
            raise self.violation(f"wait without an attempt returned {summary!r}")
        self.path("wait_any", "summary")

    @precondition(lambda self: self.with_callback and self.callback_failures < 2)
    @rule()
    def callback_fails_next(self) -> None:
        self.callback_failures += 1
        with self.callback.lock:
            self.callback.raise_next = True
        self.path("callback", "fails next")

    # -- faults and time --------------------------------------------------------------------

    @precondition(lambda self: not self.closed and self.fault_budget > 0)
    @rule(
        op=st.sampled_from(FAULT_OPS),
        mode=st.sampled_from(["raise", "lost", "lost-untyped", "slow"]),
        times=st.integers(1, 2),
    )
    def inject_fault(self, op: str, mode: str, times: int) -> None:
        times = min(times, self.fault_budget)
        self.fault_budget -= times
        if mode == "lost-untyped":
            # The write applied, then a failure that says nothing about it (not
            # RetryableStorage): the supervisor must find out what happened.
            fault = Fault(times, error=lambda: Failed("injected: response lost"), mode="lost")
        elif mode == "slow":
            # Store time moves on during the call; counted as drift so leases never lapse.
            fault = Fault(times, mode="slow", delay=SLOW_CALL)
            self.drift += times * SLOW_CALL
        else:
            fault = Fault(times, mode=mode)
        self.faulty.plan(op, fault)
        self.path("fault", f"{op} {mode}")

    @precondition(lambda self: not self.closed)
    @rule(seconds=st.sampled_from([1.0, 4.0, 9.0]))
    def advance_clock(self, seconds: float) -> None:
        if self.drift + seconds >= LEASE_TTL / 2:
            return
        self.clock.advance(seconds)
        self.drift += seconds
        # Heartbeats run on real time: wait until every live lease was renewed at the
        # new store time, so the leases never lapse by accident.
        deadline = time.monotonic() + SETTLE
        while time.monotonic() < deadline:
            now = self.clock.now()
            stale = [
                a
                for a in self.by_state("active")
                if (r := self._load(a)) is not None
                and str(r.execution_status) not in TERMINAL
                and r.owner_lease.lease_expires_at < now + LEASE_TTL / 2
            ]
            if not stale:
                self.drift = 0.0
                break
            time.sleep(0.002)
        self.path("clock", f"+{seconds:g}s")

    @precondition(lambda self: not self.closed and self.lapses < 1)
    @rule(reconcile=st.booleans())
    def lease_lapses(self, reconcile: bool) -> None:
        """Store time jumps past every lease: each live attempt is lost (confirmed), and
        reconciliation may record it as failed/host_process_lost."""
        self.lapses += 1
        self.clock.advance(LEASE_TTL + 1)
        self.drift = 0.0
        for attempt_id in self.by_state("active"):
            tracked = self.tracked[attempt_id]
            state = self.ended(attempt_id)
            if state != "lost":
                raise self.violation(f"{attempt_id} ended {state} after its lease lapsed")
            tracked.state = "lost"
        if reconcile:
            self.store.reconcile(NS)
            for tracked in self.tracked.values():
                if tracked.state == "lost":
                    tracked.expect = ("failed", None, None)
        self.path("lease", "lapsed" + (" and reconciled" if reconcile else ""))

    @precondition(lambda self: not self.closed and self.steps >= SHUTDOWN_AFTER)
    @rule()
    def shutdown(self) -> None:
        self.faulty.clear()
        self._shutdown_checked()
        self._after_shutdown()
        self.path("shutdown", "completed")

    # -- invariants -------------------------------------------------------------------------

    @invariant()
    def one_terminal_outcome_per_attempt(self) -> None:
        type(self).stats.steps += 1
        type(self).stats.invariants += 1
        self.steps += 1
        for record in self.store.list_attempts(NS, SESSION):
            status = str(record.execution_status)
            seen = self.terminal_seen.get(record.attempt_id)
            if status in TERMINAL:
                now = (status, record.terminal_fingerprint)
                if seen is None:
                    self.terminal_seen[record.attempt_id] = now
                elif seen != now:
                    raise self.violation(
                        f"{record.attempt_id} changed its terminal outcome: {seen} -> {now}"
                    )
            elif seen is not None:
                raise self.violation(f"{record.attempt_id} left its terminal state: {status}")

    @invariant()
    def callback_at_most_once_and_for_every_callback_delivery(self) -> None:
        type(self).stats.invariants += 1
        with self.callback.lock:
            calls = Counter(self.callback.calls)
            accepted = Counter(r.attempt_id for r in self.callback.accepted)
        twice = [a for a, n in calls.items() if n > 1]
        if twice:
            raise self.violation(f"the callback fired more than once for {twice}")
        for record in self.store.list_attempts(NS, SESSION):
            by_callback = str(record.delivery_status) == "delivered" and str(
                record.delivered_claim_id or ""
            ).startswith("callback_")
            if by_callback and accepted[record.attempt_id] != 1:
                raise self.violation(
                    f"{record.attempt_id} is delivered by the callback, which accepted it "
                    f"{accepted[record.attempt_id]} times"
                )

    @invariant()
    def each_result_delivered_at_most_once(self) -> None:
        type(self).stats.invariants += 1
        self.check_delivery()

    def check_delivery(self) -> None:
        with self.callback.lock:
            fresh = self.callback.accepted[self.callback_noted :]
            self.callback_noted += len(fresh)
        for result in fresh:
            self.note_delivery(_from_result(result, "callback"))
        counts = Counter(d.attempt_id for d in self.deliveries)
        twice = {
            a: [d.channel for d in self.deliveries if d.attempt_id == a]
            for a, n in counts.items()
            if n > 1
        }
        if twice:
            raise self.violation(f"results delivered more than once: {twice}")
        deltas = Counter(d.delta for d in self.deliveries if d.delta is not None)
        again = [delta for delta, n in deltas.items() if n > 1]
        if again:
            raise self.violation(f"context deltas applied more than once: {again}")
        for d in self.deliveries:
            if d.delta is not None and d.delta != f"delta-{d.attempt_id}":
                raise self.violation(
                    f"{d.attempt_id} was delivered with a foreign delta {d.delta!r}"
                )
        for steered in self.tracked.values():
            seen_by_child = self.children.get(steered.attempt_id).seen_steering()
            if seen_by_child != steered.sent[: len(seen_by_child)]:
                raise self.violation(
                    f"{steered.attempt_id}: the child saw steering {seen_by_child}, "
                    f"queued {steered.sent}"
                )


def _from_result(result: BackgroundResult, channel: str) -> Delivery:
    return Delivery(
        attempt_id=result.attempt_id,
        channel=channel,
        status=result.status,
        output=result.output,
        error=result.error,
        delta=result.context_delta,
    )


def _from_wait(result: WaitResult, attempt_id: str) -> Delivery:
    """A result a ``wait`` delivered, with the context delta it carried."""
    return Delivery(
        attempt_id=attempt_id,
        channel="wait",
        status=result.status,
        output=result.result,
        error=result.error,
        delta=result.context_delta,
    )


def supervisor_machine(factory: StoreFactory) -> type[SupervisorMachine]:
    """The supervisor machine bound to ``factory`` (its own counters)."""
    safe = "".join(c if c.isalnum() else "_" for c in factory.name)
    return type(
        f"SupervisorMachine_{safe}",
        (SupervisorMachine,),
        {"factory": factory, "stats": Stats(), "__module__": SupervisorMachine.__module__},
    )


# -- the planted bug it must catch ----------------------------------------------------------


class RedeliversDelivered(StoreProxy):
    """A store that forgets deliveries: a claim on a delivered result succeeds again
    (and its acknowledgement too), so the same result can reach the parent twice."""

    def claim_delivery(
        self, attempt_id: str, claim: DeliveryClaim, *, automatic: bool = False
    ) -> AttemptRecord:
        try:
            return self.inner.claim_delivery(attempt_id, claim, automatic=automatic)
        except Delivered:
            record = self.inner.load_attempt(attempt_id)
            return msgspec.structs.replace(record, delivery_status="claimed", delivery_claim=claim)

    def acknowledge_delivery(self, attempt_id: str, claim_id: str) -> AttemptRecord:
        try:
            return self.inner.acknowledge_delivery(attempt_id, claim_id)
        except Delivered:
            return self.inner.load_attempt(attempt_id)


SUPERVISOR_PLANTED: type[StoreProxy] = RedeliversDelivered
"""The planted bug the supervisor machine is expected to catch."""

__all__ = [
    "SUPERVISOR_PLANTED",
    "Child",
    "Children",
    "RedeliversDelivered",
    "SupervisorMachine",
    "SupervisorViolation",
    "supervisor_machine",
]
