"""LMDB-specific behaviour: persistence, shared environments, several processes,
stale readers, full maps, corrupted bytes, the batching writer and closing.

The contract itself is checked for every store in ``test_contract.py``; this
file covers what only the LMDB backend has to get right.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from builders import (
    NS,
    acceptance,
    as_layout_1,
    drive,
    mixed_attempt_states,
    setup_session,
    tables,
    terminal,
)

from storage import (
    CorruptRecord,
    Failed,
    LmdbBackend,
    LmdbSessionStore,
    ManualClock,
    NotFound,
    RetryableStorage,
    StorageFull,
    Txn,
)
from storage._lmdb import _registry

REPO = Path(__file__).resolve().parents[2]
TABLES = ("t", "u")
SMALL_MAP = 256 * 1024


# -- fixtures ------------------------------------------------------------------------------------


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(start=1_700_000_000.0)


class Opened:
    """Opens backends and stores and closes every one of them in teardown."""

    def __init__(self, path: Path, clock: ManualClock) -> None:
        self.path = path
        self.clock = clock
        self._closers: list[Callable[[], None]] = []

    def backend(self, **options: Any) -> LmdbBackend:
        options.setdefault("tables", TABLES)
        backend = LmdbBackend(self.path, **options)
        self._closers.append(backend.close)
        return backend

    def store(self, **options: Any) -> LmdbSessionStore:
        options.setdefault("clock", self.clock)
        store = LmdbSessionStore(self.path, **options)
        self._closers.append(store.close)
        return store

    def close_all(self) -> None:
        for close in reversed(self._closers):
            close()


@pytest.fixture
def opened(tmp_path: Path, clock: ManualClock) -> Iterator[Opened]:
    handle = Opened(tmp_path / "env", clock)
    try:
        yield handle
    finally:
        handle.close_all()
    assert str(handle.path.resolve()) not in _registry, "an environment was left open"


def _python(code: str, *args: str, stdin: int | None = None) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _keys(backend: LmdbBackend, table: str = "t") -> list[bytes]:
    return backend.read(lambda txn: [k for k, _ in txn.scan(table)])


def _last_txnid(backend: LmdbBackend) -> int:
    return int(backend._live().env.info()["last_txnid"])


# -- persistence and sharing ---------------------------------------------------------------------


def test_committed_attempts_survive_closing_and_reopening_the_store(
    opened: Opened, clock: ManualClock
) -> None:
    store = opened.store()
    setup_session(store, clock)
    record = drive(store, store.accept_attempt(acceptance(clock)), clock)
    done = store.commit_terminal(terminal(record, clock))
    store.close()

    reopened = opened.store()
    assert reopened.load_attempt(done.attempt_id) == done
    assert [a.attempt_id for a in reopened.list_pending_attempts(NS)] == [done.attempt_id]


def test_a_layout_1_directory_is_migrated_when_reopened(opened: Opened, clock: ManualClock) -> None:
    store = opened.store()
    setup_session(store, clock)
    mixed_attempt_states(store, clock)
    expected = tables(store)
    as_layout_1(store.backend)
    store.close()

    reopened = opened.store()
    assert tables(reopened) == expected
    assert [a.attempt_id for a in reopened.list_pending_attempts(NS)] == [
        "subattempt_art",
        "subattempt_m1",
        "subattempt_m2",
        "subattempt_m4",
    ]


def test_two_stores_on_one_path_share_one_environment_until_the_last_closes(
    opened: Opened, clock: ManualClock
) -> None:
    first = opened.store()
    second = opened.store()
    assert first.lmdb_backend._entry is second.lmdb_backend._entry
    setup_session(first, clock)
    accepted = first.accept_attempt(acceptance(clock))

    first.close()
    assert second.load_attempt(accepted.attempt_id) == accepted
    assert str(opened.path.resolve()) in _registry


def test_a_write_by_a_second_process_is_read_by_the_first(
    opened: Opened, clock: ManualClock
) -> None:
    store = opened.store()
    setup_session(store, clock)
    code = (
        "import sys\n"
        "sys.path.insert(0, sys.argv[2])\n"
        "from builders import acceptance\n"
        "from storage import LmdbSessionStore, ManualClock\n"
        "clock = ManualClock(start=1_700_000_000.0)\n"
        "store = LmdbSessionStore(sys.argv[1], clock=clock)\n"
        "store.accept_attempt(acceptance(clock, 'subattempt_other', 'other-bg-0000bbbb'))\n"
        "store.close()\n"
    )
    child = _python(code, str(opened.path), str(Path(__file__).parent))
    _, err = child.communicate(timeout=60)
    assert child.returncode == 0, err

    assert store.load_attempt("subattempt_other").agent_id == "other-bg-0000bbbb"


def _child_writes(path: str) -> None:
    backend = LmdbBackend(path, tables=TABLES)
    backend.write(lambda txn: txn.put("t", b"from-child", b"1"))
    backend.close()


def test_a_forked_child_opens_its_own_environment_and_the_parent_keeps_working(
    opened: Opened,
) -> None:
    backend = opened.backend()
    backend.write(lambda txn: txn.put("t", b"from-parent", b"1"))
    child = multiprocessing.get_context("fork").Process(
        target=_child_writes, args=(str(opened.path),)
    )
    child.start()
    child.join(timeout=60)
    assert child.exitcode == 0

    assert _keys(backend) == [b"from-child", b"from-parent"]
    # The parent's reader slot is still its own after the child closed its copy.
    pid = str(os.getpid())
    assert backend.read(lambda txn: backend.readers()).split().count(pid) == 1


def test_stale_readers_of_a_killed_process_are_cleared_on_open(opened: Opened) -> None:
    # Stay open meanwhile: the last process to open an environment resets the
    # whole reader table anyway, so only an open beside a live one must clear.
    first = opened.backend()
    code = (
        "import sys\n"
        "from storage import LmdbBackend\n"
        "backend = LmdbBackend(sys.argv[1], tables=('t', 'u'))\n"
        "def hold(txn):\n"
        "    print('reading', flush=True)\n"
        "    sys.stdin.read()\n"
        "backend.read(hold)\n"
    )
    child = _python(code, str(opened.path), stdin=subprocess.PIPE)
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "reading"
        assert str(child.pid) in first.readers()
    finally:
        child.kill()
        child.communicate(timeout=60)

    second = opened.backend()
    assert second.stale_readers_cleared >= 1
    assert str(child.pid) not in second.readers()


# -- full maps ------------------------------------------------------------------------------------


def _accept_until_full(store: LmdbSessionStore, clock: ManualClock) -> tuple[list[str], str]:
    """Accept attempts until the map is full; (accepted ids, the refused id)."""
    accepted: list[str] = []
    for n in range(100_000):
        attempt_id = f"subattempt_{n:06d}"
        try:
            store.accept_attempt(acceptance(clock, attempt_id, f"agent-bg-{n:08x}"))
        except StorageFull:
            return accepted, attempt_id
        accepted.append(attempt_id)
    raise AssertionError("the map never filled up")


def test_a_full_map_is_storage_full_and_keeps_every_earlier_commit(
    opened: Opened, clock: ManualClock
) -> None:
    store = opened.store(map_size=SMALL_MAP)
    setup_session(store, clock)
    accepted, refused = _accept_until_full(store, clock)

    assert len(accepted) > 10
    with pytest.raises(NotFound):
        store.load_attempt(refused)
    store.close()
    reopened = opened.store(map_size=SMALL_MAP)
    assert [a.attempt_id for a in reopened.list_active_attempts(NS)] == accepted


def test_a_write_that_overflows_the_map_leaves_none_of_its_puts(opened: Opened) -> None:
    backend = opened.backend(map_size=SMALL_MAP)
    backend.write(lambda txn: txn.put("t", b"kept", b"1"))

    def too_big(txn: Txn) -> None:
        txn.put("t", b"small-first", b"x")
        txn.put("u", b"huge", b"x" * (2 * SMALL_MAP))

    with pytest.raises(StorageFull) as raised:
        backend.write(too_big)
    assert raised.value.fields["table"] == "u"
    assert _keys(backend) == [b"kept"]
    assert _keys(backend, "u") == []
    backend.write(lambda txn: txn.put("t", b"after", b"1"))
    assert _keys(backend) == [b"after", b"kept"]


def test_a_write_that_swallows_storage_full_is_still_not_committed(opened: Opened) -> None:
    backend = opened.backend(map_size=SMALL_MAP)

    def swallow(txn: Txn) -> str:
        txn.put("t", b"before", b"1")
        try:
            txn.put("t", b"huge", b"x" * (2 * SMALL_MAP))
        except StorageFull:
            return "ignored"
        return "fit"

    with pytest.raises(StorageFull):
        backend.write(swallow)
    assert _keys(backend) == []


def test_auto_grow_doubles_the_map_and_the_write_succeeds(
    opened: Opened, clock: ManualClock
) -> None:
    # Unsynced: this test is about growth, not durability, and stays fast.
    store = opened.store(
        map_size=SMALL_MAP, auto_grow=True, max_map_size=64 * SMALL_MAP, sync=False
    )
    setup_session(store, clock)
    for n in range(1500):
        store.accept_attempt(acceptance(clock, f"subattempt_{n:06d}", f"agent-bg-{n:08x}"))

    assert store.lmdb_backend.map_size > SMALL_MAP
    assert len(store.list_active_attempts(NS)) == 1500


def test_auto_grow_stops_at_max_map_size_with_storage_full(opened: Opened) -> None:
    backend = opened.backend(map_size=SMALL_MAP, auto_grow=True, max_map_size=2 * SMALL_MAP)
    with pytest.raises(StorageFull):
        backend.write(lambda txn: txn.put("t", b"huge", b"x" * (4 * SMALL_MAP)))
    assert backend.map_size == 2 * SMALL_MAP
    assert _keys(backend) == []


@pytest.mark.parametrize(
    "grown_bytes",
    [1024 * 1024, 1024],
    ids=["their-data-exceeds-our-map", "our-write-exceeds-our-map"],
)
def test_a_map_grown_by_another_process_is_adopted_without_auto_grow(
    opened: Opened, grown_bytes: int
) -> None:
    backend = opened.backend(map_size=SMALL_MAP)
    code = (
        "import sys\n"
        "from storage import LmdbBackend\n"
        "backend = LmdbBackend(sys.argv[1], tables=('t', 'u'), map_size=8 * 256 * 1024,\n"
        "                      sync=True)\n"
        "backend.write(lambda txn: txn.put('u', b'grown', b'x' * int(sys.argv[2])))\n"
        "backend.close()\n"
    )
    child = _python(code, str(opened.path), str(grown_bytes))
    _, err = child.communicate(timeout=60)
    assert child.returncode == 0, err

    backend.write(lambda txn: txn.put("t", b"big", b"y" * SMALL_MAP))
    assert backend.map_size == 8 * SMALL_MAP
    assert _keys(backend, "u") == [b"grown"]
    assert _keys(backend) == [b"big"]


# -- bad bytes on disk ---------------------------------------------------------------------------


def test_corrupted_record_bytes_fail_closed_and_other_records_still_load(
    opened: Opened, clock: ManualClock
) -> None:
    store = opened.store()
    setup_session(store, clock)
    good = store.accept_attempt(acceptance(clock, "subattempt_good", "good-bg-0000aaaa"))
    store.accept_attempt(acceptance(clock, "subattempt_bad", "bad-bg-0000bbbb"))
    store.lmdb_backend.write(lambda txn: txn.put("attempts", b"subattempt_bad", b"\xc1garbage"))

    with pytest.raises(CorruptRecord) as raised:
        store.load_attempt("subattempt_bad")
    assert raised.value.fields["table"] == "attempts"
    assert store.load_attempt("subattempt_good") == good
    store.close()
    assert opened.store().load_attempt("subattempt_good") == good


def test_a_data_file_that_is_not_lmdb_fails_closed_on_open(opened: Opened) -> None:
    opened.path.mkdir()
    (opened.path / "data.mdb").write_bytes(b"\x5a" * 65536)
    with pytest.raises(CorruptRecord) as raised:
        opened.backend()
    assert raised.value.fields["path"] == str(opened.path.resolve() / "data.mdb")
    assert str(opened.path.resolve()) not in _registry


# -- the batching writer -------------------------------------------------------------------------


class Batch:
    """Holds the writer with one blocked write while others queue behind it."""

    def __init__(self, backend: LmdbBackend) -> None:
        self.backend = backend
        self.results: dict[str, object] = {}
        self._inside = threading.Event()
        self._release = threading.Event()
        self._threads: list[threading.Thread] = []

    def _call(self, name: str, fn: Callable[[Txn], object]) -> None:
        try:
            self.results[name] = self.backend.write(fn)
        except Exception as exc:
            self.results[name] = exc

    def hold(self) -> None:
        def blocker(txn: Txn) -> str:
            txn.put("t", b"holder", b"1")
            self._inside.set()
            assert self._release.wait(timeout=60)
            return "holder"

        self._start("holder", blocker)
        assert self._inside.wait(timeout=60)

    def _start(self, name: str, fn: Callable[[Txn], object]) -> None:
        thread = threading.Thread(target=self._call, args=(name, fn))
        thread.start()
        self._threads.append(thread)

    def queue(self, calls: dict[str, Callable[[Txn], object]]) -> None:
        entry = self.backend._entry
        for name, fn in calls.items():
            self._start(name, fn)
        with entry.mu:
            assert entry.enqueued.wait_for(lambda: len(entry.queue) == len(calls), timeout=60)

    def finish(self) -> None:
        self._release.set()
        for thread in self._threads:
            thread.join(timeout=60)
        assert not any(thread.is_alive() for thread in self._threads)


def _put(key: bytes, value: bytes = b"1") -> Callable[[Txn], bytes]:
    def fn(txn: Txn) -> bytes:
        txn.put("t", key, value)
        return key

    return fn


def test_concurrent_writes_share_one_commit_and_each_caller_gets_its_value(
    opened: Opened,
) -> None:
    backend = opened.backend()
    batch = Batch(backend)
    before = _last_txnid(backend)
    batch.hold()
    batch.queue({f"w{n}": _put(f"k{n}".encode()) for n in range(5)})
    batch.finish()

    assert batch.results == {"holder": "holder"} | {f"w{n}": f"k{n}".encode() for n in range(5)}
    # One commit for the holder, one for the five queued writes together.
    assert _last_txnid(backend) == before + 2
    assert _keys(backend) == [b"holder"] + [f"k{n}".encode() for n in range(5)]


def test_a_raising_write_in_a_batch_leaves_nothing_and_the_others_commit(
    opened: Opened,
) -> None:
    backend = opened.backend()

    def boom(txn: Txn) -> None:
        txn.put("t", b"boom-part", b"1")
        txn.delete("t", b"holder")
        raise RuntimeError("boom")

    batch = Batch(backend)
    batch.hold()
    batch.queue({"a": _put(b"a"), "boom": boom, "b": _put(b"b")})
    batch.finish()

    assert batch.results["a"] == b"a"
    assert batch.results["b"] == b"b"
    error = batch.results["boom"]
    assert isinstance(error, RuntimeError)
    assert str(error) == "boom"
    assert _keys(backend) == [b"a", b"b", b"holder"]


def test_failed_writes_alone_and_in_a_batch_leave_no_cyclic_garbage(opened: Opened) -> None:
    # A failed write's traceback reaches the writer's frames; were they to hold the
    # error, each failure would wait for a full collection, pinning its frames and
    # transaction: a long-lived host's heap grew with every refused claim (issue 16).
    backend = opened.backend()

    def boom(txn: Txn) -> None:
        txn.put("t", b"boom-part", b"1")
        raise RuntimeError("boom")

    gc.collect()
    gc.disable()
    try:
        with pytest.raises(RuntimeError, match="boom"):
            backend.write(boom)
        batch = Batch(backend)
        batch.hold()
        batch.queue({"a": _put(b"a"), "boom": boom, "b": _put(b"b")})
        batch.finish()
        assert isinstance(batch.results.pop("boom"), RuntimeError)
        batch.results.clear()
        garbage = gc.collect()
    finally:
        gc.enable()
    assert garbage == 0


def test_a_write_that_overflows_the_map_in_a_batch_fails_alone(opened: Opened) -> None:
    backend = opened.backend(map_size=SMALL_MAP)

    def huge(txn: Txn) -> None:
        txn.put("t", b"huge-part", b"1")
        txn.put("u", b"huge", b"x" * (2 * SMALL_MAP))

    batch = Batch(backend)
    batch.hold()
    batch.queue({"a": _put(b"a"), "huge": huge, "b": _put(b"b")})
    batch.finish()

    assert isinstance(batch.results["huge"], StorageFull)
    assert batch.results["a"] == b"a"
    assert batch.results["b"] == b"b"
    assert _keys(backend) == [b"a", b"b", b"holder"]
    assert _keys(backend, "u") == []


def test_a_batch_that_overflows_with_auto_grow_grows_and_commits_everyone(
    opened: Opened,
) -> None:
    backend = opened.backend(map_size=SMALL_MAP, auto_grow=True, max_map_size=16 * SMALL_MAP)

    def huge(txn: Txn) -> str:
        txn.put("u", b"huge", b"x" * (2 * SMALL_MAP))
        return "huge"

    batch = Batch(backend)
    batch.hold()
    batch.queue({"a": _put(b"a"), "huge": huge, "b": _put(b"b")})
    batch.finish()

    assert batch.results == {"holder": "holder", "a": b"a", "huge": "huge", "b": b"b"}
    assert backend.map_size > SMALL_MAP
    assert _keys(backend, "u") == [b"huge"]


def test_an_uncontended_write_runs_on_the_callers_own_thread(opened: Opened) -> None:
    backend = opened.backend()
    assert backend.write(lambda txn: threading.get_ident()) == threading.get_ident()


def test_after_a_batch_a_lone_writer_gets_the_uncontended_path_back(opened: Opened) -> None:
    backend = opened.backend()
    batch = Batch(backend)
    batch.hold()
    batch.queue({"a": _put(b"a"), "b": _put(b"b")})
    batch.finish()
    assert backend._entry.last_batch == 2

    # The next lone write leads a batch of one (it waited for company that
    # never came); after it the writer is back on the uncontended path.
    assert backend.write(_put(b"lone")) == b"lone"
    assert backend._entry.last_batch == 1
    assert backend.write(lambda txn: threading.get_ident()) == threading.get_ident()
    assert _keys(backend) == [b"a", b"b", b"holder", b"lone"]


def test_many_threads_writing_at_once_are_all_answered_and_all_committed(
    opened: Opened,
) -> None:
    backend = opened.backend()
    start = threading.Barrier(8)
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        try:
            start.wait(timeout=60)
            for i in range(25):
                assert backend.write(_put(f"w{n}-{i:02d}".encode())) == f"w{n}-{i:02d}".encode()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    backend.drain()

    assert errors == []
    assert len(_keys(backend)) == 8 * 25


# -- reads ---------------------------------------------------------------------------------------


def _in_a_held_read(
    backend: LmdbBackend, release: threading.Event
) -> tuple[threading.Thread, list[object]]:
    """Start a read that stays open until ``release``; returns once it is open."""
    inside = threading.Event()
    seen: list[object] = []

    def hold(txn: Txn) -> None:
        seen.append(txn.get("t", b"k"))
        inside.set()
        assert release.wait(timeout=60)
        seen.append(txn.get("t", b"k"))

    thread = threading.Thread(target=backend.read, args=(hold,))
    thread.start()
    assert inside.wait(timeout=60)
    return thread, seen


def test_a_read_sees_one_snapshot_even_while_a_write_commits(opened: Opened) -> None:
    backend = opened.backend()
    backend.write(lambda txn: txn.put("t", b"k", b"old"))
    release = threading.Event()
    reader, seen = _in_a_held_read(backend, release)

    backend.write(lambda txn: txn.put("t", b"k", b"new"))
    release.set()
    reader.join(timeout=60)

    assert seen == [b"old", b"old"]
    assert backend.read(lambda txn: txn.get("t", b"k")) == b"new"


def test_a_full_reader_table_is_retryable(opened: Opened) -> None:
    backend = opened.backend(max_readers=1)
    release = threading.Event()
    reader, _ = _in_a_held_read(backend, release)
    try:
        with pytest.raises(RetryableStorage):
            backend.read(lambda txn: txn.get("t", b"k"))
    finally:
        release.set()
        reader.join(timeout=60)
    assert backend.read(lambda txn: txn.get("t", b"k")) is None


# -- misuse and closing --------------------------------------------------------------------------


def test_a_transaction_cannot_start_another_one(opened: Opened) -> None:
    backend = opened.backend()
    with pytest.raises(Failed):
        backend.read(lambda txn: backend.write(_put(b"inner")))
    with pytest.raises(Failed):
        backend.write(lambda txn: backend.read(lambda inner: None))
    with pytest.raises(Failed):
        backend.write(lambda txn: backend.drain())
    with pytest.raises(Failed):
        backend.read(lambda txn: backend.close())
    assert _keys(backend) == []


def test_opening_a_path_with_another_sync_mode_fails(opened: Opened) -> None:
    opened.backend()
    with pytest.raises(Failed) as raised:
        opened.backend(sync=False)
    assert raised.value.fields["open_sync"] is True


def test_scans_start_inclusively_and_stop_at_the_end_of_the_prefix(opened: Opened) -> None:
    backend = opened.backend()
    backend.write(lambda txn: [txn.put("t", k, k) for k in (b"a\x001", b"a\x002", b"b\x001")])
    assert backend.read(lambda txn: [k for k, _ in txn.scan("t", b"a\x00")]) == [
        b"a\x001",
        b"a\x002",
    ]
    assert backend.read(lambda txn: [k for k, _ in txn.scan("t", b"a\x00", b"a\x002")]) == [
        b"a\x002"
    ]
    assert backend.read(lambda txn: [k for k, _ in txn.scan("t", b"c")]) == []


def test_an_unknown_table_is_failed_not_a_raw_lmdb_error(opened: Opened) -> None:
    backend = opened.backend()
    with pytest.raises(Failed) as raised:
        backend.read(lambda txn: txn.get("nope", b"k"))
    assert raised.value.fields["table"] == "nope"


def test_a_closed_backend_fails_every_call(opened: Opened) -> None:
    backend = opened.backend()
    backend.close()
    backend.close()
    with pytest.raises(Failed):
        backend.read(lambda txn: None)
    with pytest.raises(Failed):
        backend.write(_put(b"k"))
    with pytest.raises(Failed):
        backend.drain()


def test_a_closed_store_fails_every_call(opened: Opened, clock: ManualClock) -> None:
    store = opened.store()
    setup_session(store, clock)
    store.close()
    with pytest.raises(Failed):
        store.load_session("session-1")
    with pytest.raises(Failed):
        store.accept_attempt(acceptance(clock))


def test_without_a_linger_window_a_lone_writer_commits_at_once_on_its_own_thread(
    opened: Opened,
) -> None:
    backend = opened.backend()
    assert backend._entry.linger == 0.0
    assert backend.write(lambda txn: threading.get_ident()) == threading.get_ident()


def test_a_lingering_lone_writer_shares_its_commit_with_a_writer_arriving_in_its_window(
    opened: Opened,
) -> None:
    backend = opened.backend(linger_seconds=1.0)
    entry = backend._entry
    before = _last_txnid(backend)
    results: dict[str, object] = {}

    def write(name: str) -> None:
        results[name] = backend.write(_put(name.encode()))

    first = threading.Thread(target=write, args=("first",))
    first.start()
    with entry.mu:
        # The first writer leads a batch of one and lingers for company.
        assert entry.enqueued.wait_for(lambda: len(entry.queue) == 1, timeout=60)
    second = threading.Thread(target=write, args=("second",))
    second.start()
    first.join(timeout=60)
    second.join(timeout=60)

    assert results == {"first": b"first", "second": b"second"}
    # The second write woke the lingering leader: one commit holds both.
    assert _last_txnid(backend) == before + 1
    assert _keys(backend) == [b"first", b"second"]


def test_a_lingering_writer_alone_commits_when_its_window_ends(opened: Opened) -> None:
    backend = opened.backend(linger_seconds=0.001)
    before = _last_txnid(backend)
    assert backend.write(_put(b"lone")) == b"lone"
    assert backend.write(_put(b"again")) == b"again"
    assert _last_txnid(backend) == before + 2
    assert _keys(backend) == [b"again", b"lone"]


@pytest.mark.parametrize("linger", [-0.001, 1.5])
def test_a_linger_window_outside_0_to_1_second_is_refused(opened: Opened, linger: float) -> None:
    with pytest.raises(Failed, match="linger_seconds"):
        opened.backend(linger_seconds=linger)
