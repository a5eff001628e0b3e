"""A journaled LMDB backend (``LmdbBackend(journal=True)``) against power cuts.

The disk model is this file's, and knows nothing of the journal's rules: the
disk holds ``data.mdb`` as it was when LMDB last returned from a flush
(``Environment.sync``, seen through a wrapper around the environment), plus
any subset of the pages written since, meta pages included, in whatever
order the page cache wrote them back; and the journal file as it is (each of
its appends was flushed before it returned; a torn append is the journal
file's own tests' business). After the cut, opening the directory must give
back exactly what every returned ``write`` committed.
"""

from __future__ import annotations

import random
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import lmdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import storage._lmdb as lmdb_module
from storage import Failed, LmdbBackend, LmdbSessionStore
from storage._journal import BLOCK, JOURNAL_NAME

TABLES = ("a", "b")
REGION = 16 * BLOCK  # small: checkpoints come every few commits


class FlushedDisk:
    """What the disk holds of each ``data.mdb``: its bytes when LMDB last flushed it."""

    def __init__(self) -> None:
        self.flushed: dict[str, bytes] = {}

    def environment(self, real: Callable[..., Any]) -> Callable[..., Any]:
        disk = self

        class Recording:
            def __init__(self, path: str, **options: Any) -> None:
                self._env = real(path, **options)
                self._data = Path(path) / "data.mdb"
                disk.flushed[str(self._data)] = self._data.read_bytes()  # as created

            def sync(self, force: bool = False) -> None:
                self._env.sync(force)
                disk.flushed[str(self._data)] = self._data.read_bytes()

            def __getattr__(self, name: str) -> Any:
                return getattr(self._env, name)

        return Recording

    def cut(self, live: Path, into: Path, rng: random.Random) -> None:
        """Build the disk after a power cut of ``live`` in ``into``."""
        data = live / "data.mdb"
        flushed, now = self.flushed[str(data)], data.read_bytes()
        page = 4096
        image = bytearray(flushed + bytes(max(0, len(now) - len(flushed))))
        for at in range(0, len(now), page):
            if now[at : at + page] != image[at : at + page] and rng.random() < 0.5:
                image[at : at + page] = now[at : at + page]
        into.mkdir(mode=0o700)
        (into / "data.mdb").write_bytes(bytes(image))
        shutil.copyfile(live / JOURNAL_NAME, into / JOURNAL_NAME)


@pytest.fixture
def disk(monkeypatch: pytest.MonkeyPatch) -> Iterator[FlushedDisk]:
    model = FlushedDisk()
    monkeypatch.setattr(lmdb_module.lmdb, "Environment", model.environment(lmdb.Environment))
    yield model


def _backend(path: Path, *, journal: bool = True) -> LmdbBackend:
    return LmdbBackend(path, tables=TABLES, journal=journal, journal_region_bytes=REGION)


def _contents(backend: LmdbBackend) -> dict[tuple[str, bytes], bytes]:
    def read(txn: Any) -> dict[tuple[str, bytes], bytes]:
        return {(t, k): v for t in TABLES for k, v in txn.scan(t)}

    return backend.read(read)


_write = st.tuples(
    st.sampled_from(TABLES),
    st.integers(0, 300),
    st.none() | st.binary(min_size=1, max_size=1500),
)
_commit = st.tuples(st.lists(_write, min_size=1, max_size=8), st.booleans())


def _apply(
    backend: LmdbBackend, model: dict[tuple[str, bytes], bytes], writes: list[Any], fails: bool
) -> None:
    """One ``write``: the writes, then (``fails``) an exception that aborts them all."""

    def fn(txn: Any) -> None:
        for table, n, value in writes:
            key = b"key-%04d" % n
            if value is None:
                txn.delete(table, key)
            else:
                txn.put(table, key, value)
        if fails:
            raise ValueError("aborted on purpose")

    try:
        backend.write(fn)
    except ValueError:
        return
    for table, n, value in writes:
        key = b"key-%04d" % n
        if value is None:
            model.pop((table, key), None)
        else:
            model[(table, key)] = value


# The disk model is keyed by path and every example writes new paths: sharing it is safe.
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(commits=st.lists(_commit, min_size=1, max_size=60), seed=st.integers(0, 2**32 - 1))
def test_after_a_power_cut_every_returned_write_is_there_and_nothing_else(
    disk: FlushedDisk, tmp_path_factory: pytest.TempPathFactory, commits: list[Any], seed: int
) -> None:
    live = tmp_path_factory.mktemp("live") / "store"
    backend = _backend(live)
    model: dict[tuple[str, bytes], bytes] = {}
    try:
        for writes, fails in commits:
            _apply(backend, model, writes, fails)
        cut = tmp_path_factory.mktemp("cut") / "store"
        disk.cut(live, cut, random.Random(seed))
    finally:
        backend.close()
    recovered = _backend(cut)
    try:
        assert _contents(recovered) == model
    finally:
        recovered.close()


def test_concurrent_writers_share_entries_and_survive_a_cut(
    disk: FlushedDisk, tmp_path: Path
) -> None:
    backend = _backend(tmp_path / "live")
    models = [dict[tuple[str, bytes], bytes]() for _ in range(4)]
    start = threading.Barrier(4)

    def writer(index: int) -> None:
        rng = random.Random(index)
        start.wait()
        for _ in range(60):
            writes = [
                ("a", index * 1000 + rng.randrange(50), None if rng.random() < 0.2 else b"v" * 99)
            ]
            _apply(backend, models[index], writes, rng.random() < 0.1)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert backend.counters().commits < backend.counters().writes  # batches happened
    disk.cut(tmp_path / "live", tmp_path / "cut", random.Random(1))
    backend.close()
    recovered = _backend(tmp_path / "cut")
    expected = {key: value for model in models for key, value in model.items()}
    assert _contents(recovered) == expected
    recovered.close()


def test_a_directory_opened_without_the_journal_replays_it_and_removes_it(
    disk: FlushedDisk, tmp_path: Path
) -> None:
    backend = _backend(tmp_path / "live")
    model: dict[tuple[str, bytes], bytes] = {}
    for n in range(30):
        _apply(backend, model, [("b", n, b"x" * 700)], False)
    disk.cut(tmp_path / "live", tmp_path / "cut", random.Random(3))
    backend.close()
    plain = _backend(tmp_path / "cut", journal=False)
    assert _contents(plain) == model
    assert not (tmp_path / "cut" / JOURNAL_NAME).exists()
    _apply(plain, model, [("b", 99, b"y")], False)
    plain.close()
    again = _backend(tmp_path / "cut")  # a new journal, based on the database as it is
    assert _contents(again) == model
    again.close()


def test_a_clean_close_leaves_nothing_to_replay(tmp_path: Path) -> None:
    backend = _backend(tmp_path)
    _apply(backend, {}, [("a", 1, b"1")], False)
    backend.close()
    reopened = _backend(tmp_path)
    assert _contents(reopened) == {("a", b"key-0001"): b"1"}
    reopened.close()


def test_one_commit_costs_one_flush(tmp_path: Path) -> None:
    backend = LmdbBackend(tmp_path, tables=TABLES, journal=True)  # the default region
    before = backend.counters()
    for n in range(20):
        _apply(backend, {}, [("a", n, b"v")], False)
    spent = backend.counters() - before
    assert (spent.writes, spent.commits, spent.fsyncs) == (20, 20, 20)
    backend.close()


def test_a_second_process_is_refused_while_the_journal_is_held(tmp_path: Path) -> None:
    import multiprocessing

    backend = _backend(tmp_path)
    context = multiprocessing.get_context("spawn")
    with context.Pool(1) as pool:
        for journal in (True, False):
            outcome = pool.apply(_open_elsewhere, (str(tmp_path), journal))
            assert outcome == "Failed: busy"
    backend.close()
    with context.Pool(1) as pool:
        assert pool.apply(_open_elsewhere, (str(tmp_path), False)) == "opened"


def _open_elsewhere(path: str, journal: bool) -> str:
    try:
        backend = _backend(Path(path), journal=journal)
    except Failed as exc:
        return f"Failed: {exc.fields.get('reason')}"
    backend.close()
    return "opened"


def test_the_journal_needs_sync(tmp_path: Path) -> None:
    with pytest.raises(Failed, match="needs sync=True"):
        LmdbBackend(tmp_path, tables=TABLES, journal=True, sync=False)


def test_a_journaled_session_store_keeps_what_it_committed(tmp_path: Path) -> None:
    from storage import ManualClock, SessionRecord

    clock = ManualClock(start=1_700_000_000.0)
    store = LmdbSessionStore(tmp_path, clock=clock, journal=True)
    record = SessionRecord(
        session_id="s1", namespace_id="ns", created_at=clock.now(), updated_at=clock.now()
    )
    store.create_session(record)
    store.close()
    store = LmdbSessionStore(tmp_path, clock=clock, journal=True)
    assert store.load_session("s1") == record
    store.close()


def test_a_checkpoint_that_fails_after_a_commit_does_not_fail_the_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import storage._journaled as journaled

    backend = _backend(tmp_path)
    monkeypatch.setattr(journaled, "CHECKPOINT_COMMITS", 1)
    real = journaled.Keeper.checkpoint

    def failing(self: journaled.Keeper, *, clean: bool = False) -> None:
        raise Failed("the disk went away", path=str(tmp_path))

    monkeypatch.setattr(journaled.Keeper, "checkpoint", failing)
    model: dict[tuple[str, bytes], bytes] = {}
    with caplog.at_level("WARNING", logger="subagents.storage"):
        _apply(backend, model, [("a", 1, b"committed")], False)  # returns: it is durable
    assert "checkpoint after a commit failed" in caplog.text
    monkeypatch.setattr(journaled.Keeper, "checkpoint", real)
    _apply(backend, model, [("a", 2, b"next")], False)
    backend.close()
    reopened = _backend(tmp_path)
    assert _contents(reopened) == model
    reopened.close()


def test_a_fork_keeps_the_parents_checkpoint_pinned(disk: FlushedDisk, tmp_path: Path) -> None:
    import os

    # The default region: no checkpoint re-pins between the fork and the cut.
    backend = LmdbBackend(tmp_path / "live", tables=TABLES, journal=True)
    model: dict[tuple[str, bytes], bytes] = {}
    for n in range(40):
        _apply(backend, model, [("a", n % 7, b"before-%d" % n)], False)
    child = os.fork()  # the at-fork handlers checkpoint, drop the pin and pin again
    if child == 0:
        os._exit(0)
    assert os.waitpid(child, 0)[1] == 0
    for n in range(40):
        _apply(backend, model, [("a", n % 5, b"after-%d" % n), ("b", n, None)], False)
    disk.cut(tmp_path / "live", tmp_path / "cut", random.Random(5))
    backend.close()
    recovered = _backend(tmp_path / "cut")
    assert _contents(recovered) == model
    recovered.close()


def test_a_map_that_grows_keeps_the_checkpoint_pinned(disk: FlushedDisk, tmp_path: Path) -> None:
    backend = LmdbBackend(
        tmp_path / "live", tables=TABLES, journal=True, map_size=1 << 20, auto_grow=True
    )
    model: dict[tuple[str, bytes], bytes] = {}
    grown_from = backend.map_size
    for n in range(120):
        _apply(backend, model, [("a", n, b"g" * 3000), ("b", n % 9, b"h" * 900)], False)
    assert backend.map_size > grown_from  # the map grew at least once on the way
    disk.cut(tmp_path / "live", tmp_path / "cut", random.Random(9))
    backend.close()
    recovered = _backend(tmp_path / "cut")
    assert _contents(recovered) == model
    recovered.close()


def test_a_failed_recovery_leaves_no_open_journal_or_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    import storage._journaled as journaled

    backend = _backend(tmp_path)
    _apply(backend, {}, [("a", 1, b"1")], False)
    backend.close()

    def failing(self: journaled.Keeper) -> None:
        raise lmdb.Error("pinning failed")

    (tmp_path / "journal.log").unlink()  # a new journal: replay() creates one, then fails
    fds = set(os.listdir("/proc/self/fd"))
    monkeypatch.setattr(journaled.Keeper, "_pin", failing)
    with pytest.raises(Failed, match="journal recovery failed"):
        _backend(tmp_path)
    assert set(os.listdir("/proc/self/fd")) <= fds  # nothing of the failed open stays open
    monkeypatch.undo()
    reopened = _backend(tmp_path)  # the directory lock was released
    assert _contents(reopened) == {("a", b"key-0001"): b"1"}
    reopened.close()


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_periodic_checkpoints_keep_every_returned_write_across_a_cut(
    disk: FlushedDisk, tmp_path: Path, seed: int
) -> None:
    # The default region: checkpoints come every CHECKPOINT_COMMITS commits.
    import storage._journaled as journaled

    backend = LmdbBackend(tmp_path / "live", tables=TABLES, journal=True)
    rng = random.Random(seed)
    model: dict[tuple[str, bytes], bytes] = {}
    commits = journaled.CHECKPOINT_COMMITS * 3 + rng.randrange(journaled.CHECKPOINT_COMMITS)
    for _ in range(commits):
        n = rng.randrange(400)
        writes = [("a", n, None if rng.random() < 0.2 else b"v" * rng.randrange(1, 600))]
        _apply(backend, model, writes, rng.random() < 0.05)
    spent = backend.counters()
    assert spent.fsyncs > spent.commits  # checkpoints happened, and were counted
    disk.cut(tmp_path / "live", tmp_path / "cut", rng)
    backend.close()
    recovered = _backend(tmp_path / "cut")
    assert _contents(recovered) == model
    recovered.close()


def test_a_write_larger_than_the_journal_is_flushed_by_lmdb_itself(
    disk: FlushedDisk, tmp_path: Path
) -> None:
    backend = _backend(tmp_path / "live")  # the journal holds 64 KiB of entries
    model: dict[tuple[str, bytes], bytes] = {}
    _apply(backend, model, [("a", 1, b"small")], False)
    _apply(backend, model, [("b", n, b"L" * 1500) for n in range(60)], False)  # ~90 KiB
    _apply(backend, model, [("a", 2, b"after")], False)
    disk.cut(tmp_path / "live", tmp_path / "cut", random.Random(2))
    backend.close()
    recovered = _backend(tmp_path / "cut")
    assert _contents(recovered) == model
    recovered.close()
