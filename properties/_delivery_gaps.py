"""The host's continuation admission under the delivery machine (found by the mutation run).

No property machine called :meth:`actors.Deliverer.admit_continuation`: the
delivery machine builds its own :class:`~storage.AcquireContinuation`
requests, the supervisor machine never admits continuations. So a Deliverer
that asked for a claim deadline of now, or built the input from the record
instead of its retention view (the content where the expiry summary is due),
went unnoticed. Nor did any rule report a consumer's end in the name of another
run, so a store that let any run release (and suppress) a claim went unnoticed.

:class:`DeliveryGapsMachine` is the delivery machine plus one rule: with no
live run in an active session, the host admits a continuation for an
undelivered, unsuppressed result (now, or exactly at its retention deadline,
before expiry ran) through a real ``Deliverer`` over the store under test. The
request the Deliverer sends is judged by the reference model like every other
store call, and since the host asks only when the model says the result may be
continued, it must be admitted: a refusal is a violation. A second rule has a run other
than the claim's consumer report it terminated: :class:`Conflict`, nothing released.
A third gives a result to a session that never admitted a run: a continuation
expecting some head there is a stale head (:class:`Conflict`).
"""

from __future__ import annotations

import msgspec
from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from actors import Deliverer
from storage import (
    AcquireContinuation,
    Conflict,
    ConsumerTerminated,
    ContinuationReceipt,
    InputPart,
    RunRecord,
    SeededIds,
    SessionRecord,
    SessionStore,
)

from ._delivery import NS, DeliveryMachine
from ._factories import StoreFactory
from ._harness import build_for
from ._index_audit import IndexAudit
from ._planted import StoreProxy

RUNLESS_NS = "ns-runless"
RUNLESS_SESSION = "session-runless"


class _Judged(StoreProxy):
    """The store as the Deliverer sees it: its continuation request is judged by the model."""

    def __init__(self, machine: DeliveryGapsMachine) -> None:
        super().__init__(machine.store)
        self.machine = machine
        self.sent: list[AcquireContinuation] = []
        self.ambiguous: str | None = None
        """Set when the model allowed the store's refusal (an ambiguous artifact)."""

    def acquire_continuation(self, request: AcquireContinuation) -> ContinuationReceipt:
        machine = self.machine
        self.sent.append(request)
        outcome = machine.model.acquire(request)
        got = machine.expect(
            "Deliverer.admit_continuation",
            lambda: machine.store.acquire_continuation(request),
            outcome,
            attempt_id=request.attempt_id,
        )
        if got is None and outcome.ok_allowed:
            self.ambiguous = outcome.why
            raise Conflict("refused, as the model allows here", attempt_id=request.attempt_id)
        if got is None:
            raise machine.violation(
                f"the host's own continuation request for {request.attempt_id} was refused "
                f"({outcome.why}): it must be canonical and admissible"
            )
        return got


class DeliveryGapsMachine(IndexAudit, DeliveryMachine):
    """The delivery machine with the host's continuation admission."""

    def __init__(self) -> None:
        super().__init__()
        self.runless = False

    def _continuable(self) -> list[str]:
        return sorted(
            aid
            for aid in self.claims
            if self.model.attempts[aid].delivery_status == "undelivered"
            and self.model.attempts[aid].automatic_continuation_suppressed_by_run_id is None
        )

    @precondition(
        lambda self: (
            bool(self._continuable())
            and self.model.live_run(self.sid) is None
            and self.model.sessions[self.sid].status == "active"
        )
    )
    @rule(data=st.data(), at=st.sampled_from(["now", "now", "retention_deadline"]))
    def host_admits_a_continuation(self, data: st.DataObject, at: str) -> None:
        aid = data.draw(st.sampled_from(self._continuable()), label="attempt")
        record = self.model.attempts[aid]
        deadline = record.retention_expires_at
        if at == "retention_deadline" and deadline is not None and deadline > self.clock.now():
            self.clock.advance(deadline - self.clock.now())
            if self.model.live_run(self.sid) is not None:
                return
        template = self._request(aid, "exact", False).run

        def make_run(parts: tuple[InputPart, ...], now: float) -> RunRecord:
            return msgspec.structs.replace(template, input=parts, created_at=now, updated_at=now)

        store: SessionStore = _Judged(self)
        deliverer = Deliverer(store=store, ids=SeededIds(self.n), namespace_id=record.namespace_id)
        stored = self.store.load_attempt(aid)
        try:
            receipt = deliverer.admit_continuation(stored, make_run, self.clock.now())
        except Conflict:
            assert isinstance(store, _Judged)
            if store.ambiguous is None:
                raise
            return
        # Delivered means consumed (issue 15): the admitted run holds the result's
        # claim; its completion acknowledges it, its failure or death releases it.
        claim = receipt.record.delivery_claim
        if (
            receipt.record.delivery_status != "claimed"
            or claim is None
            or claim.continuation_run_id != receipt.run.run_id
        ):
            raise self.violation(
                f"admit_continuation({aid}) left the result "
                f"{receipt.record.delivery_status}, not claimed for run {receipt.run.run_id}"
            )
        assert isinstance(store, _Judged)
        self.requests[aid] = store.sent[-1]
        self.consumers.append(receipt.run.run_id)
        self.continuations += 1

    def _claimed_by_a_run(self) -> list[str]:
        return sorted(
            aid
            for aid in self.claims
            if (claim := self.model.attempts[aid].delivery_claim) is not None
            and claim.continuation_run_id is not None
        )

    @precondition(lambda self: bool(self._claimed_by_a_run()))
    @rule(data=st.data())
    def another_run_reports_the_consumer_terminated(self, data: st.DataObject) -> None:
        """ConsumerTerminated naming a run that is not the claim's consumer: Conflict,
        nothing released (the delivery machine only ever names the claim's own run)."""
        aid = data.draw(st.sampled_from(self._claimed_by_a_run()), label="attempt")
        claim = self.model.attempts[aid].delivery_claim
        assert claim is not None and claim.continuation_run_id is not None
        others = [r for r in self.consumers if r != claim.continuation_run_id]
        other = data.draw(st.sampled_from([*others, "run-never-admitted"]), label="run")
        reason = ConsumerTerminated(run_id=other)
        self.expect(
            f"release_delivery(another run, {reason!r})",
            lambda: self.store.release_delivery(aid, claim.claim_id, reason),
            self.model.release(aid, claim.claim_id, reason),
            attempt_id=aid,
            check=self.record_checker("release_delivery"),
        )

    @precondition(lambda self: not self.runless)
    @rule()
    def continuation_expecting_a_head_in_a_session_without_runs(self) -> None:
        """A session that never admitted a run holds a result; a continuation that expects
        some head run there is a stale head (Conflict), not admitted."""
        self.runless = True
        now = self.clock.now()
        session = SessionRecord(
            session_id=RUNLESS_SESSION, namespace_id=RUNLESS_NS, created_at=now, updated_at=now
        )
        self.expect(
            "create_session(runless)",
            lambda: self.store.create_session(session),
            self.model.create_session(RUNLESS_SESSION, RUNLESS_NS),
        )
        n = self.n
        self.n += 1
        record = msgspec.structs.replace(
            self.acceptance(n, NS, agent=n),
            namespace_id=RUNLESS_NS,
            parent_session_id=RUNLESS_SESSION,
            parent_run_id="run-of-another-host",
        )
        if self.drive_to_terminal(record, "completed", f"result {n} of a runless session") is None:
            return
        exact = self._request(record.attempt_id, "exact", False)
        # The run restores from the runless session's head (none), so only the
        # expected head can refuse it.
        request = msgspec.structs.replace(
            exact,
            expected_head_run_id="run-ghost",
            run=msgspec.structs.replace(exact.run, restore_from_run_id=None),
        )
        self.expect(
            "acquire_continuation(runless session, expected head)",
            lambda: self.store.acquire_continuation(request),
            self.model.acquire(request),
            attempt_id=record.attempt_id,
        )


def delivery_gaps_machine(factory: StoreFactory) -> type[DeliveryGapsMachine]:
    """The delivery-gaps machine bound to ``factory`` (use ``.TestCase`` under pytest)."""
    return build_for(DeliveryGapsMachine, factory)
