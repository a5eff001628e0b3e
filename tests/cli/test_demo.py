"""``subagents demo`` as a user runs it: a subprocess, then the data directory it leaves.

The story is asserted from the output (every step, the SIGKILL, the
reconciliation, the tables) and from the store: every accepted attempt has
exactly one terminal record, one continuation run per delivered result (the
attempt points at it), the killed attempt is failed/host_process_lost and its
continuation says so, and no completed child result is lost.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "host"))

from host_helpers import cli_env

from storage import ASYNC_SUBAGENT_RESULT, LmdbSessionStore

pytestmark = pytest.mark.timeout(180)


def demo(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``python -m subagents._cli demo`` from ``cwd`` (not the checkout), with a deadline."""
    return subprocess.run(
        [sys.executable, "-m", "subagents._cli", "demo", *args],
        capture_output=True,
        text=True,
        env={**cli_env(), "COLUMNS": "160"},
        cwd=cwd,
        timeout=120,
        check=False,
    )


@pytest.fixture(scope="module")
def story(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    root = tmp_path_factory.mktemp("demo")
    data_dir = root / "data"
    proc = demo("--data-dir", str(data_dir), cwd=root)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    return proc.stdout, data_dir


def test_output_tells_the_story(story: tuple[str, Path]) -> None:
    out, data_dir = story
    for step in range(1, 11):
        assert f"[{step}/10]" in out
    assert out.count(" ok (") == 10
    assert "delegates to researcher + reviewer, steers, cancels" in out
    assert "SIGKILL host #1" in out
    assert "restart: host #2" in out
    assert "debugger: failed (host_process_lost) -> one continuation run" in out
    assert "steered: Focus on the lease code path" in out  # the steering reached the child
    assert "timeline of every attempt" in out
    assert "host killed" in out and "host restarted" in out
    assert str(data_dir) in out
    assert "demo finished" in out


def test_store_holds_exactly_once_outcomes(story: tuple[str, Path]) -> None:
    _, data_dir = story
    assert (data_dir / "lmdb").is_dir()
    store = LmdbSessionStore(data_dir / "lmdb")
    try:
        attempts = {a.subagent_name: a for a in store.list_attempts("default")}
        runs = store.list_runs("demo")
    finally:
        store.close()
    assert sorted(attempts) == ["debugger", "researcher", "reviewer"]
    continuations: dict[str, list[str]] = {}
    for run in runs:
        assert str(run.status) == "completed", run
        if run.trigger_type == ASYNC_SUBAGENT_RESULT:
            attempt_id = run.metadata["async_subagent.attempt_id"]
            continuations.setdefault(attempt_id, []).append(run.run_id)
    assert set(continuations) <= {a.attempt_id for a in attempts.values()}
    for record in attempts.values():
        assert str(record.execution_status) in {"completed", "failed", "cancelled"}
        assert record.terminal_fingerprint is not None  # one terminal record
        assert str(record.delivery_status) == "delivered"
        linked = continuations.get(record.attempt_id, [])
        if record.continuation_run_id is None:
            assert linked == []  # delivered inside a parent run: no continuation run
        else:
            assert linked == [record.continuation_run_id]  # exactly one continuation run
    by_run = {run.run_id: run for run in runs}

    researcher = attempts["researcher"]
    assert str(researcher.execution_status) == "completed"
    assert researcher.continuation_run_id is not None
    text = by_run[researcher.continuation_run_id].input[0].text
    assert "findings ready" in text and "Focus on the lease code path" in text  # not lost

    assert str(attempts["reviewer"].execution_status) == "cancelled"

    killed = attempts["debugger"]
    assert str(killed.execution_status) == "failed"
    assert killed.failure_category == "host_process_lost"
    assert killed.owner_lease.host_instance_id == "demo-host-1"  # the lost owner stays on record
    assert killed.continuation_run_id is not None
    assert "host process lost" in by_run[killed.continuation_run_id].input[0].text

    parents = [run for run in runs if run.trigger_type == "rpc"]
    assert len(parents) == 2
    assert len(runs) == len(parents) + sum(len(v) for v in continuations.values())


def test_non_empty_data_dir_is_a_readable_error(tmp_path: Path) -> None:
    busy = tmp_path / "used"
    busy.mkdir()
    (busy / "something").write_text("x")
    proc = demo("--data-dir", str(busy), cwd=tmp_path)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines[0].startswith("error: ") and "not empty" in lines[0]
    assert lines[1].strip().startswith("fix: ")
