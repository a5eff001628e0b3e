"""The pre-open check of an LMDB file that another process commits to.

A shared data directory (several host processes, ``shared=True``) is committed
to by the other processes while a new one checks the file before mapping it.
The offline walk then reads pages of two snapshots and finds damage that is
not there: before the fix, every check made beside a writer committing in a
loop refused the healthy store (``page 22 is reachable more than once``), so a
host could not join a busy shared directory. A check that raced a commit is
made again; only a check during which no commit ended is believed.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import lmdb
import lmdb.verify
import pytest

from storage import LmdbSessionStore, StoreRefused
from storage._lmdbfile import CHECK_TRIES, preflight

FINDING = "page 22 is reachable more than once (via main/runs DB)"
WRITER = """
import os, sys
import lmdb
env = lmdb.open(sys.argv[1], map_size=1 << 30, max_dbs=4)
db = env.open_db(b"t")
print("writing", flush=True)
i = 0
while True:  # commits until killed, rewriting keys so that freed pages are reused
    with env.begin(write=True) as txn:
        for j in range(20):
            key = b"k%06d" % ((i * 7919 + j * 104729) % 3000)
            txn.put(key, os.urandom(100 + (i + j) % 300), db=db)
    i += 1
"""


def _fill(path: Path) -> None:
    env = lmdb.open(str(path), map_size=1 << 30, max_dbs=4)
    try:
        db = env.open_db(b"t")
        with env.begin(write=True) as txn:
            for i in range(3000):
                txn.put(b"k%06d" % i, b"v" * 200, db=db)
    finally:
        env.close()


COMMIT = """
import sys
import lmdb
env = lmdb.open(sys.argv[1], map_size=1 << 30, max_dbs=4)
db = env.open_db(b"t")  # before the write transaction: it takes the writer lock itself
with env.begin(write=True) as txn:
    txn.put(b"other", b"process", db=db)
env.close()
"""


def _commit(path: Path) -> None:
    """One commit by another process."""
    subprocess.run([sys.executable, "-c", COMMIT, str(path)], check=True, timeout=60)


@pytest.fixture
def filled(tmp_path: Path) -> Path:
    path = tmp_path / "lmdb"
    _fill(path)
    return path


def _racing_walks(monkeypatch: pytest.MonkeyPatch, path: Path, racing: int) -> Callable[[], int]:
    """The verifier's first ``racing`` walks see a commit end while they read (and report
    what such a walk reports); later walks are the real verifier. Returns the walk count."""
    real = lmdb.verify.verify
    walks = 0

    def walk(*args: object, **kwargs: object) -> list[str]:
        nonlocal walks
        walks += 1
        if walks <= racing:
            _commit(path)
            return [FINDING]
        found: list[str] = real(*args, **kwargs)
        return found

    monkeypatch.setattr(lmdb.verify, "verify", walk)
    return lambda: walks


def test_a_check_that_raced_a_commit_is_made_again_and_the_store_opens(
    monkeypatch: pytest.MonkeyPatch, filled: Path
) -> None:
    walks = _racing_walks(monkeypatch, filled, racing=1)
    assert preflight(str(filled)) is None  # no marker: a py-lmdb file, healthy
    assert walks() == 2


def test_a_finding_with_no_commit_during_the_check_still_refuses(
    monkeypatch: pytest.MonkeyPatch, filled: Path
) -> None:
    monkeypatch.setattr(lmdb.verify, "verify", lambda *a, **k: [FINDING])
    with pytest.raises(StoreRefused) as refused:
        preflight(str(filled))
    assert refused.value.fields["reason"] == "damaged pages"
    assert FINDING in refused.value.message


def test_checks_that_always_race_are_given_up_with_a_warning(
    monkeypatch: pytest.MonkeyPatch, filled: Path, caplog: pytest.LogCaptureFixture
) -> None:
    walks = _racing_walks(monkeypatch, filled, racing=CHECK_TRIES)
    with caplog.at_level(logging.WARNING, logger="subagents.storage"):
        assert preflight(str(filled)) is None
    assert walks() == CHECK_TRIES
    assert "raced a commit of another process" in caplog.text


@pytest.fixture
def writer(filled: Path) -> Iterator[Path]:
    """A process committing to ``filled`` in a loop (py-lmdb's own writer)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(filled)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "writing"
        yield filled
    finally:
        proc.kill()
        proc.wait(timeout=30)
        if proc.stdout is not None:
            proc.stdout.close()


def test_a_file_another_process_is_committing_to_is_never_refused(writer: Path) -> None:
    for _ in range(10):
        preflight(str(writer))  # before the fix: every one refused the healthy file


STORE_WRITER = """
import sys
sys.path.insert(0, sys.argv[2])
from builders import setup_session
from storage import LmdbSessionStore, ManualClock
clock = ManualClock(start=1_700_000_000.0)
store = LmdbSessionStore(sys.argv[1], clock=clock)
setup_session(store, clock, "s-0")
print("writing", flush=True)
i = 1
while True:  # a session and its run per round: four commits
    setup_session(store, clock, f"s-{i}", parent_run=f"run-{i}")
    i += 1
"""


def test_a_store_opens_beside_another_process_writing_to_it(tmp_path: Path) -> None:
    path = tmp_path / "store"
    tests = str(Path(__file__).parent)
    proc = subprocess.Popen(
        [sys.executable, "-c", STORE_WRITER, str(path), tests], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "writing"
        for _ in range(5):
            store = LmdbSessionStore(path)  # before the fix: StoreRefused, damaged pages
            assert store.load_session("s-0").session_id == "s-0"
            store.close()
    finally:
        proc.kill()
        proc.wait(timeout=30)
        if proc.stdout is not None:
            proc.stdout.close()
