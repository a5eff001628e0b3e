"""PostgresSessionStore durable throughput, beside LmdbSessionStore, on this machine.

Run: ``python bench/store_postgres.py [--quick] [--json] [--admin-dsn DSN] [--no-lmdb]``.

It creates a database of its own on the server (``--admin-dsn``, default
``$SUBAGENTS_PG_ADMIN_DSN`` or the local ``postgres`` database) and drops it at
the end. In one run it measures:

- ``raw``: plain psycopg durable commits per second, one small INSERT per
  autocommit transaction (``synchronous_commit`` on): the physical limit of
  "one durable PostgreSQL transaction per operation" here.
- the store's durable operations per second, single-threaded, one operation per
  transaction, exactly the operation mix of ``bench/store.py`` (accept, update,
  heartbeat, terminal commit, claim, acknowledge), interleaved one by one with
  raw commits; rates are 1/median latency and the ratio is to raw. The store
  time is a ManualClock like the LMDB bench (``--db-clock`` reads the server's
  clock in each transaction instead: one more round trip per operation).
- concurrent writers (informative): 8 threads heartbeating their own attempts
  through one store (8 pooled connections); PostgreSQL's group commit shares
  WAL flushes between them.
- several store processes on one database (informative): 1, 2 and 4 processes,
  each running whole attempt lifecycles (accept, starting, running, terminal,
  claim, acknowledge) on a session of its own with database time, for a fixed
  duration; total operations per second. This is the store side of "several
  hosts on one database" (the RPC host's own multi-host bench is issue 8's).
- the LMDB figures of ``bench/store.py`` (its ``store_ops``, reused by import),
  same operations, so the two stores sit side by side (``--no-lmdb`` skips).

Work on both sides: no model request, no message history, no usage: store
operations against one raw INSERT, both durable (``synchronous_commit`` on:
the WAL flushed before the commit returns). Each ratio is the median of the
per-round ratios (the calls cut into rounds, medians within each) with its
min and max. The load average is printed before and after.

This is a benchmark, not a test: it never asserts timing; exit status is 0.
"""

from __future__ import annotations

import argparse
import importlib.util
import multiprocessing
import os
import secrets
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_ADMIN_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"


def _repo_on_path() -> None:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))


def _lmdb_bench() -> ModuleType:
    """``bench/store.py`` as a module (its records, set-up and measuring are reused)."""
    spec = importlib.util.spec_from_file_location("bench_store", ROOT / "bench" / "store.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_store"] = module
    spec.loader.exec_module(module)
    return module


class RawPostgres:
    """Plain psycopg: one small INSERT per durable autocommit transaction."""

    def __init__(self, dsn: str) -> None:
        import psycopg

        self._conn = psycopg.connect(dsn, autocommit=True)
        self._conn.execute("CREATE TABLE raw_commits (k bigint PRIMARY KEY, v bytea NOT NULL)")
        self._next = 0
        self._value = b"v" * 64

    def commit(self, count: int) -> float:
        """Seconds taken by ``count`` durable commits of one new row each."""
        conn, value = self._conn, self._value
        start = time.perf_counter()
        for n in range(self._next, self._next + count):
            conn.execute("INSERT INTO raw_commits (k, v) VALUES (%s, %s)", (n, value))
        self._next += count
        return time.perf_counter() - start

    def close(self) -> None:
        self._conn.close()


def store_ops(
    bench: ModuleType, store: Any, clock: Any, raw: RawPostgres, count: int
) -> dict[str, Any]:
    """The PostgreSQL store's durable single-threaded rates (the LMDB bench's mix)."""

    records = bench.Records(clock)
    results: dict[str, Any] = {}

    def measure(name: str, calls: list[Callable[[], object]]) -> None:
        results[name] = bench._measure(calls, clock, raw)

    bench._setup_session(store, clock)
    concurrent = bench.measure_operation_mix(
        store,
        clock,
        records,
        count,
        measure=measure,
        between=lambda starting: _concurrent_heartbeats(bench, store, starting, clock),
    )
    return {"operations": results, "concurrent": concurrent}


def _concurrent_heartbeats(
    bench: ModuleType, store: Any, records: list[Any], clock: Any, threads: int = 8
) -> dict[str, Any]:
    slices = [records[i::threads] for i in range(threads)]
    barrier = threading.Barrier(threads + 1)
    errors: list[BaseException] = []

    def worker(mine: list[Any]) -> None:
        try:
            barrier.wait()
            for r in mine:
                store.heartbeat_attempt(r.attempt_id, bench.HOST, 1, clock.now() + 7200.0)
        except BaseException as exc:
            errors.append(exc)

    workers = [threading.Thread(target=worker, args=(mine,)) for mine in slices]
    for w in workers:
        w.start()
    retries_before = store.postgres.retries
    barrier.wait()
    start = time.perf_counter()
    for w in workers:
        w.join()
    took = time.perf_counter() - start
    if errors:
        raise errors[0]
    return {
        "threads": threads,
        "operation": "heartbeat",
        "ops_per_s": len(records) / took,
        "serialization_retries": store.postgres.retries - retries_before,
        "note": "informative: no target; one store, one pooled connection per thread",
    }


# -- several processes on one database ---------------------------------------------------------


def _lifecycle_worker(
    dsn: str, *, tag: str, index: int, seconds: float, start_at: float, out: Any
) -> None:
    """One process: whole attempt lifecycles on its own session, database time."""
    _repo_on_path()
    bench = _lmdb_bench()
    import msgspec

    from storage import DeliveryClaim, ManualClock
    from storage._postgres import PostgresSessionStore

    store = PostgresSessionStore(dsn, pool_size=2)
    clock = ManualClock(start=store.clock.now())
    session = f"bench-session-{tag}-p{index}"
    parent = f"bench-parent-{tag}-p{index}"
    records = bench.Records(clock)
    try:
        store.create_session(msgspec.structs.replace(records.session(), session_id=session))
        _admit_parent(store, clock, session, parent)
        while time.time() < start_at:
            time.sleep(0.001)
        ops = 0
        n = 0
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            clock.set(store.clock.now())  # records stamped at database time
            record = msgspec.structs.replace(
                records.acceptance(n),
                attempt_id=f"subattempt_{tag}_p{index}_{n:08d}",
                parent_session_id=session,
                parent_run_id=parent,
            )
            record = store.accept_attempt(record)
            record = store.update_attempt_execution(records.moved(record, "starting"))
            record = store.update_attempt_execution(
                records.moved(record, "running", child_run_id=f"child-{record.attempt_id}")
            )
            record = store.commit_terminal(records.terminal(record))
            claim = DeliveryClaim(claim_id=f"c-{record.attempt_id}", deadline=clock.now() + 600)
            store.claim_delivery(record.attempt_id, claim)
            store.acknowledge_delivery(record.attempt_id, claim.claim_id)
            ops += 6  # the clock read that stamps the records is not counted
            n += 1
        out.put((index, ops, seconds, store.postgres.retries))
    except BaseException as exc:
        out.put((index, -1, repr(exc), 0))
        raise
    finally:
        store.close()


def _admit_parent(store: Any, clock: Any, session: str, parent: str) -> None:
    from statemachines import RunStatus
    from storage import AdmissionLease, InputPart, RunRecord

    now = clock.now()
    store.admit_run(
        RunRecord(
            session_id=session,
            run_id=parent,
            created_at=now,
            updated_at=now,
            input=(InputPart(text="bench"),),
            admission_lease=AdmissionLease(
                admission_id=f"adm-{parent}",
                host_instance_id="bench-host",
                fencing_generation=1,
                lease_expires_at=now + 3600.0,
            ),
        )
    )
    for status in (RunStatus.RUNNING, RunStatus.COMPLETED):
        store.transition_run(session, parent, status, admission_id=f"adm-{parent}")


def processes_throughput(dsn: str, counts: list[int], seconds: float) -> list[dict[str, Any]]:
    ctx = multiprocessing.get_context("spawn")
    figures = []
    for count in counts:
        out = ctx.Queue()
        start_at = time.time() + 3.0  # every process connected and set up first
        procs = [
            ctx.Process(
                target=_lifecycle_worker,
                args=(dsn,),
                kwargs={
                    "tag": f"n{count}",
                    "index": i,
                    "seconds": seconds,
                    "start_at": start_at,
                    "out": out,
                },
            )
            for i in range(count)
        ]
        for p in procs:
            p.start()
        rows = [out.get(timeout=120) for _ in procs]
        for p in procs:
            p.join(60)
        failed = [r for r in rows if r[1] < 0]
        if failed:
            raise RuntimeError(f"bench process failed: {failed}")
        total = sum(r[1] for r in rows)
        figures.append(
            {
                "processes": count,
                "ops_per_s": total / seconds,
                "per_process_ops_per_s": [r[1] / seconds for r in rows],
                "serialization_retries": sum(r[3] for r in rows),
            }
        )
    return figures


# -- run and report ------------------------------------------------------------------------------


def run(quick: bool, admin_dsn: str, *, lmdb: bool, db_clock: bool) -> dict[str, Any]:
    _repo_on_path()
    bench = _lmdb_bench()
    from storage import ManualClock
    from storage._postgres import PostgresSessionStore, create_database, drop_database

    ops = 200 if quick else 2000
    seconds = 2.0 if quick else 10.0
    name = f"subagents_bench_{secrets.token_hex(6)}"
    dsn = create_database(admin_dsn, name)
    try:
        raw = RawPostgres(dsn)
        try:
            raw.commit(max(50, ops // 10))
            manual = None if db_clock else ManualClock(start=1_700_000_000.0)
            store = PostgresSessionStore(dsn, clock=manual, pool_size=8)
            try:
                # With database time, records are built from a clock set to it.
                clock = manual or ManualClock(start=store.clock.now())
                measured = store_ops(bench, store, clock, raw, ops)
            finally:
                store.close()
        finally:
            raw.close()
        processes = processes_throughput(dsn, [1, 2, 4], seconds)
    finally:
        drop_database(admin_dsn, name)
    result: dict[str, Any] = {
        "quick": quick,
        "ops_per_measurement": ops,
        "clock": "database" if db_clock else "manual",
        "postgres": measured["operations"],
        "concurrent": measured["concurrent"],
        "processes": processes,
        "process_seconds": seconds,
    }
    if lmdb:
        with tempfile.TemporaryDirectory(prefix="bench-store-pg-") as tmp:
            raw_lmdb = bench.RawLmdb(Path(tmp) / "raw")
            try:
                raw_lmdb.commit(max(50, ops // 10))
                result["lmdb"] = bench.store_ops(Path(tmp) / "store", raw_lmdb, ops)["operations"]
            finally:
                raw_lmdb.close()
    return result


def render(result: dict[str, Any]) -> str:
    lines = [
        "PostgresSessionStore durable ops vs raw psycopg durable commits"
        " (synchronous_commit on, single thread, one op per transaction)"
        + (" [quick]" if result["quick"] else ""),
        f"{result['ops_per_measurement']} ops per operation; rates are 1/median latency "
        f"(mean in brackets); store clock: {result['clock']}; x raw = median of the "
        "rounds' ratios of medians [min-max]",
        "",
        f"{'operation':<16} {'PG ops/s':>16} {'raw PG/s':>16} {'x raw [min-max]':>21} "
        f"{'LMDB ops/s':>12}",
    ]
    lmdb = result.get("lmdb", {})
    for name, figure in result["postgres"].items():
        other = lmdb.get(name)
        lines.append(
            f"{name:<16} {figure['ops_per_s']:>7,.0f} ({figure['ops_per_s_mean']:>6,.0f}) "
            f"{figure['raw_commits_per_s']:>7,.0f} ({figure['raw_commits_per_s_mean']:>6,.0f}) "
            f"{figure['ratio_to_raw']:>7.3f} [{figure['ratio_min']:.2f}-{figure['ratio_max']:.2f}] "
            f"{format(other['ops_per_s'], ',.0f') if other else '-':>12}"
        )
    con = result["concurrent"]
    lines += [
        "",
        f"concurrent (informative): {con['threads']} threads x {con['operation']} on one store: "
        f"{con['ops_per_s']:,.0f} ops/s, {con['serialization_retries']} serialization retries",
        "",
        f"store processes on one database, whole lifecycles, database time "
        f"({result['process_seconds']:.0f} s each):",
    ]
    for fig in result["processes"]:
        lines.append(
            f"  {fig['processes']} process(es): {fig['ops_per_s']:>8,.0f} ops/s "
            f"(retries {fig['serialization_retries']})"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="small counts, for a smoke test")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--admin-dsn",
        default=os.environ.get("SUBAGENTS_PG_ADMIN_DSN", DEFAULT_ADMIN_DSN),
        help="a DSN allowed to CREATE DATABASE (the bench's own database is dropped after)",
    )
    parser.add_argument("--no-lmdb", action="store_true", help="skip the LMDB side")
    parser.add_argument(
        "--db-clock", action="store_true", help="store time from the server in each transaction"
    )
    args = parser.parse_args(argv)
    _repo_on_path()
    from bench._common import report

    report(
        lambda: run(args.quick, args.admin_dsn, lmdb=not args.no_lmdb, db_clock=args.db_clock),
        render,
        args.json,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
