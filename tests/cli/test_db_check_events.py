"""``subagents db check`` covers the host's event log: a damaged event value is
reported by table and key (exit 1), and ``--repair`` moves it aside so the
check passes and the session's other events are served."""

from __future__ import annotations

import json
from pathlib import Path

from host_helpers import run_cli

from storage import Txn
from subagents._host._datadir import open_store
from subagents._host._eventlog import StoreEventLog


def _key(session: str, seq: int) -> bytes:
    return session.encode() + b"\0" + seq.to_bytes(8, "big")


def test_check_finds_a_damaged_event_and_repair_moves_it_aside(tmp_path: Path) -> None:
    directory = tmp_path / "data"
    opened = open_store(directory)
    try:
        events = opened.events
        assert isinstance(events, StoreEventLog)
        for index in range(3):
            events.append("s1", "note", 1.0, None, {"i": index})

        def flip(txn: Txn) -> None:
            raw = txn.get("host_events", _key("s1", 2))
            assert raw is not None
            txn.put("host_events", _key("s1", 2), raw[:-1] + bytes([raw[-1] ^ 0xFF]))

        events.raw_backend.write(flip)
    finally:
        opened.close()
    checked = run_cli("db", "check", "--json", "--data-dir", str(directory))
    assert checked.returncode == 1, checked.stderr
    report = json.loads(checked.stdout)
    assert report["findings"] == [
        "host_events s1////////\\x02: checksum (the stored bytes do not match their CRC-32)"
    ]
    repaired = run_cli("db", "check", "--repair", "--data-dir", str(directory))
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    assert "1 value(s) quarantined" in repaired.stdout
    assert run_cli("db", "check", "--data-dir", str(directory)).returncode == 0
    opened = open_store(directory)
    try:
        assert [e.seq for e in opened.events.replay("s1")] == [1, 3]
    finally:
        opened.close()


def test_db_status_of_a_data_directory_shows_its_identity_and_warnings(tmp_path: Path) -> None:
    directory = tmp_path / "data"
    open_store(directory).close()
    directory.chmod(0o755)
    status = run_cli("db", "status", "--json", "--data-dir", str(directory))
    assert status.returncode == 0, status.stderr
    report = json.loads(status.stdout)
    assert report["store"] == "lmdb" and report["layout"] >= 3 and report["store_id"]
    assert report["created_at"].endswith("Z")
    assert [w for w in report["warnings"] if "can be read by other users" in w]
    human = run_cli("db", "status", "--data-dir", str(directory))
    assert "warning: data directory" in human.stdout
    missing = run_cli("db", "status", "--data-dir", str(tmp_path / "nothing"))
    assert missing.returncode == 2 and "holds no store" in missing.stderr
