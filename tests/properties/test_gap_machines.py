"""The machines the mutation run added pass on the memory store and reach their rules.

Each is a registered machine plus the rules (and the store-check invariant) for
paths the mutation run found unreached; the parent machines already run on
every built-in store, so these run on memory (the kernel logic is the same).
"""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import stateful

from properties import MEMORY, profile_settings
from properties._delivery_gaps import delivery_gaps_machine
from properties._fencing_gaps import fencing_gaps_machine
from properties._index_audit import retention_gaps_machine
from properties._supervisor_gaps import supervisor_gaps_machine

# Typed here: some Hypothesis releases leave it unannotated (mypy's no-untyped-call).
run_state_machine_as_test: Callable[..., None] = stateful.run_state_machine_as_test


def test_the_fencing_gaps_machine_passes_and_reaches_its_writes() -> None:
    machine = fencing_gaps_machine(MEMORY)
    run_state_machine_as_test(machine, settings=profile_settings("ci"))
    paths = machine.stats.paths
    assert machine.stats.examples > 0
    # The impostor and the after-commit heartbeat are refused as the model predicts.
    assert any("writer lease is not the stored owner lease" in p for p in paths), paths
    assert any(p.startswith("heartbeat_attempt") and "attempt is completed" in p for p in paths)
    assert any(p.startswith("accept_attempt") and "InvalidRecord" in p for p in paths)


def test_the_delivery_gaps_machine_admits_the_host_s_continuations() -> None:
    machine = delivery_gaps_machine(MEMORY)
    run_state_machine_as_test(machine, settings=profile_settings("ci"))
    admitted = [
        count
        for path, count in machine.stats.paths.items()
        if path.startswith("Deliverer.admit_continuation") and ": Ok" in path
    ]
    assert sum(admitted) >= 20, machine.stats.paths


def test_the_retention_gaps_machine_checks_the_store_after_every_step() -> None:
    machine = retention_gaps_machine(MEMORY)
    run_state_machine_as_test(machine, settings=profile_settings("ci"))
    assert machine.stats.examples > 0
    assert machine.stats.invariants > machine.stats.steps


def test_the_supervisor_gaps_machine_reaches_its_rules() -> None:
    machine = supervisor_gaps_machine(MEMORY)
    run_state_machine_as_test(machine, settings=profile_settings("ci"))
    paths = machine.stats.paths
    for path in (
        "turn: delivered after retries - 1 faults",
        "fault: commit_terminal lost, then time moved",
        "child: complete refused by the quota",
        "lease: taken over by the same host, new generation",
        "wait: cancelled result after its retention",
        "lease: store time at the expiry instant",
        "child: ended after the decision",
    ):
        assert paths[path] > 0, (path, dict(paths))
    # Rarer (they need two pending results, or a deaf child still running at the lapse;
    # how often depends on the supervisor's threads): at least one of them ran.
    rare = ("turn: skipped a claim held elsewhere", "lease: lapsed under a deaf child")
    assert sum(paths[path] for path in rare) > 0, dict(paths)
    sizes = [p for p, n in paths.items() if p.startswith("child: complete at the") and n > 0]
    assert len(sizes) >= 2, sizes
