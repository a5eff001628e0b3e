"""Several RPC host processes on one store: delegations per second and CPU, 1, 2 and 4 hosts.

Run: ``python bench/hosts.py [--quick] [--json] [--admin-dsn DSN] [--hosts 1,2,4]
[--stores lmdb,postgres] [--rounds N]``.

Two stores, measured alike: a PostgreSQL database of the bench's own
(``--admin-dsn``, default ``$SUBAGENTS_PG_ADMIN_DSN`` or the local server;
emptied before each measurement, dropped at the end), and one LMDB data
directory shared by the host processes (``shared=True``; a fresh one per
measurement). For each host count N it starts N host processes (each with its
own instance id and fencing generation, the store's default clock) and, after
every one has warmed up, lets them run for a fixed time. Each host drives
``--sessions`` sessions of its own, each in a loop of one whole background
delegation, end to end through the host's supervisor:

    run.start (parent) -> the parent delegates in the background and finishes
    -> the supervisor runs the child (an offline test model that works 50 ms)
    and commits its terminal result -> the host admits the one continuation
    run -> the continuation completes.

A delegation counts when its continuation run has completed (or, when the
child's result reached the parent while it still ran, when the parent ended
with nothing left to deliver). Reported per measurement: delegations per
second in total and per host, the median latency of one delegation, host CPU
milliseconds per delegation (``time.process_time`` of the host processes,
steadier than wall time on a shared machine; the database server's own CPU is
not in it), the store's serialization retries and the 1-minute load average
before and after. The measurements are interleaved (round by round, host count
by host count, the stores' order alternating), and the summary gives each
figure's median [min-max] over the rounds and PostgreSQL's CPU per delegation
over LMDB's, paired round by round. The load averages say what else the
machine ran: on a shared machine, throughput is the least trustworthy figure.

Each host serves a namespace of its own, so the host that starts a parent also
admits its continuation (and sees its events in process); every host still
shares the tables, the write-ahead log, the event log and the fencing counter.
Taking over another host's sessions is the kill test's job
(tests/host/test_multi_host_postgres.py), not this bench's.

Work in every row: the parent's and the continuation's model requests on
offline test models, the child's (50 ms), every run's message history and
usage in the store; durability: PostgreSQL with ``synchronous_commit`` on (its
default), every store write committed before the call returns. Rows differ
only in the number of hosts. The load average is printed before and after.

This is a benchmark, not a test: it never asserts timing; exit status is 0.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import secrets
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_ADMIN_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
TICK_SECONDS = 0.05
CHILD_SECONDS = 0.05
"""How long the child works: long enough that its result nearly always reaches the
parent after the parent's run ended (the continuation-run path this bench
measures); the rare in-band delivery into the still-running parent is counted
separately."""


def _repo_on_path() -> None:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))


def _planner() -> Any:
    """A scripted parent: one background delegation per fresh prompt; a
    continuation run answers with the result's last line."""
    from properties.reliability._scripted import scripted_planner
    from subagents import FunctionModel

    planner = scripted_planner()
    return lambda name, settings: FunctionModel(planner)


def _child() -> Any:
    """An offline child that works for ``CHILD_SECONDS`` and answers three facts."""
    from subagents import FunctionModel

    async def child(messages: Sequence[Any], params: Any) -> str:
        await asyncio.sleep(CHILD_SECONDS)
        return "three facts"

    return lambda name, settings: FunctionModel(child)


def _open(store: dict[str, str], config: Any, tag: str) -> Any:
    """A host on ``store``: a PostgreSQL URL, or a data directory shared by the hosts."""
    from subagents._host import open_host

    common: dict[str, Any] = {"host_instance_id": f"bench-host-{tag}", "tick_seconds": TICK_SECONDS}
    if store["kind"] == "postgres":
        return open_host(config, store=store["url"], **common)
    return open_host(config, data_dir=store["path"], shared=True, **common)


async def _host(
    store: dict[str, str], *, index: int, sessions: int, seconds: float, start_at: float
) -> dict[str, Any]:
    from properties.reliability._scripted import planner_config
    from subagents import default_model_providers
    from subagents._host import parse_host_config
    from subagents._host._jsonrpc import Connection
    from subagents._host._methods import HostEvent, RunStartParams, SessionCreateParams

    default_model_providers().register("planner", _planner())
    default_model_providers().register("child", _child())
    tag = f"h{index}-{secrets.token_hex(3)}"
    config = parse_host_config(planner_config("child:x", namespace=f"bench-{tag}", lease_ttl=10.0))
    service = _open(store, config, tag)
    await service.start()
    conn = Connection(transport="bench")
    loop = asyncio.get_running_loop()
    waiting: dict[str, asyncio.Future[bool]] = {}
    continuation_runs: set[str] = set()

    def watch(event: HostEvent) -> None:
        if event.kind == "run.admitted" and event.data.get("trigger_type") == (
            "async_subagent_result"
        ):
            assert event.run_id is not None
            continuation_runs.add(event.run_id)
        elif event.kind in ("run.completed", "run.failed") and event.run_id in continuation_runs:
            continuation_runs.discard(event.run_id)
            found = waiting.pop(event.session_id, None)
            if found is not None and not found.done():
                found.set_result(event.kind == "run.completed")
        elif event.kind == "run.completed":
            loop.call_soon(parent_ended, event.session_id)

    inband = 0

    def settled_inband(session_id: str) -> bool:
        """No run of the session live here, no attempt of it running or undelivered."""
        if any(key[0] == session_id for key in service._runs):
            return False
        store, namespace = service.store, service.namespace_id
        open_attempts = store.list_active_attempts(namespace) + store.list_pending_attempts(
            namespace, session_id
        )
        return all(r.parent_session_id != session_id for r in open_attempts)

    def parent_ended(session_id: str) -> None:
        # Called once the parent's run has fully ended: if its child's result
        # was delivered in-band (into the parent while it ran), no continuation
        # run follows and the delegation is done now.
        nonlocal inband
        found = waiting.get(session_id)
        if found is not None and not found.done() and settled_inband(session_id):
            waiting.pop(session_id, None)
            inband += 1
            found.set_result(True)

    async def delegation(session_id: str) -> bool:
        done = loop.create_future()
        waiting[session_id] = done
        await service.run_start(RunStartParams(session_id=session_id, input="plan"), conn)
        return bool(await asyncio.wait_for(done, 60.0))

    latencies: list[float] = []
    failures = 0
    counting = False

    async def session_loop(session_id: str, stop_at: float) -> None:
        nonlocal failures
        while time.time() < stop_at:
            began = time.perf_counter()
            ok = await delegation(session_id)
            if counting and time.time() <= stop_at:
                if ok:
                    latencies.append(time.perf_counter() - began)
                else:
                    failures += 1

    try:
        names = [f"bench-{tag}-s{n}" for n in range(sessions)]
        for name in names:
            await service.session_create(SessionCreateParams(session_id=name), conn)
            service.add_listener(name, watch)
        await asyncio.gather(*(delegation(name) for name in names))  # warm up
        while time.time() < start_at:  # every host warmed up: start together
            await asyncio.sleep(0.005)
        counting = True
        cpu = time.process_time()
        stop_at = start_at + seconds
        await asyncio.gather(*(session_loop(name, stop_at) for name in names))
        cpu = time.process_time() - cpu
        backend = getattr(service.store, "postgres", None)
        retries = backend.retries if backend is not None else 0
    finally:
        await service.close()
    return {
        "host": index,
        "generation": service.fencing_generation,
        "delegations": len(latencies),
        "failures": failures,
        "inband": inband,
        "retries": retries,
        "cpu_seconds": cpu,
        "latencies": latencies,
    }


def _worker(
    store: dict[str, str], index: int, *, sessions: int, seconds: float, start_at: float, out: Any
) -> None:
    _repo_on_path()
    try:
        out.put(
            asyncio.run(
                _host(store, index=index, sessions=sessions, seconds=seconds, start_at=start_at)
            )
        )
    except BaseException as exc:
        out.put({"host": index, "error": repr(exc)})
        raise


def _transactions(url: str) -> int | None:
    """Committed transactions of the bench's database so far (``pg_stat_database``;
    the server publishes each backend's counts within about a second)."""
    import psycopg

    try:
        with psycopg.connect(url, autocommit=True) as conn:
            row = conn.execute(
                "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
            ).fetchone()
    except psycopg.Error:
        return None
    return None if row is None else int(row[0])


def _read_at(
    when: float, read: Callable[[], int | None], into: list[int | None]
) -> threading.Timer:
    """Read ``read()`` into ``into`` at wall time ``when`` (on a timer thread)."""
    timer = threading.Timer(max(0.0, when - time.time()), lambda: into.append(read()))
    timer.daemon = True
    timer.start()
    return timer


def measure(store: dict[str, str], hosts: int, sessions: int, seconds: float) -> dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    start_at = time.time() + 8.0 + 2.0 * hosts  # imports, connections and warm-up first
    procs = [
        ctx.Process(
            target=_worker,
            args=(store, i),
            kwargs={"sessions": sessions, "seconds": seconds, "start_at": start_at, "out": out},
        )
        for i in range(hosts)
    ]
    for proc in procs:
        proc.start()
    window: list[int | None] = []
    # One second past each end: the server publishes a backend's counts about once a second.
    url = store.get("url")  # the database's own count: PostgreSQL only
    timers = (
        [
            _read_at(start_at + 1.0, lambda: _transactions(url), window),
            _read_at(start_at + seconds + 1.0, lambda: _transactions(url), window),
        ]
        if url is not None
        else []
    )
    rows = [out.get(timeout=300) for _ in procs]
    for timer in timers:
        timer.join(seconds + 60)
    for proc in procs:
        proc.join(60)
    failed = [r for r in rows if "error" in r]
    if failed:
        raise RuntimeError(f"bench host failed: {failed}")
    latencies = [t for r in rows for t in r["latencies"]]
    total = sum(r["delegations"] for r in rows)
    cpu = sum(r["cpu_seconds"] for r in rows)
    counted = len(window) == 2 and None not in window and total
    return {
        "store": store["kind"],
        "transactions_per_delegation": (window[1] - window[0]) / total  # type: ignore[operator]
        if counted
        else None,
        "hosts": hosts,
        "sessions_per_host": sessions,
        "delegations": total,
        "failures": sum(r["failures"] for r in rows),
        "inband_deliveries": sum(r["inband"] for r in rows),
        "serialization_retries": sum(r["retries"] for r in rows),
        "delegations_per_s": total / seconds,
        "per_host_per_s": [
            r["delegations"] / seconds for r in sorted(rows, key=lambda r: r["host"])
        ],
        "latency_p50_ms": statistics.median(latencies) * 1e3 if latencies else None,
        "host_cpu_ms_per_delegation": cpu / total * 1e3 if total else None,
        "host_cpu_ms_per_run": _per_run(cpu * 1e3, total, sum(r["inband"] for r in rows)),
        "generations": sorted(r["generation"] for r in rows),
    }


def _per_run(cpu_ms: float, delegations: int, inband: int) -> float | None:
    """Host CPU per run: a delegation is two runs (the parent, the continuation),
    one when its result reached the parent in-band. The stores' in-band shares
    differ, so this is the fairer figure to compare them by."""
    runs = 2 * delegations - inband
    return cpu_ms / runs if runs > 0 else None


def _as_url(conninfo: str) -> str:
    """A ``postgresql://`` URL for a libpq conninfo (the host takes URLs)."""
    from urllib.parse import quote

    import psycopg

    info = psycopg.conninfo.conninfo_to_dict(conninfo)
    user = quote(str(info.get("user") or "postgres"), safe="")
    password = info.get("password")
    auth = f"{user}:{quote(str(password), safe='')}" if password else user
    host = info.get("host") or "127.0.0.1"
    return f"postgresql://{auth}@{host}:{info.get('port') or 5432}/{info['dbname']}"


def _load() -> list[float]:
    """The 1, 5 and 15 minute load averages (what else the machine was running)."""
    return [round(v, 2) for v in os.getloadavg()]


def _spread(values: list[float]) -> dict[str, float] | None:
    """Median, min and max of ``values`` (None when there are none)."""
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def _measure_store(
    kind: str, url: str, scratch: Path, *, hosts: int, sessions: int, seconds: float
) -> dict[str, Any]:
    """One measurement on a fresh, empty store of ``kind``."""
    from storage._postgres import wipe

    if kind == "postgres":
        wipe(url)
        store = {"kind": kind, "url": url}
    else:
        store = {"kind": kind, "path": str(scratch / f"lmdb-{secrets.token_hex(4)}")}
    before = _load()
    fig = measure(store, hosts, sessions, seconds)
    fig["load_before"], fig["load_after"] = before, _load()
    return fig


def _summarize(figures: list[dict[str, Any]], counts: list[int]) -> list[dict[str, Any]]:
    """Per host count: each store's figures over the rounds, PostgreSQL over LMDB per round."""
    out = []
    for n in counts:
        row: dict[str, Any] = {"hosts": n}
        by_store: dict[str, list[dict[str, Any]]] = {}
        for fig in figures:
            if fig["hosts"] == n:
                by_store.setdefault(fig["store"], []).append(fig)
        for kind, figs in by_store.items():
            row[kind] = {
                "cpu_ms_per_delegation": _spread(
                    [f["host_cpu_ms_per_delegation"] for f in figs if f["delegations"]]
                ),
                "delegations_per_s": _spread([f["delegations_per_s"] for f in figs]),
                "speedup": _spread([f["speedup"] for f in figs if f.get("speedup")]),
            }
        pairs = list(zip(by_store.get("postgres", []), by_store.get("lmdb", []), strict=False))
        for name, figure in (
            ("pg_over_lmdb_cpu", "host_cpu_ms_per_delegation"),
            ("pg_over_lmdb_cpu_per_run", "host_cpu_ms_per_run"),
        ):
            row[name] = _spread(
                [pg[figure] / lm[figure] for pg, lm in pairs if pg[figure] and lm[figure]]
            )
        out.append(row)
    return out


def _speedups(figures: list[dict[str, Any]]) -> None:
    """Each figure's delegations/s over the same round's and store's 1-host figure."""
    base = {(f["round"], f["store"]): f["delegations_per_s"] for f in figures if f["hosts"] == 1}
    for fig in figures:
        one = base.get((fig["round"], fig["store"]))
        fig["speedup"] = fig["delegations_per_s"] / one if one else None


def run(
    quick: bool,
    admin_dsn: str,
    counts: list[int],
    sessions: int,
    *,
    stores: list[str],
    rounds: int,
) -> dict[str, Any]:
    """Every (host count, store) measured ``rounds`` times, interleaved: round by
    round, host count by host count, the stores in alternating order."""
    import tempfile

    _repo_on_path()
    from storage._postgres import create_database, drop_database, migrate

    seconds = 3.0 if quick else 15.0
    name = f"subagents_bench_hosts_{secrets.token_hex(6)}"
    url = _as_url(create_database(admin_dsn, name))
    load_before = _load()
    figures: list[dict[str, Any]] = []
    try:
        migrate(url)
        with tempfile.TemporaryDirectory(prefix="subagents-bench-hosts-") as scratch:
            for r in range(rounds):
                for n in counts:
                    order = stores if (r + n) % 2 == 0 else stores[::-1]
                    for kind in order:
                        fig = _measure_store(
                            kind, url, Path(scratch), hosts=n, sessions=sessions, seconds=seconds
                        )
                        fig["round"] = r
                        figures.append(fig)
    finally:
        drop_database(admin_dsn, name)
    _speedups(figures)
    summary = _summarize(figures, counts)
    return {
        "quick": quick,
        "seconds": seconds,
        "tick_seconds": TICK_SECONDS,
        "cpus": os.cpu_count(),
        "rounds": rounds,
        "stores": stores,
        "load_before": load_before,
        "load_after": _load(),
        "measurements": figures,
        "summary": summary,
        "hosts": _compat_rows(figures, counts),
    }


def _compat_rows(figures: list[dict[str, Any]], counts: list[int]) -> list[dict[str, Any]]:
    """The PostgreSQL figures of the last round, one row per host count (or LMDB's
    when PostgreSQL was not measured)."""
    last = max((f["round"] for f in figures), default=0)
    kinds = {f["store"] for f in figures}
    kind = "postgres" if "postgres" in kinds else "lmdb"
    by_count = {f["hosts"]: f for f in figures if f["round"] == last and f["store"] == kind}
    return [by_count[n] for n in counts if n in by_count]


def _fmt(spread: dict[str, float] | None, spec: str) -> str:
    if spread is None:
        return "-"
    return (
        f"{format(spread['median'], spec)} "
        f"[{format(spread['min'], spec)}-{format(spread['max'], spec)}]"
    )


def render(result: dict[str, Any]) -> str:
    lines = [
        "RPC host processes on one store: background delegations end to end"
        + (" [quick]" if result["quick"] else ""),
        f"{result['seconds']:.0f} s per row, maintenance tick {result['tick_seconds']} s, "
        f"{result['cpus']} CPUs shared by the hosts and the database server; "
        f"{result['rounds']} round(s), interleaved",
        f"load average (1/5/15 min) before {result['load_before']}, after {result['load_after']}",
        "",
        f"{'round':>5} {'store':>8} {'hosts':>5} {'deleg/s':>8} {'x 1 host':>8} "
        f"{'per host':>22} {'p50 ms':>7} {'CPU ms/deleg':>12} {'in-band':>7} {'CPU ms/run':>10} "
        f"{'retries':>7} {'txn/deleg':>9} {'load 1m':>11}",
    ]
    for fig in result["measurements"]:
        per_host = " ".join(f"{v:.1f}" for v in fig["per_host_per_s"])
        p50 = fig["latency_p50_ms"]
        cpu = fig["host_cpu_ms_per_delegation"]
        load = f"{fig['load_before'][0]:.2f}>{fig['load_after'][0]:.2f}"
        share = fig["inband_deliveries"] / fig["delegations"] if fig["delegations"] else 0.0
        inband = f"{share:.0%}"
        per_run = fig["host_cpu_ms_per_run"]
        txn = fig["transactions_per_delegation"]
        lines.append(
            f"{fig['round']:>5} {fig['store']:>8} {fig['hosts']:>5} "
            f"{fig['delegations_per_s']:>8.1f} {fig['speedup'] or 0:>8.2f} {per_host:>22} "
            f"{'-' if p50 is None else format(p50, '.0f'):>7} "
            f"{'-' if cpu is None else format(cpu, '.1f'):>12} {inband:>7} "
            f"{'-' if per_run is None else format(per_run, '.1f'):>10} "
            f"{fig['serialization_retries']:>7} "
            f"{'-' if txn is None else format(txn, '.1f'):>9} {load:>11}"
        )
    lines += ["", "median [min-max] over rounds:"]
    for row in result["summary"]:
        for kind in result["stores"]:
            figs = row.get(kind)
            if figs is None:
                continue
            lines.append(
                f"  {row['hosts']} host(s) {kind:>8}: CPU ms/deleg "
                f"{_fmt(figs['cpu_ms_per_delegation'], '.1f')}, deleg/s "
                f"{_fmt(figs['delegations_per_s'], '.1f')}, x 1 host {_fmt(figs['speedup'], '.2f')}"
            )
        if row["pg_over_lmdb_cpu"] is not None:
            lines.append(
                f"  {row['hosts']} host(s) PostgreSQL/LMDB CPU per delegation: "
                f"{_fmt(row['pg_over_lmdb_cpu'], '.2f')}, per run: "
                f"{_fmt(row['pg_over_lmdb_cpu_per_run'], '.2f')}"
            )
    failures = sum(fig["failures"] for fig in result["measurements"])
    inband = sum(fig["inband_deliveries"] for fig in result["measurements"])
    lines += [
        "",
        f"failed delegations: {failures}; results delivered in-band to a still-running parent "
        f"(no continuation run): {inband}",
        "txn/deleg: the database's committed transactions (pg_stat_database.xact_commit) over "
        "the row's window per delegation; read-only ones included, so an upper bound on its "
        "WAL flushes (fsyncs) per delegation",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="short rows, for a smoke test")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--admin-dsn",
        default=os.environ.get("SUBAGENTS_PG_ADMIN_DSN", DEFAULT_ADMIN_DSN),
        help="a DSN allowed to CREATE DATABASE (the bench's own database is dropped after)",
    )
    parser.add_argument("--hosts", default="1,2,4", help="host counts, comma separated")
    parser.add_argument("--sessions", type=int, default=4, help="concurrent sessions per host")
    parser.add_argument(
        "--stores", default="lmdb,postgres", help="stores, comma separated: lmdb, postgres"
    )
    parser.add_argument("--rounds", type=int, default=None, help="rounds (default 3, quick 1)")
    args = parser.parse_args(argv)
    counts = [int(n) for n in args.hosts.split(",") if n.strip()]
    stores = [s.strip() for s in args.stores.split(",") if s.strip()]
    unknown = set(stores) - {"lmdb", "postgres"}
    if unknown:
        parser.error(f"unknown stores: {sorted(unknown)}")
    rounds = args.rounds if args.rounds is not None else (1 if args.quick else 3)
    _repo_on_path()
    from bench._common import report

    report(
        lambda: run(
            args.quick, args.admin_dsn, counts, args.sessions, stores=stores, rounds=rounds
        ),
        render,
        args.json,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
