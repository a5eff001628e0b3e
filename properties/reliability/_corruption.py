"""A corpus of damaged LMDB stores, and what a fresh process makes of each.

:func:`build_pristine` writes a small store (sessions, runs, attempts in
several states, retained results) into ``<work>/pristine/dd/lmdb`` and
records every value as the kernel sees it. :func:`cases` lists the damage
(at least 40 cases): zero-length and truncated files, zeroed ranges, bit
flips in meta and data pages, missing, foreign and odd markers, odd lock
files, another store's database, a full disk. :func:`run_corpus` applies each
to a fresh copy of the pristine directory and runs a *probe* in a new
process on it; the probe opens the store, reads every value and prints one
JSON line (:func:`probe_store`). The verdict of a case (:func:`verdict`):

- ``refused``: opening raised a typed storage or data-directory error;
- ``whole``: every value was served unchanged;
- ``surfaced``: some values are unreadable, and each read of them raised
  :class:`~storage.CorruptRecord` (the others were served unchanged);
- ``silent loss``: a value was missing or different and nothing said so;
- ``signal`` / ``traceback``: the probe died or printed a traceback.

Only the first three are acceptable. The probe command is the caller's
(``probe``): by default :data:`STORE_PROBE` opens the store with
:class:`~storage.LmdbSessionStore`; :data:`HOST_PROBE` opens the data
directory as a host does and calls :func:`probe_store` on its store (what
``subagents verify --report`` runs).
"""

from __future__ import annotations

import errno
import json
import os
import random
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lmdb
import msgspec

from statemachines import ExecutionStatus, RetentionStatus, RunStatus, SubagentsError
from storage._backend import Txn
from storage._clock import ManualClock, SeededIds
from storage._digest import result_digest
from storage._errors import CorruptRecord, StorageFull, StoreError
from storage._identity import MARKER_NAME, StoreIdentity, write_marker
from storage._kernel import KernelStore
from storage._lmdb import LmdbSessionStore
from storage._lmdbfile import DATA_NAME, LOCK_NAME
from storage._records import (
    AdmissionLease,
    AttemptRecord,
    InputPart,
    OwnerLease,
    ResultRef,
    RunRecord,
    SessionRecord,
    TerminalCommit,
)
from subagents._host._datadir import open_store

NAMESPACE = "ns-corpus"
ACCEPTABLE = frozenset({"refused", "whole", "surfaced"})
STORE_PROBE = (
    sys.executable,
    "-c",
    "from properties.reliability._corruption import probe_main; probe_main()",
)
"""Probe argv prefix: opens ``<dd>/lmdb`` with :class:`~storage.LmdbSessionStore`."""
HOST_PROBE = (
    sys.executable,
    "-c",
    "from properties.reliability._corruption import host_probe_main; host_probe_main()",
)
"""Probe argv prefix: opens the data directory as a host does
(:func:`subagents._host._datadir.open_store`: lock, store, event log)."""

Damage = Callable[[Path, random.Random, Path], None]
"""Damage a copy of the pristine data directory ``dd`` (``rng`` seeded per case;
the third argument is another store's data directory)."""


@dataclass(frozen=True)
class Case:
    """One kind of damage."""

    name: str
    category: str
    damage: Damage
    full_disk: bool = False


class Outcome(msgspec.Struct, frozen=True, kw_only=True):
    """What the probe of one case reported, and its verdict."""

    case: str
    category: str
    verdict: str
    detail: str = ""


# -- the pristine store -------------------------------------------------------------------------


def _session(clock: ManualClock, sid: str) -> SessionRecord:
    now = clock.now()
    return SessionRecord(
        session_id=sid, namespace_id=NAMESPACE, created_at=now, updated_at=now, profile="p"
    )


def _run(clock: ManualClock, sid: str, rid: str) -> RunRecord:
    now = clock.now()
    lease = AdmissionLease(
        admission_id=f"adm-{rid}",
        host_instance_id="h",
        fencing_generation=1,
        lease_expires_at=now + 30,
    )
    return RunRecord(
        session_id=sid,
        run_id=rid,
        created_at=now,
        updated_at=now,
        input=(InputPart(text=f"prompt for {rid} " * 8),),
        profile="p",
        admission_lease=lease,
    )


def _attempt(clock: ManualClock, sid: str, n: int) -> AttemptRecord:
    now = clock.now()
    return AttemptRecord(
        attempt_id=f"subattempt_{sid}_{n:03d}",
        agent_id=f"agent-{sid}-{n:03d}",
        subagent_name="researcher",
        namespace_id=NAMESPACE,
        parent_session_id=sid,
        parent_run_id=f"run-{sid}",
        owner_lease=OwnerLease(
            host_instance_id="h", fencing_generation=1, heartbeat_at=now, lease_expires_at=now + 3e6
        ),
        accepted_at=now,
        updated_at=now,
        profile="p",
    )


def _finish(store: KernelStore, clock: ManualClock, record: AttemptRecord) -> None:
    for status in (ExecutionStatus.STARTING, ExecutionStatus.RUNNING):
        extra = {"child_run_id": f"child-{record.attempt_id}"} if status == "running" else {}
        record = store.update_attempt_execution(
            msgspec.structs.replace(
                record, execution_status=status, updated_at=clock.now(), **extra
            )
        )
    content = f"result of {record.attempt_id}: " + "lorem ipsum " * 20
    now = clock.now()
    ref = ResultRef(
        content=content, digest=result_digest(content), size_bytes=len(content.encode())
    )
    done = msgspec.structs.replace(
        record,
        execution_status=ExecutionStatus.COMPLETED,
        result_ref=ref,
        retention_status=RetentionStatus.INLINE,
        retention_expires_at=now + 86400.0,
        terminal_at=now,
        updated_at=now,
    )
    store.commit_terminal(TerminalCommit(record=done))


def _fill(store: KernelStore, clock: ManualClock, sessions: int, attempts: int) -> None:
    for s in range(sessions):
        sid = f"s{s:02d}"
        store.create_session(_session(clock, sid))
        rid = f"run-{sid}"
        store.admit_run(_run(clock, sid, rid))
        for status in (RunStatus.RUNNING, RunStatus.COMPLETED):
            store.transition_run(sid, rid, status, admission_id=f"adm-{rid}")
        for n in range(attempts):
            record = store.accept_attempt(_attempt(clock, sid, n))
            if n % 3:
                _finish(store, clock, record)


def snapshot(store: KernelStore) -> dict[str, dict[str, str]]:
    """Every value of every table as the kernel reads it: ``{table: {key hex: value hex}}``."""

    def fn(txn: Txn) -> dict[str, dict[str, str]]:
        return {t: {k.hex(): v.hex() for k, v in txn.scan(t)} for t in store.TABLES}

    return store.backend.read(fn)


def build_pristine(work: Path, *, sessions: int = 6, attempts: int = 12) -> Path:
    """Write the pristine data directory ``<work>/pristine/dd`` and its
    ``expected.json`` (the :func:`snapshot` plus the store id); return ``dd``."""
    dd = work / "pristine" / "dd"
    clock = ManualClock()
    store = LmdbSessionStore(dd / "lmdb", clock=clock, ids=SeededIds(17), sync=False)
    try:
        _fill(store, clock, sessions, attempts)
        expected = {"store_id": store.identity.store_id, "tables": snapshot(store)}
    finally:
        store.close()
    (work / "pristine" / "expected.json").write_text(json.dumps(expected))
    other = work / "other" / "dd"
    second = LmdbSessionStore(other / "lmdb", clock=clock, ids=SeededIds(18), sync=False)
    try:
        _fill(second, clock, 1, 2)
    finally:
        second.close()
    return dd


# -- damage -----------------------------------------------------------------------------------


def _data(dd: Path) -> Path:
    return dd / "lmdb" / DATA_NAME


def _truncate_to(size: Callable[[int], int]) -> Damage:
    def damage(dd: Path, _rng: random.Random, _other: Path) -> None:
        path = _data(dd)
        os.truncate(path, max(0, size(path.stat().st_size)))

    return damage


def _zero(offset: Callable[[int], int], length: int) -> Damage:
    def damage(dd: Path, _rng: random.Random, _other: Path) -> None:
        path = _data(dd)
        size = path.stat().st_size
        start = max(0, min(offset(size), size - 1))
        with open(path, "r+b") as handle:
            handle.seek(start)
            handle.write(b"\x00" * min(length, size - start))

    return damage


def _flip(where: Callable[[int, random.Random], list[int]], bit: int | None = None) -> Damage:
    """Flip ``bit`` (default: a random one) at each offset ``where(size, rng)`` gives."""

    def damage(dd: Path, rng: random.Random, _other: Path) -> None:
        path = _data(dd)
        data = bytearray(path.read_bytes())
        for offset in where(len(data), rng):
            data[offset % len(data)] ^= 1 << (rng.randrange(8) if bit is None else bit)
        path.write_bytes(bytes(data))

    return damage


def _random_offsets(count: int, low: int = 0) -> Callable[[int, random.Random], list[int]]:
    return lambda size, rng: [rng.randrange(low, size) for _ in range(count)]


def _replace_path(target: Callable[[Path], Path], make: Callable[[Path, Path], object]) -> Damage:
    def damage(dd: Path, _rng: random.Random, other: Path) -> None:
        path = target(dd)
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
        make(path, other)

    return damage


def _marker(dd: Path) -> Path:
    return dd / "lmdb" / MARKER_NAME


def _lock(dd: Path) -> Path:
    return dd / "lmdb" / LOCK_NAME


def _foreign_marker(path: Path, _other: Path) -> None:
    write_marker(str(path.parent), StoreIdentity(store_id="not-this-store", layout=3, created_at=0))


def _nothing(_path: Path, _other: Path) -> None:
    """Leave the path removed."""


def _other_database(path: Path, other: Path) -> None:
    shutil.copyfile(_data(other), path)


def _at(offset: int) -> Callable[[int, random.Random], list[int]]:
    return lambda _size, _rng: [offset]


def _meta_cases() -> list[Case]:
    # Offsets inside meta page 0 (bytes 16.. hold magic, version, address,
    # mapsize, the two MDB_db, last_pg, txnid) and the same in meta page 1
    # (4096 on). Bit 1 of a txnid is left out: see storage._lmdbfile (the one
    # flip LMDB's unchecksummed meta pages cannot reveal).
    fields = {
        "magic": (16, 0),
        "psize": (41, 4),
        "main_root": (128, 0),
        "last_pg": (136, 2),
        "txnid bit 0": (144, 0),
        "txnid bit 2": (144, 2),
        "txnid bit 7": (144, 7),
    }
    return [
        Case(
            f"flip meta{page} {name}",
            "meta bit flip",
            _flip(_at(page * 4096 + off), bit=bit),
        )
        for page in (0, 1)
        for name, (off, bit) in fields.items()
    ]


def cases() -> list[Case]:
    """Every case of the corpus, in a fixed order (names are unique)."""
    out = [Case("zero-length data.mdb", "zero-length", _truncate_to(lambda _s: 0))]
    for label, size in (
        ("1 byte", lambda _s: 1),
        ("4096 bytes", lambda _s: 4096),
        ("8191 bytes", lambda _s: 8191),
        ("3 pages + 17", lambda _s: 3 * 4096 + 17),
        ("half", lambda s: s // 2),
        ("a page short", lambda s: s - 4096),
        ("1 byte short", lambda s: s - 1),
    ):
        out.append(Case(f"truncated to {label}", "truncated", _truncate_to(size)))
    for label, offset, length in (
        ("64 KiB mid-file", lambda s: s // 2, 65536),
        ("meta page 0", lambda _s: 0, 4096),
        ("meta page 1", lambda _s: 4096, 4096),
        ("one page mid-file", lambda s: (s // 8192) * 4096, 4096),
        ("the last page", lambda s: s - 4096, 4096),
        ("512 bytes at a quarter", lambda s: s // 4, 512),
        ("512 bytes at three quarters", lambda s: 3 * s // 4, 512),
        ("the data pages", lambda _s: 8192, 1 << 30),
    ):
        out.append(Case(f"zeroed {label}", "zeroed range", _zero(offset, length)))
    out += _meta_cases()
    for n in range(8):
        out.append(
            Case(
                f"one bit flipped in the data pages #{n}",
                "data bit flip",
                _flip(_random_offsets(1, low=8192)),
            )
        )
    for n in range(4):
        out.append(
            Case(f"100 bits flipped anywhere #{n}", "data bit flip", _flip(_random_offsets(100)))
        )
    out += [
        Case("marker missing", "marker", _replace_path(_marker, _nothing)),
        Case("marker of another store", "marker", _replace_path(_marker, _foreign_marker)),
        Case(
            "marker is garbage",
            "marker",
            _replace_path(_marker, lambda p, _o: p.write_bytes(b"\x00garbage\xff")),
        ),
        Case("marker is a directory", "marker", _replace_path(_marker, lambda p, _o: p.mkdir())),
        Case("database missing", "database", _replace_path(_data, _nothing)),
        Case("another store's database", "database", _replace_path(_data, _other_database)),
        Case("database is a directory", "database", _replace_path(_data, lambda p, _o: p.mkdir())),
        Case("lock.mdb is a directory", "lock file", _replace_path(_lock, lambda p, _o: p.mkdir())),
        Case("lock.mdb is empty", "lock file", _replace_path(_lock, lambda p, _o: p.touch())),
        Case(
            "lock.mdb is garbage",
            "lock file",
            _replace_path(_lock, lambda p, _o: p.write_bytes(os.urandom(8192))),
        ),
        Case("lock.mdb missing", "lock file", _replace_path(_lock, _nothing)),
        Case(
            "host.lock is a directory",
            "lock file",
            _replace_path(lambda dd: dd / "host.lock", lambda p, _o: p.mkdir()),
        ),
        Case(
            "host.lock is a symlink",
            "lock file",
            _replace_path(lambda dd: dd / "host.lock", lambda p, o: p.symlink_to(o / "x")),
        ),
        Case("full disk", "full disk", lambda _d, _r, _o: None, full_disk=True),
    ]
    return out


# -- the probe (runs in the fresh process) -------------------------------------------------------


class _FullDiskTxn:
    def __init__(self, txn: Any) -> None:
        self._txn = txn

    def __getattr__(self, name: str) -> Any:
        return getattr(self._txn, name)

    def commit(self) -> None:
        self._txn.abort()
        raise lmdb.DiskError("mdb_txn_commit", errno.ENOSPC)


class _FullDiskEnv:
    """An lmdb environment whose write commits fail with ENOSPC (a full disk)."""

    def __init__(self, env: Any) -> None:
        self._env = env

    def __getattr__(self, name: str) -> Any:
        return getattr(self._env, name)

    def begin(self, *args: Any, **kwargs: Any) -> Any:
        txn = self._env.begin(*args, **kwargs)
        return _FullDiskTxn(txn) if kwargs.get("write") else txn


def _fill_disk(store: KernelStore) -> str:
    """With commits failing as on a full disk, a write must be StorageFull."""
    backend = getattr(store, "lmdb_backend", None)
    if backend is None:
        return "not lmdb"
    entry = backend._entry
    entry.env = _FullDiskEnv(entry.env)
    try:
        store.create_session(_session(ManualClock(), "written-on-a-full-disk"))
    except StorageFull:
        return "storage_full"
    except StoreError as exc:
        return type(exc).__name__
    finally:
        entry.env = entry.env._env
    return "written"


def probe_store(store: KernelStore, expected: dict[str, Any], *, full_disk: bool) -> dict[str, Any]:
    """Read every expected value through ``store``; count ok/corrupt/missing/wrong."""
    counts = {"ok": 0, "corrupt": 0, "missing": 0, "wrong": 0, "scan_refused": 0}
    write = _fill_disk(store) if full_disk else None

    def read(txn: Txn) -> None:
        for table, rows in expected["tables"].items():
            for key_hex, value_hex in rows.items():
                try:
                    value = txn.get(table, bytes.fromhex(key_hex))
                except CorruptRecord:
                    counts["corrupt"] += 1
                    continue
                state = (
                    "missing" if value is None else "ok" if value.hex() == value_hex else "wrong"
                )
                counts[state] += 1
            try:
                for _ in txn.scan(table):
                    pass
            except CorruptRecord:
                counts["scan_refused"] += 1

    store.backend.read(read)
    return {
        "opened": True,
        "store_id": store.identity.store_id,
        "counts": counts,
        "write": write,
    }


def probe_main() -> None:
    """``argv``: data directory, expected.json, ``full`` or ``-``. Prints one JSON line."""
    dd, expected_path, mode = sys.argv[1:4]
    expected = json.loads(Path(expected_path).read_text())
    try:
        store = LmdbSessionStore(Path(dd) / "lmdb")
    except StoreError as exc:
        print(json.dumps(refusal(exc)))
        return
    try:
        print(json.dumps(probe_store(store, expected, full_disk=mode == "full")))
    finally:
        store.close()


def host_probe_main() -> None:
    """As :func:`probe_main`, but the data directory is opened as a host opens it."""
    dd, expected_path, mode = sys.argv[1:4]
    expected = json.loads(Path(expected_path).read_text())
    try:
        opened = open_store(Path(dd))
    except SubagentsError as exc:
        print(json.dumps(refusal(exc)))
        return
    try:
        print(json.dumps(probe_store(opened.store, expected, full_disk=mode == "full")))  # type: ignore[arg-type]
    finally:
        opened.close()


def refusal(exc: BaseException) -> dict[str, Any]:
    """The probe's line for a typed refusal."""
    fields = getattr(exc, "fields", {})
    return {
        "opened": False,
        "error": type(exc).__name__,
        "message": getattr(exc, "message", str(exc)),
        "fix": fields.get("fix"),
    }


# -- running the corpus --------------------------------------------------------------------------


def verdict(case: Case, returncode: int, stdout: str, stderr: str, store_id: str) -> Outcome:
    """Classify one probe run (see the module docstring)."""

    def out(kind: str, detail: str = "") -> Outcome:
        return Outcome(case=case.name, category=case.category, verdict=kind, detail=detail)

    if returncode < 0:
        return out("signal", f"killed by signal {-returncode}")
    if returncode != 0 or "Traceback" in stderr:
        return out("traceback", stderr.strip().splitlines()[-1] if stderr.strip() else "")
    try:
        line = json.loads(stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return out("traceback", f"no verdict line: {stdout[-200:]!r}")
    if not line["opened"]:
        return out("refused", f"{line['error']}: {line['message']}")
    counts = line["counts"]
    detail = ", ".join(f"{k} {v}" for k, v in counts.items() if v)
    if case.full_disk and line["write"] != "storage_full":
        return out("silent loss", f"a write on a full disk gave {line['write']}")
    if counts["wrong"] or line["store_id"] != store_id:
        return out("silent loss", detail or "another store was served")
    if counts["missing"] and not (counts["corrupt"] or counts["scan_refused"]):
        return out("silent loss", detail)
    if counts["corrupt"] or counts["missing"] or counts["scan_refused"]:
        return out("surfaced", detail)
    return out("whole", detail)


def run_corpus(
    work: Path,
    *,
    probe: Sequence[str] = STORE_PROBE,
    selected: Sequence[Case] | None = None,
    seed: int = 2024,
    timeout: float = 120.0,
    env: dict[str, str] | None = None,
) -> list[Outcome]:
    """Build the pristine store under ``work``, then damage a copy per case and
    probe it in a new process (``probe`` + data directory, expected.json, mode)."""
    pristine = build_pristine(work)
    expected_path = work / "pristine" / "expected.json"
    store_id = json.loads(expected_path.read_text())["store_id"]
    other = work / "other" / "dd"
    outcomes = []
    for n, case in enumerate(selected if selected is not None else cases()):
        dd = work / "cases" / f"{n:03d}" / "dd"
        shutil.copytree(pristine, dd)
        case.damage(dd, random.Random(seed * 1000 + n), other)
        done = subprocess.run(
            [*probe, str(dd), str(expected_path), "full" if case.full_disk else "-"],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            check=False,
        )
        outcomes.append(verdict(case, done.returncode, done.stdout, done.stderr, store_id))
    return outcomes


def summary(outcomes: Sequence[Outcome]) -> dict[str, int]:
    """How many cases had each verdict (every verdict listed, zeros included)."""
    kinds = ("refused", "whole", "surfaced", "silent loss", "signal", "traceback")
    return {kind: sum(1 for o in outcomes if o.verdict == kind) for kind in kinds}
