"""Fencing paths the fencing machine's random walk rarely reaches (found by the mutation run).

:class:`FencingGapsMachine` is the fencing machine plus three rules, each a
short scripted sequence that ends in a write the model judges:

- an impostor (a host that never held the lease, with the current generation
  and expiry) heartbeats, advances execution or commits: :class:`StaleFence`
  (the owner check compares the host as well as the generation);
- an acceptance wrong in one field only: :class:`InvalidRecord`;
- the owner runs its attempt to a terminal outcome (completed included), then
  heartbeats while its lease is still live: :class:`Conflict`;
- the fenced session's attempt is taken over after the fence (the contract lets
  the take-over go either way) and the new owner heartbeats, advances
  execution or commits: :class:`Conflict` every time (the fence holds against
  a live lease too).
"""

from __future__ import annotations

import msgspec
from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from storage import OwnerLease

from ._factories import StoreFactory
from ._fencing import FENCED_NS, HOSTS, NS, FencingMachine
from ._harness import LEASE_TTL, build_for
from ._index_audit import IndexAudit

WRITES = ("heartbeat", "update", "commit")
ONE_FIELD_OFF: dict[str, tuple[str, object]] = {
    "delivered": ("delivery_status", "delivered"),
    "claimed": ("delivery_status", "claimed"),
    "artifact_retention": ("retention_status", "artifact"),
    "expired_retention": ("retention_status", "expired"),
    "cancelled": ("execution_status", "cancelled"),
    "failure_category": ("failure_category", "execution_error"),
    "delivered_claim_id": ("delivered_claim_id", "claim-x"),
    "cancellation_reason": ("cancellation_reason", "cancelled early"),
    "continuation_run_id": ("continuation_run_id", "run-x"),
    "suppressed": ("automatic_continuation_suppressed_by_run_id", "run-x"),
    "delivered_to_run_id": ("delivered_to_run_id", "run-x"),
}
"""Acceptances wrong in one field only (the fencing machine's malformed ones are wrong
in two fields at once, e.g. a claimed status with its claim, so one check hides another)."""


class FencingGapsMachine(IndexAudit, FencingMachine):
    """The fencing machine with scripted rules for its rarely reached paths."""

    def _active(self, ns: str | None = None) -> list[str]:
        return sorted(
            aid
            for aid, r in self.model.attempts.items()
            if aid in self.writers and r.result_ref is None and (ns is None or r.namespace_id == ns)
        )

    def _write_as(self, aid: str, lease: OwnerLease, write: str) -> None:
        """``write`` with ``lease`` (made a known writer first), judged by the model."""
        key = (lease.host_instance_id, lease.fencing_generation)
        self.writers[aid][key] = lease
        index = list(self.writers[aid]).index(key)
        if write == "heartbeat":
            self.heartbeat(aid, index, 30.0)
        elif write == "update":
            accepted = self.model.attempts[aid].execution_status == "accepted"
            self.update_execution_as(aid, index, "starting" if accepted else "running")
        else:
            self.commit_terminal_as(aid, index, "failed")

    @precondition(lambda self: bool(self._active()))
    @rule(index=st.integers(0, 7), write=st.sampled_from(WRITES))
    def impostor_with_the_current_generation_writes(self, index: int, write: str) -> None:
        active = self._active()
        aid = active[index % len(active)]
        owner = self.model.attempts[aid].owner_lease
        other = next(h for h in HOSTS if h != owner.host_instance_id)
        self._write_as(aid, msgspec.structs.replace(owner, host_instance_id=other), write)

    @rule(agent=st.integers(0, 2), kind=st.sampled_from(sorted(ONE_FIELD_OFF)))
    def accept_with_one_field_off(self, agent: int, kind: str) -> None:
        """An acceptance wrong in exactly one field (no second field gives it away):
        InvalidRecord, nothing written."""
        n = self.accepted_n
        self.accepted_n += 1
        good = self.acceptance(n, NS, agent)
        field, value = ONE_FIELD_OFF[kind]
        self.accept(msgspec.structs.replace(good, **{field: value}))

    @rule(
        agent=st.integers(0, 2),
        outcome=st.sampled_from(["completed", "failed", "cancelled"]),
    )
    def owner_heartbeats_after_its_terminal_commit(self, agent: int, outcome: str) -> None:
        n = self.accepted_n
        self.accepted_n += 1
        record = self.acceptance(n, NS, agent, ttl=LEASE_TTL)
        if self.drive_to_terminal(record, outcome, f"{outcome} by its owner") is None:
            return
        aid = record.attempt_id
        self.acceptances[aid] = record
        self.writers[aid] = {}
        self._learn(aid)
        self.heartbeat(aid, 0, 30.0)

    @precondition(lambda self: bool(self._active(FENCED_NS)))
    @rule(
        index=st.integers(0, 7),
        host=st.sampled_from(HOSTS),
        write=st.sampled_from(WRITES),
    )
    def new_owner_writes_after_the_fence(self, index: int, host: str, write: str) -> None:
        active = self._active(FENCED_NS)
        aid = active[index % len(active)]
        if self.model.sessions[self.sessions[FENCED_NS]].status != "deleting":
            last = max(self.model.attempts[a].owner_lease.lease_expires_at for a in active)
            if last > self.clock.now():
                self.clock.advance(last - self.clock.now())
            self.fence(FENCED_NS)
            if self.model.sessions[self.sessions[FENCED_NS]].status != "deleting":
                return
        lease = self.model.attempts[aid].owner_lease
        if lease.lease_expires_at > self.clock.now():
            self.clock.advance(lease.lease_expires_at - self.clock.now())
        self.take_over(aid, host, 1, LEASE_TTL)
        taken = self.model.attempts[aid].owner_lease
        if taken.lease_expires_at > self.clock.now():
            self._write_as(aid, taken, write)


def fencing_gaps_machine(factory: StoreFactory) -> type[FencingGapsMachine]:
    """The fencing-gaps machine bound to ``factory`` (use ``.TestCase`` under pytest)."""
    return build_for(FencingGapsMachine, factory)
