"""What the supervisor machine did not check (found by the mutation run).

:class:`SupervisorGapsMachine` is the supervisor machine plus:

- every delivery of a result whose child completed or failed with an outcome
  (by callback, ``wait`` or the parent's turn) carries that child's context
  delta (the machine checked only that no delta arrives twice, so a delivery
  that dropped the delta passed);
- every terminal record's ``failure_category`` matches its status
  (``cancelled`` for cancelled, ``execution_error`` or ``host_process_lost``
  for failed, none for completed);
- the parent's turn delivers every pending result after DELIVERY_RETRIES - 1
  transient claim failures, and every result beside one claimed elsewhere;
- a terminal commit whose response was lost is retried after store time moved:
  the exact replay is Ok and the attempt ends terminal (not lost);
- an artifact commit refused by the namespace quota ends failed; a wait whose
  artifact fails to load gives its claim back (the next wait delivers);
- a cancelled result delivered after its retention expired has no output, only
  the expiry summary as its error;
- a child that ignores cancellation is aborted when its lease lapses;
- a lapsed attempt taken over by this host's id with a new generation is lost;
- a child completes with an output of exactly the inline limit, one byte more,
  exactly the artifact limit or one byte more (multi-byte text): inline up to
  the inline limit, an artifact up to the artifact limit, failed past it, and
  the parent receives the whole output;
- store time lands exactly on every live lease's expiry: a lease is live only
  while ``now < lease_expires_at``, so every attempt is lost at that instant;
- an attempt cancelled before its child launched (the store refuses its
  ``starting`` write for now) ends cancelled with the parent's reason and its
  child never runs;
- a child that ignores the cancel request and its task's cancellation has its
  task cancelled after the grace, and the attempt decides ``cancelled`` after
  another; when the child then ends on its own (while the store still refuses
  the commit) the decision stands: the attempt ends cancelled, whatever the late
  child returned.

The timers of the cancellation grace run on real time (the loop's); the rules
wait for what the supervisor did (a refused write, the child's end), never for
a time.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import time
from typing import Any

import pykka
from hypothesis import strategies as st
from hypothesis.stateful import invariant, precondition, rule

from actors import BackgroundSubagentError, ChildControl, ChildOutcome, ChildRequest
from actors._delivery import DELIVERY_RETRIES
from actors._messages import Describe
from storage import DeliveryClaim, Failed, QuotaExceeded, RetryableStorage

from ._factories import StoreFactory
from ._faults import Fault
from ._harness import Stats
from ._supervisor import (
    CLAIM_DEADLINE,
    HOST,
    LEASE_TTL,
    LIMITS,
    NS,
    SESSION,
    SETTLE,
    SLOW_CALL,
    SUBAGENTS,
    Child,
    Children,
    Delivery,
    SupervisorMachine,
    Tracked,
    _from_result,
    _from_wait,
)

SIZES = {
    "inline limit": LIMITS.inline_preview_bytes,
    "inline limit + 1": LIMITS.inline_preview_bytes + 1,
    "artifact limit": LIMITS.max_artifact_bytes,
    "artifact limit + 1": LIMITS.max_artifact_bytes + 1,
}
ORDER = ("inline limit", "artifact limit", "inline limit + 1", "artifact limit + 1")
CATEGORIES: dict[str, set[str | None]] = {
    "completed": {None},
    "failed": {"execution_error", "host_process_lost"},
    "cancelled": {"cancelled"},
}


class DeafChild(Child):
    """A child script that may ignore cancellation: it still obeys every command, but
    only its task's cancellation (the supervisor's abort) ends it early."""

    def __init__(self, attempt_id: str, *, deaf: bool) -> None:
        super().__init__(attempt_id)
        self.deaf = deaf

    async def run(self, request: ChildRequest, control: ChildControl) -> ChildOutcome:
        if not self.deaf:
            return await super().run(request, control)
        inbox = self.open_inbox()
        try:
            while True:
                kind, text = await inbox.get()  # control.wait_cancelled() goes unheard
                drained = control.steering()
                with self.lock:
                    self.steering.extend(drained)
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


class StubbornChild(Child):
    """A child script that ignores every cancellation: the cooperative request goes
    unheard and its task's cancellation is swallowed (counted in ``aborts``). Only a
    command (``complete``, ``fail``) ends it."""

    def __init__(self, attempt_id: str) -> None:
        super().__init__(attempt_id)
        self.aborts = 0

    async def run(self, request: ChildRequest, control: ChildControl) -> ChildOutcome:
        inbox = self.open_inbox()
        try:
            while True:
                try:
                    kind, text = await inbox.get()
                except asyncio.CancelledError:
                    with self.lock:
                        self.aborts += 1
                    continue  # it ignores its task's cancellation too
                if kind == "complete":
                    return ChildOutcome.completed(text, context_delta=self.delta)
                return ChildOutcome.failed(text, context_delta=self.delta)
        finally:
            self.ended.set()


class DeafableChildren(Children):
    """The runner: the next child it creates is deaf to cancellation, or stubborn
    (deaf to its task's cancellation as well), when asked."""

    def __init__(self) -> None:
        super().__init__()
        self.next_deaf = False
        self.next_stubborn = False

    def get(self, attempt_id: str) -> Child:
        with self.lock:
            child = self.scripts.get(attempt_id)
            if child is None:
                if self.next_stubborn:
                    child = StubbornChild(attempt_id)
                    self.next_stubborn = False
                else:
                    child = DeafChild(attempt_id, deaf=self.next_deaf)
                    self.next_deaf = False
                self.scripts[attempt_id] = child
            return child


def text_of(size: int) -> str:
    """A text of exactly ``size`` UTF-8 bytes, mostly two-byte characters."""
    return "ü" * (size // 2) + "a" * (size % 2)


class SupervisorGapsMachine(SupervisorMachine):
    """The supervisor machine with the checks the mutation run found missing."""

    size_turns = 0
    """Calls of the size rule so far, over the bound class's whole run (see the rule)."""

    def __init__(self) -> None:
        super().__init__()
        self.sized: dict[str, str] = {}
        self.big_outputs = 0
        self.expired_cancels = 0
        self.turn_checks = 0
        self.elsewhere_checks = 0
        self.lost_commits = 0
        self.rare = 0
        self.children: DeafableChildren = DeafableChildren()
        self.deafened = 0
        self.exact_expiries = 0
        self.takeovers = 0
        self.stubborn = 0

    def note_delivery(self, delivery: Delivery) -> None:
        super().note_delivery(delivery)
        tracked = self.tracked.get(delivery.attempt_id)
        if tracked is None or tracked.expect is None:
            return
        status, _, error = tracked.expect
        child_outcome = status == "completed" or (
            status == "failed" and error is not None and error.startswith("fail-text")
        )
        if child_outcome and delivery.delta != f"delta-{delivery.attempt_id}":
            raise self.violation(
                f"{delivery.channel} delivered {delivery.attempt_id} ({status}) without its "
                f"child's context delta (got {delivery.delta!r})"
            )
        text = self.sized.get(delivery.attempt_id)
        if text is not None and status == "completed" and delivery.output != text:
            raise self.violation(
                f"{delivery.channel} delivered {delivery.attempt_id} with "
                f"{len((delivery.output or '').encode())} bytes, the child returned "
                f"{len(text.encode())}"
            )

    @precondition(lambda self: not self.closed and self.by_state("active") and self.big_outputs < 2)
    @rule(index=st.integers(0, 7), offset=st.integers(0, len(ORDER) - 1))
    def child_completes_at_a_size_limit(self, index: int, offset: int) -> None:
        # The sizes rotate over the whole run (the drawn offset shifts the rotation), so
        # a derandomized run that keeps drawing the simplest offset still meets every
        # boundary. The rotation is the bound class's: a replayed failing example may
        # take another size (reported as flaky, still a failure).
        cls = type(self)
        turn = cls.size_turns
        cls.size_turns = turn + 1
        size = ORDER[(turn + offset) % len(ORDER)]
        tracked = self.pick(self.by_state("active"), index)
        child = self._started(tracked)
        n = SIZES[size]
        self.big_outputs += n > LIMITS.inline_preview_bytes + 1
        text = text_of(n)
        inline = n <= LIMITS.inline_preview_bytes
        if n <= LIMITS.max_artifact_bytes:
            tracked.expect = ("completed", text if inline else None, None)
        else:
            tracked.expect = ("failed", None, None)
        self.sized[tracked.attempt_id] = text
        if not child.send("complete", text):
            raise self.violation(f"the child of {tracked.attempt_id} is not running")
        tracked.queued = 0
        self.settle_end(tracked)
        record = self.store.load_attempt(tracked.attempt_id)
        want = "inline" if inline else "artifact"
        if tracked.expect[0] == "completed" and str(record.retention_status) != want:
            raise self.violation(
                f"{tracked.attempt_id}: an output of {n} bytes is kept "
                f"{record.retention_status}, expected {want}"
            )
        self.path("child", f"complete at the {size}")

    def _pending(self) -> list[str]:
        """Undelivered, unclaimed results in the store, in the order a turn takes them."""
        return [
            r.attempt_id
            for r in self.store.list_pending_attempts(NS, SESSION)
            if str(r.delivery_status) == "undelivered"
        ]

    def _turn(self, what: str) -> set[str]:
        """The parent's next turn; the ids it received."""
        try:
            results = self.sup.take_pending_sync()
        except Exception as exc:
            raise self.violation(f"the parent's turn {what} raised {exc!r}") from exc
        for result in results:
            self.note_delivery(_from_result(result, "turn"))
        return {r.attempt_id for r in results}

    @precondition(lambda self: not self.closed and not self.with_callback and self.turn_checks < 2)
    @rule()
    def turn_after_one_fault_less_than_the_retries(self) -> None:
        """Transient failures on all but the last of a claim's DELIVERY_RETRIES tries: the
        turn still delivers every pending result."""
        pending = self._pending()
        if not pending or self.faults_planned("claim_and_acknowledge"):
            return
        self.turn_checks += 1
        self.faulty.plan("claim_and_acknowledge", Fault(DELIVERY_RETRIES - 1))
        got = self._turn(f"after {DELIVERY_RETRIES - 1} transient claim failures")
        self.faulty.clear()
        if not set(pending) <= got:
            raise self.violation(f"the turn delivered {sorted(got)} of pending {pending}")
        self.path("turn", "delivered after retries - 1 faults")

    @precondition(
        lambda self: not self.closed and not self.with_callback and self.elsewhere_checks < 2
    )
    @rule()
    def turn_skips_a_result_claimed_elsewhere(self) -> None:
        """Another consumer holds a live claim on the first pending result: the turn
        delivers every other one."""
        pending = self._pending()
        if len(pending) < 2:
            return
        self.elsewhere_checks += 1
        claim = DeliveryClaim(
            claim_id=self.fresh("claim-elsewhere"), deadline=self.clock.now() + CLAIM_DEADLINE
        )
        self.store.claim_delivery(pending[0], claim)
        got = self._turn("beside a claim held elsewhere")
        if not set(pending[1:]) <= got or pending[0] in got:
            raise self.violation(
                f"the turn delivered {sorted(got)}; pending {pending}, {pending[0]} claimed "
                "elsewhere"
            )
        self.path("turn", "skipped a claim held elsewhere")

    @precondition(
        lambda self: (
            not self.closed
            and bool(self.by_state("active"))
            and self.lost_commits < 1
            and not self.faults_planned("commit_terminal")
        )
    )
    @rule(index=st.integers(0, 7))
    def commit_response_lost_then_store_time_moves(self, index: int) -> None:
        """The terminal commit applies but its response is lost, and store time moves before
        the retry: the retry must replay the same commit (Ok), not a rebuilt one."""
        self.lost_commits += 1

        def lost_while_time_moves() -> BaseException:
            self.clock.advance(SLOW_CALL)  # the response is lost while store time moves on
            return RetryableStorage("injected: response lost")

        self.faulty.plan("commit_terminal", Fault(1, error=lost_while_time_moves, mode="lost"))
        self.drift += SLOW_CALL
        self.child_ends(index, "complete")
        self.path("fault", "commit_terminal lost, then time moved")

    def _complete_with(self, index: int, size: int, expect: tuple[str, str | None, None]) -> str:
        tracked = self.pick(self.by_state("active"), index)
        child = self._started(tracked)
        text = text_of(size)
        tracked.expect = expect
        self.sized[tracked.attempt_id] = text
        if not child.send("complete", text):
            raise self.violation(f"the child of {tracked.attempt_id} is not running")
        tracked.queued = 0
        self.settle_end(tracked)
        return tracked.attempt_id

    @precondition(
        lambda self: (
            not self.closed
            and bool(self.by_state("active"))
            and self.rare < 2
            and not self.faults_planned("commit_terminal")
        )
    )
    @rule(index=st.integers(0, 7))
    def artifact_commit_refused_by_the_namespace_quota(self, index: int) -> None:
        """The store refuses the artifact commit with QuotaExceeded: the attempt ends
        failed (naming the quota), never completed by a replay of the refused commit."""
        self.rare += 1
        quota = QuotaExceeded("injected: the namespace's artifact quota is full")
        self.faulty.plan("commit_terminal", Fault(1, error=lambda: quota))
        aid = self._complete_with(index, LIMITS.inline_preview_bytes + 1, ("failed", None, None))
        ref = self.store.load_attempt(aid).result_ref
        if ref is None or "quota" not in (ref.error or ""):
            raise self.violation(f"{aid} refused for quota ended with {ref!r}")
        self.path("child", "complete refused by the quota")

    @precondition(
        lambda self: (
            not self.closed
            and not self.with_callback
            and bool(self.by_state("active"))
            and self.rare < 2
            and not self.faults_planned("load_artifact")
        )
    )
    @rule(index=st.integers(0, 7))
    def wait_while_the_artifact_cannot_be_loaded(self, index: int) -> None:
        """A wait whose result's artifact fails to load gives the claim back: the next
        wait delivers it."""
        self.rare += 1
        size = LIMITS.inline_preview_bytes + 1
        aid = self._complete_with(index, size, ("completed", None, None))
        self.faulty.plan("load_artifact", Fault(1))
        try:
            self.sup.wait_sync(aid, timeout_seconds=0)
        except Exception as exc:
            self.path("wait", f"artifact load failed ({type(exc).__name__})")
        else:
            raise self.violation(f"wait on {aid} delivered though its artifact failed to load")
        self.faulty.clear()
        result = self.sup.wait_sync(aid, timeout_seconds=0)
        if result.delivery_status != "delivered":
            raise self.violation(f"the wait after a failed artifact load returned {result!r}")
        self.note_delivery(_from_wait(result, aid))

    @precondition(
        lambda self: not self.closed and bool(self.by_state("active")) and self.takeovers < 1
    )
    @rule(index=st.integers(0, 7))
    def same_host_takes_over_with_a_new_generation(self, index: int) -> None:
        """Every lease lapses and one attempt is taken over by this host's id with the next
        generation (a restarted host): the running attempt must see it lost all the same.
        Once per example, whatever lapsed before (its own counter: the rule stays reached
        whichever lapse rule the derandomized order tries first; it leaves ``lapses``
        alone, so the deaf-child lapse below stays reachable after it)."""
        self.takeovers += 1
        self.clock.advance(LEASE_TTL + 1)
        self.drift = 0.0
        active = self.by_state("active")
        taken = self.pick(active, index).attempt_id
        self.store.take_over_attempt(taken, HOST, 2, self.clock.now() + LEASE_TTL)
        for attempt_id in active:
            if self.ended(attempt_id) != "lost":
                raise self.violation(f"{attempt_id} did not end lost after its lease lapsed")
            self.tracked[attempt_id].state = "lost"
        self.path("lease", "taken over by the same host, new generation")

    @precondition(lambda self: not self.closed and self.deafened < 1)
    @rule()
    def the_next_child_ignores_cancellation(self) -> None:
        self.deafened += 1
        self.children.next_deaf = True

    @precondition(
        lambda self: (
            not self.closed and not self.lapses and self.deafened and bool(self.by_state("active"))
        )
    )
    @rule()
    def a_child_that_ignores_cancellation_loses_its_lease(self) -> None:
        """Every lease lapses (after a child deaf to cancellation was asked for): each lost
        attempt's child task is aborted (it ends), a deaf one too."""
        for attempt_id in self.by_state("active"):
            self._started(self.tracked[attempt_id])
        self.lapses += 1
        self.clock.advance(LEASE_TTL + 1)
        self.drift = 0.0
        active = self.by_state("active")
        for attempt_id in active:
            if self.ended(attempt_id) != "lost":
                raise self.violation(f"{attempt_id} did not end lost after its lease lapsed")
            self.tracked[attempt_id].state = "lost"
        for attempt_id in active:
            child = self.children.get(attempt_id)
            if child.started.is_set() and not child.ended.wait(SETTLE):
                raise self.violation(f"the child of lost attempt {attempt_id} still runs")
        self.path("lease", "lapsed under a deaf child")

    @precondition(
        lambda self: not self.closed and not self.with_callback and self.expired_cancels < 1
    )
    @rule(index=st.integers(0, 7))
    def cancelled_result_delivered_after_its_retention(self, index: int) -> None:
        """The parent cancels a running attempt (delegated here when none is active), then
        store time passes its retention (every other lease lapses on the way) and expiry
        runs: the cancelled result, still undelivered, reaches the parent with no output
        and the expiry summary as error."""
        active = self.by_state("active")
        if not active:
            fresh = self._delegate_fresh()
            if fresh is None:
                return
            active = [fresh.attempt_id]
        tracked = self.pick(active, index)
        self._started(tracked)
        aid = tracked.attempt_id
        self.sup.cancel_sync(aid, None, None)
        tracked.cancel_reason = tracked.cancel_reason or "cancelled by the parent"
        reason = tracked.cancel_reason
        tracked.expect = ("cancelled", None, f"Background subagent was cancelled: {reason}")
        self.settle_end(tracked)
        self.expired_cancels += 1
        self.clock.advance(LIMITS.retention + 1)
        self.drift = 0.0
        for attempt_id in self.by_state("active"):
            if self.ended(attempt_id) != "lost":
                raise self.violation(f"{attempt_id} did not end lost after its lease lapsed")
            self.tracked[attempt_id].state = "lost"
        self.store.expire_retention(NS)
        for other in self.tracked.values():  # what they carried is gone: only the status
            if other.expect is not None:
                other.expect = (other.expect[0], None, None)
        result = self.sup.wait_sync(aid, timeout_seconds=0)
        if result.delivery_status != "delivered" or result.owned_elsewhere:
            raise self.violation(f"the expired cancelled result {aid} was not delivered")
        if result.result is not None or not result.error:
            raise self.violation(
                f"expired cancelled result {aid} delivered output {result.result!r}, "
                f"error {result.error!r}"
            )
        self.note_delivery(_from_wait(result, aid))
        self.path("wait", "cancelled result after its retention")

    # -- cancellation and lease expiry, judged by the spec's rules ----------------------------

    def _quiet(self) -> None:
        """Drop the injected faults still planned (the scripted rules below plan their own;
        a precondition on them would depend on how far the supervisor's threads got)."""
        self.faulty.clear()

    def _delegate_fresh(self) -> Tracked | None:
        """Delegate to a new agent (no checks: the ``delegate`` rule has them); ``None``
        when the supervisor refuses (a quota)."""
        try:
            result = self.sup.delegate_sync(SUBAGENTS[0], self.fresh("prompt"))
        except BackgroundSubagentError as exc:
            self.path("delegate", f"refused ({type(exc).__name__})")
            return None
        self.agents[result.agent_id] = SUBAGENTS[0]
        tracked = self.tracked[result.attempt_id] = Tracked(
            attempt_id=result.attempt_id, agent_id=result.agent_id, subagent=SUBAGENTS[0]
        )
        return tracked

    def _leases_renewed_at(self, active: list[str], expiry: float) -> bool:
        """Wait until every attempt of ``active`` holds a lease expiring at ``expiry``
        (heartbeats renew on real time; store time stands still meanwhile)."""
        deadline = time.monotonic() + SETTLE
        while time.monotonic() < deadline:
            leases = [r.owner_lease.lease_expires_at for a in active if (r := self._load(a))]
            if leases == [expiry] * len(active):
                return True
            time.sleep(0.002)
        return False

    @precondition(
        lambda self: not self.closed and bool(self.by_state("active")) and self.exact_expiries < 1
    )
    @rule()
    def store_time_lands_exactly_on_every_lease_expiry(self) -> None:
        """Every live lease was renewed at the current store time; store time then moves
        by exactly the lease TTL. A lease is live only while now < lease_expires_at, so
        at its expiry instant the owner may neither heartbeat nor write: every attempt
        is lost."""
        self._quiet()
        active = self.by_state("active")
        expiry = self.clock.now() + LEASE_TTL
        if not self._leases_renewed_at(active, expiry):
            raise self.violation(f"the leases of {active} were not renewed to {expiry}")
        self.exact_expiries += 1
        self.lapses += 1
        self.clock.advance(LEASE_TTL)
        self.drift = 0.0
        for attempt_id in active:
            if self.ended(attempt_id) != "lost":
                raise self.violation(
                    f"{attempt_id} did not end lost when store time reached its lease expiry"
                )
            self.tracked[attempt_id].state = "lost"
        self.path("lease", "store time at the expiry instant")

    def _child_end_handled(self, child: Child, attempt_id: str) -> None:
        """Return once the attempt actor handled its child's end (or has stopped): the
        loop tells ``ChildFinished`` from the task's done callback, before a callback
        queued two loop turns after the child's ``ended``; the actor answers
        ``Describe`` after every message told before it."""
        loop = child.loop
        assert loop is not None
        turned = threading.Event()
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(lambda: loop.call_soon(turned.set))
        turned.wait(SETTLE)
        ref = pykka.ActorRegistry.get_by_urn(f"urn:{attempt_id}")
        if ref is None:
            return
        reply: concurrent.futures.Future[Any] = concurrent.futures.Future()
        with contextlib.suppress(pykka.ActorDeadError):
            ref.tell(Describe(reply=reply))
            with contextlib.suppress(Exception):
                reply.result(timeout=SETTLE)

    @precondition(lambda self: not self.closed and self.stubborn < 1)
    @rule(how=st.sampled_from(["complete", "fail"]), reason=st.sampled_from([None, "too slow"]))
    def a_child_that_ignores_every_cancellation_ends_after_the_decision(
        self, how: str, reason: str | None
    ) -> None:
        """A running child ignores the parent's cancel and its task's cancellation, and
        the store refuses terminal commits for now. After the grace the child's task is
        cancelled, after another the attempt decides ``cancelled`` without it; then the
        child ends on its own (``how``) and the store takes commits again. The decision
        was taken once: the attempt ends cancelled with the parent's reason, whatever the
        late child returned."""
        self._quiet()
        self.children.next_stubborn = True
        try:
            tracked = self._delegate_fresh()
            if tracked is None:
                return
            self.children.get(tracked.attempt_id)  # its script: the stubborn one
        finally:
            self.children.next_stubborn = False
        child = self._started(tracked)
        if not isinstance(child, StubbornChild):
            raise self.violation(f"the child of {tracked.attempt_id} is not the stubborn one")
        self.stubborn += 1
        op = "commit_terminal"
        decided = self.faulty.when_failed(op, self.faulty.failures[op] + 1)
        self.faulty.fail_always(op, lambda: Failed("injected: terminal commit refused"))
        try:
            self.sup.cancel_sync(tracked.attempt_id, reason, None)
            tracked.cancel_reason = reason or "cancelled by the parent"
            if not decided.wait(SETTLE):
                raise self.violation(
                    f"{tracked.attempt_id} never decided though its child ignored cancellation"
                )
            if not child.send(how, self.fresh(f"{how}-late")) or not child.ended.wait(SETTLE):
                raise self.violation(f"the stubborn child of {tracked.attempt_id} did not end")
            self._child_end_handled(child, tracked.attempt_id)
        finally:
            self.faulty.fail_always(op, None)
            child.send("complete", "teardown")  # never left running (a no-op once it ended)
        if child.aborts < 1:
            raise self.violation(f"the cancelled child of {tracked.attempt_id} was never aborted")
        message = f"Background subagent was cancelled: {tracked.cancel_reason}"
        tracked.expect = ("cancelled", None, message)
        self.settle_end(tracked)
        self.path("child", "ended after the decision")

    @invariant()
    def failure_category_matches_status(self) -> None:
        type(self).stats.invariants += 1
        for record in self.store.list_attempts(NS, SESSION):
            allowed = CATEGORIES.get(str(record.execution_status))
            if allowed is not None and record.failure_category not in allowed:
                raise self.violation(
                    f"{record.attempt_id} is {record.execution_status} with failure_category "
                    f"{record.failure_category!r}"
                )


def supervisor_gaps_machine(factory: StoreFactory) -> type[SupervisorGapsMachine]:
    """The supervisor-gaps machine bound to ``factory`` (its own counters)."""
    safe = "".join(c if c.isalnum() else "_" for c in factory.name)
    return type(
        f"SupervisorGapsMachine_{safe}",
        (SupervisorGapsMachine,),
        {"factory": factory, "stats": Stats(), "__module__": SupervisorGapsMachine.__module__},
    )
