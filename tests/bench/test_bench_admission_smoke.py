"""bench/admission.py runs end to end, and admission made no full recount of a
session's pending results while every result was delivered (before: one every
``max_undelivered_results`` attempts). A smoke test only: it never asserts timing."""

from __future__ import annotations

import json

from bench_helpers import run_bench

BENCH = "admission.py"


def test_the_admission_bench_measures_both_histories_without_a_recount() -> None:
    done = run_bench(BENCH, "--quick", "--json")
    result = json.loads(done.stdout)
    assert result["history"]["small"] < result["history"]["large"]
    assert [len(v) for v in result["mean_us"].values()] == [2, 2]
    assert all(us > 0 for values in result["mean_us"].values() for us in values)
    assert result["ratio_min"] <= result["ratio"] <= result["ratio_max"]
    # 2 rounds x 256 attempts per side, past the limit of 128 four times: no recount.
    assert result["recounts"] == {"small": 0, "large": 0}


def test_the_admission_bench_prints_a_table_for_people() -> None:
    done = run_bench(BENCH, "--quick")
    assert "large / small: " in done.stdout and "full recounts" in done.stdout
    assert "load average before" in done.stdout and "load average after" in done.stdout
