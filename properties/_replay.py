"""Terminal replay idempotency.

A committed terminal outcome replays exactly: Ok after the owner's lease
expired, after delivery and after retention expired (artifact included); any
forged replay (other content, a bumped fencing generation, another terminal
time, deadline, outcome or artifact) is Conflict. A commit whose response was
lost (the store applied it, the caller never saw the answer) is recovered by
replaying the same commit. An expired owner's *first* terminal commit is
refused.
"""

from __future__ import annotations

import math

import msgspec
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, multiple, precondition, rule

from storage import ArtifactLimits, AttemptRecord, DeliveryClaim, ResultRef, TerminalCommit

from ._factories import StoreFactory
from ._harness import ContractMachine, build_for

NS = "ns-a"
LIMITS = ArtifactLimits(max_single_bytes=4096, max_retained_bytes=1 << 20)
OUTCOMES = st.sampled_from(["completed", "failed", "cancelled"])
MALFORMED = (
    "no_result",
    "claimed",
    "terminal_at",
    "not_terminal",
    "agent_changed",
    "retention_expired",
    "deadline_past",
    "nan_deadline",
)
FORGERIES = (
    "content",
    "generation",
    "terminal_at",
    "retention_deadline",
    "outcome",
    "artifact",
    "trace",
)


class ReplayMachine(ContractMachine):
    """Exact replay is Ok, forged replay is Conflict, lost responses are recovered."""

    pending = Bundle("pending")
    terminals = Bundle("terminals")

    def __init__(self) -> None:
        super().__init__()
        self.n = 0
        self.replays_ok = 0
        self.malformed = 0

    def _fresh_record(self, ttl: float = 30.0) -> AttemptRecord:
        n = self.n
        self.n += 1
        return self.acceptance(n, NS, agent=n, ttl=ttl)

    @rule(
        target=terminals,
        outcome=OUTCOMES,
        artifact=st.booleans(),
        retention=st.sampled_from([60.0, 120.0]),
    )
    def commit_new_result(self, outcome: str, artifact: bool, retention: float) -> object:
        record = self._fresh_record()
        text = f"{outcome} result ✓ {self.n}"
        commit = self.drive_to_terminal(
            record,
            outcome,
            text,
            retention=retention,
            artifact_text=(text * 4) if artifact else None,
            limits=LIMITS if artifact else None,
        )
        return commit.record.attempt_id if commit is not None else multiple()

    @rule(target=terminals, outcome=OUTCOMES)
    def commit_with_lost_response(self, outcome: str) -> object:
        """The store applies the commit but the caller never sees the answer; it replays."""
        record = self._fresh_record()
        if not self.accept(record):
            return multiple()
        aid = record.attempt_id
        if outcome == "completed":
            self.update_execution(self.model.attempts[aid], "starting")
            self.update_execution(self.model.attempts[aid], "running")
        commit = self.terminal_commit(self.model.attempts[aid], outcome, f"lost {outcome}")
        self.expect(
            "commit_terminal(response lost)",
            lambda: self.store.commit_terminal(commit),
            self.model.commit_terminal(commit),
            attempt_id=aid,
        )
        self.commit(commit, "commit_terminal(recovery replay)")
        self.replays_ok += 1
        return aid

    @rule(target=pending, ttl=st.sampled_from([10.0, 30.0]))
    def accept_pending(self, ttl: float) -> object:
        record = self._fresh_record(ttl)
        return record.attempt_id if self.accept(record) else multiple()

    @rule(aid=pending, outcome=OUTCOMES, retention=st.sampled_from([60.0, 0.0]))
    def first_commit_by_owner(self, aid: str, outcome: str, retention: float) -> None:
        """The original owner commits (refused once its lease expired or it is terminal, or
        when the retention deadline is not after now)."""
        stored = self.model.attempts[aid]
        view = stored
        if stored.result_ref is not None:
            view = msgspec.structs.replace(
                stored,
                execution_status="accepted",
                result_ref=None,
                failure_category=None,
                cancellation_reason=None,
                retention_expires_at=None,
                terminal_at=None,
                terminal_fingerprint=None,
            )
        self.commit(
            self.terminal_commit(view, outcome, "late", retention=retention),
            "commit_terminal(owner)",
        )

    @precondition(lambda self: self.malformed < 3)
    @rule(aid=pending, kind=st.sampled_from(MALFORMED))
    def commit_malformed(self, aid: str, kind: str) -> None:
        """A non-canonical first terminal commit by the owner is refused and writes nothing."""
        self.malformed += 1
        stored = self.model.attempts[aid]
        if stored.result_ref is not None:
            return
        good = self.terminal_commit(stored, "failed", "malformed")
        r = good.record
        now = self.clock.now()
        bad = {
            "no_result": msgspec.structs.replace(r, result_ref=None),
            "claimed": msgspec.structs.replace(
                r,
                delivery_status="claimed",
                delivery_claim=DeliveryClaim(claim_id="claim-x", deadline=now + 60.0),
            ),
            "terminal_at": msgspec.structs.replace(r, terminal_at=now + 1.0),
            "not_terminal": msgspec.structs.replace(r, execution_status="running"),
            "agent_changed": msgspec.structs.replace(r, agent_id="worker-bg-ffffffff"),
            "retention_expired": msgspec.structs.replace(r, retention_status="expired"),
            "deadline_past": msgspec.structs.replace(r, retention_expires_at=now),
            "nan_deadline": msgspec.structs.replace(r, retention_expires_at=math.nan),
        }[kind]
        self.commit(TerminalCommit(record=bad), f"commit_terminal(malformed {kind})")

    @rule(aid=terminals)
    def replay_exactly(self, aid: str) -> None:
        if self.commit(self.model.commits[aid], "commit_terminal(exact replay)"):
            self.replays_ok += 1

    @rule(aid=terminals, forgery=st.sampled_from(FORGERIES))
    def replay_forged(self, aid: str, forgery: str) -> None:
        commit = self.model.commits[aid]
        self.commit(self._forge(commit, forgery), f"commit_terminal(forged {forgery})")

    def _forge(self, commit: TerminalCommit, forgery: str) -> TerminalCommit:
        r = commit.record
        ref = r.result_ref or ResultRef()
        if forgery == "content":
            ref = msgspec.structs.replace(
                ref,
                content=(ref.content or "") + "!",
                error=None if ref.content is not None else (ref.error or "") + "!",
            )
            return msgspec.structs.replace(
                commit, record=msgspec.structs.replace(r, result_ref=ref)
            )
        if forgery == "generation":
            lease = msgspec.structs.replace(
                r.owner_lease, fencing_generation=r.owner_lease.fencing_generation + 1
            )
            return msgspec.structs.replace(
                commit, record=msgspec.structs.replace(r, owner_lease=lease)
            )
        if forgery == "terminal_at":
            t = (r.terminal_at or 0.0) + 1.0
            return msgspec.structs.replace(
                commit, record=msgspec.structs.replace(r, terminal_at=t, updated_at=t)
            )
        if forgery == "retention_deadline":
            d = (r.retention_expires_at or 0.0) + 1.0
            return msgspec.structs.replace(
                commit, record=msgspec.structs.replace(r, retention_expires_at=d)
            )
        if forgery == "outcome":
            other = "cancelled" if r.execution_status != "cancelled" else "failed"
            return msgspec.structs.replace(
                commit, record=msgspec.structs.replace(r, execution_status=other)
            )
        if forgery == "artifact" and commit.artifact is not None:
            art = msgspec.structs.replace(commit.artifact, content=commit.artifact.content + "!")
            return msgspec.structs.replace(commit, artifact=art)
        trace = dict(r.trace_context or {})
        trace["forged"] = "1"
        return msgspec.structs.replace(
            commit, record=msgspec.structs.replace(r, trace_context=trace)
        )

    @rule(aid=terminals)
    def deliver(self, aid: str) -> None:
        """Claim and acknowledge, so later replays happen after delivery."""
        claim = DeliveryClaim(claim_id=self.fresh("claim"), deadline=self.clock.now() + 60.0)
        got = self.expect(
            "claim_delivery",
            lambda: self.store.claim_delivery(aid, claim),
            self.model.claim(aid, claim, automatic=False),
            attempt_id=aid,
            check=self.record_checker("claim_delivery"),
        )
        if got is not None:
            self.expect(
                "acknowledge_delivery",
                lambda: self.store.acknowledge_delivery(aid, claim.claim_id),
                self.model.acknowledge(aid, claim.claim_id),
                attempt_id=aid,
                check=self.record_checker("acknowledge_delivery"),
            )

    @rule(seconds=st.sampled_from([5.0, 10.0, 30.0, 60.0, 120.0]))
    def advance_time(self, seconds: float) -> None:
        self.clock.advance(seconds)

    @rule(limit=st.sampled_from([1, 1000]))
    def expire_retention(self, limit: int) -> None:
        self.expire(NS, limit)

    @rule()
    def reconcile_namespace(self) -> None:
        self.reconcile(NS)

    @precondition(lambda self: bool(self.model.commits))
    @rule(data=st.data())
    def replay_any_committed(self, data: st.DataObject) -> None:
        """Includes failures synthesized by reconcile: their exact replay is Ok too."""
        aid = data.draw(st.sampled_from(sorted(self.model.commits)), label="attempt")
        self.commit(self.model.commits[aid], "commit_terminal(exact replay)")


def replay_machine(factory: StoreFactory) -> type[ReplayMachine]:
    """The replay machine bound to ``factory`` (use ``.TestCase`` under pytest)."""
    return build_for(ReplayMachine, factory)
