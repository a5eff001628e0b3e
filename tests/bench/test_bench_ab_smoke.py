"""bench/ab.py runs this checkout against a revision, both sides interleaved, and
reports each side of every round. A smoke test only: it never asserts timing."""

from __future__ import annotations

import json
import subprocess

from bench_helpers import BENCH as BENCH_DIR
from bench_helpers import run_bench

BENCH = "ab.py"


def test_the_ab_bench_reports_both_sides_per_round_against_the_named_revision() -> None:
    done = run_bench(BENCH, "--base", "HEAD", "--trips", "60", "--rounds", "2", "--json")
    result = json.loads(done.stdout)
    head = subprocess.run(
        ["git", "-C", str(BENCH_DIR.parent), "rev-parse", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert result["base"] == head and result["store"] == "journal"
    assert len(result["rounds"]) == 2
    for per_round in result["rounds"]:
        assert set(per_round) == {"base", "work"}
        for figures in per_round.values():
            assert figures["us"] > 0 and figures["cpu_us"] > 0
            assert figures["mean_us"] > 0
            assert 2 <= figures["fsyncs"] < 2.5  # two durable commits a trip, counted
            assert figures["trips"] == 60  # a whole block of 50 and the 10 left over
    assert result["load_before"] and result["load_after"]


def test_the_ab_bench_prints_its_ratios_for_people() -> None:
    done = run_bench(BENCH, "--store", "sync", "--trips", "10", "--rounds", "1")
    for line in ("store sync", "round trip time, mean", "CPU per trip", "above 1, the work is"):
        assert line in done.stdout
    assert "load average before" in done.stdout and "load average after" in done.stdout


def test_an_unknown_revision_is_refused_by_name() -> None:
    done = run_bench(BENCH, "--base", "no-such-revision", "--trips", "1", expect=None)
    assert done.returncode != 0
    assert "no-such-revision" in done.stderr
