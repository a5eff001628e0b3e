"""What a redo journal (storage._journal) would save per durable commit, against LMDB's own sync.

Run: ``python bench/journal.py [--ops N] [--rounds N] [--json]``.

The writes are real: ``LmdbSessionStore`` accepts ``--ops`` attempts and
commits their terminal outcomes, and every put those operations make (table,
key and sealed bytes) is noted (``bench/store.py``'s :class:`Rewrite`). Each
side then puts the same bytes under the same keys, one operation per write
transaction, into an environment of its own that started empty:

- ``lmdb``: py-lmdb with ``sync=True`` (the store's durable default): the data
  pages, then the meta page, are flushed before the commit returns;
- ``journal``: the operation's writes appended to a :class:`~storage._journal.Journal`
  (one pre-written block or more, one ``fdatasync``), then committed to
  py-lmdb with ``sync=False`` (the page cache only): what a store on the
  journal would pay per commit, the store's own code aside;
- ``raw``: plain py-lmdb, one small put per durable commit (the reference
  of ``bench/store.py``'s ``x raw`` column);
- ``flush``: one 4 KiB ``pwrite`` and ``fdatasync`` on a pre-written file:
  the physical limit of one durable write on this disk.

Sides take turns in blocks of 50 commits, the order rotating, for ``--rounds``
rounds; every ratio is taken per round from the same round's two sides, and
reported as the median with its min and max. No model requests, no message
history, no usage: storage only. The journal's checkpoints are not in the
figures: it is checkpointed between blocks, untimed (a checkpoint flushes
LMDB; the store does it every 128 commits, and ``bench/supervisor.py`` and
``bench/critical_path.py --journal`` include that cost).
The load average is printed before and after. A benchmark, not a test: it
never asserts timing and exits 0.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench._common import fmt_spread, rounds_main  # noqa: E402

MAP_SIZE = 1 << 30
BLOCK_OPS = 50
SIDES = ("lmdb", "journal", "raw", "flush")

Puts = list[tuple[bytes, bytes, bytes]]
"""One operation's puts: (LMDB database name, key, stored bytes)."""


def record_operations(directory: Path, count: int) -> list[Puts]:
    """The puts of ``count`` accepts and ``count`` terminal commits, in commit order."""
    from bench.store import Records, Rewrite, _setup_session
    from storage import LmdbSessionStore, ManualClock

    clock = ManualClock(start=1_700_000_000.0)
    records = Records(clock)
    store = LmdbSessionStore(directory, clock=clock, sync=False, map_size=MAP_SIZE)
    rewrite = Rewrite(store)
    names = {id(db): name for name, db in store.lmdb_backend._live().dbs.items()}
    operations: list[Puts] = []

    def noted(call: Callable[[], object]) -> None:
        rewrite.record(call)
        operations.append(
            [(names[id(db)].encode(), key, value) for db, key, value in rewrite.puts()]
        )

    try:
        _setup_session(store, clock, records.session_id)
        for n in range(count):
            record = records.acceptance(n)
            noted(lambda r=record: store.accept_attempt(r))  # type: ignore[misc]
            for status in ("starting", "running"):
                record = store.update_attempt_execution(records.moved(record, status))
            commit = records.terminal(record)
            noted(lambda c=commit: store.commit_terminal(c))  # type: ignore[misc]
    finally:
        rewrite.close()
        store.close()
    return operations


class Env:
    """An empty py-lmdb environment with the store's tables."""

    def __init__(self, directory: Path, *, sync: bool) -> None:
        import lmdb

        self.env = lmdb.Environment(
            str(directory), map_size=MAP_SIZE, sync=sync, metasync=sync, max_dbs=32
        )
        self.dbs: dict[bytes, Any] = {}

    def put(self, puts: Puts) -> None:
        with self.env.begin(write=True) as txn:
            for name, key, value in puts:
                db = self.dbs.get(name)
                if db is None:
                    db = self.dbs[name] = self.env.open_db(name, txn=txn)
                txn.put(key, value, db=db)


class Sides:
    """Each side's commit of one operation, and its untimed upkeep between blocks."""

    def __init__(self, directory: Path) -> None:
        from bench.store import RawLmdb
        from storage._journal import open_journal

        for name in ("lmdb", "journal", "raw", "flush"):
            (directory / name).mkdir()
        self.lmdb = Env(directory / "lmdb", sync=True)
        self.nosync = Env(directory / "journal", sync=False)
        self.journal, _ = open_journal(str(directory / "journal"), txnid=0, metas=b"")
        self.raw = RawLmdb(directory / "raw")
        self.fd = os.open(directory / "flush" / "file", os.O_RDWR | os.O_CREAT, 0o600)
        os.write(self.fd, bytes(64 << 20))
        os.fsync(self.fd)
        self.flush_at = 0

    def commit(self, side: str, puts: Puts) -> None:
        if side == "lmdb":
            self.lmdb.put(puts)
        elif side == "journal":
            self.journal.append([(name.decode(), key, value) for name, key, value in puts])
            self.nosync.put(puts)
        elif side == "raw":
            self.raw.commit(1)
        else:
            os.pwrite(self.fd, b"f" * 4096, self.flush_at)
            os.fdatasync(self.fd)
            self.flush_at = (self.flush_at + 4096) % (64 << 20)

    def upkeep(self) -> None:
        """Checkpoint the journal when it is half full (untimed, see the docstring)."""
        if self.journal.room() < 32 << 20:
            self.nosync.env.sync(True)
            self.journal.checkpoint(txnid=self.nosync.env.info()["last_txnid"], metas=b"")

    def close(self) -> None:
        self.journal.close()
        os.close(self.fd)
        for env in (self.lmdb.env, self.nosync.env):
            env.close()
        self.raw.close()


def measure(ops: int, rounds: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-journal-") as tmp:
        operations = record_operations(Path(tmp) / "store", ops)
        sides = Sides(Path(tmp))
        try:
            times = _turn_about(sides, operations, rounds)
        finally:
            sides.close()
    pages = statistics.mean(len(puts) for puts in operations)
    return {"ops": len(operations), "puts_per_op": pages, "rounds": times}


def _turn_about(sides: Sides, operations: list[Puts], rounds: int) -> list[dict[str, float]]:
    """Per round: each side's median microseconds per commit over the same operations."""
    per_round: list[dict[str, float]] = []
    for r in range(rounds):
        samples: dict[str, list[float]] = {side: [] for side in SIDES}
        order = SIDES[r % len(SIDES) :] + SIDES[: r % len(SIDES)]
        for start in range(0, len(operations), BLOCK_OPS):
            block = operations[start : start + BLOCK_OPS]
            for side in order:
                for puts in block:
                    began = time.perf_counter()
                    sides.commit(side, puts)
                    samples[side].append(time.perf_counter() - began)
                sides.upkeep()
        per_round.append({side: statistics.median(v) * 1e6 for side, v in samples.items()})
    return per_round


def render(result: dict[str, Any]) -> str:
    rounds = result["rounds"]
    lines = [
        f"{result['ops']} operations (accepts and terminal commits of a real store),"
        f" {result['puts_per_op']:.1f} puts each; median us per commit, per round",
        "",
        f"{'side':10s} {'us per commit, median [min-max] of rounds':>44s}",
    ]
    for side in SIDES:
        lines.append(f"{side:10s} {fmt_spread([r[side] for r in rounds], 1):>44s}")
    lines.append("")
    lines.append("ratios of rates, per round (median [min-max]):")
    for name, num, den in (
        ("journal / lmdb (same writes)", "lmdb", "journal"),
        ("journal / raw (one small put)", "raw", "journal"),
        ("journal / flush (one block)", "flush", "journal"),
    ):
        lines.append(f"  {name:32s} {fmt_spread([r[num] / r[den] for r in rounds])}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    count = ("ops", 1000, "attempts recorded (x2 operations)")
    return rounds_main(__doc__, argv, count, measure, render)


if __name__ == "__main__":
    raise SystemExit(main())
