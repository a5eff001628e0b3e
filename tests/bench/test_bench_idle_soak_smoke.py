"""bench/idle.py and bench/soak.py run end to end (tiny sizes) and report every figure.

Smoke tests only: they never assert timing.
"""

from __future__ import annotations

import json

from bench_helpers import run_bench


def run(script: str, *args: str) -> dict[str, object]:
    done = run_bench(script, *args, "--json")
    result: dict[str, object] = json.loads(done.stdout)
    return result


def test_the_idle_bench_reports_cpu_threads_and_rss_against_an_empty_host() -> None:
    row = run("idle.py", "--sessions", "20", "--rounds", "2", "--window", "0.2")
    assert row["sessions"] == 20
    for key in ("extra_cpu_ms_per_s_median", "idle_threads", "rss_kib_per_session", "ok"):
        assert key in row
    assert isinstance(row["idle_threads"], int)
    assert row["idle_threads"] < 20  # not a few threads per session


def test_the_soak_bench_loses_and_duplicates_nothing() -> None:
    report = run("soak.py", "--sessions", "20", "--attempts", "2", "--window", "8")
    assert report["sessions"] == 20
    assert report["attempts"] == 40
    assert report["lost"] == 0
    assert report["duplicates"] == 0
    assert report["exit_status"] == 0
    samples = report["samples"]
    assert isinstance(samples, list)
    assert samples[-1]["sessions"] == 20
