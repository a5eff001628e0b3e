"""The LMDB batching writer's linger window: latency alone against throughput together.

Run: ``python bench/linger.py [--quick] [--json] [--lingers 0,50,100,200] [--rounds N]``.

``LmdbBackend(linger_seconds=...)`` lets a lone writer wait up to that long
for a second write before it commits, so writes arriving close together share
one fsync. Every microsecond of it is paid by a writer that stays alone. For
each window (microseconds, default 0, 50, 100 and 200), on a store of its own
(``LmdbSessionStore(sync=True)``: every commit fsync'd before the call returns;
the window is set by opening the path's ``LmdbBackend`` first, whose settings
the store's shares), it measures:

- ``c1``: one thread heartbeating one attempt: the median latency of one
  durable store operation (microseconds), every window's calls interleaved
  call by call (the order rotating);
- ``c8`` and ``c32``: 8 and 32 threads, each heartbeating its own attempt
  back to back for a fixed time: operations per second and operations per
  physical commit (LMDB ``last_txnid``);
- ``kernel c1`` and ``kernel c32``: the supervisor at the kernel level (as in
  bench/supervisor.py: delegate -> a child that returns at once -> wait, which
  claims and acknowledges; no model request, no message history, no usage) on
  the same store: attempts per second and commits per attempt.

The work on every side is the same: only the window differs. Rounds
interleave every (window, figure) cell, the order rotating round by round, so
drift in the machine's disk and CPU load hits every window alike; each figure
is the median over rounds with its min and max, and the ratio of each window
to the 0 window is taken per round. This is a benchmark, not a test: it never
asserts timing, and exits 0.
"""

from __future__ import annotations

import argparse
import json
import shutil
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

from bench._common import CommitCounter, fmt_spread, load_average, print_load, spread  # noqa: E402

MAP_SIZE = 1 << 30
THREADS = 32


class Window:
    """One linger window's store, its attempts, and a supervisor on it."""

    def __init__(self, directory: Path, linger_us: int) -> None:
        from actors import BackgroundSubagentSupervisor, OwnerIdentity
        from bench.store import Records, _setup_session
        from bench.supervisor import instant_child, limits, run_delegations
        from storage import KernelStore, LmdbBackend, LmdbSessionStore, ManualClock

        self.linger_us = linger_us
        # The first opener's settings apply to the path: the store shares this window.
        self.backend = LmdbBackend(
            directory, tables=KernelStore.TABLES, map_size=MAP_SIZE, linger_seconds=linger_us / 1e6
        )
        self.clock = ManualClock(start=1_700_000_000.0)
        self.store = LmdbSessionStore(directory, clock=self.clock, sync=True, map_size=MAP_SIZE)
        records = Records(self.clock)
        _setup_session(self.store, self.clock, records.session_id)
        self.attempts = [
            self.store.accept_attempt(records.acceptance(n)).attempt_id for n in range(THREADS)
        ]
        self.supervisor = BackgroundSubagentSupervisor(
            runner=instant_child,
            store=self.store,
            owner=OwnerIdentity(host_instance_id="bench-linger", fencing_generation=1),
            limits=limits(THREADS + 8),
        )
        run_delegations(self.supervisor, 20, 1)  # warm up
        self.counter = CommitCounter(self.store)
        self.beats = 0

    def heartbeat(self, index: int) -> None:
        from bench.store import HOST

        self.beats += 1
        self.store.heartbeat_attempt(
            self.attempts[index], HOST, 1, self.clock.now() + 3600.0 + self.beats
        )

    def attempt(self, _: int) -> None:
        attempt = self.supervisor.delegate_sync("worker", "go").attempt_id
        result = self.supervisor.wait_sync(attempt, 60)
        if result.status != "completed":
            raise RuntimeError(f"unexpected wait result {result!r}")

    def close(self) -> None:
        self.supervisor.shutdown_checked_sync(60)
        self.store.close()
        self.backend.close()


def latencies_us(windows: list[Window], count: int) -> list[dict[str, float]]:
    """One thread, one heartbeat at a time on each window in turn (the order rotating
    call by call): each window's median latency, microseconds."""
    times: list[list[float]] = [[] for _ in windows]
    for n in range(count):
        shift = n % len(windows)
        for index in list(range(shift, len(windows))) + list(range(shift)):
            start = time.perf_counter()
            windows[index].heartbeat(0)
            times[index].append(time.perf_counter() - start)
    return [{"value": statistics.median(t) * 1e6, "per_commit": 1.0} for t in times]


def together(
    window: Window, one: Callable[[int], None], threads: int, seconds: float
) -> dict[str, float]:
    """``threads`` threads calling ``one`` back to back for ``seconds``: per second, and
    calls per physical commit."""
    from bench.supervisor import timed_callers

    first = window.counter.physical() or 0
    calls, took = timed_callers(one, seconds, threads)
    commits = (window.counter.physical() or 0) - first
    return {"value": calls / took, "per_commit": calls / max(1, commits)}


CELLS = ("c1 latency us", "c8 ops/s", "c32 ops/s", "kernel c1 att/s", "kernel c32 att/s")


def measure_cell(window: Window, cell: str, quick: bool) -> dict[str, float]:
    seconds = 0.3 if quick else 1.5
    if cell == "c8 ops/s":
        return together(window, window.heartbeat, 8, seconds)
    if cell == "c32 ops/s":
        return together(window, window.heartbeat, 32, seconds)
    if cell == "kernel c1 att/s":
        return together(window, window.attempt, 1, seconds)
    return together(window, window.attempt, 32, seconds)


def run(lingers: list[int], rounds: int, quick: bool) -> dict[str, Any]:
    base = Path(tempfile.mkdtemp(prefix="bench-linger-"))
    windows: list[Window] = []
    samples: dict[tuple[int, str], list[dict[str, float]]] = {}
    try:
        for linger in lingers:
            windows.append(Window(base / f"linger-{linger}", linger))
        cells = [(w, c) for w in windows for c in CELLS[1:]]
        for n in range(rounds):
            for window, figure in zip(
                windows, latencies_us(windows, 50 if quick else 300), strict=True
            ):
                samples.setdefault((window.linger_us, CELLS[0]), []).append(figure | {"round": n})
            shift = (n * 7) % len(cells)
            for window, cell in cells[shift:] + cells[:shift]:
                figure = measure_cell(window, cell, quick)
                figure["round"] = n
                samples.setdefault((window.linger_us, cell), []).append(figure)
    finally:
        for window in windows:
            window.close()
        shutil.rmtree(base, ignore_errors=True)
    return summarise(lingers, samples)


def summarise(
    lingers: list[int], samples: dict[tuple[int, str], list[dict[str, float]]]
) -> dict[str, Any]:
    rows: dict[str, Any] = {}
    for linger in lingers:
        row: dict[str, Any] = {}
        for cell in CELLS:
            runs = samples[(linger, cell)]
            base = {r["round"]: r["value"] for r in samples[(lingers[0], cell)]}
            row[cell] = {
                "values": [r["value"] for r in runs],
                "per_commit": statistics.median(r["per_commit"] for r in runs),
                "vs_first": [r["value"] / base[r["round"]] for r in runs],
            }
        rows[str(linger)] = row
    return {"lingers_us": lingers, "rows": rows}


def render(result: dict[str, Any]) -> str:
    lines = [
        "linger window (us) vs latency alone and throughput together, LmdbSessionStore(sync=True);",
        f"median [min-max] over rounds; (xN) = per-round ratio to the {result['lingers_us'][0]} us "
        "window, median; op/c = store operations per physical commit, c/att = physical "
        "commits per attempt",
        "",
    ]
    header = f"{'linger':>7}  " + "  ".join(f"{c:<38}" for c in CELLS)
    lines.append(header)
    for linger, row in result["rows"].items():
        cells = []
        for cell in CELLS:
            fig = row[cell]
            ratio = statistics.median(fig["vs_first"])
            per = fig["per_commit"]
            tail = f"{1 / per:.1f} c/att" if cell.startswith("kernel") else f"{per:.1f} op/c"
            cells.append(f"{fmt_spread(fig['values'], 0)} (x{ratio:.2f}) {tail}")
        lines.append(f"{linger:>7}  " + "  ".join(f"{c:<38}" for c in cells))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="short cells, 2 rounds")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--lingers", default="0,50,100,200", help="windows in microseconds")
    parser.add_argument("--rounds", type=int, default=None)
    args = parser.parse_args(argv)
    lingers = [int(v) for v in args.lingers.split(",") if v.strip()]
    rounds = args.rounds or (2 if args.quick else 5)
    if args.json:
        before = load_average()
        result = run(lingers, rounds, args.quick)
        result |= {"load_before": before, "load_after": load_average(), "rounds": rounds}
        for row in result["rows"].values():
            for fig in row.values():
                fig["spread"] = spread(fig["values"])
        print(json.dumps(result, indent=2))
        return 0
    print_load("before")
    result = run(lingers, rounds, args.quick)
    print(render(result))
    print_load("after")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
