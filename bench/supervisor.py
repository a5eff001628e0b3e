"""The background supervisor (actors/) measured in one run: memory, throughput, durability.

Run: ``python bench/supervisor.py [--quick] [--json] [--no-dbos] [--no-postgres] [--no-sdk]
[--rounds N] [--seconds S] [--admin-dsn DSN]``.

Figures, each against its target:

- ``memory_per_live_attempt_kib``: peak memory per live background attempt with
  1,000 attempts alive at once (each with its actor, its thread, its child task
  waiting on the loop), measured as the growth of the process's resident set
  (``VmRSS`` in ``/proc/self/status``) from before the first delegate to the
  moment every child is running, divided by the number of attempts. Target
  <= 100 KiB.
- ``memory_attempts_per_s``: in-memory delegate -> child completes -> wait
  (which claims and acknowledges the result) throughput, from one caller
  keeping a window of attempts in flight; best of several rounds, each on a
  fresh supervisor. Target >= 2,000 attempts/s. Each round also reports the
  process CPU time per attempt (``time.process_time``, every thread).
- The interleaved comparison, at concurrency 1 and 32 (that many caller
  threads, each doing one attempt after another for a fixed time). Every side
  runs in a worker process of its own, set up and warmed up once; a round asks
  each (side, concurrency) in turn, the order rotating from round to round, so
  the two sides of every ratio are measured within one round, seconds apart, on
  the same disk and the same machine load. Each ratio is taken per round and
  reported as the median with its min and max. The sides and the work each does:

  - ``raw``: plain py-lmdb, one small put per durable (``sync=True``) write
    transaction, one writer: the rate of one fsync'd LMDB commit here.
  - ``kernel`` (ours): ``BackgroundSubagentSupervisor`` on
    ``LmdbSessionStore(sync=True)``, every commit fsync'd before it returns
    (the store's default); delegate -> a child runner that returns ``"ok"`` at
    once -> wait, which receives the result durably: handed over by the terminal
    commit when the wait was already waiting (two commits per attempt), else
    claimed and acknowledged by the wait in a commit of its own (three). No model
    request, no message history, no usage: the same work as DBOS's side.
  - ``journal`` (ours): the same as ``kernel`` on
    ``LmdbSessionStore(journal=True)``: each commit made durable by one flushed
    block of the store's redo journal before it returns (LMDB itself commits
    without syncing and is flushed at each checkpoint, every 128 commits;
    ``docs/journal.md``). Same durability, same work.
  - ``sdk`` (ours, through the SDK's host): ``open_host`` on an LMDB data
    directory (durable, the host's defaults, its event log in the same
    environment); each caller delegates on a session of its own to a subagent
    whose child is a real agent run on a test model (one model request, its
    message history and usage recorded), then waits for it. More work than
    DBOS's side. Each session carries the metadata of a session whose client
    reads its own results (as an MCP client's does), so the caller's wait
    receives the result durably (as the kernel side's does) and the host admits
    no continuation run.
  - ``dbos-sqlite`` / ``dbos-postgres``: DBOS Transact 3 with its default
    durability (SQLite: the sqlite3 defaults, a rollback journal and
    ``synchronous=FULL``; PostgreSQL: the server's ``synchronous_commit``, on
    here), on a database of its own (``dbos_bench_supervisor``, created and
    dropped): a parent workflow starts a child workflow and waits for its
    result; the child returns ``"ok"``. No model request, no message history,
    no usage.

  Figures: ``durable_ratio``: ours (kernel) at 32 callers against what one
  commit per write would allow, raw commits/s / commit requests per attempt,
  both from the same round (target >= 0.5); ``ours_over_dbos_sqlite_c1`` and
  ``_c32`` (target >= 10) and ``ours_over_dbos_postgres_c1`` and ``_c32``
  (target >= 5): ours (kernel) / DBOS per round. The SDK's ratios are printed
  beside them, and so is each ``fsync-ceiling/dbos-*@1``: raw commits/s divided by
  ours' durable commits per attempt at concurrency 1, over DBOS, per round. An
  attempt's commits are serial at concurrency 1, so that is the highest ratio any
  kernel with our fsync budget could reach on this disk, with zero CPU of its own.
  Each row also prints the commit requests per attempt (ours: the
  store's backend writes; DBOS: SQLAlchemy commits), the durable commits per
  attempt after batching (ours: LMDB write transactions, ``last_txnid``, each
  one fsync'd; DBOS: its commits) and the process CPU per attempt. A stretch
  ends when every caller finished the attempt it was in, so a slow side's
  stretch runs a little past its time; its rate counts the whole stretch.
  Needs ``dbos`` (the ``bench`` extra) and, for its PostgreSQL side, a server
  at ``--admin-dsn``; ``--no-dbos``, ``--no-postgres`` or a missing package
  or server skips those sides.

The machine's load average is printed before and after: every figure is as
measured, on whatever else the machine was doing. This is a benchmark, not a
test: it never asserts timing, and exits 0 whether or not targets are met.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench._common import load_average, print_load, worker_line  # noqa: E402

MEMORY_TARGET_KIB = 100.0
THROUGHPUT_TARGET = 2000.0
DURABLE_RATIO_TARGET = 0.5
DBOS_SQLITE_TARGET = 10.0
DBOS_POSTGRES_TARGET = 5.0
MAP_SIZE = 1 << 30


def rss_kib() -> int:
    """Resident set size of this process (``VmRSS``), KiB."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


# -- children ---------------------------------------------------------------------------------


class HeldChildren:
    """A runner whose children report that they run, then wait for one shared release."""

    def __init__(self, expected: int) -> None:
        self.lock = threading.Lock()
        self.running = 0
        self.expected = expected
        self.all_running = threading.Event()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.release: asyncio.Event | None = None

    async def __call__(self, request: Any, control: Any) -> Any:
        from actors import ChildOutcome

        if self.release is None:
            self.loop = asyncio.get_running_loop()
            self.release = asyncio.Event()
        release = self.release
        with self.lock:
            self.running += 1
            if self.running >= self.expected:
                self.all_running.set()
        await release.wait()
        return ChildOutcome.completed("done")

    def open(self) -> None:
        if self.loop is not None and self.release is not None:
            self.loop.call_soon_threadsafe(self.release.set)


async def instant_child(request: Any, control: Any) -> Any:
    from actors import ChildOutcome

    return ChildOutcome.completed("ok")


def limits(active: int) -> Any:
    from actors import SupervisorLimits

    return SupervisorLimits(max_active_attempts=active, max_undelivered_results=1 << 30)


# -- (a) memory per live attempt --------------------------------------------------------------


def measure_memory(count: int) -> dict[str, Any]:
    from actors import BackgroundSubagentSupervisor

    warm = 64
    held = HeldChildren(expected=warm + count)
    supervisor = BackgroundSubagentSupervisor(runner=held, limits=limits(count + warm))
    try:
        # Warm up: the loop, the pools, the machine pool and a few actor threads exist
        # before the baseline (they are per supervisor, not per attempt).
        for _ in range(warm):
            supervisor.delegate_sync("worker", "warm up", runner=instant_child)
        for record in list(supervisor.info_sync().active):
            supervisor.wait_sync(record.attempt_id, 30)
        held.expected = count
        gc.collect()
        before = rss_kib()
        started = time.perf_counter()
        ids = [supervisor.delegate_sync("worker", "hold").attempt_id for _ in range(count)]
        if not held.all_running.wait(120):
            raise RuntimeError(f"only {held.running} of {count} children started")
        seconds = time.perf_counter() - started
        gc.collect()
        after = rss_kib()
        live_threads = threading.active_count()
        held.open()
        for attempt_id in ids:
            supervisor.wait_sync(attempt_id, 60)
    finally:
        supervisor.shutdown_checked_sync(60)
    per = (after - before) / count
    return {
        "value": round(per, 1),
        "target_max": MEMORY_TARGET_KIB,
        "ok": per <= MEMORY_TARGET_KIB,
        "unit": "KiB",
        "method": "VmRSS delta (/proc/self/status) / live attempts",
        "live_attempts": count,
        "rss_before_kib": before,
        "rss_with_all_live_kib": after,
        "threads_alive": live_threads,
        "seconds_to_start_all": round(seconds, 3),
    }


# -- (b) in-memory throughput -----------------------------------------------------------------


def run_delegations(supervisor: Any, count: int, window: int) -> float:
    """Seconds for ``count`` delegate -> complete -> wait, ``window`` in flight."""
    started = time.perf_counter()
    done = 0
    while done < count:
        batch = min(window, count - done)
        ids = [supervisor.delegate_sync("worker", "go").attempt_id for _ in range(batch)]
        for attempt_id in ids:
            result = supervisor.wait_sync(attempt_id, 60)
            if result.status != "completed" or result.result != "ok":
                raise RuntimeError(f"unexpected wait result {result!r}")
        done += batch
    return time.perf_counter() - started


def measure_memory_throughput(count: int, window: int, rounds: int) -> dict[str, Any]:
    """Each round on a fresh supervisor (and in-memory store), as a host starts one per
    session: a supervisor's own tables grow with every attempt it ever ran."""
    from actors import BackgroundSubagentSupervisor

    rates = []
    cpu = []
    for _ in range(rounds):
        # Garbage of the previous phase or round (a shut-down supervisor's tables and
        # pools) is not this round's work: collect it before, not during, the round.
        gc.collect()
        supervisor = BackgroundSubagentSupervisor(runner=instant_child, limits=limits(window + 8))
        try:
            run_delegations(supervisor, min(count, 500), window)  # warm up
            cpu_started = time.process_time()
            seconds = run_delegations(supervisor, count, window)
            cpu.append((time.process_time() - cpu_started) / count * 1e6)
            rates.append(count / seconds)
        finally:
            supervisor.shutdown_checked_sync(60)
    best = max(rates)
    best_cpu = cpu[rates.index(best)]
    return {
        "value": round(best, 1),
        "target_min": THROUGHPUT_TARGET,
        "ok": best >= THROUGHPUT_TARGET,
        "unit": "attempts/s",
        "method": f"best of {rounds} rounds of {count} on a fresh supervisor, window {window}, "
        "one caller",
        "rounds": [round(r, 1) for r in rates],
        "cpu_us_per_attempt": [round(c) for c in cpu],
        "best_round_cpu_us_per_attempt": round(best_cpu),
    }


# -- (c) the interleaved comparison: ours, raw LMDB and DBOS, round by round -------------------
#
# Every side runs in a worker process of its own (``--worker KIND``), set up and warmed up once,
# then asked for one timed stretch at a time over a pipe. A round asks every side in turn
# (the order rotates from round to round), at concurrency 1 and at 32, so each ratio's two
# sides are measured within seconds of each other, on the same disk and the same machine
# load; the figure is the median of the per-round ratios, with their min and max.

SDK_CONFIG = """
[profiles.default]
model_id = "test:echo"
subagents = ["worker"]

[profiles.worker]
model_id = "test:text=ok"

[subagents.worker]
profile = "worker"
description = "Answers ok"
"""

SIDES = ("raw", "kernel", "journal", "sdk", "dbos-sqlite", "dbos-postgres")
OURS = ("kernel", "journal", "sdk")
DBOS_SIDES = ("dbos-sqlite", "dbos-postgres")
LABELS = {
    "raw": "raw LMDB (py-lmdb, 1 put per durable commit)",
    "kernel": "ours, kernel (supervisor + LmdbSessionStore sync)",
    "journal": "ours, kernel (supervisor + LmdbSessionStore journal)",
    "sdk": "ours, SDK host (child agent on a test model, LMDB)",
    "dbos-sqlite": "DBOS 3 on SQLite (default durability)",
    "dbos-postgres": "DBOS 3 on PostgreSQL (default durability)",
}
DEFAULT_ADMIN_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
DBOS_DATABASE = "dbos_bench_supervisor"


def timed_callers(
    one: Callable[[int], None], seconds: float, concurrency: int
) -> tuple[int, float]:
    """``concurrency`` threads each call ``one(caller)`` back to back until ``seconds``
    have passed (each finishes the call it is in): (calls completed, wall seconds)."""
    counts = [0] * concurrency
    errors: list[BaseException] = []
    started = time.perf_counter()
    deadline = started + seconds

    def caller(index: int) -> None:
        try:
            while time.perf_counter() < deadline:
                one(index)
                counts[index] += 1
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return sum(counts), time.perf_counter() - started


def _delta(before: int | None, after: int | None) -> int | None:
    return None if before is None or after is None else after - before


class Side:
    """One side of the comparison inside its worker process: ``round`` runs one timed
    stretch and reports attempts, seconds, CPU and the commits it cost."""

    def round(self, seconds: float, concurrency: int) -> dict[str, Any]:
        writes, physical = self.commits()
        cpu = time.process_time()
        attempts, took = self.run(seconds, concurrency)
        cpu = time.process_time() - cpu
        writes_after, physical_after = self.commits()
        return {
            "attempts": attempts,
            "seconds": took,
            "cpu_s": cpu,
            "writes": _delta(writes, writes_after),
            "commits": _delta(physical, physical_after),
        }

    def run(self, seconds: float, concurrency: int) -> tuple[int, float]:
        raise NotImplementedError

    def commits(self) -> tuple[int | None, int | None]:
        """(commit requests, physical durable commits) so far; ``None`` when not counted."""
        return None, None

    def close(self) -> None:
        pass


class RawSide(Side):
    """Plain py-lmdb: one small put per durable (``sync=True``) write transaction, one
    writer (LMDB has one; concurrency is ignored): the rate of one fsync'd commit."""

    def __init__(self, directory: Path) -> None:
        from bench.store import RawLmdb

        self.raw = RawLmdb(directory)
        self.raw.commit(50)

    def round(self, seconds: float, concurrency: int) -> dict[str, Any]:
        cpu = time.process_time()
        started = time.perf_counter()
        count = 0
        while time.perf_counter() - started < seconds:
            self.raw.commit(10)
            count += 10
        took = time.perf_counter() - started
        return {
            "attempts": count,
            "seconds": took,
            "cpu_s": time.process_time() - cpu,
            "writes": count,
            "commits": count,
        }

    def close(self) -> None:
        self.raw.close()


class KernelSide(Side):
    """Ours at the kernel level: ``BackgroundSubagentSupervisor`` on
    ``LmdbSessionStore(sync=True)`` (every commit fsync'd before it returns), a child
    runner that returns ``"ok"`` at once (no model request, no message history, no usage),
    each caller doing delegate -> child completes -> wait (which receives it durably)."""

    def __init__(self, directory: Path, *, journal: bool = False) -> None:
        from actors import BackgroundSubagentSupervisor, OwnerIdentity
        from bench._common import CommitCounter
        from storage import LmdbSessionStore

        self.store = LmdbSessionStore(directory, sync=True, map_size=MAP_SIZE, journal=journal)
        self.supervisor = BackgroundSubagentSupervisor(
            runner=instant_child,
            store=self.store,
            owner=OwnerIdentity(host_instance_id="bench-host", fencing_generation=1),
            limits=limits(40),
        )
        run_delegations(self.supervisor, 50, 1)  # warm up: threads, session
        self.counter = CommitCounter(self.store)

    def one(self, _: int) -> None:
        attempt = self.supervisor.delegate_sync("worker", "go").attempt_id
        result = self.supervisor.wait_sync(attempt, 60)
        if result.status != "completed" or result.result != "ok":
            raise RuntimeError(f"unexpected wait result {result!r}")

    def run(self, seconds: float, concurrency: int) -> tuple[int, float]:
        return timed_callers(self.one, seconds, concurrency)

    def commits(self) -> tuple[int | None, int | None]:
        return self.counter.writes, self.counter.physical()

    def close(self) -> None:
        self.supervisor.shutdown_checked_sync(60)
        self.store.close()


class SdkSide(Side):
    """Ours through the SDK's host: ``open_host`` on an LMDB data directory (the host's
    defaults: durable commits, its event log in the same environment, its maintenance
    tick), each caller on a session of its own delegating to the ``worker`` subagent in
    the background and waiting for it. The child is a real agent run on a test model:
    one model request, its message history and usage recorded, its output the result."""

    def __init__(self, directory: Path) -> None:
        from bench._common import CommitCounter
        from subagents._host import open_host, parse_host_config

        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="bench-sdk-loop")
        self.thread.start()
        self.service = open_host(parse_host_config(SDK_CONFIG), data_dir=directory)
        self.sessions: set[str] = set()
        self._call(self.service.start())
        self._call(self._callers(1.0, 1))  # warm up
        self.counter = CommitCounter(self.service.store)

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(600)

    async def _callers(self, seconds: float, concurrency: int) -> int:
        deadline = time.perf_counter() + seconds

        async def caller(index: int) -> int:
            supervisor = self.service.supervisor(await self._session(index))
            done = 0
            while time.perf_counter() < deadline:
                accepted = await supervisor.delegate("worker", "go")
                result = await supervisor.wait(accepted.attempt_id, 60)
                if result.status != "completed" or result.result != "ok":
                    raise RuntimeError(f"unexpected wait result {result!r}")
                done += 1
            return done

        return sum(await asyncio.gather(*(caller(i) for i in range(concurrency))))

    async def _session(self, index: int) -> str:
        """Caller ``index``'s session, created on first use with the metadata of a session
        whose client reads its own results (as an MCP client's does), so the caller's
        wait receives each result durably and the host admits no continuation."""
        from subagents._host import Connection
        from subagents._host._methods import SessionCreateParams
        from subagents._host._service import MCP_SESSION_KEY

        session_id = f"bench-session-{index:03d}"
        if session_id not in self.sessions:
            params = SessionCreateParams(session_id=session_id, metadata={MCP_SESSION_KEY: "true"})
            await self.service.session_create(params, Connection(transport="bench"))
            self.sessions.add(session_id)
        return session_id

    def run(self, seconds: float, concurrency: int) -> tuple[int, float]:
        started = time.perf_counter()
        done = self._call(self._callers(seconds, concurrency))
        return done, time.perf_counter() - started

    def commits(self) -> tuple[int | None, int | None]:
        return self.counter.writes, self.counter.physical()

    def close(self) -> None:
        self._call(self.service.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(60)


class DbosSide(Side):
    """DBOS Transact with its default durability (SQLite: the sqlite3 defaults, a
    rollback journal and ``synchronous=FULL``; PostgreSQL: the server's
    ``synchronous_commit``): a parent workflow starts a child workflow and waits for its
    result; the child returns ``"ok"`` (no model request, no message history, no usage).
    Commits are counted from SQLAlchemy's ``commit`` event on every engine DBOS makes."""

    def __init__(self, url: str) -> None:
        import sqlalchemy
        from dbos import DBOS

        self.lock = threading.Lock()
        self.count = 0

        def committed(_: Any) -> None:
            with self.lock:
                self.count += 1

        sqlalchemy.event.listen(sqlalchemy.engine.Engine, "commit", committed)
        DBOS(
            config={
                "name": "bench-supervisor",
                "system_database_url": url,
                "log_level": "WARNING",
                "console_log_level": "WARNING",
            }
        )

        @DBOS.workflow()
        def child(prompt: str) -> str:
            return "ok"

        @DBOS.workflow()
        def parent(prompt: str) -> str:
            handle = DBOS.start_workflow(child, prompt)
            return handle.get_result()

        self.parent = parent
        self.dbos = DBOS
        DBOS.launch()
        for n in range(20):
            parent(f"warm-{n}")

    def one(self, _: int) -> None:
        if self.parent("go") != "ok":
            raise RuntimeError("the DBOS parent workflow did not return ok")

    def run(self, seconds: float, concurrency: int) -> tuple[int, float]:
        return timed_callers(self.one, seconds, concurrency)

    def commits(self) -> tuple[int | None, int | None]:
        return self.count, self.count

    def close(self) -> None:
        self.dbos.destroy()


def open_side(kind: str, directory: Path, dsn: str) -> Side:
    if kind == "raw":
        return RawSide(directory)
    if kind == "kernel":
        return KernelSide(directory)
    if kind == "journal":
        return KernelSide(directory, journal=True)
    if kind == "sdk":
        return SdkSide(directory)
    if kind == "dbos-sqlite":
        return DbosSide(f"sqlite:///{directory}/dbos.sqlite")
    if kind == "dbos-postgres":
        return DbosSide(dsn)
    raise ValueError(f"no side {kind!r}")


def worker_main(kind: str, directory: str, dsn: str) -> int:
    """A worker process: one side, set up once; one JSON line in (``seconds``,
    ``concurrency``), one JSON line out per round; end of input ends it."""
    side = open_side(kind, Path(directory), dsn)
    out = sys.stdout
    out.write(json.dumps({"ready": kind}) + "\n")
    out.flush()
    try:
        for line in sys.stdin:
            ask = json.loads(line)
            figures = side.round(float(ask["seconds"]), int(ask["concurrency"]))
            out.write(json.dumps(figures) + "\n")
            out.flush()
    finally:
        side.close()
    return 0


class Worker:
    """The bench's end of one worker process."""

    def __init__(self, kind: str, directory: Path, dsn: str) -> None:
        self.kind = kind
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        }
        self.process = subprocess.Popen(
            [
                sys.executable,
                str(Path(__file__).resolve()),
                "--worker",
                kind,
                "--dir",
                str(directory),
                "--dsn",
                dsn,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )

    def ready(self) -> None:
        line = self._line()
        if json.loads(line).get("ready") != self.kind:
            raise RuntimeError(f"worker {self.kind} did not start: {line!r}")

    def _line(self) -> str:
        return worker_line(self.process, f"worker {self.kind}")

    def round(self, seconds: float, concurrency: int) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(
            json.dumps({"seconds": seconds, "concurrency": concurrency}) + "\n"
        )
        self.process.stdin.flush()
        figures: dict[str, Any] = json.loads(self._line())
        return figures

    def close(self, kill: bool = False) -> None:
        if kill:
            self.process.kill()
        if self.process.stdin is not None:
            with contextlib.suppress(OSError):
                self.process.stdin.close()
        try:
            self.process.wait(120)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)


def _psql(admin_dsn: str, sql: str) -> None:
    import psycopg

    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(sql)  # type: ignore[arg-type]


def postgres_url(admin_dsn: str, database: str) -> str:
    """``admin_dsn`` with its database replaced by ``database``."""
    base, _, _ = admin_dsn.rpartition("/")
    return f"{base}/{database}"


def measure_comparison(
    sides: list[str], concurrencies: tuple[int, ...], rounds: int, seconds: float, admin_dsn: str
) -> dict[str, Any]:
    """Rounds of every (side, concurrency) in a rotating order; per-round figures."""
    base = Path(tempfile.mkdtemp(prefix="bench-supervisor-"))
    dsn = postgres_url(admin_dsn, DBOS_DATABASE)
    if "dbos-postgres" in sides:
        _psql(admin_dsn, f"DROP DATABASE IF EXISTS {DBOS_DATABASE}")
        _psql(admin_dsn, f"CREATE DATABASE {DBOS_DATABASE}")
    workers: dict[str, Worker] = {}
    samples: dict[str, list[dict[str, Any]]] = {}
    failed = True
    try:
        for kind in sides:
            (base / kind).mkdir()
            workers[kind] = Worker(kind, base / kind, dsn)
        for worker in workers.values():
            worker.ready()
        cells = [(kind, c) for kind in sides for c in (concurrencies if kind != "raw" else (1,))]
        for n in range(rounds):
            shift = n % len(cells)
            for kind, c in cells[shift:] + cells[:shift]:
                figures = workers[kind].round(seconds, c)
                figures["round"] = n
                samples.setdefault(f"{kind}@{c}", []).append(figures)
        failed = False
    finally:
        for worker in workers.values():
            worker.close(kill=failed)
        shutil.rmtree(base, ignore_errors=True)
        if "dbos-postgres" in sides:
            _psql(admin_dsn, f"DROP DATABASE IF EXISTS {DBOS_DATABASE}")
    return samples


def rate(sample: dict[str, Any]) -> float:
    return float(sample["attempts"]) / float(sample["seconds"])


# -- the fsync budget (docs/durability.md) -------------------------------------------------


def fsync_budget_line(attempts: int = 20, *, journal: bool = False) -> str:
    """Durable commits one attempt costs at concurrency 1, from the store's own counters:
    ``attempts`` sequential delegate -> complete -> wait (which delivers) on
    ``LmdbSessionStore(sync=True)`` (``journal``: with its redo journal, whose
    checkpoints' flushes are counted too), after one warm-up attempt (the session)."""
    from actors import BackgroundSubagentSupervisor, OwnerIdentity
    from storage import LmdbSessionStore

    base = Path(tempfile.mkdtemp(prefix="bench-fsyncs-"))
    store = LmdbSessionStore(base / "store", sync=True, map_size=MAP_SIZE, journal=journal)
    supervisor = BackgroundSubagentSupervisor(
        runner=instant_child,
        store=store,
        owner=OwnerIdentity(host_instance_id="bench-fsyncs", fencing_generation=1),
        limits=limits(8),
    )
    try:
        run_delegations(supervisor, 1, 1)
        before = store.counters()
        run_delegations(supervisor, attempts, 1)
        store.drain()
        moved = store.counters() - before
    finally:
        supervisor.shutdown_checked_sync(60)
        store.close()
        shutil.rmtree(base, ignore_errors=True)
    return (
        f"fsyncs per attempt (concurrency 1, LMDB sync=True{', journal' if journal else ''},"
        f" counted by the store over "
        f"{attempts} attempts): {moved.fsyncs / attempts:.2f} "
        f"({moved.commits / attempts:.2f} commits, {moved.writes / attempts:.2f} writes); "
        "budget <= 3 (2 when the wait came first: the terminal commit delivers to it)"
    )


# -- (d) DBOS Transact on SQLite --------------------------------------------------------------


def per_attempt(samples: list[dict[str, Any]], key: str) -> float | None:
    counted = [s[key] for s in samples if s.get(key) is not None]
    attempts = sum(s["attempts"] for s in samples if s.get(key) is not None)
    return None if not counted or not attempts else sum(counted) / attempts


# ---- fsyncs per attempt -------------------------------------------------------------------
# Commits per attempt in the comparison rows: for ours, LMDB write transactions
# (``last_txnid``: each is fsync'd before it returns, so they equal the store's own
# ``counters().fsyncs``, as tests/actors/test_fsync_budget.py checks); for DBOS, SQLAlchemy
# commits; for raw, one per put. ``fsync_budget_line`` reads the store's counters directly.
def fsyncs_per_attempt(samples: list[dict[str, Any]]) -> float | None:
    """Durable commits per attempt over ``samples`` (``None`` when not counted)."""
    return per_attempt(samples, "commits")


def comparison_figures(samples: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Rows (rate median and min-max, commits per attempt, CPU per attempt) and the
    per-round ratios ours / DBOS and ours / raw-commit bound."""
    from bench._common import spread

    rows: dict[str, Any] = {}
    for cell, runs in samples.items():
        kind, _, c = cell.partition("@")
        attempts = sum(r["attempts"] for r in runs)
        rows[cell] = {
            "side": kind,
            "label": LABELS[kind],
            "concurrency": int(c),
            "per_s": spread([rate(r) for r in runs]),
            "rounds_per_s": [round(rate(r), 1) for r in runs],
            "writes_per_attempt": per_attempt(runs, "writes"),
            "fsyncs_per_attempt": fsyncs_per_attempt(runs),
            "cpu_ms_per_attempt": 1e3 * sum(r["cpu_s"] for r in runs) / max(1, attempts),
        }
    ratios: dict[str, Any] = {}
    for ours in OURS:
        for other in DBOS_SIDES:
            for cell in [k for k in samples if k.startswith(f"{ours}@")]:
                c = cell.partition("@")[2]
                theirs = samples.get(f"{other}@{c}")
                if not theirs:
                    continue
                by_round = {r["round"]: rate(r) for r in theirs}
                values = [
                    rate(r) / by_round[r["round"]] for r in samples[cell] if r["round"] in by_round
                ]
                ratios[f"{ours}/{other}@{c}"] = spread(values) | {
                    "rounds": [round(v, 2) for v in values]
                }
    raw = {r["round"]: rate(r) for r in samples.get("raw@1", [])}
    for cell in [k for k in samples if k.startswith("kernel@")]:
        values = []
        for r in samples[cell]:
            if r["round"] in raw and r.get("writes"):
                bound = raw[r["round"]] / (r["writes"] / r["attempts"])
                values.append(rate(r) / bound)
        if values:
            ratios[f"kernel/raw-bound@{cell.partition('@')[2]}"] = spread(values) | {
                "rounds": [round(v, 2) for v in values]
            }
    ratios.update(_ceiling_ratios(samples, raw))
    return {"rows": rows, "ratios": ratios}


def _ceiling_ratios(
    samples: dict[str, list[dict[str, Any]]], raw: dict[int, float]
) -> dict[str, Any]:
    """At concurrency 1 an attempt's durable commits are serial, so no kernel can beat
    raw commits/s / (ours' fsyncs per attempt) there: that ceiling over DBOS, per round,
    is the best ratio ours could reach at its fsync budget with zero CPU."""
    from bench._common import spread

    fsyncs = fsyncs_per_attempt(samples.get("kernel@1", []))
    ratios: dict[str, Any] = {}
    if not fsyncs or not raw:
        return ratios
    for other in DBOS_SIDES:
        theirs = {r["round"]: rate(r) for r in samples.get(f"{other}@1", [])}
        values = [raw[n] / fsyncs / theirs[n] for n in raw if n in theirs]
        if values:
            ratios[f"fsync-ceiling/{other}@1"] = spread(values) | {
                "rounds": [round(v, 2) for v in values]
            }
    return ratios


def dbos_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("dbos") is not None


def postgres_available(admin_dsn: str) -> bool:
    try:
        _psql(admin_dsn, "SELECT 1")
    except Exception:
        return False
    return True


# -- report -----------------------------------------------------------------------------------


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.2f}" if value < 10 else f"{value:,.1f}"
    return str(value)


def _spread_text(s: dict[str, float]) -> str:
    return f"{_fmt(s['median'])} [{_fmt(s['min'])}-{_fmt(s['max'])}]"


def _maybe(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def figures_table(result: dict[str, Any]) -> list[str]:
    rows = [("figure", "value", "target", "ok")]
    for name, fig in result["figures"].items():
        if "target_min" in fig:
            target = f">= {_fmt(fig['target_min'])}"
        elif "target_max" in fig:
            target = f"<= {_fmt(fig['target_max'])}"
        else:
            target = "-"
        ok = "-" if fig.get("ok") is None else ("yes" if fig["ok"] else "NO")
        if fig.get("value") is None:
            value = f"skipped ({fig.get('skipped')})"
        elif "min" in fig:
            value = f"{_fmt(fig['value'])} [{_fmt(fig['min'])}-{_fmt(fig['max'])}] {fig['unit']}"
        else:
            value = f"{_fmt(fig['value'])} {fig['unit']}"
        rows.append((name, value, target, ok))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return lines


def comparison_table(comparison: dict[str, Any]) -> list[str]:
    head = ("side", "conc", "attempts/s median [min-max]", "writes/att", "fsyncs/att", "CPU ms/att")
    rows = [head]
    for row in comparison["rows"].values():
        rows.append(
            (
                row["label"],
                str(row["concurrency"]),
                _spread_text(row["per_s"]),
                _maybe(row["writes_per_attempt"]),
                _maybe(row["fsyncs_per_attempt"]),
                f"{row['cpu_ms_per_attempt']:.2f}",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append("")
    lines.append("ratios, per round (both sides measured in the same round), median [min-max]:")
    for name, ratio in comparison["ratios"].items():
        lines.append(f"  {name:<34} {_spread_text(ratio)}  rounds {ratio['rounds']}")
    return lines


def table(result: dict[str, Any]) -> str:
    throughput = result["figures"]["memory_attempts_per_s"]
    lines = [
        *figures_table(result),
        "",
        f"memory: {result['figures']['memory_per_live_attempt_kib']['method']}",
        f"in-memory throughput: rounds {throughput['rounds']} attempts/s; process CPU "
        f"{throughput['cpu_us_per_attempt']} us per attempt (all threads); best round "
        f"{throughput['best_round_cpu_us_per_attempt']} us",
        "",
        f"interleaved comparison: {result['comparison_method']}",
        *comparison_table(result["comparison"]),
    ]
    if result.get("dbos_skipped"):
        lines.append(f"dbos: skipped ({result['dbos_skipped']})")
    lines += [
        "",
        f"load average before: {result['load_before']}; after: {result['load_after']} "
        f"({result['cpus']} CPUs, shared with other work); quick={result['quick']}",
    ]
    return "\n".join(lines)


def ratio_figure(
    comparison: dict[str, Any], key: str, target: float, method: str
) -> dict[str, Any]:
    found = comparison["ratios"].get(key)
    if found is None:
        return {
            "value": None,
            "target_min": target,
            "ok": None,
            "unit": "x",
            "skipped": "not measured",
        }
    return {
        "value": round(found["median"], 2),
        "min": round(found["min"], 2),
        "max": round(found["max"], 2),
        "rounds": found["rounds"],
        "target_min": target,
        "ok": found["median"] >= target,
        "unit": "x",
        "method": method,
    }


def comparison_result(comparison: dict[str, Any], skipped: str | None) -> dict[str, dict[str, Any]]:
    figures = {
        "durable_ratio": ratio_figure(
            comparison,
            "kernel/raw-bound@32",
            DURABLE_RATIO_TARGET,
            "ours attempts/s at 32 callers / (raw LMDB durable commits/s / commit requests "
            "per attempt), per round",
        )
    }
    for other, target in (
        ("dbos-sqlite", DBOS_SQLITE_TARGET),
        ("dbos-postgres", DBOS_POSTGRES_TARGET),
    ):
        for (ours, prefix, what), c in itertools.product(
            (("kernel", "ours", "LMDB durable"), ("journal", "journal", "LMDB + journal")), (1, 32)
        ):
            name = f"{prefix}_over_{other.replace('-', '_')}_c{c}"
            figure = ratio_figure(
                comparison,
                f"{ours}/{other}@{c}",
                target,
                f"ours (kernel, {what}) / {LABELS[other]}, {c} callers, per round",
            )
            if skipped and figure["value"] is None:
                figure["skipped"] = skipped
            figures[name] = figure
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small counts: a smoke test")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--no-dbos", action="store_true", help="skip the DBOS comparison")
    parser.add_argument("--no-postgres", action="store_true", help="skip DBOS on PostgreSQL")
    parser.add_argument("--no-sdk", action="store_true", help="skip ours through the SDK host")
    parser.add_argument("--rounds", type=int, default=None, help="comparison rounds")
    parser.add_argument("--seconds", type=float, default=None, help="seconds per side per round")
    parser.add_argument(
        "--admin-dsn",
        default=os.environ.get("SUBAGENTS_PG_ADMIN_DSN", DEFAULT_ADMIN_DSN),
        help="a DSN allowed to CREATE DATABASE (DBOS on PostgreSQL gets its own, dropped after)",
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--dir", help=argparse.SUPPRESS)
    parser.add_argument("--dsn", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker_main(args.worker, args.dir, args.dsn)
    quick = args.quick
    load_before = print_load("before", sys.stderr if args.json else sys.stdout)
    figures: dict[str, dict[str, Any]] = {}
    figures["memory_per_live_attempt_kib"] = measure_memory(100 if quick else 1000)
    figures["memory_attempts_per_s"] = measure_memory_throughput(
        count=300 if quick else 4000, window=64, rounds=1 if quick else 3
    )
    sides = ["raw", "kernel", "journal"] + ([] if args.no_sdk else ["sdk"])
    skipped = None
    if args.no_dbos:
        skipped = "--no-dbos"
    elif not dbos_available():
        skipped = "dbos is not installed (the bench extra)"
    else:
        sides.append("dbos-sqlite")
        if args.no_postgres:
            skipped = "--no-postgres"
        elif not postgres_available(args.admin_dsn):
            skipped = f"no PostgreSQL at {args.admin_dsn}"
        else:
            sides.append("dbos-postgres")
    rounds = args.rounds or (2 if quick else 5)
    seconds = args.seconds or (0.5 if quick else 2.0)
    samples = measure_comparison(sides, (1, 32), rounds, seconds, args.admin_dsn)
    comparison = comparison_figures(samples)
    figures.update(comparison_result(comparison, skipped))
    result = {
        "figures": figures,
        "comparison": comparison,
        "comparison_method": f"{rounds} rounds x {seconds:g} s per side and concurrency, "
        "each side in its own process, the order rotating round by round",
        "dbos_skipped": skipped,
        "quick": quick,
        "cpus": os.cpu_count(),
        "load_before": load_before,
        "load_after": load_average(),
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(table(result))
        print(fsync_budget_line())
        # Enough attempts to include checkpoints (one per 128 journaled commits).
        print(fsync_budget_line(300, journal=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
