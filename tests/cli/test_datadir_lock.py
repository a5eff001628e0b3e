"""The data-directory lock: exclusive and shared hosts exclude each other.

An exclusive host (no ``--shared``) refuses any second host; shared hosts
coexist, but neither a shared host beside an exclusive one nor the reverse is
allowed. Each refusal is one ``error:`` / ``fix:`` pair naming what to change;
``chat`` (which takes no ``--shared``) never suggests it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "host"))

from host_helpers import REPO, StdioHost, run_cli

from subagents._host import DataDirBusy
from subagents._host._datadir import DataDirLock, is_busy

pytestmark = pytest.mark.timeout(120)

CONFIG = str(REPO / "examples" / "host.toml")


def test_lock_semantics_in_process(tmp_path: Path) -> None:
    exclusive = DataDirLock(tmp_path)
    with pytest.raises(DataDirBusy, match="does not share it") as refused:
        DataDirLock(tmp_path, shared=True)
    assert "--shared too" in refused.value.fix
    exclusive.close()
    first = DataDirLock(tmp_path, shared=True)
    second = DataDirLock(tmp_path, shared=True)
    with pytest.raises(DataDirBusy, match="in use by another host") as busy:
        DataDirLock(tmp_path)
    assert "--shared" in busy.value.fix
    assert is_busy(tmp_path)
    first.close()
    second.close()
    assert not is_busy(tmp_path)
    DataDirLock(tmp_path).close()


def serve(data: Path, *extra: str) -> StdioHost:
    host = StdioHost("--config", CONFIG, "--data-dir", str(data), *extra)
    host.result("initialize")
    return host


def assert_refused(proc: object, fragment: str) -> None:
    stderr = proc.stderr  # type: ignore[attr-defined]
    assert proc.returncode == 2, stderr  # type: ignore[attr-defined]
    assert "Traceback" not in stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert lines[0].startswith("error: ") and fragment in lines[0], stderr
    assert lines[1].strip().startswith("fix: ")


def test_a_shared_host_is_refused_beside_an_exclusive_one(tmp_path: Path) -> None:
    data = tmp_path / "data"
    host = serve(data)
    try:
        second = run_cli(
            "serve", "--stdio", "--shared", "--config", CONFIG, "--data-dir", str(data)
        )
        assert_refused(second, "in use by another host that does not share it")
    finally:
        assert host.close() == 0


def test_an_exclusive_host_is_refused_beside_a_shared_one(tmp_path: Path) -> None:
    data = tmp_path / "data"
    host = serve(data, "--shared")
    try:
        other = serve(data, "--shared")  # shared hosts coexist
        assert other.close() == 0
        second = run_cli("serve", "--stdio", "--config", CONFIG, "--data-dir", str(data))
        assert_refused(second, "in use by another host")
    finally:
        assert host.close() == 0


def test_chat_lock_error_does_not_suggest_shared(tmp_path: Path) -> None:
    data = tmp_path / "data"
    host = serve(data)
    try:
        chat = run_cli("chat", "--data-dir", str(data), stdin="")
        assert_refused(chat, "in use by another host")
        assert "--shared" not in chat.stderr
        assert "another --data-dir" in chat.stderr
    finally:
        assert host.close() == 0


def test_attempts_read_a_directory_an_exclusive_host_serves(tmp_path: Path) -> None:
    data = tmp_path / "data"
    host = serve(data)
    try:
        listed = run_cli("attempts", "list", "--json", "--data-dir", str(data))
        assert listed.returncode == 0, listed.stderr
        assert listed.stdout.strip() == "[]"
    finally:
        assert host.close() == 0
