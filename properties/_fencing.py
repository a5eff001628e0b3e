"""Fencing and leases: a stale or expired owner never writes.

Hosts accept attempts, heartbeat, advance execution, let store time pass,
take over expired attempts with a newer fencing generation, commit terminal
outcomes, reconcile and fence the session for deletion. Every writer that
ever held a lease keeps trying to write with it; the model predicts which
writes must fail, and the harness checks that a refused write changed nothing
(the record is compared before and after, and the whole store after every
step).
"""

from __future__ import annotations

import math

import msgspec
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, multiple, precondition, rule

from storage import AttemptRecord, DeliveryClaim, OwnerLease, ResultRef

from ._factories import StoreFactory
from ._harness import LEASE_TTL, ContractMachine, build_for

NS = "ns-a"
FENCED_NS = "ns-b"
ACTIVE = ("starting", "running", "waiting", "accepted")
HOSTS = ("host-a", "host-b", "host-c")
MALFORMED = (
    "running",
    "claimed",
    "result",
    "terminal_at",
    "generation_0",
    "no_host",
    "heartbeat_mismatch",
    "nan_lease",
)


class FencingMachine(ContractMachine):
    """Fenced ownership of non-terminal attempts."""

    NAMESPACES = (NS, FENCED_NS)
    attempts = Bundle("attempts")

    def __init__(self) -> None:
        super().__init__()
        self.accepted_n = 0
        self.acceptances: dict[str, AttemptRecord] = {}
        self.writers: dict[str, dict[tuple[str, int], OwnerLease]] = {}
        self.expired_acceptances = 0
        self.malformed = 0

    def _writer(self, aid: str, index: int) -> OwnerLease:
        leases = list(self.writers[aid].values())
        return leases[index % len(leases)]

    def _learn(self, aid: str) -> None:
        """The current owner knows the lease the store returned to it."""
        lease = self.model.attempts[aid].owner_lease
        self.writers[aid][(lease.host_instance_id, lease.fencing_generation)] = lease

    def _is_stale(self, aid: str, lease: OwnerLease) -> bool:
        stored = self.model.attempts[aid].owner_lease
        return lease != stored or stored.lease_expires_at <= self.clock.now()

    @rule(
        target=attempts,
        ns=st.sampled_from([NS, NS, FENCED_NS]),
        agent=st.integers(0, 2),
        host=st.sampled_from(HOSTS),
        ttl=st.sampled_from([10.0, LEASE_TTL]),
    )
    def accept_attempt(self, ns: str, agent: int, host: str, ttl: float) -> object:
        n = self.accepted_n
        self.accepted_n += 1
        record = self.acceptance(n, ns, agent, host=host, ttl=ttl)
        if not self.accept(record):
            return multiple()
        self.acceptances[record.attempt_id] = record
        self.writers[record.attempt_id] = {}
        self._learn(record.attempt_id)
        return record.attempt_id

    @precondition(lambda self: self.expired_acceptances < 2)
    @rule(agent=st.integers(0, 2), lag=st.sampled_from([0.0, 10.0]))
    def accept_already_expired(self, agent: int, lag: float) -> None:
        self.expired_acceptances += 1
        n = self.accepted_n
        self.accepted_n += 1
        record = self.acceptance(n, NS, agent)
        now = self.clock.now()
        lease = OwnerLease(
            host_instance_id="host-a",
            fencing_generation=1,
            heartbeat_at=now - 40.0,
            lease_expires_at=now - lag,
        )
        record = msgspec.structs.replace(
            record, owner_lease=lease, accepted_at=now - 40.0, updated_at=now - 40.0
        )
        self.accept(record)

    @precondition(lambda self: self.malformed < 3)
    @rule(agent=st.integers(0, 2), kind=st.sampled_from(MALFORMED))
    def accept_malformed(self, agent: int, kind: str) -> None:
        """Bad input gets a typed error and writes nothing; it never crashes the store."""
        self.malformed += 1
        n = self.accepted_n
        self.accepted_n += 1
        good = self.acceptance(n, NS, agent)
        now = self.clock.now()
        lease = good.owner_lease
        bad = {
            "running": msgspec.structs.replace(good, execution_status="running"),
            "claimed": msgspec.structs.replace(
                good,
                delivery_status="claimed",
                delivery_claim=DeliveryClaim(claim_id="claim-x", deadline=now + 60.0),
            ),
            "result": msgspec.structs.replace(good, result_ref=ResultRef(content="early")),
            "terminal_at": msgspec.structs.replace(good, terminal_at=now),
            "generation_0": msgspec.structs.replace(
                good, owner_lease=msgspec.structs.replace(lease, fencing_generation=0)
            ),
            "no_host": msgspec.structs.replace(
                good, owner_lease=msgspec.structs.replace(lease, host_instance_id="")
            ),
            "heartbeat_mismatch": msgspec.structs.replace(good, updated_at=now + 1.0),
            "nan_lease": msgspec.structs.replace(
                good, owner_lease=msgspec.structs.replace(lease, lease_expires_at=math.nan)
            ),
        }[kind]
        self.accept(bad)

    @rule(aid=attempts)
    def retry_acceptance(self, aid: str) -> None:
        self.accept(self.acceptances[aid])

    @rule(aid=attempts, writer=st.integers(0, 3), extend=st.sampled_from([30.0, 10.0, 0.0, -1.0]))
    def heartbeat(self, aid: str, writer: int, extend: float) -> None:
        lease = self._writer(aid, writer)
        stale = self._is_stale(aid, lease)
        expiry = self.clock.now() + extend
        got = self.expect(
            f"heartbeat_attempt({lease.host_instance_id}/{lease.fencing_generation})",
            lambda: self.store.heartbeat_attempt(
                aid, lease.host_instance_id, lease.fencing_generation, expiry
            ),
            self.model.heartbeat(aid, lease.host_instance_id, lease.fencing_generation, expiry),
            attempt_id=aid,
            check=self.record_checker("heartbeat_attempt"),
        )
        if got is not None and stale:
            raise self.violation(f"heartbeat_attempt: stale or expired writer {lease!r} wrote")
        if got is not None:
            self._learn(aid)

    @rule(aid=attempts, extend=st.sampled_from([0.0, 0.5]))
    def owner_heartbeats_at_the_boundary(self, aid: str, extend: float) -> None:
        """The current owner asks for a new expiry of exactly now (refused) or just after."""
        owner = self.model.attempts[aid].owner_lease
        self.heartbeat(aid, self._index_of(aid, owner), extend)

    @rule(aid=attempts, writer=st.integers(0, 3), status=st.sampled_from(ACTIVE))
    def update_execution_as(self, aid: str, writer: int, status: str) -> None:
        lease = self._writer(aid, writer)
        stale = self._is_stale(aid, lease)
        before = self.store.load_attempt(aid)
        view = msgspec.structs.replace(self.model.attempts[aid], owner_lease=lease)
        self.update_execution(view, status)
        if stale and self.store.load_attempt(aid) != before:
            raise self.violation(f"update_attempt_execution: stale writer {lease!r} wrote")

    @rule(
        aid=attempts,
        host=st.sampled_from(HOSTS),
        bump=st.sampled_from([1, 2, 0, -1]),
        ttl=st.sampled_from([10.0, LEASE_TTL, 0.0]),
    )
    def take_over(self, aid: str, host: str, bump: int, ttl: float) -> None:
        generation = self.model.attempts[aid].owner_lease.fencing_generation + bump
        expiry = self.clock.now() + ttl
        got = self.expect(
            f"take_over_attempt({host}/{generation})",
            lambda: self.store.take_over_attempt(aid, host, generation, expiry),
            self.model.take_over(aid, host, generation, expiry),
            attempt_id=aid,
            check=self.record_checker("take_over_attempt"),
        )
        if got is not None:
            self._learn(aid)

    @rule(
        aid=attempts,
        host=st.sampled_from(HOSTS),
        overshoot=st.sampled_from([0.0, 1.0]),
        ttl=st.sampled_from([LEASE_TTL, 0.0]),
    )
    def owner_crashes_and_is_taken_over(
        self, aid: str, host: str, overshoot: float, ttl: float
    ) -> None:
        """The owner stops heartbeating; store time reaches its lease expiry (exactly, or
        just past it) and another host takes over with the next generation."""
        lease = self.model.attempts[aid].owner_lease
        wait = lease.lease_expires_at - self.clock.now() + overshoot
        if wait > 0:
            self.clock.advance(wait)
        self.take_over(aid, host, 1, ttl)

    @rule(
        aid=attempts,
        overshoot=st.sampled_from([0.0, 1.0]),
        then=st.sampled_from(["heartbeat", "update", "commit", "fence", "reconcile", "nothing"]),
    )
    def lease_runs_out(self, aid: str, overshoot: float, then: str) -> None:
        """Store time reaches the owner's lease expiry exactly (or just past it); then the
        owner tries to write, the session is fenced or the reconciler runs, at that instant."""
        lease = self.model.attempts[aid].owner_lease
        wait = lease.lease_expires_at - self.clock.now() + overshoot
        if wait > 0:
            self.clock.advance(wait)
        owner = self.model.attempts[aid].owner_lease
        if then == "heartbeat":
            self.heartbeat(aid, self._index_of(aid, owner), 30.0)
        elif then == "update":
            self.update_execution_as(aid, self._index_of(aid, owner), "starting")
        elif then == "commit":
            self.commit_terminal_as(aid, self._index_of(aid, owner), "failed")
        elif then == "fence" and self.model.attempts[aid].namespace_id == FENCED_NS:
            self.fence(FENCED_NS)
        elif then == "reconcile":
            self.reconcile(self.model.attempts[aid].namespace_id)

    @precondition(
        lambda self: (
            self.model.sessions[self.sessions[FENCED_NS]].status != "deleting"
            and any(
                r.namespace_id == FENCED_NS and r.owner_lease.lease_expires_at > self.clock.now()
                for r in self.model.attempts.values()
                if r.result_ref is None
            )
        )
    )
    @rule()
    def fence_when_the_last_lease_expires(self) -> None:
        """Store time reaches the last live lease's expiry exactly; the fence then succeeds."""
        last = max(
            r.owner_lease.lease_expires_at
            for r in self.model.attempts.values()
            if r.namespace_id == FENCED_NS and r.result_ref is None
        )
        self.clock.advance(last - self.clock.now())
        self.fence(FENCED_NS)

    def _index_of(self, aid: str, lease: OwnerLease) -> int:
        leases = list(self.writers[aid].values())
        return leases.index(lease) if lease in leases else 0

    @rule(
        aid=attempts,
        writer=st.integers(0, 3),
        outcome=st.sampled_from(["completed", "failed", "cancelled"]),
    )
    def commit_terminal_as(self, aid: str, writer: int, outcome: str) -> None:
        lease = self._writer(aid, writer)
        view = msgspec.structs.replace(self.model.attempts[aid], owner_lease=lease)
        if view.result_ref is not None:
            # A writer that lost the race still believes the attempt is active.
            view = msgspec.structs.replace(
                self.acceptances[aid],
                owner_lease=lease,
                execution_status="running",
            )
        commit = self.terminal_commit(view, outcome, f"{outcome} by {lease.host_instance_id}")
        stale = self._is_stale(aid, lease)
        before = self.store.load_attempt(aid)
        self.commit(commit)
        if stale and self.store.load_attempt(aid) != before:
            raise self.violation(f"commit_terminal: stale or expired writer {lease!r} wrote")

    @precondition(lambda self: bool(self.model.commits))
    @rule(data=st.data())
    def replay_terminal(self, data: st.DataObject) -> None:
        aid = data.draw(st.sampled_from(sorted(self.model.commits)), label="attempt")
        self.commit(self.model.commits[aid], "commit_terminal(exact replay)")

    @rule(seconds=st.sampled_from([10.0, 30.0, 1.0, 5.0, 29.0, 31.0]))
    def advance_time(self, seconds: float) -> None:
        self.clock.advance(seconds)

    @rule(ns=st.sampled_from([NS, FENCED_NS]))
    def reconcile_namespace(self, ns: str) -> None:
        self.reconcile(ns)

    @precondition(lambda self: self.model.sessions[self.sessions[FENCED_NS]].status != "deleting")
    @rule()
    def fence_session(self) -> None:
        """Only the second namespace is ever fenced, so the first keeps being explored."""
        self.fence(FENCED_NS)


def fencing_machine(factory: StoreFactory) -> type[FencingMachine]:
    """The fencing machine bound to ``factory`` (use ``.TestCase`` under pytest)."""
    return build_for(FencingMachine, factory)
