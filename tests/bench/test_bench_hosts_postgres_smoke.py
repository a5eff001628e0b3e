"""bench/hosts.py runs end to end (quick mode, 1 and 2 host processes) and reports its figures.

A smoke test only: it never asserts timing. Needs PostgreSQL (skipped outside
CI without a server, like every PostgreSQL test).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from bench_helpers import run_bench

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "host"))

from postgres_db import PG_ADMIN_DSN, require_postgres

BENCH = "hosts.py"

pytestmark = pytest.mark.timeout(240)


def test_the_hosts_bench_reports_delegations_per_second_for_each_host_count() -> None:
    require_postgres()
    done = run_bench(
        BENCH,
        *("--quick", "--json", "--hosts", "1,2", "--sessions", "2", "--admin-dsn", PG_ADMIN_DSN),
        timeout=200,
    )
    result = json.loads(done.stdout)
    assert [row["hosts"] for row in result["hosts"]] == [1, 2]
    for row in result["hosts"]:
        assert row["delegations"] > 0
        assert row["failures"] == 0
        assert len(row["per_host_per_s"]) == row["hosts"]
        assert len(set(row["generations"])) == row["hosts"]  # one generation per host start
        assert row["transactions_per_delegation"] > 0  # counted over the row's window
    assert result["hosts"][0]["speedup"] == 1.0
    assert result["load_before"]
    assert result["load_after"]
