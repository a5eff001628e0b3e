"""bench/critical_path.py runs end to end and accounts for one attempt's time, mark by
mark. A smoke test only: it never asserts timing."""

from __future__ import annotations

import json

import pytest
from bench_helpers import run_bench

BENCH = "critical_path.py"


def test_the_critical_path_bench_times_every_mark_of_one_attempt_as_json() -> None:
    done = run_bench(BENCH, "--attempts", "40", "--json")
    result = json.loads(done.stdout)
    from bench.critical_path import COMMITS, MARKS

    assert result["attempts"] == 40
    assert result["in_usual_order"] >= 20  # the usual order is the order of most attempts
    assert 0 <= result["handed_over"] <= 40
    # Every mark was reached, in causal order where one step causes the next; the wait's
    # own claim only when the terminal commit did not hand it the result.
    order = result["order"]
    claimed = "claim_ack>" in order
    own_claim = {"claim_ack>", "claim_ack<"}
    assert set(order) == (set(MARKS) if claimed else set(MARKS) - own_claim)
    causal = [("call>", "supervisor>"), ("accept>", "accept<"), ("accept<", "launch>")]
    causal += [("launch>", "child>")]
    causal += [("child>", "finished>"), ("terminal<", "call<")]
    if claimed:
        causal += [("terminal<", "claim_ack>"), ("claim_ack<", "call<")]
    for before, after in causal:
        assert order.index(before) < order.index(after), (before, after, order)
    steps = result["steps"]
    assert [s["from"] for s in steps] == order[:-1]
    assert all(s["us"] >= 0 for s in steps)
    commits = [s for s in steps if s["from"] in COMMITS]
    assert len(commits) == result["commits"] == (3 if claimed else 2)
    assert all(s["us"] > 0 for s in commits)
    assert result["commits_us"] == pytest.approx(sum(s["us"] for s in commits))
    assert result["raw_commit_us"] > 0
    # Counted by the store: two durable commits an attempt, three for one that was claimed.
    assert 2 <= result["fsyncs_per_attempt"] <= 3
    assert result["not_commits_us"] == pytest.approx(
        sum(s["us"] for s in steps) - result["commits_us"]
    )


def test_the_critical_path_bench_prints_a_table_for_people() -> None:
    done = run_bench(BENCH, "--attempts", "20")
    assert "durable commits: " in done.stdout and "handed the result by the" in done.stdout
    assert "fsyncs per attempt, counted by the store" in done.stdout
    assert "load average before" in done.stdout and "load average after" in done.stdout


def test_the_marks_are_removed_once_the_run_ends() -> None:
    from actors import _attempt, _supervisor
    from bench.critical_path import Marks, instrument
    from storage import _kernel

    methods = [
        (_supervisor.SupervisorActor, "_delegate"),
        (_kernel.KernelStore, "accept_attempt"),
        (_attempt.AttemptActor, "_launch_child"),
        (_attempt.AttemptActor, "_on_child_finished"),
        (_kernel.KernelStore, "commit_terminal"),
        (_kernel.KernelStore, "claim_and_acknowledge"),
    ]
    originals = [getattr(owner, name) for owner, name in methods]
    undo = instrument(Marks())
    assert all(getattr(o, n) is not f for (o, n), f in zip(methods, originals, strict=True))
    for restore in reversed(undo):
        restore()
    assert [getattr(owner, name) for owner, name in methods] == originals


def test_a_non_positive_attempt_count_is_refused() -> None:
    done = run_bench(BENCH, "--attempts", "0", timeout=60, expect=2)
    assert "--attempts must be at least 1" in done.stderr
