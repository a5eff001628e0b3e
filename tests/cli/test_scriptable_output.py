"""Scriptable output: ``--version``, ``--json``, ISO-8601 times and id prefixes."""

from __future__ import annotations

import json
import re
import sys
import time
import tomllib
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "host"))

from host_helpers import REPO, run_cli, seed_two_attempts

from storage import LmdbSessionStore, ManualClock
from subagents._host import AmbiguousAttemptId, TrustedAttempts

pytestmark = pytest.mark.timeout(120)

ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")


def seed(data_dir: Path) -> None:
    clock = ManualClock(start=time.time() - 1000)
    store = LmdbSessionStore(data_dir / "lmdb", clock=clock)
    try:
        seed_two_attempts(store, clock)
    finally:
        store.close()


def test_version_is_the_package_version() -> None:
    proc = run_cli("--version")
    assert proc.returncode == 0, proc.stderr
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert proc.stdout.strip().startswith(f"subagents {declared} (commit ")


def test_attempts_list_and_show_as_json(tmp_path: Path) -> None:
    data = tmp_path / "data"
    seed(data)
    listed = run_cli("attempts", "list", "--json", "--data-dir", str(data))
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert sorted(row["attempt_id"] for row in rows) == [
        "subattempt_0000live",
        "subattempt_0000lost",
    ]
    assert {row["owner"] for row in rows} == {"host-dead"}
    shown = run_cli("attempts", "show", "subattempt_0000live", "--json", "--data-dir", str(data))
    assert shown.returncode == 0, shown.stderr
    one = json.loads(shown.stdout)
    assert one["attempt_id"] == "subattempt_0000live"
    assert one["lease_live"] is True
    assert isinstance(one["accepted_at"], float)


def test_human_output_has_iso_timestamps(tmp_path: Path) -> None:
    data = tmp_path / "data"
    seed(data)
    listed = run_cli("attempts", "list", "--data-dir", str(data))
    assert listed.returncode == 0, listed.stderr
    assert len(ISO.findall(listed.stdout)) == 2
    for attempt_id in ("subattempt_0000live", "subattempt_0000lost"):  # one line each, piped
        [line] = [line for line in listed.stdout.splitlines() if attempt_id in line]
        assert "host-dead" in line and "research" in line and ISO.search(line), line
    shown = run_cli("attempts", "show", "subattempt_0000lost", "--data-dir", str(data))
    assert shown.returncode == 0, shown.stderr
    accepted = next(line for line in shown.stdout.splitlines() if "accepted_at" in line)
    assert ISO.search(accepted), accepted
    terminal = next(line for line in shown.stdout.splitlines() if "terminal_at" in line)
    assert "None" not in terminal


def test_show_accepts_a_unique_prefix_and_lists_candidates_of_an_ambiguous_one(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    seed(data)
    shown = run_cli("attempts", "show", "subattempt_0000li", "--json", "--data-dir", str(data))
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["attempt_id"] == "subattempt_0000live"
    ambiguous = run_cli("attempts", "show", "subattempt_0000", "--data-dir", str(data))
    assert ambiguous.returncode == 2
    assert "Traceback" not in ambiguous.stderr
    assert ambiguous.stderr.startswith("error: ")
    assert "subattempt_0000live" in ambiguous.stderr
    assert "subattempt_0000lost" in ambiguous.stderr
    assert "fix:" in ambiguous.stderr


def test_trusted_resolve_raises_a_typed_error_with_the_candidates(tmp_path: Path) -> None:
    data = tmp_path / "data"
    seed(data)
    store = LmdbSessionStore(data / "lmdb", clock=ManualClock(start=time.time()))
    try:
        trusted = TrustedAttempts(store)
        assert trusted.resolve("subattempt_0000lo") == "subattempt_0000lost"
        with pytest.raises(AmbiguousAttemptId) as caught:
            trusted.resolve("sub")
        assert caught.value.candidates == ["subattempt_0000live", "subattempt_0000lost"]
        assert caught.value.prefix == "sub"
    finally:
        store.close()
