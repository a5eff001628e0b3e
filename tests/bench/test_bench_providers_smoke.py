"""bench/providers.py runs against llmock with tiny counts and prints its table and figures.
A smoke test only: it never asserts timing."""

from __future__ import annotations

import json

from bench_helpers import run_bench

BENCH = "providers.py"
PROVIDERS = ["openai-chat", "openai-responses", "anthropic"]


def _run(*args: str) -> str:
    done = run_bench(BENCH, "--rounds", "2", "--requests", "2", *args, timeout=300)
    return done.stdout


def test_the_providers_bench_prints_a_row_per_provider_and_the_load() -> None:
    out = _run()

    lines = out.splitlines()
    assert lines[0].startswith("load average before: ")
    assert lines[-1].startswith("load average after: ")
    for provider in PROVIDERS:
        [row] = [line for line in lines if line.startswith(provider + " ")]
        assert "x" in row
    assert "target: median ratio <= 1.2x" in out


def test_the_providers_bench_reports_median_and_spread_as_json() -> None:
    result = json.loads(_run("--json"))

    assert [row["provider"] for row in result["providers"]] == PROVIDERS
    for row in result["providers"]:
        assert row["ratio_min"] <= row["ratio_median"] <= row["ratio_max"]
        assert row["ours_ms_median"] > 0 and row["raw_ms_median"] > 0
        assert row["target_max"] == 1.2
        assert isinstance(row["ok"], bool)
    assert result["load_before"] and result["load_after"]
