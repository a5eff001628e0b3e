"""bench/delegation.py's adapter rows run end to end (tiny sizes). Never asserts timing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "delegation.py"


def test_the_delegation_bench_reports_the_adapter_rows_and_their_overhead() -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH), "--runs", "4", "--batches", "1", "--json"],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    scenarios = json.loads(done.stdout)["scenarios"]
    assert list(scenarios) == ["delegation", "bare", "adapter", "adapter_bare"]
    for name in ("adapter", "adapter_bare"):
        row = scenarios[name]
        assert row["ours_ms"] > 0 and row["pydantic_ai_ms"] > 0
        assert row["target_ratio"] is None and row["meets_target"] is None
        assert (
            row["overhead_ms"] == round(row["ours_ms"] - row["pydantic_ai_ms"], 4)
            or abs(row["overhead_ms"] - (row["ours_ms"] - row["pydantic_ai_ms"])) < 1e-3
        )
