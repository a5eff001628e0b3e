"""bench/journal.py runs end to end on a real store's writes and reports every side of
every round. A smoke test only: it never asserts timing."""

from __future__ import annotations

import json

from bench_helpers import run_bench

BENCH = "journal.py"


def test_the_journal_bench_reports_each_side_per_round_as_json() -> None:
    done = run_bench(BENCH, "--ops", "30", "--rounds", "2", "--json")
    result = json.loads(done.stdout)
    from bench.journal import SIDES

    assert result["ops"] == 60  # an accept and a terminal commit per attempt
    assert result["puts_per_op"] >= 2  # a record and at least one index entry or event
    assert len(result["rounds"]) == 2
    for per_round in result["rounds"]:
        assert set(per_round) == set(SIDES)
        assert all(us > 0 for us in per_round.values())
    assert result["load_before"] and result["load_after"]


def test_the_journal_bench_prints_its_ratios_for_people() -> None:
    done = run_bench(BENCH, "--ops", "20", "--rounds", "1")
    for line in ("journal / lmdb (same writes)", "journal / flush (one block)"):
        assert line in done.stdout
    assert "load average before" in done.stdout and "load average after" in done.stdout
