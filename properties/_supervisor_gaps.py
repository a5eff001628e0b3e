"""What the supervisor machine did not check (found by the mutation run).

:class:`SupervisorGapsMachine` is the supervisor machine plus:

- every delivery of a result whose child completed or failed with an outcome
  by callback or the parent's turn carries that child's context delta (the
  machine checked only that no delta arrives twice, so a delivery that dropped
  the delta passed; its ``wait`` rule notes no delta at all);
- every terminal record's ``failure_category`` matches its status
  (``cancelled`` for cancelled, ``execution_error`` or ``host_process_lost``
  for failed, none for completed);
- a child completes with an output of exactly the inline limit, one byte more,
  exactly the artifact limit or one byte more (multi-byte text): inline up to
  the inline limit, an artifact up to the artifact limit, failed past it, and
  the parent receives the whole output.
"""

from __future__ import annotations

from hypothesis import strategies as st
from hypothesis.stateful import invariant, precondition, rule

from ._factories import StoreFactory
from ._harness import Stats
from ._supervisor import LIMITS, NS, SESSION, Delivery, SupervisorMachine

SIZES = {
    "inline limit": LIMITS.inline_preview_bytes,
    "inline limit + 1": LIMITS.inline_preview_bytes + 1,
    "artifact limit": LIMITS.max_artifact_bytes,
    "artifact limit + 1": LIMITS.max_artifact_bytes + 1,
}
CATEGORIES: dict[str, set[str | None]] = {
    "completed": {None},
    "failed": {"execution_error", "host_process_lost"},
    "cancelled": {"cancelled"},
}


def text_of(size: int) -> str:
    """A text of exactly ``size`` UTF-8 bytes, mostly two-byte characters."""
    return "ü" * (size // 2) + "a" * (size % 2)


class SupervisorGapsMachine(SupervisorMachine):
    """The supervisor machine with the checks the mutation run found missing."""

    def __init__(self) -> None:
        super().__init__()
        self.sized: dict[str, str] = {}
        self.big_outputs = 0

    def note_delivery(self, delivery: Delivery) -> None:
        super().note_delivery(delivery)
        tracked = self.tracked.get(delivery.attempt_id)
        if tracked is None or tracked.expect is None:
            return
        status, _, error = tracked.expect
        child_outcome = status == "completed" or (
            status == "failed" and error is not None and error.startswith("fail-text")
        )
        # The parent's wait rule notes no delta (it builds its Delivery without one).
        carried = delivery.channel != "wait"
        if child_outcome and carried and delivery.delta != f"delta-{delivery.attempt_id}":
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
    @rule(index=st.integers(0, 7), size=st.sampled_from(sorted(SIZES)))
    def child_completes_at_a_size_limit(self, index: int, size: str) -> None:
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
