"""Storage that never lies: sealed values, a store identity, files checked before
they are mapped, the check and its repair, backups, mapped disk errors.

Cases that could kill the process before the fix (SIGBUS on a truncated file,
SIGABRT on zeroed pages) open the store in a child process, so a regression is
a failed assertion naming the signal instead of a dead test run.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lmdb
import msgspec
import pytest
from builders import NS, SESSION, acceptance, drive, mixed_attempt_states, setup_session, terminal

import storage.admin
from storage import (
    CorruptRecord,
    KernelStore,
    LmdbSessionStore,
    ManualClock,
    MemorySessionStore,
    RetryableStorage,
    SeededIds,
    StorageFull,
    StoreRefused,
    Txn,
)
from storage import _codec as codec
from storage._identity import MARKER_NAME, read_marker
from storage._kernel import STORE_SCHEMA_VERSION
from storage._lmdb import _map_error
from storage._sealed import SEAL_BYTES, intact, seal, unseal

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(start=1_700_000_000.0)


@pytest.fixture
def lmdb_dir(tmp_path: Path) -> Path:
    return tmp_path / "lmdb"


def populated(path: Path, clock: ManualClock) -> None:
    """An LMDB store holding attempts in every indexed state, then closed."""
    store = LmdbSessionStore(path, clock=clock, ids=SeededIds(7))
    try:
        setup_session(store, clock)
        mixed_attempt_states(store, clock)
    finally:
        store.close()


def open_in_child(path: Path) -> dict[str, Any]:
    """Open the store at ``path`` in a fresh process and load every attempt."""
    code = (
        "import json, sys\n"
        "from storage import LmdbSessionStore, StoreError\n"
        "try:\n"
        "    s = LmdbSessionStore(sys.argv[1])\n"
        "    n = len(s.list_attempts(sys.argv[2]))\n"
        "    s.close()\n"
        "    print(json.dumps({'opened': True, 'attempts': n}))\n"
        "except StoreError as e:\n"
        "    print(json.dumps({'opened': False, 'error': type(e).__name__,"
        " 'reason': e.fields.get('reason'), 'fix': e.fields.get('fix')}))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", code, str(path), NS],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert done.returncode == 0, f"child died (status {done.returncode}): {done.stderr[-2000:]}"
    assert "Traceback" not in done.stderr, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


# -- sealed values -----------------------------------------------------------------------------


def test_a_seal_covers_the_table_the_key_and_every_byte() -> None:
    sealed = seal("attempts", b"k", b"value")
    assert len(sealed) == len(b"value") + SEAL_BYTES
    assert unseal("attempts", b"k", sealed) == b"value"
    assert not intact("sessions", b"k", sealed)
    assert not intact("attempts", b"j", sealed)
    for i in range(len(sealed)):
        flipped = bytearray(sealed)
        flipped[i] ^= 0x10
        assert not intact("attempts", b"k", bytes(flipped))
    with pytest.raises(CorruptRecord) as info:
        unseal("attempts", b"k", b"abc")
    assert info.value.fields["reason"] == "shorter than its seal"


@pytest.mark.parametrize("kind", ["memory", "lmdb"])
def test_a_flipped_byte_is_a_corrupt_record_naming_table_and_key_and_others_are_served(
    kind: str, clock: ManualClock, lmdb_dir: Path
) -> None:
    store: KernelStore = (
        MemorySessionStore(clock=clock)
        if kind == "memory"
        else LmdbSessionStore(lmdb_dir, clock=clock)
    )
    try:
        setup_session(store, clock)
        bad = store.accept_attempt(acceptance(clock, "subattempt_bad", "ag-bad"))
        good = store.accept_attempt(acceptance(clock, "subattempt_good", "ag-good"))
        key = codec.attempt_key(bad.attempt_id)

        def flip(txn: Txn) -> None:
            raw = bytearray(txn.get("attempts", key) or b"")
            raw[len(raw) // 2] ^= 0x01  # still decodes as msgpack: only the seal tells
            txn.put("attempts", key, bytes(raw))

        store.raw_backend.write(flip)
        with pytest.raises(CorruptRecord) as info:
            store.load_attempt(bad.attempt_id)
        assert info.value.fields["table"] == "attempts"
        assert info.value.fields["key"] == key
        assert store.load_attempt(good.attempt_id) == good
        assert store.load_session(SESSION).session_id == SESSION
    finally:
        store.close()


def test_bytes_that_do_not_decode_as_utf8_or_msgpack_are_corrupt_records(
    clock: ManualClock,
) -> None:
    store = MemorySessionStore(clock=clock)
    setup_session(store, clock)
    live = store.accept_attempt(acceptance(clock, "subattempt_1", "ag-1"))
    # A live index entry whose sealed value is not UTF-8 (the traceback).
    agent = codec.agent_key(NS, SESSION, live.agent_id)
    store.raw_backend.write(lambda txn: txn.put("index", agent, b"\xff\xfe" + b"\x00" * 4))
    with pytest.raises(CorruptRecord) as info:
        store.list_active_attempts(NS)
    assert info.value.fields["table"] == "index"
    assert store.load_attempt(live.attempt_id) == live


def _as_layout_2(store: KernelStore) -> dict[str, list[tuple[bytes, bytes]]]:
    """Rewrite a store as layout 2 (plain values, 8-byte marker, no identity, no
    ``A`` entries); return its tables as layout 2 held them."""

    def fn(txn: Txn) -> dict[str, list[tuple[bytes, bytes]]]:
        out: dict[str, list[tuple[bytes, bytes]]] = {}
        for key, _value in list(txn.scan("index", codec.AGENT)):
            txn.delete("index", key)
        for table in store.TABLES:
            rows = [(k, unseal(table, k, v)) for k, v in txn.scan(table)]
            for k, v in rows:
                txn.put(table, k, v)
            out[table] = rows
        txn.delete("meta", b"store_identity")
        txn.put("meta", b"schema_version", (2).to_bytes(8, "big"))
        return out

    return store.raw_backend.write(fn)


def test_a_layout_2_lmdb_store_is_sealed_on_open_and_keeps_every_record(
    clock: ManualClock, lmdb_dir: Path
) -> None:
    store = LmdbSessionStore(lmdb_dir, clock=clock)
    setup_session(store, clock)
    mixed_attempt_states(store, clock)
    before = {a.attempt_id: a for a in store.list_attempts(NS)}
    agents = store.raw_backend.read(lambda txn: list(txn.scan("index", codec.AGENT)))
    assert len(agents) == 2  # the expired results'
    old = _as_layout_2(store)
    store.close()
    (lmdb_dir / MARKER_NAME).unlink()  # layout 2 had no marker

    again = LmdbSessionStore(lmdb_dir, clock=clock, ids=SeededIds(3))
    try:
        assert {a.attempt_id: a for a in again.list_attempts(NS)} == before
        raw = again.raw_backend.read(lambda txn: {t: list(txn.scan(t)) for t in again.TABLES})
        for table, rows in old.items():
            if table == "meta":
                continue
            kept = [(k, v) for k, v in raw[table] if not k.startswith(codec.AGENT)]
            assert [(k, unseal(table, k, v)) for k, v in kept] == rows
        # Layout 4's agent entries, written by the migration as the kernel writes them.
        assert [(k, v) for k, v in raw["index"] if k.startswith(codec.AGENT)] == agents
        assert again.identity.layout == STORE_SCHEMA_VERSION
        marker = read_marker(str(lmdb_dir))
        assert marker is not None and marker.store_id == again.identity.store_id
        assert storage.admin.check(again).ok
    finally:
        again.close()


def test_a_store_with_records_but_no_layout_marker_is_refused(clock: ManualClock) -> None:
    store = MemorySessionStore(clock=clock)
    setup_session(store, clock)
    store.raw_backend.write(lambda txn: txn.delete("meta", b"schema_version"))
    with pytest.raises(CorruptRecord, match="no layout marker"):
        KernelStore(store.raw_backend, clock=clock)


# -- identity and marker -----------------------------------------------------------------------


def test_a_new_store_takes_its_identity_from_its_id_source_and_clock(
    clock: ManualClock, lmdb_dir: Path
) -> None:
    store = LmdbSessionStore(lmdb_dir, clock=clock, ids=SeededIds(1))
    try:
        assert store.identity.store_id == str(SeededIds(1).uuid4())
        assert store.identity.created_at == clock.now()
        assert read_marker(str(lmdb_dir)) == store.identity
    finally:
        store.close()
    reopened = LmdbSessionStore(lmdb_dir, clock=clock, ids=SeededIds(2))
    try:
        assert reopened.identity == store.identity  # written once, never again
    finally:
        reopened.close()


def test_a_zero_length_database_is_refused_not_served_empty(
    clock: ManualClock, lmdb_dir: Path
) -> None:
    populated(lmdb_dir, clock)
    (lmdb_dir / "data.mdb").write_bytes(b"")
    result = open_in_child(lmdb_dir)
    assert result == {
        "opened": False,
        "error": "StoreRefused",
        "reason": "empty",
        "fix": result["fix"],
    }
    assert "backup" in result["fix"]


def test_a_zero_length_database_without_a_marker_is_refused_too(
    clock: ManualClock, lmdb_dir: Path
) -> None:
    populated(lmdb_dir, clock)
    (lmdb_dir / "data.mdb").write_bytes(b"")
    (lmdb_dir / MARKER_NAME).unlink()
    assert open_in_child(lmdb_dir)["reason"] == "empty"


@pytest.mark.parametrize("keep", ["half", 8191, 4096 * 3 + 17])
def test_a_truncated_database_is_refused_before_it_is_mapped(
    clock: ManualClock, lmdb_dir: Path, keep: str | int
) -> None:
    populated(lmdb_dir, clock)
    data = lmdb_dir / "data.mdb"
    size = data.stat().st_size
    os.truncate(data, size // 2 if keep == "half" else int(keep))
    result = open_in_child(lmdb_dir)
    assert result["opened"] is False
    assert result["error"] == "StoreRefused"
    assert result["reason"] in {"truncated", "damaged pages", "bad meta page"}


def test_64k_zeroed_in_the_middle_is_refused_not_an_lmdb_assertion(
    clock: ManualClock, lmdb_dir: Path
) -> None:
    store = LmdbSessionStore(lmdb_dir, clock=clock)
    setup_session(store, clock)
    base = acceptance(clock)
    for i in range(300):
        store.accept_attempt(
            msgspec.structs.replace(base, attempt_id=f"subattempt_{i:05d}", agent_id=f"ag-{i}")
        )
    store.close()
    data = lmdb_dir / "data.mdb"
    size = data.stat().st_size
    assert size > 3 * 65536
    with open(data, "r+b") as handle:
        handle.seek(size // 2)
        handle.write(b"\x00" * 65536)
    result = open_in_child(lmdb_dir)
    assert result["opened"] is False
    assert result["reason"] == "damaged pages"


def test_a_marker_without_its_database_is_refused(clock: ManualClock, lmdb_dir: Path) -> None:
    populated(lmdb_dir, clock)
    (lmdb_dir / "data.mdb").unlink()
    (lmdb_dir / "lock.mdb").unlink()
    with pytest.raises(StoreRefused) as info:
        LmdbSessionStore(lmdb_dir, clock=clock)
    assert info.value.fields["reason"] == "database missing"
    assert not (lmdb_dir / "data.mdb").exists()  # nothing was re-created


def test_another_stores_database_under_a_marker_is_refused(
    clock: ManualClock, tmp_path: Path
) -> None:
    populated(tmp_path / "a", clock)
    other = LmdbSessionStore(tmp_path / "b", clock=clock, ids=SeededIds(99))
    other.close()
    (tmp_path / "a" / "data.mdb").write_bytes((tmp_path / "b" / "data.mdb").read_bytes())
    with pytest.raises(StoreRefused) as info:
        LmdbSessionStore(tmp_path / "a", clock=clock)
    assert info.value.fields["reason"] == "another identity"
    assert info.value.fields["path"] == str((tmp_path / "a").resolve())


def test_an_empty_lmdb_file_under_a_marker_is_refused_and_left_untouched(
    clock: ManualClock, tmp_path: Path
) -> None:
    populated(tmp_path / "a", clock)
    lmdb.open(str(tmp_path / "fresh")).close()  # a valid LMDB file holding nothing
    fresh = (tmp_path / "fresh" / "data.mdb").read_bytes()
    (tmp_path / "a" / "data.mdb").write_bytes(fresh)
    with pytest.raises(StoreRefused) as info:
        LmdbSessionStore(tmp_path / "a", clock=clock)
    assert info.value.fields["reason"] == "identity missing"


def test_a_lost_marker_is_written_again_from_the_database(
    clock: ManualClock, lmdb_dir: Path
) -> None:
    populated(lmdb_dir, clock)
    identity = read_marker(str(lmdb_dir))
    (lmdb_dir / MARKER_NAME).unlink()
    store = LmdbSessionStore(lmdb_dir, clock=clock)
    try:
        assert store.identity == identity
        assert len(store.list_attempts(NS)) == 7
    finally:
        store.close()
    assert read_marker(str(lmdb_dir)) == identity


@pytest.mark.parametrize("what", ["directory", "symlink", "foreign"])
def test_a_marker_that_is_not_ours_is_refused(
    clock: ManualClock, lmdb_dir: Path, what: str
) -> None:
    populated(lmdb_dir, clock)
    marker = lmdb_dir / MARKER_NAME
    marker.unlink()
    if what == "directory":
        marker.mkdir()
    elif what == "symlink":
        (lmdb_dir / "elsewhere").write_text("{}")
        marker.symlink_to(lmdb_dir / "elsewhere")
    else:
        marker.write_text('{"format": "something-else"}')
    with pytest.raises(StoreRefused) as info:
        LmdbSessionStore(lmdb_dir, clock=clock)
    assert info.value.fields["fix"]


def test_store_files_are_private(clock: ManualClock, tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        store = LmdbSessionStore(tmp_path / "new" / "lmdb", clock=clock)
        store.close()
    finally:
        os.umask(old)
    for name in ("data.mdb", "lock.mdb", MARKER_NAME):
        assert stat.S_IMODE((tmp_path / "new" / "lmdb" / name).stat().st_mode) == 0o600, name
    assert stat.S_IMODE((tmp_path / "new" / "lmdb").stat().st_mode) == 0o700


def test_an_existing_world_readable_database_is_made_private(
    clock: ManualClock, lmdb_dir: Path
) -> None:
    populated(lmdb_dir, clock)
    os.chmod(lmdb_dir / "data.mdb", 0o644)
    LmdbSessionStore(lmdb_dir, clock=clock).close()
    assert stat.S_IMODE((lmdb_dir / "data.mdb").stat().st_mode) == 0o600


# -- check and repair --------------------------------------------------------------------------


def test_the_check_passes_a_healthy_store_in_every_indexed_state(
    clock: ManualClock, lmdb_dir: Path
) -> None:
    populated(lmdb_dir, clock)
    report = storage.admin.check_lmdb(lmdb_dir)
    assert report.ok, [f.describe() for f in report.findings]
    assert report.records == 10  # 1 session, 1 run, 7 attempts, 1 artifact
    assert report.index_entries > 5


def test_the_check_finds_a_planted_checksum_mismatch_and_repair_quarantines_it(
    clock: ManualClock,
) -> None:
    store = MemorySessionStore(clock=clock)
    setup_session(store, clock)
    mixed_attempt_states(store, clock)
    key = codec.attempt_key("subattempt_m1")
    raw = store.raw_backend.read(lambda txn: txn.get("attempts", key))
    assert raw is not None
    damaged = raw[:-1] + bytes([raw[-1] ^ 0xFF])
    store.raw_backend.write(lambda txn: txn.put("attempts", key, damaged))

    report = storage.admin.check(store)
    assert not report.ok
    problems = {(f.table, f.key, f.problem) for f in report.findings}
    assert ("attempts", key, "checksum") in problems
    # Its retention entry now has no readable record behind it.
    assert any(f.problem == "orphan index entry" for f in report.findings)

    repaired = storage.admin.check(store, repair=True)
    assert repaired.ok and repaired.repaired and repaired.quarantined == 1
    assert storage.admin.quarantined(store) == [("attempts", key, damaged)]
    assert "subattempt_m1" not in {a.attempt_id for a in store.list_attempts(NS)}
    assert store.load_attempt("subattempt_m2").attempt_id == "subattempt_m2"


def test_the_check_finds_a_planted_orphan_index_entry_and_repair_rebuilds_the_index(
    clock: ManualClock, lmdb_dir: Path
) -> None:
    store = LmdbSessionStore(lmdb_dir, clock=clock)
    try:
        setup_session(store, clock)
        mixed_attempt_states(store, clock)
        expected_active = store.list_active_attempts(NS)
        orphan = codec.agent_key(NS, SESSION, "ag-ghost")
        live = codec.agent_key(NS, SESSION, "ag-live")

        def plant(txn: Txn) -> None:
            txn.put("index", orphan, b"subattempt_ghost")
            txn.delete("index", live)

        store.backend.write(plant)
        report = storage.admin.check(store)
        found = {(f.key, f.problem) for f in report.findings}
        assert found == {(orphan, "orphan index entry"), (live, "missing index entry")}
        assert "ag/ghost" not in report.findings[0].describe()

        repaired = storage.admin.check(store, repair=True)
        assert repaired.ok and repaired.index_rewritten == 2 and repaired.quarantined == 0
        assert store.list_active_attempts(NS) == expected_active
    finally:
        store.close()


def test_a_store_that_is_refused_is_reported_by_the_check(
    clock: ManualClock, lmdb_dir: Path
) -> None:
    populated(lmdb_dir, clock)
    (lmdb_dir / "data.mdb").write_bytes(b"")
    report = storage.admin.check_lmdb(lmdb_dir)
    assert not report.ok and report.refused is not None and "empty" in report.refused


# -- backup ------------------------------------------------------------------------------------


def test_a_backup_taken_while_another_thread_writes_passes_the_check_and_opens(
    clock: ManualClock, tmp_path: Path
) -> None:
    store = LmdbSessionStore(tmp_path / "live", clock=clock)
    setup_session(store, clock)
    stop = threading.Event()
    twenty = threading.Event()
    written: list[str] = []
    base = acceptance(clock)

    def writer() -> None:
        n = 0
        while not stop.is_set() or n < 50:
            record = msgspec.structs.replace(
                base, attempt_id=f"subattempt_w{n:05d}", agent_id=f"ag-w{n}"
            )
            drive(store, store.accept_attempt(record), clock)
            written.append(record.attempt_id)
            n += 1
            if n == 20:
                twenty.set()

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        assert twenty.wait(60)
        copy = storage.admin.backup(store, tmp_path / "backup")
    finally:
        stop.set()
        thread.join()
    store.close()

    report = storage.admin.check_lmdb(copy)
    assert report.ok, [f.describe() for f in report.findings]
    restored = LmdbSessionStore(copy, clock=clock)
    try:
        assert restored.identity == read_marker(str(tmp_path / "live"))
        ids = {a.attempt_id for a in restored.list_attempts(NS)}
        assert len(ids) >= 20 and ids <= set(written)
        # The copy is a working store: it takes new writes.
        done = drive(restored, restored.accept_attempt(acceptance(clock, "subattempt_new")), clock)
        restored.commit_terminal(terminal(done, clock))
    finally:
        restored.close()
    for name in os.listdir(copy):
        assert stat.S_IMODE((copy / name).stat().st_mode) == 0o600


def test_a_backup_refuses_a_directory_that_is_not_empty(clock: ManualClock, tmp_path: Path) -> None:
    populated(tmp_path / "live", clock)
    (tmp_path / "dest").mkdir()
    (tmp_path / "dest" / "precious").write_text("keep me")
    with pytest.raises(storage.Failed, match="not empty"):
        storage.admin.backup(tmp_path / "live", tmp_path / "dest")
    assert (tmp_path / "dest" / "precious").read_text() == "keep me"


def test_the_postgres_backup_command_is_pg_dump_of_the_schema() -> None:
    command = storage.admin.postgres_backup_command("postgresql://u@h/db", "/tmp/x.dump")
    assert (
        command == "pg_dump --format=custom --schema=public --file=/tmp/x.dump postgresql://u@h/db"
    )


# -- disk errors -------------------------------------------------------------------------------


class _FailingTxn:
    """An lmdb write transaction whose commit fails as the disk would."""

    def __init__(self, txn: Any, code: int) -> None:
        self._txn = txn
        self._code = code

    def __getattr__(self, name: str) -> Any:
        return getattr(self._txn, name)

    def commit(self) -> None:
        self._txn.abort()
        raise (lmdb.DiskError if self._code == errno.ENOSPC else lmdb.Error)(
            "mdb_txn_commit", self._code
        )


class _FailingEnv:
    def __init__(self, env: Any, code: int) -> None:
        self._env = env
        self._code = code

    def __getattr__(self, name: str) -> Any:
        return getattr(self._env, name)

    def begin(self, *args: Any, **kwargs: Any) -> Any:
        txn = self._env.begin(*args, **kwargs)
        return _FailingTxn(txn, self._code) if kwargs.get("write") else txn


@pytest.fixture
def failing_disk(lmdb_dir: Path, clock: ManualClock) -> Iterator[Any]:
    store = LmdbSessionStore(lmdb_dir, clock=clock)
    entry = store.lmdb_backend._entry
    real = entry.env

    def fail(code: int) -> None:
        entry.env = _FailingEnv(real, code)

    try:
        yield store, fail
    finally:
        entry.env = real
        store.close()


@pytest.mark.parametrize(
    ("code", "error"),
    [(errno.ENOSPC, StorageFull), (errno.EIO, RetryableStorage), (errno.EDQUOT, StorageFull)],
)
def test_disk_errors_at_commit_are_storage_full_or_retryable_and_write_nothing(
    failing_disk: Any, clock: ManualClock, code: int, error: type[Exception]
) -> None:
    store, fail = failing_disk
    setup_session(store, clock)
    fail(code)
    with pytest.raises(error):
        store.accept_attempt(acceptance(clock))
    assert store.list_attempts(NS) == []


def test_os_errors_from_the_filesystem_are_mapped_the_same_way() -> None:
    full = _map_error(OSError(errno.ENOSPC, "No space left on device"), op="x", path="p")
    assert isinstance(full, StorageFull)
    io = _map_error(OSError(errno.EIO, "Input/output error"), op="x", path="p")
    assert isinstance(io, RetryableStorage) and io.fields["errno"] == errno.EIO


# -- every store ---------------------------------------------------------------------------


def test_every_store_seals_its_values_and_the_check_finds_a_flip(
    store: KernelStore, clock: ManualClock
) -> None:
    setup_session(store, clock)
    mixed_attempt_states(store, clock)
    assert storage.admin.check(store).ok
    key = codec.attempt_key("subattempt_m2")
    raw = store.raw_backend.read(lambda txn: txn.get("attempts", key))
    assert raw is not None and intact("attempts", key, raw)
    flipped = bytes([raw[0] ^ 0x04]) + raw[1:]
    store.raw_backend.write(lambda txn: txn.put("attempts", key, flipped))
    with pytest.raises(CorruptRecord) as info:
        store.load_attempt("subattempt_m2")
    assert (info.value.fields["table"], info.value.fields["key"]) == ("attempts", key)
    assert store.load_attempt("subattempt_m1").attempt_id == "subattempt_m1"
    report = storage.admin.check(store)
    assert ("attempts", key, "checksum") in {(f.table, f.key, f.problem) for f in report.findings}


def test_every_store_of_layout_2_is_sealed_when_the_kernel_opens_it(
    store: KernelStore, clock: ManualClock
) -> None:
    setup_session(store, clock)
    mixed_attempt_states(store, clock)
    before = store.list_attempts(NS)
    _as_layout_2(store)
    migrated = KernelStore(store.raw_backend, clock=clock)
    assert migrated.list_attempts(NS) == before
    assert storage.admin.check(migrated).ok
