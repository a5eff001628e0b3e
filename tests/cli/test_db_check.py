"""``subagents db check [--repair]`` and ``db backup DEST`` on a data directory, run as a user."""

from __future__ import annotations

import json
import time
from pathlib import Path

from host_helpers import run_cli, seed_two_attempts

from storage import LmdbSessionStore, ManualClock
from storage import _codec as codec
from storage._backend import Txn
from subagents._host._datadir import open_store


def seeded_data_dir(tmp_path: Path) -> Path:
    """A host data directory holding two attempts (written at store time)."""
    directory = tmp_path / "data"
    open_store(directory).close()
    clock = ManualClock(start=time.time())
    store = LmdbSessionStore(directory / "lmdb", clock=clock)
    try:
        seed_two_attempts(store, clock)
    finally:
        store.close()
    return directory


def damage(directory: Path) -> tuple[bytes, bytes]:
    """Flip the last byte of one attempt record and plant an orphan index entry."""
    store = LmdbSessionStore(directory / "lmdb")
    try:
        key = codec.attempt_key("subattempt_0000lost")
        orphan = codec.agent_key("default", "s1", "ag-ghost")

        def flip(txn: Txn) -> None:
            raw = txn.get("attempts", key)
            assert raw is not None
            txn.put("attempts", key, raw[:-1] + bytes([raw[-1] ^ 0xFF]))

        def orphan_entry(txn: Txn) -> None:  # a well-sealed entry for an attempt never stored
            txn.put("index", orphan, b"subattempt_ghost")

        store.raw_backend.write(flip)
        store.backend.write(orphan_entry)
    finally:
        store.close()
    return key, orphan


def test_check_passes_a_healthy_data_directory(tmp_path: Path) -> None:
    directory = seeded_data_dir(tmp_path)
    checked = run_cli("db", "check", "--data-dir", str(directory))
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout.strip().endswith(": ok")


def test_check_names_a_checksum_mismatch_and_an_orphan_entry_and_repair_fixes_the_index(
    tmp_path: Path,
) -> None:
    directory = seeded_data_dir(tmp_path)
    damage(directory)

    found = run_cli("db", "check", "--data-dir", str(directory), "--json")
    assert found.returncode == 1, found.stderr
    report = json.loads(found.stdout)
    assert report["ok"] is False
    problems = " | ".join(report["findings"])
    assert "attempts" in problems and "checksum" in problems
    assert "orphan index entry" in problems

    repaired = run_cli("db", "check", "--data-dir", str(directory), "--repair")
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    assert "repaired: 1 value(s) quarantined" in repaired.stdout
    again = run_cli("db", "check", "--data-dir", str(directory))
    assert again.returncode == 0, again.stdout
    listed = run_cli("attempts", "list", "--data-dir", str(directory))
    assert "subattempt_0000live" in listed.stdout
    assert "subattempt_0000lost" not in listed.stdout


def test_a_backup_is_a_data_directory_that_checks_and_serves_the_same_attempts(
    tmp_path: Path,
) -> None:
    directory = seeded_data_dir(tmp_path)
    copy = tmp_path / "copy"
    made = run_cli("db", "backup", str(copy), "--data-dir", str(directory))
    assert made.returncode == 0, made.stderr
    assert run_cli("db", "check", "--data-dir", str(copy)).returncode == 0
    listed = run_cli("attempts", "list", "--data-dir", str(copy))
    assert listed.returncode == 0, listed.stderr
    assert "subattempt_0000lost" in listed.stdout and "subattempt_0000live" in listed.stdout
