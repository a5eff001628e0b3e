"""The ``subagents`` command line: subcommands, readable errors, trusted attempt operations."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "host"))

from host_helpers import REPO, run_cli, seed_two_attempts

from statemachines import MACHINES
from storage import LmdbSessionStore, ManualClock
from subagents._host import (
    AttemptOwned,
    cancel_attempt,
    list_attempts,
    show_attempt,
)

pytestmark = pytest.mark.timeout(120)


def assert_readable_error(proc: object, *fragments: str) -> None:
    stderr = proc.stderr  # type: ignore[attr-defined]
    assert proc.returncode == 2, stderr  # type: ignore[attr-defined]
    assert "Traceback" not in stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert lines[0].startswith("error: ")
    assert lines[1].strip().startswith("fix: ")
    for fragment in fragments:
        assert fragment in stderr


def test_diagram_is_mermaid_of_every_lifecycle() -> None:
    proc = run_cli("diagram")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.count("```mermaid\nstateDiagram-v2") == len(MACHINES)
    for spec in MACHINES:
        assert f"## {spec.name}" in out
    from statemachines import all_mermaid

    assert out == all_mermaid()


def test_run_is_one_shot() -> None:
    proc = run_cli("run", "--config", str(REPO / "examples" / "host.toml"), "plan the release")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "plan the release\n"
    piped = run_cli("run", stdin="from stdin")
    assert piped.stdout == "from stdin\n"


def test_worker_has_no_delegation(tmp_path: Path) -> None:
    proc = run_cli("worker", "--config", str(REPO / "examples" / "host.toml"), "work")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "work\n"


def test_unknown_profile_bad_config_and_missing_config(tmp_path: Path) -> None:
    assert_readable_error(run_cli("run", "--profile", "ghost", "x"), "unknown profile 'ghost'")
    bad = tmp_path / "bad.toml"
    bad.write_text('[profiles.default]\nmodel_id = "nope"\n')
    assert_readable_error(
        run_cli("run", "--config", str(bad), "x"), f"{bad}: profiles.default.model_id"
    )
    assert_readable_error(
        run_cli("serve", "--stdio", "--config", str(tmp_path / "missing.toml")), "file not found"
    )
    typo = tmp_path / "typo.toml"
    typo.write_text('[profiles.default]\nmodel_id = "test:echo"\n[hots]\n')
    assert_readable_error(run_cli("serve", "--http", "--config", str(typo)), "hots: unknown key")


def test_verify_runs_the_properties_suite() -> None:
    proc = run_cli("verify", "--machine", "fencing", "--store", "memory")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert "fencing" in proc.stdout
    assert "1 runs, 0 failures" in proc.stdout
    unknown = run_cli("verify", "--machine", "nope")
    assert_readable_error(unknown, "unknown machine 'nope'")


# -- trusted attempt operations ------------------------------------------------------------


def seed_attempts(data_dir: Path) -> None:
    clock = ManualClock(start=time.time() - 1000)
    store = LmdbSessionStore(data_dir / "lmdb", clock=clock)
    try:
        seed_two_attempts(store, clock)
    finally:
        store.close()


def test_attempts_python_api(tmp_path: Path) -> None:
    data = tmp_path / "data"
    seed_attempts(data)
    views = {v.attempt_id: v for v in list_attempts(data)}
    assert sorted(views) == ["subattempt_0000live", "subattempt_0000lost"]
    assert views["subattempt_0000lost"].lease_live is False
    assert views["subattempt_0000live"].lease_live is True
    assert show_attempt(data, "subattempt_0000lost").phase == "accepted"
    cancelled = cancel_attempt(data, "subattempt_0000lost", "operator says stop")
    assert cancelled.execution_status == "cancelled"
    assert cancelled.cancellation_reason == "operator says stop"
    assert cancelled.owner == "operator"
    assert cancelled.fencing_generation == 2
    assert cancel_attempt(data, "subattempt_0000lost").execution_status == "cancelled"
    with pytest.raises(AttemptOwned, match="owned by live host host-dead"):
        cancel_attempt(data, "subattempt_0000live")


def test_attempts_cli(tmp_path: Path) -> None:
    data = tmp_path / "data"
    seed_attempts(data)
    listed = run_cli("attempts", "list", "--data-dir", str(data))
    assert listed.returncode == 0, listed.stderr
    assert "subattempt_0000lost" in listed.stdout
    assert "2 attempts" in listed.stdout
    shown = run_cli("attempts", "show", "subattempt_0000live", "--data-dir", str(data))
    assert shown.returncode == 0, shown.stderr
    assert "host-dead" in shown.stdout
    cancelled = run_cli("attempts", "cancel", "subattempt_0000lost", "--data-dir", str(data))
    assert cancelled.returncode == 0, cancelled.stderr
    assert "cancelled" in cancelled.stdout
    owned = run_cli("attempts", "cancel", "subattempt_0000live", "--data-dir", str(data))
    assert_readable_error(owned, "owned by live host")
    missing = run_cli("attempts", "show", "subattempt_nope", "--data-dir", str(data))
    assert missing.returncode == 2
    assert "Traceback" not in missing.stderr
    nodir = run_cli("attempts", "list", "--data-dir", str(tmp_path / "empty"))
    assert_readable_error(nodir, "no store in data directory")
