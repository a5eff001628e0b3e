"""bench/supervisor.py runs end to end (quick mode, no DBOS) and reports every figure
with its target, each ratio from per-round figures of both sides. A smoke test only: it
never asserts timing."""

from __future__ import annotations

import json

from bench_helpers import run_bench

BENCH = "supervisor.py"
FIGURES = {
    "memory_per_live_attempt_kib",
    "memory_attempts_per_s",
    "durable_ratio",
    "ours_over_dbos_sqlite_c1",
    "ours_over_dbos_sqlite_c32",
    "ours_over_dbos_postgres_c1",
    "ours_over_dbos_postgres_c32",
    "journal_over_dbos_sqlite_c1",
    "journal_over_dbos_sqlite_c32",
    "journal_over_dbos_postgres_c1",
    "journal_over_dbos_postgres_c32",
}
DBOS = {name for name in FIGURES if "dbos" in name}


def test_the_supervisor_bench_prints_every_figure_with_its_target_as_json() -> None:
    done = run_bench(BENCH, "--quick", "--json", "--no-dbos", timeout=300)
    result = json.loads(done.stdout)
    figures = result["figures"]
    assert set(figures) == FIGURES
    for name in FIGURES - DBOS:
        figure = figures[name]
        assert figure["value"] > 0, name
        assert ("target_min" in figure) != ("target_max" in figure), name
        assert isinstance(figure["ok"], bool), name
    assert figures["memory_per_live_attempt_kib"]["target_max"] == 100.0
    assert figures["memory_attempts_per_s"]["target_min"] == 2000.0
    durable = figures["durable_ratio"]
    assert durable["target_min"] == 0.5
    assert durable["min"] <= durable["value"] <= durable["max"]
    assert len(durable["rounds"]) == 2  # one ratio per interleaved round
    rows = result["comparison"]["rows"]
    assert set(rows) == {
        "raw@1",
        "kernel@1",
        "kernel@32",
        "journal@1",
        "journal@32",
        "sdk@1",
        "sdk@32",
    }
    for cell in ("kernel@1", "kernel@32", "journal@1", "journal@32", "sdk@1"):
        # accept, terminal and delivery: in the terminal commit when the wait came first
        assert 2 <= rows[cell]["writes_per_attempt"] <= 3.5
        assert rows[cell]["fsyncs_per_attempt"] > 0
    for name in DBOS:
        assert figures[name]["value"] is None
        assert figures[name]["skipped"] == "--no-dbos"
    assert figures["ours_over_dbos_sqlite_c1"]["target_min"] == 10.0
    assert figures["ours_over_dbos_postgres_c32"]["target_min"] == 5.0
    assert result["load_before"]
    assert result["load_after"]


def test_the_supervisor_bench_prints_a_table_for_people() -> None:
    done = run_bench(BENCH, "--quick", "--no-dbos", timeout=300)
    for name in FIGURES:
        assert name in done.stdout
    assert "load average" in done.stdout
    assert "dbos: skipped (--no-dbos)" in done.stdout
    assert "fsyncs per attempt (concurrency 1" in done.stdout
    assert "fsyncs per attempt (concurrency 1, LMDB sync=True, journal" in done.stdout
