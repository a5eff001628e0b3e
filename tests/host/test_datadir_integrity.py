"""A data directory that never lies: private files, odd files where the lock or the
token belong, and store refusals turned into one ``error:`` and one ``fix:`` line."""

from __future__ import annotations

import logging
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from storage import LmdbSessionStore
from subagents._host._datadir import (
    DataDirCorrupt,
    DataDirError,
    DataDirLock,
    is_busy,
    open_store,
    write_token_file,
)

REPO = Path(__file__).resolve().parents[2]
_MAIN = "import sys; from subagents._cli import main; sys.exit(main())"  # the console script


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_a_new_data_directory_and_its_files_are_private(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        opened = open_store(tmp_path / "dd")
        opened.close()
    finally:
        os.umask(old)
    assert _mode(tmp_path / "dd") == 0o700
    assert _mode(tmp_path / "dd" / "lmdb") == 0o700
    for name in ("host.lock", "lmdb/data.mdb", "lmdb/lock.mdb", "lmdb/store.marker"):
        assert _mode(tmp_path / "dd" / name) == 0o600, name


def test_opening_a_directory_others_can_read_warns(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "dd").mkdir(mode=0o755)
    os.chmod(tmp_path / "dd", 0o755)
    with caplog.at_level(logging.WARNING, logger="subagents.host"):
        opened = open_store(tmp_path / "dd")
    opened.close()
    assert len(opened.warnings) == 1 and "chmod 700" in opened.warnings[0]
    assert opened.warnings[0] in caplog.text


def test_a_private_directory_gives_no_warning(tmp_path: Path) -> None:
    (tmp_path / "dd").mkdir(mode=0o700)
    opened = open_store(tmp_path / "dd")
    opened.close()
    assert opened.warnings == []


@pytest.mark.parametrize("what", ["directory", "symlink", "fifo"])
def test_a_non_file_in_place_of_host_lock_is_a_typed_error(tmp_path: Path, what: str) -> None:
    directory = tmp_path / "dd"
    directory.mkdir()
    lock = directory / "host.lock"
    if what == "directory":
        lock.mkdir()
    elif what == "symlink":
        (tmp_path / "target").write_text("")
        lock.symlink_to(tmp_path / "target")
    else:
        os.mkfifo(lock)
    with pytest.raises(DataDirCorrupt) as info:
        DataDirLock(directory)
    assert "host.lock" in info.value.message and "remove" in info.value.fix
    with pytest.raises(DataDirCorrupt):
        is_busy(directory)
    with pytest.raises(DataDirCorrupt):
        open_store(directory)


def test_an_existing_wide_lock_file_is_made_private(tmp_path: Path) -> None:
    (tmp_path / "host.lock").write_text("")
    os.chmod(tmp_path / "host.lock", 0o666)
    DataDirLock(tmp_path).close()
    assert _mode(tmp_path / "host.lock") == 0o600


def test_a_token_file_is_created_private(tmp_path: Path) -> None:
    path = tmp_path / "new" / "http.token"
    write_token_file(path, "secret")
    assert path.read_text() == "secret"
    assert _mode(path) == 0o600
    assert _mode(path.parent) == 0o700


def test_an_existing_world_readable_token_file_is_replaced_by_a_private_one(
    tmp_path: Path,
) -> None:
    path = tmp_path / "http.token"
    path.write_text("old token that is longer than the new one")
    os.chmod(path, 0o644)
    write_token_file(path, "new")
    assert path.read_text() == "new"
    assert _mode(path) == 0o600


def test_a_token_file_that_is_a_symlink_is_refused_and_its_target_untouched(
    tmp_path: Path,
) -> None:
    target = tmp_path / "victim"
    target.write_text("do not overwrite")
    path = tmp_path / "http.token"
    path.symlink_to(target)
    with pytest.raises(DataDirError) as info:
        write_token_file(path, "secret")
    assert "symlink" in info.value.message and info.value.fix
    assert target.read_text() == "do not overwrite"
    assert path.is_symlink()


def test_a_zero_length_store_is_refused_with_the_storage_layers_fix(tmp_path: Path) -> None:
    opened = open_store(tmp_path / "dd")
    opened.close()
    (tmp_path / "dd" / "lmdb" / "data.mdb").write_bytes(b"")
    with pytest.raises(DataDirCorrupt) as info:
        open_store(tmp_path / "dd")
    assert "empty" in info.value.message
    assert "backup" in info.value.fix


def test_the_cli_prints_one_error_and_one_fix_line_for_a_damaged_store(tmp_path: Path) -> None:
    (tmp_path / "dd").mkdir(mode=0o700)
    store = LmdbSessionStore(tmp_path / "dd" / "lmdb")
    store.close()
    data = tmp_path / "dd" / "lmdb" / "data.mdb"
    os.truncate(data, 8191)
    done = subprocess.run(
        [sys.executable, "-c", _MAIN, "attempts", "list", "--data-dir", str(tmp_path / "dd")],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "400"},
        check=False,
    )
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    out = done.stdout + done.stderr
    assert "Traceback" not in out
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    assert [line.split(":", 1)[0] for line in lines] == ["error", "fix"], lines
