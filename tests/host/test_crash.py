"""SIGKILL a host at 20+ different points of background attempts, restart it, check the store.

After every restart: each accepted attempt has exactly one terminal outcome
(with its fingerprint), at most one continuation run exists per attempt, the
attempt points at it, and no completed child result is lost (its continuation
run's durable input carries it).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from host_helpers import REPO, TIMEOUT, cli_env

from storage import ASYNC_SUBAGENT_RESULT, LmdbSessionStore

pytestmark = pytest.mark.timeout(600)

SCRIPT = Path(__file__).with_name("crash_host.py")
ATTEMPTS = 3
# (marker, occurrence): where to kill. 22 points across the whole life of the attempts.
POINTS = [
    ("session", 1),
    ("parent-completed", 1),
    ("accepted", 1),
    ("accepted", 2),
    ("accepted", 3),
    ("child-started", 1),
    ("child-started", 2),
    ("child-started", 3),
    ("child-finishing", 1),
    ("child-finishing", 2),
    ("child-finishing", 3),
    ("continuation-admitted", 1),
    ("continuation-completed", 1),
    ("continuation-admitted", 2),
    ("continuation-completed", 2),
    ("continuation-admitted", 3),
    ("continuation-completed", 3),
    ("child-started", 1),  # repeated points hit different interleavings
    ("child-finishing", 2),
    ("continuation-admitted", 1),
    ("accepted", 2),
    ("continuation-completed", 3),
]


def run_until(data_dir: Path, name: str, occurrence: int) -> list[str]:
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), "work", str(data_dir), str(ATTEMPTS)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=cli_env(),
        cwd=REPO,
    )
    seen: list[str] = []
    count = 0
    try:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.decode().strip()
            if not line.startswith("marker "):
                continue
            seen.append(line[7:])
            if line[7:] == name:
                count += 1
                if count == occurrence:
                    break
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=TIMEOUT)
        if proc.stdout is not None:
            proc.stdout.close()
    return seen


def recover(data_dir: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "recover", str(data_dir)],
        capture_output=True,
        text=True,
        env=cli_env(),
        cwd=REPO,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]


def check_store(data_dir: Path) -> None:
    store = LmdbSessionStore(data_dir / "lmdb")
    try:
        records = store.list_attempts("default")
        try:
            runs = store.list_runs("s1")
        except Exception:
            runs = []
        continuations: dict[str, list[str]] = {}
        for run in runs:
            assert str(run.status) in {"completed", "failed", "cancelled"}, run
            if run.trigger_type == ASYNC_SUBAGENT_RESULT:
                attempt_id = run.metadata["async_subagent.attempt_id"]
                continuations.setdefault(attempt_id, []).append(run.run_id)
        for record in records:
            assert str(record.execution_status) in {"completed", "failed", "cancelled"}
            assert record.terminal_fingerprint is not None
            assert record.result_ref is not None and record.result_ref.digest
            linked = continuations.get(record.attempt_id, [])
            assert len(linked) <= 1, (record.attempt_id, linked)
            assert str(record.delivery_status) == "delivered"
            assert linked == [record.continuation_run_id]
            run = next(r for r in runs if r.run_id == linked[0])
            if str(record.execution_status) == "completed":
                assert "child result: 42 facts" in run.input[0].text  # never lost
        assert set(continuations) <= {r.attempt_id for r in records}
    finally:
        store.close()


@pytest.mark.parametrize(("point", "occurrence"), POINTS, ids=[f"{p}-{n}" for p, n in POINTS])
def test_sigkill_restart_keeps_exactly_once(tmp_path: Path, point: str, occurrence: int) -> None:
    data_dir = tmp_path / "data"
    seen = run_until(data_dir, point, occurrence)
    assert seen, "the host printed no marker"
    recover(data_dir)
    check_store(data_dir)
    recover(data_dir)  # a second restart changes nothing
    check_store(data_dir)
