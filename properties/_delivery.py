"""Delivery and continuation exactly-once.

Terminal results are claimed, acknowledged and released by consumers that are
parent runs: runs stay live, complete, fail or are cancelled (admit_run,
transition_run, renew_run_admission) while time passes and reconcile reclaims
expired claims. Continuations are acquired exactly, with a forged input, an
empty input, a forged cause, a stale head, under another claim, and replayed.
Invariant (checked after every step, in the harness): at most one admitted
continuation run per attempt, ever, and its input is byte-equal to the
canonical form (:func:`storage.continuation_input`) of the record it consumed.
"""

from __future__ import annotations

from typing import Any

import msgspec
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, multiple, precondition, rule

from statemachines import SessionStatus
from storage import (
    ASYNC_SUBAGENT_RESULT,
    AcquireContinuation,
    AdmissionLease,
    ArtifactLimits,
    AttemptRecord,
    ConsumerTerminated,
    ContinuationReceipt,
    DeliveryClaim,
    InputPart,
    Retryable,
    RunAdmissionReceipt,
    RunRecord,
)

from ._factories import StoreFactory
from ._harness import RUN_TTL, ContractMachine, build_for

NS = "ns-a"
LIMITS = ArtifactLimits(max_single_bytes=4096, max_retained_bytes=1 << 20)
CLAIM_CHOICE = st.sampled_from(["current", "current", "first", "never"])
VARIANTS = (
    "exact",
    "exact",
    "forged_input",
    "empty_input",
    "forged_cause",
    "stale_head",
    "head",
    "replay",
    "deadline_now",
    "expired_run_lease",
    "causal_restore",
)
DEATHS = st.sampled_from(["completed", "failed", "cancelled", "lease_lost", "lease_lost"])


class DeliveryMachine(ContractMachine):
    """Claims, consumers, reconcile, suppression and continuation admission."""

    results = Bundle("results")

    def __init__(self) -> None:
        super().__init__()
        self.n = 0
        self.sid = self.sessions[NS]
        self.consumers: list[str] = []
        self.claims: dict[str, list[str]] = {}
        self.requests: dict[str, AcquireContinuation] = {}
        self.continuations = 0
        self.toggles = 0
        self.keyed: list[tuple[str, RunRecord]] = []

    # -- results ----------------------------------------------------------------------------

    @rule(
        target=results,
        outcome=st.sampled_from(["completed", "completed", "failed", "cancelled"]),
        artifact=st.booleans(),
        retention=st.sampled_from([60.0, 600.0]),
        handed_over=st.booleans(),
    )
    def new_result(
        self, outcome: str, artifact: bool, retention: float, handed_over: bool = False
    ) -> object:
        """A result reaches terminal; ``handed_over``: its terminal commit also delivers
        it to an in-process consumer that waited for it (one transaction)."""
        n = self.n
        self.n += 1
        text = f"result {n}: ünïcode ✓"
        claim_id = self.fresh("claim") if handed_over else None
        commit = self.drive_to_terminal(
            self.acceptance(n, NS, agent=n),
            outcome,
            text,
            retention=retention,
            artifact_text=("full artifact " + text * 3) if artifact else None,
            limits=LIMITS if artifact else None,
            deliver_claim_id=claim_id,
        )
        if commit is None:
            return multiple()
        self.claims[commit.record.attempt_id] = [] if claim_id is None else [claim_id]
        return commit.record.attempt_id

    # -- consumer runs ----------------------------------------------------------------------

    @precondition(lambda self: self.model.live_run(self.sid) is None)
    @rule()
    def admit_consumer_run(self) -> None:
        run_id = self.admit_plain_run(self.sid, "consumer")
        if run_id is not None:
            self.consumers.append(run_id)

    @rule(variant=st.sampled_from(["new", "replay", "other_request", "expired_lease"]))
    def admit_with_idempotency_key(self, variant: str) -> None:
        """Same key and request: the first receipt again; same key, other request: refused."""
        now = self.clock.now()
        if variant in ("new", "expired_lease") or not self.keyed:
            key = self.fresh("key")
            run_id = self.fresh("consumer")
            run = RunRecord(
                session_id=self.sid,
                run_id=run_id,
                created_at=now,
                updated_at=now,
                input=(InputPart(text=f"turn {run_id}"),),
                trigger_type="user",
                admission_lease=AdmissionLease(
                    admission_id=f"adm-{run_id}",
                    host_instance_id="host-runs",
                    fencing_generation=1,
                    lease_expires_at=now if variant == "expired_lease" else now + RUN_TTL,
                ),
            )
        else:
            key, run = self.keyed[-1]
            if variant == "other_request":
                run = msgspec.structs.replace(run, input=(InputPart(text="another turn"),))
        outcome = self.model.admit_run(run, key)
        replay = outcome.error is None and (self.sid, key) in self.model.idempotency

        def check(receipt: RunAdmissionReceipt) -> None:
            if receipt.run.run_id != run.run_id or receipt.idempotent_replay != replay:
                raise self.violation(
                    f"admit_run(key={key}): receipt run {receipt.run.run_id} "
                    f"replay={receipt.idempotent_replay}, want {run.run_id} replay={replay}"
                )

        got = self.expect(
            f"admit_run(idempotency {variant})",
            lambda: self.store.admit_run(run, idempotency_key=key),
            outcome,
            check=check,
        )
        if got is not None and not replay:
            self.keyed.append((key, run))
            self.consumers.append(run.run_id)

    def _run(self, index: int) -> str | None:
        if not self.consumers:
            return None
        # 0, the simplest choice, is the latest consumer: the one a parent turn would use.
        return self.consumers[-1 - index % len(self.consumers)]

    @precondition(lambda self: bool(self.consumers))
    @rule(
        index=st.integers(0, 7),
        status=st.sampled_from(["running", "completed", "failed", "cancelled"]),
    )
    def consumer_moves(self, index: int, status: str) -> None:
        run_id = self._run(index)
        assert run_id is not None
        self.move_run(self.sid, run_id, status)

    @precondition(lambda self: bool(self.consumers))
    @rule(index=st.integers(0, 7), how=st.sampled_from(["completed", "failed", "cancelled"]))
    def consumer_finishes(self, index: int, how: str) -> None:
        """The consumer's turn ends: completes (through running), fails or is cancelled."""
        run_id = self._run(index)
        assert run_id is not None
        if how == "completed" and self.model.runs[(self.sid, run_id)].status == "admitted":
            self.move_run(self.sid, run_id, "running")
        self.move_run(self.sid, run_id, how)

    @precondition(lambda self: bool(self.consumers))
    @rule(index=st.integers(0, 7), ttl=st.sampled_from([0.0, 30.0, 120.0]))
    def consumer_renews(self, index: int, ttl: float) -> None:
        run_id = self._run(index)
        assert run_id is not None
        mrun = self.model.runs[(self.sid, run_id)]
        adm = mrun.admission_id or ""
        expiry = self.clock.now() + ttl

        def check(got: RunRecord) -> None:
            lease = got.admission_lease
            if lease is None or lease.lease_expires_at != expiry:
                raise self.violation(f"renew_run_admission: lease {lease!r}, want {expiry}")

        self.expect(
            "renew_run_admission",
            lambda: self.store.renew_run_admission(self.sid, run_id, adm, expiry),
            self.model.renew_run(self.sid, run_id, adm, expiry),
            check=check,
        )

    # -- claims -----------------------------------------------------------------------------

    @rule(
        aid=results,
        consumer=st.integers(-1, 7),
        deadline=st.sampled_from([10.0, 60.0, 0.0]),
        automatic=st.booleans(),
    )
    def claim(self, aid: str, consumer: int, deadline: float, automatic: bool) -> None:
        run_id = self._run(consumer) if consumer >= 0 else None
        claim = DeliveryClaim(
            claim_id=self.fresh("claim"),
            deadline=self.clock.now() + deadline,
            continuation_run_id=run_id,
        )
        got = self.expect(
            f"claim_delivery(automatic={automatic}, consumer={run_id})",
            lambda: self.store.claim_delivery(aid, claim, automatic=automatic),
            self.model.claim(aid, claim, automatic),
            attempt_id=aid,
            check=self.record_checker("claim_delivery"),
        )
        if got is not None:
            self.claims[aid].append(claim.claim_id)

    @rule(
        aid=results,
        deadline=st.sampled_from([10.0, 60.0]),
        automatic=st.booleans(),
    )
    def claim_for_new_consumer(self, aid: str, deadline: float, automatic: bool) -> None:
        """A parent turn: admit a consumer run, then claim the result for it."""
        if self.model.live_run(self.sid) is None:
            run_id = self.admit_plain_run(self.sid, "consumer")
            if run_id is not None:
                self.consumers.append(run_id)
        self.claim(aid, 0, deadline, automatic)

    def _undelivered(self) -> list[str]:
        return sorted(
            a for a in self.claims if self.model.attempts[a].delivery_status == "undelivered"
        )

    @precondition(
        lambda self: (
            bool(self._undelivered())
            and self.model.live_run(self.sid) is None
            and self.model.sessions[self.sid].status == "active"
        )
    )
    @rule(
        data=st.data(),
        variant=st.sampled_from(["exact", "deadline_now", "expired_run_lease", "forged_input"]),
    )
    def acquire_an_undelivered_result(self, data: st.DataObject, variant: str) -> None:
        """With no live run in an active session, a continuation for an undelivered result:
        admitted when exact, refused for a deadline of now, a dead admission lease or a
        forged input."""
        aid = data.draw(st.sampled_from(self._undelivered()), label="attempt")
        self.acquire_continuation(aid, variant, False)

    @precondition(lambda self: bool(self.requests))
    @rule(data=st.data(), variant=st.sampled_from(["exact", "head", "replay"]))
    def acquire_an_admitted_result_again(self, data: st.DataObject, variant: str) -> None:
        """A result whose continuation was admitted: the exact request again is an
        idempotent replay; any new run for it is refused as ``Delivered``. Drawn from
        the admitted results, so a store that admits a second continuation is caught
        within a few steps whatever order the other rules take."""
        aid = data.draw(st.sampled_from(sorted(self.requests)), label="attempt")
        self.acquire_continuation(aid, variant, False)

    @precondition(lambda self: bool(self._undelivered()))
    @rule(data=st.data())
    def explicit_claim_and_acknowledge(self, data: st.DataObject) -> None:
        """An explicit (not automatic) consumer claims an undelivered result and acknowledges
        it: delivered once, and any automatic-continuation suppression is cleared."""
        aid = data.draw(st.sampled_from(self._undelivered()), label="attempt")
        claim = DeliveryClaim(claim_id=self.fresh("claim"), deadline=self.clock.now() + 60.0)
        got = self.expect(
            "claim_delivery(explicit)",
            lambda: self.store.claim_delivery(aid, claim),
            self.model.claim(aid, claim, automatic=False),
            attempt_id=aid,
            check=self.record_checker("claim_delivery(explicit)"),
        )
        if got is None:
            return
        self.claims[aid].append(claim.claim_id)
        self.acknowledge(aid, "current")

    @precondition(lambda self: bool(self._undelivered()))
    @rule(
        data=st.data(),
        how=DEATHS,
        then=st.sampled_from(["reconcile", "claim", "automatic_claim", "release", "nothing"]),
    )
    def consumer_ends_holding_the_claim(self, data: st.DataObject, how: str, then: str) -> None:
        """A parent turn claims for its run, then the run completes (its terminal commit
        acknowledges the claim), fails or is cancelled (releases it, suppressing automatic
        continuation) or dies with its host (the reconciler releases it, unsuppressed).
        Then a late ConsumerTerminated release, or at the claim's deadline the reconciler
        or the next (explicit or automatic) claim, finds the claim already settled."""
        aid = data.draw(st.sampled_from(self._undelivered()), label="attempt")
        run_id = None
        if self.model.live_run(self.sid) is None:
            run_id = self.admit_plain_run(self.sid, "consumer")
        if run_id is None:
            return
        self.consumers.append(run_id)
        claim = DeliveryClaim(
            claim_id=self.fresh("claim"),
            deadline=self.clock.now() + 10.0,
            continuation_run_id=run_id,
        )
        got = self.expect(
            "claim_delivery(for a consumer)",
            lambda: self.store.claim_delivery(aid, claim),
            self.model.claim(aid, claim, automatic=False),
            attempt_id=aid,
            check=self.record_checker("claim_delivery"),
        )
        self.end_consumer(run_id, how)
        if got is None:
            return
        self.claims[aid].append(claim.claim_id)
        if then in ("reconcile", "claim", "automatic_claim"):
            self.clock.advance(max(0.0, claim.deadline - self.clock.now()))
        if then == "reconcile":
            self.reconcile(NS)
        elif then in ("claim", "automatic_claim"):
            self.claim(aid, -1, 60.0, then == "automatic_claim")
        elif then == "release":
            reason = ConsumerTerminated(run_id=run_id)
            self.expect(
                "release_delivery(ConsumerTerminated)",
                lambda: self.store.release_delivery(aid, claim.claim_id, reason),
                self.model.release(aid, claim.claim_id, reason),
                attempt_id=aid,
                check=self.record_checker("release_delivery"),
            )

    @precondition(lambda self: bool(self.claims))
    @rule(data=st.data())
    def replay_current_claim(self, data: st.DataObject) -> None:
        aid = data.draw(st.sampled_from(sorted(self.claims)), label="attempt")
        current = self.model.attempts[aid].delivery_claim
        if current is None:
            return
        self.expect(
            "claim_delivery(exact replay)",
            lambda: self.store.claim_delivery(aid, current),
            self.model.claim(aid, current, automatic=False),
            attempt_id=aid,
            check=self.record_checker("claim_delivery(replay)"),
        )

    def _claim_id(self, aid: str, which: str) -> str:
        """The current claim, the first claim ever issued, or one never issued."""
        current = self.model.attempts[aid].delivery_claim
        if which == "current" and current is not None:
            return current.claim_id
        issued = self.claims.get(aid)
        if which == "first" and issued:
            return issued[0]
        return "claim-never-issued"

    @rule(aid=results, which=CLAIM_CHOICE)
    def acknowledge(self, aid: str, which: str) -> None:
        claim_id = self._claim_id(aid, which)
        self.expect(
            f"acknowledge_delivery({claim_id})",
            lambda: self.store.acknowledge_delivery(aid, claim_id),
            self.model.acknowledge(aid, claim_id),
            attempt_id=aid,
            check=self.record_checker("acknowledge_delivery"),
        )

    @rule(aid=results, which=CLAIM_CHOICE, terminated=st.booleans())
    def release(self, aid: str, which: str, terminated: bool) -> None:
        claim_id = self._claim_id(aid, which)
        current = self.model.attempts[aid].delivery_claim
        reason: Retryable | ConsumerTerminated = Retryable()
        if terminated:
            run_id = (current.continuation_run_id if current else None) or "run-unknown"
            reason = ConsumerTerminated(run_id=run_id)
        self.expect(
            f"release_delivery({claim_id}, {reason!r})",
            lambda: self.store.release_delivery(aid, claim_id, reason),
            self.model.release(aid, claim_id, reason),
            attempt_id=aid,
            check=self.record_checker("release_delivery"),
        )

    # -- continuation -----------------------------------------------------------------------

    def _request(self, aid: str, variant: str, use_claim: bool) -> AcquireContinuation:
        rec = self.model.attempts[aid]
        parts, cause, _ = self.model.continuation_request_parts(aid)
        current = rec.delivery_claim
        claim_id = current.claim_id if (use_claim and current) else self.fresh("claim")
        now = self.clock.now()
        run_id = self.fresh("continuation")
        meta = {
            "async_subagent.attempt_id": rec.attempt_id,
            "async_subagent.agent_id": rec.agent_id,
            "async_subagent.parent_run_id": rec.parent_run_id,
        }
        if rec.child_run_id is not None:
            meta["async_subagent.child_run_id"] = rec.child_run_id
        if variant == "forged_input":
            parts = (InputPart(text=parts[0].text + " (forged)"),)
        elif variant == "empty_input":
            parts = ()
        elif variant == "forged_cause":
            cause = msgspec.structs.replace(cause, result_size_bytes=cause.result_size_bytes + 1)
        head: str | None = None
        runs = self.model.session_runs(self.sid)
        # The continuation restores from the session's head run, not its causal parent.
        restore = runs[-1].run_id if runs else None
        if variant == "causal_restore":
            restore = rec.parent_run_id if restore != rec.parent_run_id else "run-elsewhere"
        if variant == "head":
            head = runs[-1].run_id if runs else None
        elif variant == "stale_head":
            head = runs[0].run_id if len(runs) > 1 else "run-stale"
        run = RunRecord(
            session_id=rec.parent_session_id,
            run_id=run_id,
            created_at=now,
            updated_at=now,
            input=parts,
            trigger_type=ASYNC_SUBAGENT_RESULT,
            parent_run_id=rec.parent_run_id,
            restore_from_run_id=restore,
            profile=rec.profile,
            metadata=meta,
            trace_context=rec.trace_context,
            admission_lease=AdmissionLease(
                admission_id=f"adm-{run_id}",
                host_instance_id="host-c",
                fencing_generation=1,
                lease_expires_at=now if variant == "expired_run_lease" else now + RUN_TTL,
            ),
        )
        return AcquireContinuation(
            attempt_id=aid,
            claim_id=claim_id,
            claim_deadline=now if variant == "deadline_now" else now + 30.0,
            cause=cause,
            run=run,
            expected_head_run_id=head,
        )

    @rule(aid=results, variant=st.sampled_from(VARIANTS), use_claim=st.booleans())
    def acquire_continuation(self, aid: str, variant: str, use_claim: bool) -> None:
        if variant == "replay":
            request = self.requests.get(aid)
            if request is None:
                return
        else:
            request = self._request(aid, variant, use_claim)
        prior = self.model.receipts.get(aid)
        outcome = self.model.acquire(request)

        def check(receipt: ContinuationReceipt) -> None:
            want = self.model.receipts[aid]
            problems = []
            if receipt.cause != want.cause:
                problems.append(f"cause {receipt.cause!r} != store-derived {want.cause!r}")
            if receipt.run.run_id != want.run_id:
                problems.append(f"run {receipt.run.run_id} != {want.run_id}")
            if receipt.run.trigger_type != ASYNC_SUBAGENT_RESULT:
                problems.append(f"trigger_type {receipt.run.trigger_type}")
            if msgspec.json.encode(list(receipt.run.input)) != msgspec.json.encode(
                list(want.input)
            ):
                problems.append("receipt run input is not the canonical input")
            replay = prior is not None and prior.request == request
            if receipt.idempotent_replay != replay:
                problems.append(f"idempotent_replay={receipt.idempotent_replay}, want {replay}")
            claim = receipt.record.delivery_claim
            if (
                receipt.record.attempt_id != aid
                or receipt.record.delivery_status != "claimed"
                or claim is None
                or claim.continuation_run_id != want.run_id
                or receipt.record.continuation_run_id != want.run_id
            ):
                problems.append("receipt record is not the attempt claimed for the run")
            if problems:
                raise self.violation("acquire_continuation receipt: " + "; ".join(problems))

        got: Any = self.expect(
            f"acquire_continuation({variant})",
            lambda: self.store.acquire_continuation(request),
            outcome,
            attempt_id=aid,
            check=check,
        )
        if got is not None and (prior is None or prior.request != request):
            self.requests[aid] = request
            self.consumers.append(request.run.run_id)
            self.continuations += 1

    # -- consumer runs that complete, fail, are cancelled or die with their host ------------

    def claim_pending_for(self, run_id: str, deadline: float = 10.0) -> list[str] | None:
        """claim_pending_for_run: exactly the model's results, in order, linked to the run."""
        until = self.clock.now() + deadline
        outcome, want = self.model.claim_pending(self.sid, run_id, until)

        def check(got: list[AttemptRecord]) -> None:
            ids = [r.attempt_id for r in got]
            if ids != want:
                raise self.violation(
                    f"claim_pending_for_run({run_id}) returned {ids}, model expects {want}"
                )
            for rec in got:
                self.check_record("claim_pending_for_run", rec)

        got = self.expect(
            f"claim_pending_for_run({run_id})",
            lambda: self.store.claim_pending_for_run(self.sid, run_id, until),
            outcome,
            check=check,
        )
        return None if got is None else want

    def end_consumer(self, run_id: str, how: str) -> None:
        """The consumer run completes (through running), fails, is cancelled, or its
        host dies: store time passes its admission lease and its claims' deadlines and
        the reconciler (of the host that restarts) runs."""
        mrun = self.model.runs[(self.sid, run_id)]
        if how == "lease_lost":
            claims = [self.model.attempts[a].delivery_claim for a in self.model.attempts]
            until = max(
                [mrun.lease_expires_at or 0.0]
                + [c.deadline for c in claims if c and c.continuation_run_id == run_id]
            )
            if until > self.clock.now():
                self.clock.advance(until - self.clock.now())
            self.reconcile(NS)
            return
        if how == "completed" and mrun.status == "admitted":
            self.move_run(self.sid, run_id, "running")
        self.move_run(self.sid, run_id, how)

    def _offered(self) -> list[str]:
        """Results an explicit run would take now (undelivered, retention not expired)."""
        now = self.clock.now()
        return [
            a
            for a in self._undelivered()
            if (self.model.attempts[a].retention_expires_at or now + 1) > now
            and self.model.attempts[a].retention_status != "expired"
        ]

    @precondition(lambda self: self.model.live_run(self.sid) is None)
    @rule(how=DEATHS, twice=st.booleans(), fresh=st.booleans())
    def explicit_run_consumes_pending(self, how: str, twice: bool, fresh: bool) -> None:
        """An explicit run (``run.start``) takes every waiting result of its session,
        suppressed ones included; then it completes, fails, is cancelled or dies with
        its host. Only completion consumes; otherwise the results are offered again.
        With ``fresh`` (or when nothing waits) a background result completes first."""
        if fresh or not self._offered():
            self.new_result("completed", False, 600.0)
        run_id = self.admit_plain_run(self.sid, "explicit")
        if run_id is None:
            return
        self.consumers.append(run_id)
        if self.claim_pending_for(run_id) is None:
            return
        if twice:
            self.claim_pending_for(run_id)  # idempotent: the same set again
        self.end_consumer(run_id, how)

    @rule(data=st.data(), how=DEATHS, then=st.sampled_from(["explicit", "automatic", "nothing"]))
    def consumer_dies_holding_the_claim(self, data: st.DataObject, how: str, then: str) -> None:
        """A parent turn claims a result for its run (one that completes now, when none
        is waiting), which then ends (completes, fails, is cancelled, or dies with its
        host); then an explicit run or an automatic continuation comes for what is left."""
        if not self._offered():
            self.new_result("completed", False, 600.0)
        if not self._undelivered():
            return
        aid = data.draw(st.sampled_from(self._undelivered()), label="attempt")
        if self.model.live_run(self.sid) is not None:
            return
        run_id = self.admit_plain_run(self.sid, "consumer")
        if run_id is None:
            return
        self.consumers.append(run_id)
        self.claim(aid, 0, 10.0, False)
        self.end_consumer(run_id, how)
        if then == "explicit" and self.model.live_run(self.sid) is None:
            self.explicit_run_consumes_pending("completed", False, False)
        elif then == "automatic":
            self.acquire_continuation(aid, "exact", False)

    def _live_continuation(self) -> str | None:
        live = self.model.live_run(self.sid)
        if live is None or live.trigger_type != ASYNC_SUBAGENT_RESULT:
            return None
        return live.run_id

    @precondition(lambda self: self._live_continuation() is not None)
    @rule(how=DEATHS)
    def continuation_run_ends(self, how: str) -> None:
        """The admitted continuation run completes (the acknowledgement), fails or is
        cancelled (released, suppressed) or dies with its host (released, not suppressed:
        a replacement may be admitted)."""
        run_id = self._live_continuation()
        assert run_id is not None
        self.end_consumer(run_id, how)

    # -- time and maintenance ---------------------------------------------------------------

    @precondition(lambda self: bool(self.consumers))
    @rule(
        index=st.integers(0, 7),
        then=st.sampled_from(
            [
                "reconcile",
                "start",
                "renew",
                "admit",
                "complete",
                "reconcile_complete",
                "fail",
                "nothing",
            ]
        ),
    )
    def consumer_lease_runs_out(self, index: int, then: str) -> None:
        """Store time reaches a consumer's admission lease expiry exactly (the boundary);
        at that instant the reconciler runs, the run tries to start, renew or complete
        (a frozen host coming back, maybe after the reconciler released its claims to
        a replacement consumer), it is failed as a dead host's run (its claims go back
        unsuppressed), or another run is admitted."""
        run_id = self._run(index)
        assert run_id is not None
        expiry = self.model.runs[(self.sid, run_id)].lease_expires_at
        if expiry is not None and expiry > self.clock.now():
            self.clock.advance(expiry - self.clock.now())
        if then in ("reconcile", "reconcile_complete"):
            self.reconcile(NS)
        if then in ("complete", "reconcile_complete"):
            self.move_run(self.sid, run_id, "completed")
        elif then == "fail":  # the reconciler records the dead host's run
            self.move_run(self.sid, run_id, "failed")
        elif then == "start":
            self.move_run(self.sid, run_id, "running")
        elif then == "renew":
            self.consumer_renews(index, 30.0)
        elif then == "admit":
            self.admit_consumer_run()

    @rule(
        aid=results,
        then=st.sampled_from(["reconcile", "claim", "automatic_claim", "acquire", "nothing"]),
    )
    def claim_deadline_arrives(self, aid: str, then: str) -> None:
        """Store time reaches the current claim's deadline exactly (the boundary); at that
        instant the reconciler runs, another consumer claims, or a continuation is acquired."""
        claim = self.model.attempts[aid].delivery_claim
        if claim is not None and claim.deadline > self.clock.now():
            self.clock.advance(claim.deadline - self.clock.now())
        if then == "reconcile":
            self.reconcile(NS)
        elif then in ("claim", "automatic_claim"):
            self.claim(aid, -1, 60.0, then == "automatic_claim")
        elif then == "acquire":
            self.acquire_continuation(aid, "exact", False)

    @rule(
        seconds=st.sampled_from([10.0, 1.0, 30.0, 60.0, 600.0]),
        then=st.sampled_from(["reconcile", "nothing"]),
    )
    def time_passes(self, seconds: float, then: str) -> None:
        """Store time moves; usually the reconciler runs right after, as a host's loop does."""
        self.clock.advance(seconds)
        if then == "reconcile":
            self.reconcile(NS)

    @rule()
    def expire_retention(self) -> None:
        self.expire(NS, 1000)

    @precondition(lambda self: self.toggles < 4)
    @rule(status=st.sampled_from(["inactive", "active"]))
    def session_status(self, status: str) -> None:
        """A few times per example: an inactive session suppresses automatic continuation."""
        self.toggles += 1

        def check(got: Any) -> None:
            if got.status != status:
                raise self.violation(f"update_session_status returned {got.status}")

        self.expect(
            f"update_session_status({status})",
            lambda: self.store.update_session_status(self.sid, SessionStatus(status)),
            self.model.set_session_status(self.sid, status),
            check=check,
        )


def delivery_machine(factory: StoreFactory) -> type[DeliveryMachine]:
    """The delivery machine bound to ``factory`` (use ``.TestCase`` under pytest)."""
    return build_for(DeliveryMachine, factory)
