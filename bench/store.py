"""LmdbSessionStore durable throughput against the physical limit, side by side.

Run: ``python bench/store.py [--quick] [--json] [--ids sequential|supervisor] [--journal]``.

In one run, on one temporary directory (so one disk), it measures:

- ``raw``: plain py-lmdb durable commits per second: one small put per write
  transaction, ``sync=True``, same map size and flags as the store. This is the
  physical limit of "one durable transaction per operation" on this disk.
- the store's durable operations per second, single-threaded, one operation
  per transaction, ``sync=True``: accept, update (an execution transition),
  heartbeat, terminal commit, claim and acknowledge. Every measured call is a
  real successful operation on a record set up for it. Each is printed as a
  ratio to the raw rate (target >= 0.75): the calls are cut into
  :data:`CHUNKS` consecutive rounds, the ratio is raw median latency / store
  median latency within a round, and the figure is the median of the rounds'
  ratios with their min and max. The physical LMDB commits per operation
  (``last_txnid``, each one fsync'd) are printed beside it.
- ``rewrite`` (informative, no target), splitting each ratio in two: right
  after each operation, the puts it committed (same tables, keys and stored
  bytes) are put again by plain py-lmdb in one durable transaction on the
  store's own environment (:class:`Rewrite`). ``layout x raw`` (raw / rewrite)
  is what any code could reach writing what the store writes, the cost of the
  layout (how many trees, how deep); ``ours x layout`` (rewrite / store) is the
  cost of the store's own code (validation, encoding, seals, events, its writer)
  on top. Their product is about ``x raw``. Deletes are not redone (see
  :class:`Rewrite`); noting the puts adds about a microsecond to each timed
  operation.
- ``co-located`` (informative, no target): the same noted values put under
  adjacent new keys at the end of one tree, in one durable transaction on an
  environment of its own with the raw side's flags (:class:`Colocated`).
  ``co-located x raw`` is what a layout that kept one operation's records
  together (one leaf instead of one per tree) would reach with these bytes: the
  bound of a layout change, where ``layout x raw`` is the bound of the layout we
  have. The four sides run call by call in one interleaving.
- the reconcile ratio: the time of one reconcile with 100,000 terminal + 100
  active attempts in the namespace divided by the time with 1,000 terminal +
  100 active (target <= 2: reconcile cost follows active work, not history).
  Every attempt, terminal or active, sits in a session of
  :data:`ATTEMPTS_PER_SESSION` (the supervisor's default
  ``max_active_attempts``), so the history is spread over many sessions as it
  is in use (12,500 sessions of history in the large case), not piled into one.
  The active attempts hold unexpired leases, so reconcile visits every one of
  them and changes none (the steady state of a healthy host); the history is
  built with ``sync=False`` and measured after reopening with ``sync=True``;
  the two histories are timed in turn, so the machine's drift hits both alike;
  the repeats are cut into rounds, the ratio is taken per round (medians within
  it), and the figure is the median of the rounds' ratios with their min and max.
- the session lookup ratio, on the same two histories, measured the same way:
  ``list_attempts`` of one session (8 attempts) plus ``find_agent`` of its first
  agent, with 100,000 terminal attempts elsewhere in the namespace over 1,000
  (target <= 2: what a supervisor reads to continue an agent it no longer holds
  follows the session, not the store).

Work on both sides: no model request, no message history, no usage: store
operations (the store's records, its indexes and its event outbox where it has
one) against one raw put, both durable (``sync=True``: fsync'd before the call
returns). The load average is printed before and after.

fsync latency drifts (other work shares the disk), so every measured store
operation runs right after one raw commit on a second environment in the same
directory; rates are the inverse of the median latency (mean throughput is
reported beside them) and each ratio is raw median latency / store median
latency. Request records are built before timing. An informative figure (no
target) shows the batching writer: 8 threads heartbeating at once. Another
(Linux only, no target) is the pages each commit wrote, read from the
process's write counter (``/proc/self/io``) outside the timed calls: unlike
latency it does not drift with the machine's load, and it is what a store
operation costs beyond the raw commit (every dirty 4 KiB page is written
before the fsync).

Ids. By default the measured attempts have short sequential ids
(``subattempt_00000001``, agent ``bench-bg-00000001``). ``--ids supervisor``
gives them the host's and the supervisor's shapes instead (session
``session_<uuid4 hex>``, ``subattempt_<uuid4>``, agent ``bench-bg-<8 random
hex digits>``, from a seeded generator so every run writes the same keys):
longer keys in random order land on random leaves and make the index tree one
level deeper at this size, so an operation that touches both trees writes one
to two more pages. The reconcile figure always uses sequential ids.

This is a benchmark, not a test: it never asserts timing. Exit status is 0
whether or not targets are met.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

OP_TARGET = 0.75
CHUNKS = 5
"""Each operation's calls are cut into this many consecutive rounds; the ratio to raw
is taken per round (medians within it) and reported as the median with its min and max."""
RECONCILE_TARGET = 2.0
NS = "bench-ns"
SESSION = "bench-session"
PARENT_RUN = "bench-parent-run"
HOST = "bench-host"
MAP_SIZE = 1 << 30
ATTEMPTS_PER_SESSION = 8
"""Attempts per session in the reconcile history (the supervisor's default
``max_active_attempts``); the per-operation figures use the one :data:`SESSION`."""


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


class Colocated(RawLmdb):
    """Plain py-lmdb on its own directory: one operation's values, adjacent in one tree."""

    def put_together(self, values: list[bytes]) -> float:
        """Seconds taken by one durable transaction putting ``values`` under adjacent
        new keys (after every key so far, so they share the tree's last leaf unless it
        fills up); no transaction (0 seconds) without values."""
        if not values:
            return 0.0
        env, db = self._env, self._db
        n, self._next = self._next, self._next + 1
        start = time.perf_counter()
        with env.begin(write=True) as txn:
            for i, value in enumerate(values):
                txn.put(b"op-%08d-%02d" % (n, i), value, db=db)
        return time.perf_counter() - start


class Rewrite:
    """The physical cost of an operation's own writes, with none of the store's code.

    While :meth:`record` runs a store operation, every put it makes is noted (the
    table's LMDB database, the key and the stored bytes, seal included: the store's
    backend is patched for the run, in this process only). :meth:`commit` then puts
    the same bytes under the same keys again, in one durable (``sync=True``) py-lmdb
    write transaction on the store's own environment, right after the operation
    committed them: the same trees at the same depths, the same leaves made dirty,
    the same freelist; the records are unchanged. Deletes are not redone (a second
    delete of a missing key writes nothing), so the terminal commit's one index
    delete is missing from its figure.

    The patch stays until :meth:`close` (one flag test per put, so it is not
    installed and removed around every timed call); puts on other threads while
    nothing is recorded pass through untouched. :meth:`record` and
    :meth:`commit` are for one thread at a time.
    """

    def __init__(self, store: Any) -> None:
        from storage import _lmdb

        self._env = store.lmdb_backend._live().env  # the store's own environment
        self._puts: list[tuple[Any, bytes, bytes]] = []
        self.commits = 0
        """Durable transactions :meth:`commit` made (one per call with puts)."""
        self._recording = False
        self._txn_class = _lmdb._LmdbTxn
        original = self._original = _lmdb._LmdbTxn.put
        puts = self._puts

        def put(txn: Any, table: str, key: bytes, value: bytes) -> None:
            if self._recording:
                puts.append((txn._db(table), bytes(key), bytes(value)))
            original(txn, table, key, value)

        _lmdb._LmdbTxn.put = put  # type: ignore[method-assign]

    def record(self, call: Callable[[], object]) -> None:
        """Run ``call`` (one store operation), noting the puts it commits."""
        self._puts.clear()
        self._recording = True
        try:
            call()
        finally:
            self._recording = False

    def values(self) -> list[bytes]:
        """The stored bytes of the puts :meth:`record` noted last, in order."""
        return [value for _, _, value in self._puts]

    def puts(self) -> list[tuple[Any, bytes, bytes]]:
        """The puts :meth:`record` noted last: (LMDB database, key, stored bytes)."""
        return list(self._puts)

    def commit(self) -> float:
        """Seconds taken by one durable transaction putting the noted bytes again."""
        env, puts = self._env, self._puts
        start = time.perf_counter()
        if puts:
            with env.begin(write=True) as txn:
                for db, key, value in puts:
                    txn.put(key, value, db=db)
            self.commits += 1
        return time.perf_counter() - start

    def close(self) -> None:
        self._txn_class.put = self._original  # type: ignore[method-assign]


IDS = ("sequential", "supervisor")


class Records:
    """Builds the records the measured operations need (store time = the clock).

    ``ids`` is one of :data:`IDS`: short sequential ids, or ids shaped like the
    supervisor's, drawn from a generator seeded with the attempt number."""

    def __init__(self, clock: Any, ids: str = "sequential") -> None:
        if ids not in IDS:
            raise ValueError(f"ids must be one of {IDS}, not {ids!r}")
        self.clock = clock
        self.ids = ids
        # The host names a new session ``session_<uuid4 hex>``.
        self.session_id = (
            SESSION if ids == "sequential" else f"session_{uuid.UUID(int=0x5E55, version=4).hex}"
        )

    def _ids(self, n: int) -> tuple[str, str]:
        if self.ids == "sequential":
            return f"subattempt_{n:08d}", f"bench-bg-{n:08x}"
        rng = random.Random(n)
        attempt = uuid.UUID(int=rng.getrandbits(128), version=4)
        return f"subattempt_{attempt}", f"bench-bg-{rng.getrandbits(32):08x}"

    def session(self, session_id: str | None = None) -> Any:
        from storage import SessionRecord

        session_id = session_id or self.session_id
        now = self.clock.now()
        return SessionRecord(session_id=session_id, namespace_id=NS, created_at=now, updated_at=now)

    def acceptance(self, n: int, ttl: float = 3600.0, session_id: str | None = None) -> Any:
        from storage import AttemptRecord, OwnerLease

        session_id = session_id or self.session_id
        now = self.clock.now()
        attempt_id, agent_id = self._ids(n)
        return AttemptRecord(
            attempt_id=attempt_id,
            agent_id=agent_id,
            subagent_name="bench",
            namespace_id=NS,
            parent_session_id=session_id,
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


def _setup_session(store: Any, clock: Any, session_id: str = SESSION) -> None:
    from statemachines import RunStatus
    from storage import AdmissionLease, InputPart, RunRecord

    records = Records(clock)
    store.create_session(records.session(session_id))
    now = clock.now()
    store.admit_run(
        RunRecord(
            session_id=session_id,
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
        store.transition_run(session_id, PARENT_RUN, status, admission_id="bench-admission")


class _Written:
    """Bytes this process has written so far (``wchar`` of Linux's
    ``/proc/self/io``); ``None`` where that file does not exist."""

    def __init__(self) -> None:
        try:
            self._fd: int | None = os.open("/proc/self/io", os.O_RDONLY)
        except OSError:
            self._fd = None

    def __call__(self) -> int | None:
        if self._fd is None:
            return None
        for line in os.pread(self._fd, 4096, 0).splitlines():
            if line.startswith(b"wchar:"):
                return int(line.split()[1])
        return None

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _chunk_ratios(raw_times: list[float], op_times: list[float]) -> list[float]:
    """Median of ``raw_times`` / median of ``op_times`` in each of :data:`CHUNKS` rounds
    (the two lists measured call by call, interleaved)."""
    size = max(1, len(op_times) // CHUNKS)
    ratios = []
    for start in range(0, len(op_times) - size + 1, size):
        ops, raws = op_times[start : start + size], raw_times[start : start + size]
        ratios.append(statistics.median(raws) / statistics.median(ops))
    return ratios


_SIDES = ("raw", "op", "rewrite", "colocated")


class _Sides:
    """The latencies (seconds) and bytes written of each side, call by call."""

    def __init__(self, count_pages: bool) -> None:
        self.written = _Written() if count_pages else None
        self.times: dict[str, list[float]] = {side: [] for side in _SIDES}
        self.bytes: dict[str, int] = dict.fromkeys(_SIDES, 0)

    def time(self, side: str, run: Callable[[], float]) -> None:
        """Run one call of ``side``; ``run`` returns the seconds it took."""
        before = self.written() if self.written else None
        self.times[side].append(run())
        after = self.written() if self.written else None
        if before is not None and after is not None:
            self.bytes[side] += after - before

    def pages(self, side: str) -> float | None:
        """4 KiB pages written per call, ``None`` without a counter (or without calls)."""
        calls = len(self.times[side])
        if self.written is None or not calls or self.bytes["op"] <= 0:
            return None
        return self.bytes[side] / calls / 4096

    def close(self) -> None:
        if self.written is not None:
            self.written.close()


def _timed(call: Callable[[], object], clock_now: Callable[[], float]) -> Callable[[], float]:
    def run() -> float:
        start = clock_now()
        call()
        return clock_now() - start

    return run


def _measure(
    calls: list[Callable[[], object]],
    clock: Any,
    raw: Any,
    *,
    count_pages: bool = False,
    commits: Callable[[], int | None] | None = None,
    rewrite: Rewrite | None = None,
    colocated: Colocated | None = None,
) -> dict[str, Any]:
    """Time ``calls`` (one store transaction each), alternating one by one with
    raw commits, so a burst of disk latency from other work hits both sides.

    Rates are reported two ways: over the whole run (mean throughput) and as
    the inverse of the median latency (robust to bursts); the ratio to raw
    uses the medians. With ``count_pages`` (a local LMDB store and raw
    commits), the 4 KiB pages each side wrote per commit are counted too,
    outside the timed calls (``None`` where the platform has no counter).
    ``commits`` reads the store's physical commit counter (LMDB's
    ``last_txnid``): commits per operation are reported from it. With
    ``rewrite``, each call is followed by :meth:`Rewrite.commit` of its own
    puts, a third side in the same interleaving: ``layout_ratio`` is raw /
    rewrite (the most any code could reach with these writes) and
    ``code_ratio`` rewrite / store (what the store's code costs on top). With
    ``colocated`` too (only with ``rewrite``), a fourth side follows: the same
    values adjacent in one tree (:meth:`Colocated.put_together`),
    ``colocated_ratio`` raw / that.
    """
    sides = _Sides(count_pages)
    clock_now = time.perf_counter
    first_commit = commits() if commits else None
    first_rewrite = rewrite.commits if rewrite is not None else 0
    try:
        for call in calls:
            sides.time("raw", lambda: raw.commit(1))
            clock.advance(0.001)
            op = call if rewrite is None else (lambda call=call: rewrite.record(call))
            sides.time("op", _timed(op, clock_now))
            if rewrite is not None:
                sides.time("rewrite", rewrite.commit)
                if colocated is not None:
                    together = rewrite.values()
                    sides.time("colocated", lambda v=together: colocated.put_together(v))
        last_commit = commits() if commits else None
        if last_commit is not None and rewrite is not None:
            last_commit -= rewrite.commits - first_rewrite  # the store's commits only
    finally:
        sides.close()
    return _figures(sides, len(calls), first_commit, last_commit)


def _figures(
    sides: _Sides, calls: int, first_commit: int | None, last_commit: int | None
) -> dict[str, Any]:
    raw_times, op_times, again = sides.times["raw"], sides.times["op"], sides.times["rewrite"]
    ratios = _chunk_ratios(raw_times, op_times)
    figures: dict[str, Any] = {
        "pages_per_op": sides.pages("op"),
        "raw_pages_per_commit": sides.pages("raw"),
        "ops_per_s": 1.0 / statistics.median(op_times),
        "raw_commits_per_s": 1.0 / statistics.median(raw_times),
        "ops_per_s_mean": len(op_times) / sum(op_times),
        "raw_commits_per_s_mean": len(raw_times) / sum(raw_times),
        "ratio_to_raw": statistics.median(ratios),
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
        "ratio_rounds": ratios,
        "ratio_of_medians": statistics.median(raw_times) / statistics.median(op_times),
        "commits_per_op": None
        if first_commit is None or last_commit is None
        else (last_commit - first_commit) / calls,
        "op_p90_us": statistics.quantiles(op_times, n=10)[-1] * 1e6,
        "raw_p90_us": statistics.quantiles(raw_times, n=10)[-1] * 1e6,
    }
    if again:
        layout, code = _chunk_ratios(raw_times, again), _chunk_ratios(again, op_times)
        figures |= {
            "rewrite_pages_per_commit": sides.pages("rewrite"),
            "layout_ratio": statistics.median(layout),
            "layout_ratio_min": min(layout),
            "layout_ratio_max": max(layout),
            "code_ratio": statistics.median(code),
            "code_ratio_min": min(code),
            "code_ratio_max": max(code),
        }
    together = sides.times["colocated"]
    if together:
        colocated = _chunk_ratios(raw_times, together)
        figures |= {
            "colocated_pages_per_commit": sides.pages("colocated"),
            "colocated_ratio": statistics.median(colocated),
            "colocated_ratio_min": min(colocated),
            "colocated_ratio_max": max(colocated),
        }
    return figures


def measure_operation_mix(
    store: Any,
    clock: Any,
    records: Any,
    count: int,
    *,
    measure: Callable[[str, list[Callable[[], object]]], None],
    between: Callable[[list[Any]], Any],
) -> Any:
    """Measure accept, update, heartbeat, terminal commit, claim and acknowledge,
    each over ``count`` real operations on records made for it (built before
    timing: the store's cost is what is measured). ``between(starting)`` runs
    after the heartbeats (the concurrent figure); its value is returned.
    Shared by the LMDB and PostgreSQL benches so both measure the same mix."""
    from storage import DeliveryClaim

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
    extra = between(starting)
    # Not measured: starting -> running, so the terminal commit is a completion.
    running = [
        store.update_attempt_execution(records.moved(store.load_attempt(r.attempt_id), "running"))
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
    return extra


def store_ops(
    directory: Path, raw: RawLmdb, count: int, ids: str = "sequential", *, journal: bool = False
) -> dict[str, Any]:
    """The store's durable single-threaded rates, each over ``count`` real operations.

    ``journal``: the store on its redo journal; then there is no rewrite or
    co-located side (the store's environment commits without syncing, so a
    rewrite on it would not be a durable commit)."""
    from bench._common import lmdb_txn_id
    from storage import LmdbSessionStore, ManualClock

    clock = ManualClock(start=1_700_000_000.0)
    records = Records(clock, ids)
    store = LmdbSessionStore(directory, clock=clock, sync=True, map_size=MAP_SIZE, journal=journal)
    rewrite = None if journal else Rewrite(store)
    colocated = None if journal else Colocated(directory.with_name(directory.name + "-colocated"))
    results: dict[str, Any] = {}

    def measure(name: str, calls: list[Callable[[], object]]) -> None:
        figures: dict[str, Any] = _measure(
            calls,
            clock,
            raw,
            count_pages=True,
            commits=lambda: lmdb_txn_id(store),
            rewrite=rewrite,
            colocated=colocated,
        )
        figures["target_ratio_min"] = OP_TARGET
        figures["meets_target"] = figures["ratio_to_raw"] >= OP_TARGET
        results[name] = figures

    try:
        _setup_session(store, clock, records.session_id)
        batching = measure_operation_mix(
            store,
            clock,
            records,
            count,
            measure=measure,
            between=lambda starting: _concurrent_heartbeats(store, starting, clock, raw),
        )
        return {"operations": results, "batching": batching}
    finally:
        if rewrite is not None:
            rewrite.close()
        if colocated is not None:
            colocated.close()
        store.close()


def _concurrent_heartbeats(
    store: Any, records: list[Any], clock: Any, raw: RawLmdb, threads: int = 8
) -> dict[str, Any]:
    """Informative (no target): ``threads`` threads heartbeating their own
    attempts at once, so the batching writer shares one commit between them."""
    import threading

    env = store.lmdb_backend._live().env
    slices = [records[i::threads] for i in range(threads)]
    barrier = threading.Barrier(threads + 1)
    errors: list[BaseException] = []

    def worker(mine: list[Any]) -> None:
        try:
            barrier.wait()
            for r in mine:
                store.heartbeat_attempt(r.attempt_id, HOST, 1, clock.now() + 7200.0)
        except BaseException as exc:
            errors.append(exc)

    raw_seconds = raw.commit(len(records) // 4)
    workers = [threading.Thread(target=worker, args=(mine,)) for mine in slices]
    for w in workers:
        w.start()
    first_txn = env.info()["last_txnid"]
    barrier.wait()
    start = time.perf_counter()
    for w in workers:
        w.join()
    took = time.perf_counter() - start
    commits = env.info()["last_txnid"] - first_txn
    raw_seconds += raw.commit(len(records) // 4)
    if errors:
        raise errors[0]
    raw_rate = 2 * (len(records) // 4) / raw_seconds
    return {
        "threads": threads,
        "operation": "heartbeat",
        "ops_per_s": len(records) / took,
        "raw_commits_per_s": raw_rate,
        "ratio_to_raw": len(records) / took / raw_rate,
        "ops_per_commit": len(records) / max(1, commits),
        "target": None,
        "note": "informative: no target; shows commits shared by concurrent writers",
    }


def _sessions_of(attempts: int) -> int:
    """Sessions holding ``attempts`` attempts, :data:`ATTEMPTS_PER_SESSION` to a session."""
    return -(-attempts // ATTEMPTS_PER_SESSION)


def _build_history(directory: Path, terminal: int, active: int) -> None:
    """``terminal`` failed-terminal attempts and ``active`` live ones, unsynced
    (set-up only), attempt ``n`` in session ``n // ATTEMPTS_PER_SESSION``."""
    from storage import LmdbSessionStore, ManualClock

    clock = ManualClock(start=1_700_000_000.0)
    records = Records(clock)
    store = LmdbSessionStore(directory, clock=clock, sync=False, map_size=MAP_SIZE)

    def session_of(n: int) -> str:
        session_id = f"{SESSION}-{n // ATTEMPTS_PER_SESSION:06d}"
        if n % ATTEMPTS_PER_SESSION == 0:
            _setup_session(store, clock, session_id)
        return session_id

    try:
        for n in range(terminal):
            # accepted -> failed is one allowed transition: the cheapest real history.
            record = store.accept_attempt(records.acceptance(n, session_id=session_of(n)))
            store.commit_terminal(records.terminal(record, "failed"))
        for n in range(terminal, terminal + active):
            ttl = 10 * 365 * 86_400.0
            store.accept_attempt(records.acceptance(n, ttl=ttl, session_id=session_of(n)))
    finally:
        store.close()


def reconcile_seconds(
    small_dir: Path, large_dir: Path, histories: tuple[int, int], active: int, repeats: int
) -> tuple[float, float, list[float]]:
    """Median time of one durable reconcile over a small and a large history, and the
    large / small ratio of each of :data:`CHUNKS` rounds of the repeats.

    The two stores are measured turn about (which goes first alternates), so
    a slower stretch of the machine hits both sides alike: each figure is a
    fraction of a millisecond, and measuring one history after the other let
    drift alone move the ratio by 2x between runs."""
    small, large = histories
    _build_history(small_dir, small, active)
    _build_history(large_dir, large, active)

    def reconcile(store: Any) -> None:
        changed = store.reconcile(NS)
        if changed:
            raise RuntimeError(f"reconcile changed {len(changed)} live attempts")

    with _opened((small_dir, large_dir)) as stores:
        times = _turn_about(stores, reconcile, repeats)
        for store in stores:
            visited = len(store.list_active_attempts(NS))
            if visited != active:
                raise RuntimeError(f"expected {active} active attempts, found {visited}")
    return _large_over_small(times)


def lookup_seconds(
    small_dir: Path, large_dir: Path, repeats: int
) -> tuple[float, float, list[float]]:
    """As :func:`reconcile_seconds`, on the histories it built: the time to list the
    first session's attempts and to find the agent of its first attempt (what a
    supervisor reads to continue an agent it no longer holds in memory)."""
    session, agent = f"{SESSION}-{0:06d}", Records(None)._ids(0)[1]

    def lookup(store: Any) -> None:
        listed = store.list_attempts(NS, session)
        bound = store.find_agent(NS, session, agent)
        if len(listed) != ATTEMPTS_PER_SESSION or bound != "bench":
            raise RuntimeError(f"listed {len(listed)} attempts, found agent bound to {bound!r}")

    with _opened((small_dir, large_dir)) as stores:
        times = _turn_about(stores, lookup, repeats)
    return _large_over_small(times)


def _large_over_small(times: tuple[list[float], list[float]]) -> tuple[float, float, list[float]]:
    """The median of each side and the large / small ratio of each round."""
    return statistics.median(times[0]), statistics.median(times[1]), _chunk_ratios(*times[::-1])


@contextlib.contextmanager
def _opened(directories: tuple[Path, ...]) -> Iterator[list[Any]]:
    """The stores in ``directories``, durable, each read once untimed (pages mapped)."""
    from storage import LmdbSessionStore, ManualClock

    clock = ManualClock(start=1_700_000_000.0 + 60.0)
    with contextlib.ExitStack() as opened:
        stores = []
        for directory in directories:
            store = LmdbSessionStore(directory, clock=clock, sync=True, map_size=MAP_SIZE)
            opened.callback(store.close)
            store.reconcile(NS)
            stores.append(store)
        yield stores


def _turn_about(
    stores: list[Any], call: Callable[[Any], None], repeats: int
) -> tuple[list[float], list[float]]:
    """Seconds of each ``call(store)``, the two stores in turn, which goes first
    alternating: a slower stretch of the machine hits both sides alike."""
    times: tuple[list[float], list[float]] = ([], [])
    for n in range(repeats):
        for side in (0, 1) if n % 2 == 0 else (1, 0):
            start = time.perf_counter()
            call(stores[side])
            times[side].append(time.perf_counter() - start)
    return times


def run(quick: bool, ids: str = "sequential", *, journal: bool = False) -> dict[str, Any]:
    _repo_on_path()
    ops = 200 if quick else 2000
    small, large, active = (100, 2_000, 10) if quick else (1_000, 100_000, 100)
    repeats = 5 if quick else 101
    with tempfile.TemporaryDirectory(prefix="bench-store-") as tmp:
        root = Path(tmp)
        raw = RawLmdb(root / "raw")
        try:
            raw.commit(max(50, ops // 10))  # warm the file and the page cache
            measured = store_ops(root / "store", raw, ops, ids, journal=journal)
        finally:
            raw.close()
        reconcile_small, reconcile_large, rounds = reconcile_seconds(
            root / "reconcile-small", root / "reconcile-large", (small, large), active, repeats
        )
        lookup = lookup_seconds(root / "reconcile-small", root / "reconcile-large", repeats)
    return {
        "quick": quick,
        "journal": journal,
        "ids": ids,
        "ops_per_measurement": ops,
        "operations": measured["operations"],
        "batching": measured["batching"],
        "reconcile": {
            "small_history_terminal": small,
            "large_history_terminal": large,
            "active": active,
            "attempts_per_session": ATTEMPTS_PER_SESSION,
            "small_sessions": _sessions_of(small + active),
            "large_sessions": _sessions_of(large + active),
            **_flatness(reconcile_small, reconcile_large, rounds),
            "ratio_of_medians": reconcile_large / reconcile_small,
            "mix": "terminal history: accepted->failed attempts; active: unexpired leases, "
            "visited and left unchanged",
        },
        "lookup": _flatness(*lookup),
    }


def _flatness(small: float, large: float, rounds: list[float]) -> dict[str, Any]:
    """A large / small figure: both medians, the rounds' ratios and the target."""
    ratio = statistics.median(rounds)
    return {
        "small_seconds": small,
        "large_seconds": large,
        "ratio": ratio,
        "ratio_min": min(rounds),
        "ratio_max": max(rounds),
        "ratio_rounds": rounds,
        "target_ratio_max": RECONCILE_TARGET,
        "meets_target": ratio <= RECONCILE_TARGET,
    }


def render(result: dict[str, Any]) -> str:
    lines = [
        "LmdbSessionStore durable ops vs raw py-lmdb durable commits"
        " (sync on, single thread, one op per transaction)"
        + (", the store on its redo journal (journal=True)" if result.get("journal") else "")
        + (" [quick]" if result["quick"] else ""),
        f"{result['ops_per_measurement']} ops per operation ({result['ids']} ids), "
        "each right after one raw commit; "
        "rates are 1/median latency (mean throughput in brackets); x raw = median of "
        f"{CHUNKS} rounds' ratios of medians [min-max]",
        "",
        f"{'operation':<16} {'ops/s':>15} {'raw commits/s':>15} {'x raw [min-max]':>21} "
        f"{'target':>8}  ok   commits/op  pages/commit (raw, rewrite, co-located)  "
        "layout x raw      ours x layout     co-located x raw",
    ]
    for name, figure in result["operations"].items():
        lines.append(_operation_row(name, figure))
    lines += [
        "layout x raw: the op's own puts rewritten by plain py-lmdb in one durable commit "
        "(same trees, keys and bytes), over raw; ours x layout: that rewrite over the op, "
        "the cost of the store's code; co-located x raw: the op's values put under "
        "adjacent keys in one tree, over raw, the bound of a layout that kept an "
        "operation's records together (median [min-max] of the rounds)",
    ]
    bat = result["batching"]
    lines += [
        "",
        f"batching writer (informative, no target): {bat['threads']} threads x "
        f"{bat['operation']}: {bat['ops_per_s']:,.0f} ops/s = {bat['ratio_to_raw']:.2f} x raw "
        f"(mean throughput), {bat['ops_per_commit']:.1f} ops per durable commit",
    ]
    rec = result["reconcile"]
    lines += [
        "",
        f"reconcile history: {rec['attempts_per_session']} attempts per session "
        f"(small {rec['small_sessions']:,} sessions, large {rec['large_sessions']:,})",
        f"reconcile, {rec['active']} active + {rec['small_history_terminal']:,} terminal: "
        f"{rec['small_seconds'] * 1e3:.3f} ms",
        f"reconcile, {rec['active']} active + {rec['large_history_terminal']:,} terminal: "
        f"{rec['large_seconds'] * 1e3:.3f} ms",
        f"reconcile ratio (large / small): {rec['ratio']:.2f} "
        f"[{rec['ratio_min']:.2f}-{rec['ratio_max']:.2f}]  target <= "
        f"{rec['target_ratio_max']:.1f}  {'yes' if rec['meets_target'] else 'NO'}",
        f"  ({rec['mix']})",
    ]
    look = result["lookup"]
    lines += [
        f"session lookup (list_attempts of one session of {rec['attempts_per_session']} + "
        f"find_agent), same histories: {look['small_seconds'] * 1e3:.3f} ms small, "
        f"{look['large_seconds'] * 1e3:.3f} ms large",
        f"session lookup ratio (large / small): {look['ratio']:.2f} "
        f"[{look['ratio_min']:.2f}-{look['ratio_max']:.2f}]  target <= "
        f"{look['target_ratio_max']:.1f}  {'yes' if look['meets_target'] else 'NO'}",
    ]
    return "\n".join(lines)


def _spread_of(figure: dict[str, Any], key: str) -> str:
    if key not in figure:
        return "-"
    return f"{figure[key]:.2f} [{figure[key + '_min']:.2f}-{figure[key + '_max']:.2f}]"


def _operation_row(name: str, figure: dict[str, Any]) -> str:
    pages = figure.get("pages_per_op")
    commits = figure.get("commits_per_op")
    page_text = "-" if pages is None else f"{pages:.1f} ({figure['raw_pages_per_commit']:.1f}"
    if pages is not None:
        for side in ("rewrite", "colocated"):
            other = figure.get(f"{side}_pages_per_commit")
            page_text += "" if other is None else f", {other:.1f}"
        page_text += ")"
    layout = _spread_of(figure, "layout_ratio")
    code = _spread_of(figure, "code_ratio")
    together = _spread_of(figure, "colocated_ratio")
    return (
        f"{name:<16} {figure['ops_per_s']:>6,.0f} ({figure['ops_per_s_mean']:>6,.0f}) "
        f"{figure['raw_commits_per_s']:>6,.0f} ({figure['raw_commits_per_s_mean']:>6,.0f}) "
        f"{figure['ratio_to_raw']:>7.3f} [{figure['ratio_min']:.2f}-{figure['ratio_max']:.2f}] "
        f"{'>= ' + format(figure['target_ratio_min'], '.2f'):>8}  "
        f"{'yes' if figure['meets_target'] else 'NO ':<3}"
        f"  {'-' if commits is None else format(commits, '.2f'):>9}"
        f"  {page_text:<39}  {layout:<16}  {code:<16}  {together}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="small counts, for a smoke test")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--ids",
        choices=IDS,
        default="sequential",
        help="ids of the measured attempts: short sequential (default) or the supervisor's shapes",
    )
    parser.add_argument(
        "--journal", action="store_true", help="the store on its redo journal (journal=True)"
    )
    args = parser.parse_args(argv)
    _repo_on_path()
    from bench._common import load_average, print_load

    if args.json:
        before = load_average()
        result = run(args.quick, args.ids, journal=args.journal)
        result |= {"load_before": before, "load_after": load_average()}
        print(json.dumps(result, indent=2, sort_keys=True))
        return 0
    print_load("before")
    print(render(run(args.quick, args.ids, journal=args.journal)))
    print_load("after")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
