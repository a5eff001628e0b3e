"""LmdbSessionStore durable throughput against the physical limit, side by side.

Run: ``python bench/store.py [--quick] [--json]``.

In one run, on one temporary directory (so one disk), it measures:

- ``raw``: plain py-lmdb durable commits per second: one small put per write
  transaction, ``sync=True``, same map size and flags as the store. This is the
  physical limit of "one durable transaction per operation" on this disk.
- the store's durable operations per second, single-threaded, one operation
  per transaction, ``sync=True``: accept, update (an execution transition),
  heartbeat, terminal commit, claim and acknowledge. Every measured call is a
  real successful operation on a record set up for it. Each is printed as a
  ratio to the raw rate (target >= 0.7).
- the reconcile ratio: the time of one reconcile with 100,000 terminal + 100
  active attempts in the namespace divided by the time with 1,000 terminal +
  100 active (target <= 2: reconcile cost follows active work, not history).
  The active attempts hold unexpired leases, so reconcile visits every one of
  them and changes none (the steady state of a healthy host); the history is
  built with ``sync=False`` and measured after reopening with ``sync=True``.

fsync latency drifts (other work shares the disk), so each operation runs in
rounds, each round between two equal chunks of raw commits on a second
environment in the same directory; an operation's ratio is the median of its
per-round ratios. This is a benchmark, not
a test: it never asserts timing. Exit status is 0 whether or not targets are met.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

OP_TARGET = 0.7
RECONCILE_TARGET = 2.0
NS = "bench-ns"
SESSION = "bench-session"
PARENT_RUN = "bench-parent-run"
HOST = "bench-host"
MAP_SIZE = 1 << 30


def _repo_on_path() -> None:
    root = str(Path(__file__).resolve().parents[1])
    if root not in sys.path:
        sys.path.insert(0, root)


class RawLmdb:
    """Plain py-lmdb on its own directory: one small put per durable write transaction."""

    def __init__(self, directory: Path) -> None:
        import lmdb

        self._env = lmdb.Environment(
            str(directory),
            map_size=MAP_SIZE,
            subdir=True,
            sync=True,
            metasync=True,
            lock=True,
            max_dbs=24,
            max_spare_txns=0,
        )
        self._db = self._env.open_db(b"raw")
        self._next = 0
        self._value = b"v" * 64

    def commit(self, count: int) -> float:
        """Seconds taken by ``count`` durable commits of one new key each."""
        env, db, value = self._env, self._db, self._value
        start = time.perf_counter()
        for n in range(self._next, self._next + count):
            with env.begin(write=True) as txn:
                txn.put(b"key-%08d" % n, value, db=db)
        self._next += count
        return time.perf_counter() - start

    def close(self) -> None:
        self._env.close()


class Records:
    """Builds the records the measured operations need (store time = the clock)."""

    def __init__(self, clock: Any) -> None:
        self.clock = clock

    def session(self) -> Any:
        from storage import SessionRecord

        now = self.clock.now()
        return SessionRecord(session_id=SESSION, namespace_id=NS, created_at=now, updated_at=now)

    def acceptance(self, n: int, ttl: float = 3600.0) -> Any:
        from storage import AttemptRecord, OwnerLease

        now = self.clock.now()
        return AttemptRecord(
            attempt_id=f"subattempt_{n:08d}",
            agent_id=f"bench-bg-{n:08x}",
            subagent_name="bench",
            namespace_id=NS,
            parent_session_id=SESSION,
            parent_run_id=PARENT_RUN,
            owner_lease=OwnerLease(
                host_instance_id=HOST,
                fencing_generation=1,
                heartbeat_at=now,
                lease_expires_at=now + ttl,
            ),
            accepted_at=now,
            updated_at=now,
        )

    def moved(self, record: Any, status: str, **changes: Any) -> Any:
        import msgspec

        from statemachines import ExecutionStatus

        return msgspec.structs.replace(
            record,
            execution_status=ExecutionStatus(status),
            updated_at=self.clock.now(),
            **changes,
        )

    def terminal(self, record: Any, status: str = "completed") -> Any:
        import msgspec

        from statemachines import ExecutionStatus, RetentionStatus
        from storage import ResultRef, TerminalCommit, result_digest

        now = self.clock.now()
        if status == "completed":
            text = f"result of {record.attempt_id}"
            ref = ResultRef(content=text, digest=result_digest(text), size_bytes=len(text.encode()))
            failure = None
        else:
            text = f"failed: {record.attempt_id}"
            ref = ResultRef(
                error=text, digest=result_digest(None, text), size_bytes=len(text.encode())
            )
            failure = "execution_error"
        return TerminalCommit(
            record=msgspec.structs.replace(
                record,
                execution_status=ExecutionStatus(status),
                result_ref=ref,
                failure_category=failure,
                retention_status=RetentionStatus.INLINE,
                retention_expires_at=now + 86_400.0,
                terminal_at=now,
                updated_at=now,
            )
        )


def _setup_session(store: Any, clock: Any) -> None:
    from statemachines import RunStatus
    from storage import AdmissionLease, InputPart, RunRecord

    records = Records(clock)
    store.create_session(records.session())
    now = clock.now()
    store.admit_run(
        RunRecord(
            session_id=SESSION,
            run_id=PARENT_RUN,
            created_at=now,
            updated_at=now,
            input=(InputPart(text="bench"),),
            admission_lease=AdmissionLease(
                admission_id="bench-admission",
                host_instance_id=HOST,
                fencing_generation=1,
                lease_expires_at=now + 3600.0,
            ),
        )
    )
    for status in (RunStatus.RUNNING, RunStatus.COMPLETED):
        store.transition_run(SESSION, PARENT_RUN, status, admission_id="bench-admission")


def _measure(
    calls: list[Callable[[], object]], clock: Any, raw: RawLmdb, rounds: int
) -> tuple[float, float, list[float]]:
    """Run ``calls`` (one store transaction each) in ``rounds`` chunks, each
    between two equal chunks of raw commits, so disk drift hits both sides.

    Returns (store ops/s overall, raw commits/s overall, per-round ratios).
    """
    size = max(1, len(calls) // rounds)
    chunks = [calls[i : i + size] for i in range(0, len(calls), size)]
    op_seconds = raw_seconds = 0.0
    raw_ops = 0
    ratios = []
    for chunk in chunks:
        before = raw.commit(len(chunk))
        start = time.perf_counter()
        for call in chunk:
            clock.advance(0.001)
            call()
        took = time.perf_counter() - start
        after = raw.commit(len(chunk))
        op_seconds += took
        raw_seconds += before + after
        raw_ops += 2 * len(chunk)
        ratios.append((len(chunk) / took) / (2 * len(chunk) / (before + after)))
    return len(calls) / op_seconds, raw_ops / raw_seconds, ratios


def store_ops(directory: Path, raw: RawLmdb, count: int, rounds: int) -> dict[str, Any]:
    """The store's durable single-threaded rates, each over ``count`` real operations."""
    from storage import DeliveryClaim, LmdbSessionStore, ManualClock

    clock = ManualClock(start=1_700_000_000.0)
    records = Records(clock)
    store = LmdbSessionStore(directory, clock=clock, sync=True, map_size=MAP_SIZE)
    results: dict[str, Any] = {}

    def measure(name: str, calls: list[Callable[[], object]]) -> None:
        rate, raw_rate, ratios = _measure(calls, clock, raw, rounds)
        results[name] = {
            "ops_per_s": rate,
            "raw_commits_per_s": raw_rate,
            "ratio_to_raw": statistics.median(ratios),
            "round_ratios": ratios,
            "target_ratio_min": OP_TARGET,
            "meets_target": statistics.median(ratios) >= OP_TARGET,
        }

    try:
        _setup_session(store, clock)
        # Requests are built before timing: the store's cost is what is measured.
        acceptances = [records.acceptance(n) for n in range(count)]
        measure("accept", [lambda r=r: store.accept_attempt(r) for r in acceptances])
        starting = [records.moved(r, "starting") for r in acceptances]
        measure("update", [lambda r=r: store.update_attempt_execution(r) for r in starting])
        measure(
            "heartbeat",
            [
                lambda r=r: store.heartbeat_attempt(r.attempt_id, HOST, 1, clock.now() + 3600.0)
                for r in starting
            ],
        )
        # Not measured: starting -> running, so the terminal commit is a completion.
        running = [
            store.update_attempt_execution(
                records.moved(store.load_attempt(r.attempt_id), "running")
            )
            for r in starting
        ]
        commits = [records.terminal(r) for r in running]
        measure("terminal_commit", [lambda c=c: store.commit_terminal(c) for c in commits])
        claims = [
            (
                r.attempt_id,
                DeliveryClaim(claim_id=f"claim-{r.attempt_id}", deadline=clock.now() + 86_000.0),
            )
            for r in running
        ]
        measure("claim", [lambda a=a, c=c: store.claim_delivery(a, c) for a, c in claims])
        measure(
            "acknowledge",
            [lambda a=a, c=c: store.acknowledge_delivery(a, c.claim_id) for a, c in claims],
        )
        return results
    finally:
        store.close()


def _build_history(directory: Path, terminal: int, active: int) -> None:
    """``terminal`` failed-terminal attempts and ``active`` live ones, unsynced (set-up only)."""
    from storage import LmdbSessionStore, ManualClock

    clock = ManualClock(start=1_700_000_000.0)
    records = Records(clock)
    store = LmdbSessionStore(directory, clock=clock, sync=False, map_size=MAP_SIZE)
    try:
        _setup_session(store, clock)
        for n in range(terminal):
            # accepted -> failed is one allowed transition: the cheapest real history.
            record = store.accept_attempt(records.acceptance(n))
            store.commit_terminal(records.terminal(record, "failed"))
        for n in range(terminal, terminal + active):
            store.accept_attempt(records.acceptance(n, ttl=10 * 365 * 86_400.0))
    finally:
        store.close()


def reconcile_seconds(directory: Path, terminal: int, active: int, repeats: int) -> float:
    """Median time of one durable reconcile over the history in ``directory``."""
    from storage import LmdbSessionStore, ManualClock

    _build_history(directory, terminal, active)
    clock = ManualClock(start=1_700_000_000.0 + 60.0)
    store = LmdbSessionStore(directory, clock=clock, sync=True, map_size=MAP_SIZE)
    try:
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            changed = store.reconcile(NS)
            times.append(time.perf_counter() - start)
            if changed:
                raise RuntimeError(f"reconcile changed {len(changed)} live attempts")
        visited = len(store.list_active_attempts(NS))
        if visited != active:
            raise RuntimeError(f"expected {active} active attempts, found {visited}")
        return statistics.median(times)
    finally:
        store.close()


def run(quick: bool) -> dict[str, Any]:
    _repo_on_path()
    ops, rounds = (200, 4) if quick else (2000, 10)
    small, large, active = (100, 2_000, 10) if quick else (1_000, 100_000, 100)
    repeats = 5 if quick else 21
    with tempfile.TemporaryDirectory(prefix="bench-store-") as tmp:
        root = Path(tmp)
        raw = RawLmdb(root / "raw")
        try:
            raw.commit(max(50, ops // 10))  # warm the file and the page cache
            operations = store_ops(root / "store", raw, ops, rounds)
        finally:
            raw.close()
        reconcile_small = reconcile_seconds(root / "reconcile-small", small, active, repeats)
        reconcile_large = reconcile_seconds(root / "reconcile-large", large, active, repeats)
    ratio = reconcile_large / reconcile_small
    return {
        "quick": quick,
        "ops_per_measurement": ops,
        "rounds": rounds,
        "operations": operations,
        "reconcile": {
            "small_history_terminal": small,
            "large_history_terminal": large,
            "active": active,
            "small_seconds": reconcile_small,
            "large_seconds": reconcile_large,
            "ratio": ratio,
            "target_ratio_max": RECONCILE_TARGET,
            "meets_target": ratio <= RECONCILE_TARGET,
            "mix": "terminal history: accepted->failed attempts; active: unexpired leases, "
            "visited and left unchanged",
        },
    }


def render(result: dict[str, Any]) -> str:
    lines = [
        "LmdbSessionStore durable ops vs raw py-lmdb durable commits"
        " (sync on, single thread, one op per transaction)"
        + (" [quick]" if result["quick"] else ""),
        f"{result['ops_per_measurement']} ops per operation in {result['rounds']} rounds, each "
        "between two equal chunks of raw commits; x raw = median of the per-round ratios",
        "",
        f"{'operation':<16} {'ops/s':>9} {'raw/s':>9} {'x raw':>7} {'target':>8}  ok",
    ]
    for name, figure in result["operations"].items():
        lines.append(
            f"{name:<16} {figure['ops_per_s']:>9,.0f} {figure['raw_commits_per_s']:>9,.0f} "
            f"{figure['ratio_to_raw']:>7.2f} "
            f"{'>= ' + format(figure['target_ratio_min'], '.1f'):>8}  "
            f"{'yes' if figure['meets_target'] else 'NO'}"
        )
    rec = result["reconcile"]
    lines += [
        "",
        f"reconcile, {rec['active']} active + {rec['small_history_terminal']:,} terminal: "
        f"{rec['small_seconds'] * 1e3:.3f} ms",
        f"reconcile, {rec['active']} active + {rec['large_history_terminal']:,} terminal: "
        f"{rec['large_seconds'] * 1e3:.3f} ms",
        f"reconcile ratio (large / small): {rec['ratio']:.2f}  target <= "
        f"{rec['target_ratio_max']:.1f}  {'yes' if rec['meets_target'] else 'NO'}",
        f"  ({rec['mix']})",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="small counts, for a smoke test")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    result = run(args.quick)
    print(json.dumps(result, indent=2, sort_keys=True) if args.json else render(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
