"""bench/floor.py runs its three sides end to end and reports each side of every round.
A smoke test only: it never asserts timing."""

from __future__ import annotations

import json

from bench_helpers import run_bench

BENCH = "floor.py"


def test_the_floor_bench_reports_each_side_per_round_as_json() -> None:
    done = run_bench(BENCH, "--trips", "60", "--rounds", "2", "--json")
    result = json.loads(done.stdout)
    from bench.floor import SIDES

    assert result["trips"] == 60
    assert len(result["rounds"]) == 2
    for per_round in result["rounds"]:
        assert set(per_round) == set(SIDES)
        for figures in per_round.values():
            assert figures["us"] > 0 and figures["cpu_us"] >= 0
            assert figures["trips"] == 60  # a whole block of 50 and the 10 left over
        assert per_round["shape"]["fsyncs"] == 2  # its two flushed writes, counted
        # The kernel's two durable commits, counted by its store (a third when the wait
        # came after the end; the journal's checkpoints add two every 128 commits).
        for kernel in ("journal", "sync"):
            assert 2 <= per_round[kernel]["fsyncs"] < 2.5
    assert result["load_before"] and result["load_after"]


def test_the_floor_bench_prints_its_ratios_for_people() -> None:
    done = run_bench(BENCH, "--trips", "10", "--rounds", "1")
    for line in ("journal / shape", "sync / shape", "CPU us per round trip", "fsyncs per round"):
        assert line in done.stdout
    assert "load average before" in done.stdout and "load average after" in done.stdout
