"""Retention and artifacts.

Successful results with artifacts are committed under per-artifact and
per-namespace aggregate byte limits that count unexpired artifacts only
(UTF-8 bytes, multi-byte text included); missing or invalid limits are
Conflict, changed bytes under a retained artifact ref are Conflict. Time
passes, retention expires in batches, artifacts become NotFound, exact replay
stays Ok, and the terminal fingerprint is kept. Invariant: the bytes a
namespace retains never exceed its aggregate limit.
"""

from __future__ import annotations

from hypothesis import strategies as st
from hypothesis.stateful import Bundle, multiple, precondition, rule

from storage import ArtifactLimits, NotFound

from ._factories import StoreFactory
from ._harness import ContractMachine, build_for

# Sizes hit both limits exactly: 50 == SINGLE, 51 over it, 50 + 50 == AGGREGATE.
SINGLE = 50
AGGREGATE = 100
LIMITS = ArtifactLimits(max_single_bytes=SINGLE, max_retained_bytes=AGGREGATE)
LIMIT_KINDS = {
    "ok": LIMITS,
    "missing": None,
    "single_over_aggregate": ArtifactLimits(max_single_bytes=200, max_retained_bytes=100),
    "zero": ArtifactLimits(max_single_bytes=0, max_retained_bytes=100),
}


def artifact_text(size: int, seed: int) -> str:
    """``size`` UTF-8 bytes of text mixing one- and two-byte characters."""
    head = f"{seed}:"
    body = "é" * ((size - len(head)) // 2)
    text = head + body
    return text + "x" * (size - len(text.encode("utf-8")))


class RetentionMachine(ContractMachine):
    """Artifact quotas, expiry and fingerprints."""

    NAMESPACES = ("ns-a", "ns-b")
    retained = Bundle("retained")

    def __init__(self) -> None:
        super().__init__()
        self.n = 0
        self.quota_refusals = 0

    @rule(
        target=retained,
        ns=st.sampled_from(NAMESPACES),
        size=st.sampled_from([50, 10, 25, 40, 51, 60]),
        limits=st.sampled_from(["ok", "ok", "ok", "missing", "single_over_aggregate", "zero"]),
        retention=st.sampled_from([30.0, 90.0]),
    )
    def commit_artifact(self, ns: str, size: int, limits: str, retention: float) -> object:
        n = self.n
        self.n += 1
        commit = self.drive_to_terminal(
            self.acceptance(n, ns, agent=n),
            "completed",
            "preview",
            retention=retention,
            artifact_text=artifact_text(size, n),
            limits=LIMIT_KINDS[limits],
        )
        if commit is None:
            self.quota_refusals += 1
            return multiple()
        return commit.record.attempt_id

    @rule(ns=st.sampled_from(NAMESPACES), outcome=st.sampled_from(["completed", "failed"]))
    def commit_inline(self, ns: str, outcome: str) -> None:
        n = self.n
        self.n += 1
        self.drive_to_terminal(self.acceptance(n, ns, agent=n), outcome, f"inline ✓ {n}")

    @precondition(
        lambda self: any(
            not a.deleted and a.expires_at > self.clock.now() for a in self.model.artifacts.values()
        )
    )
    @rule(data=st.data())
    def changed_bytes_under_same_ref(self, data: st.DataObject) -> None:
        now = self.clock.now()
        live = sorted(
            ref for ref, a in self.model.artifacts.items() if not a.deleted and a.expires_at > now
        )
        ref = data.draw(st.sampled_from(live), label="artifact_ref")
        old = self.model.artifacts[ref]
        n = self.n
        self.n += 1
        self.drive_to_terminal(
            self.acceptance(n, old.namespace_id, agent=n),
            "completed",
            "preview",
            artifact_text=artifact_text(8, n),
            limits=LIMITS,
            artifact_ref=ref,
        )

    @rule(aid=retained)
    def replay_exactly(self, aid: str) -> None:
        self.commit(self.model.commits[aid], "commit_terminal(exact replay)")

    @rule(seconds=st.sampled_from([10.0, 30.0, 60.0]))
    def advance_time(self, seconds: float) -> None:
        self.clock.advance(seconds)

    @rule(ns=st.sampled_from(NAMESPACES), limit=st.sampled_from([1, 2, 1000]))
    def expire_retention(self, ns: str, limit: int) -> None:
        self.expire(ns, limit)

    def extra_invariants(self) -> None:
        """A namespace never retains more artifact bytes than its aggregate limit."""
        for ns in self.NAMESPACES:
            total = 0
            for ref, art in self.model.artifacts.items():
                if art.namespace_id != ns:
                    continue
                try:
                    total += self.store.load_artifact(ref).size_bytes
                except NotFound:
                    continue
            if total > AGGREGATE:
                raise self.violation(f"{ns} retains {total} artifact bytes > {AGGREGATE}")
        type(self).stats.invariants += len(self.NAMESPACES)


def retention_machine(factory: StoreFactory) -> type[RetentionMachine]:
    """The retention machine bound to ``factory`` (use ``.TestCase`` under pytest)."""
    return build_for(RetentionMachine, factory)
