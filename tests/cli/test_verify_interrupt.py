"""``subagents verify --store postgres`` drops its scratch database however it is
stopped: Ctrl-C (SIGINT), SIGTERM or SIGHUP, each ending it with status 130."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import uuid

import pytest
from host_helpers import cli_env
from postgres_db import PG_ADMIN_DSN, require_postgres


def _databases_of(app: str) -> list[str]:
    import psycopg

    with psycopg.connect(PG_ADMIN_DSN, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT DISTINCT datname FROM pg_stat_activity WHERE application_name = %s", (app,)
        ).fetchall()
    return [row[0] for row in rows if row[0]]


def _exists(name: str) -> bool:
    import psycopg

    with psycopg.connect(PG_ADMIN_DSN, autocommit=True) as conn:
        return (
            conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
            is not None
        )


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_an_interrupted_postgres_run_drops_its_scratch_database(sig: signal.Signals) -> None:
    require_postgres()
    app = f"verify-interrupt-{uuid.uuid4().hex[:8]}"  # libpq names our connections by it
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "subagents._cli",
            "verify",
            *("--store", "postgres", "--profile", "dev"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**cli_env(), "PGAPPNAME": app, "SUBAGENTS_PG_ADMIN_DSN": PG_ADMIN_DSN},
    )
    try:
        deadline = time.monotonic() + 60
        scratch: list[str] = []
        while not scratch and proc.poll() is None and time.monotonic() < deadline:
            scratch = [d for d in _databases_of(app) if d.startswith("subagents_props_")]
            time.sleep(0.05)  # polling another process's database sessions: no event to wait on
        assert scratch, "the run never connected to a scratch database"
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err[-2000:]
    assert "Traceback" not in err
    assert not _exists(scratch[0])
