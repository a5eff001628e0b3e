"""What every bench in bench/ shares: the load average, spreads, commit counts.

- :func:`load_average` / :func:`print_load`: the machine's 1, 5 and 15 minute
  load averages, printed before and after every bench (every figure is as
  measured, on whatever else the machine was doing).
- :func:`spread`: the median of a list of per-round figures with its min and
  max, the one way a ratio is reported (each round measures both sides,
  interleaved, so drift in the machine's load hits both alike).
- :func:`rounds_main`: the command line of a bench measured in rounds
  (``--<count>``, ``--rounds``, ``--json``), run through :func:`report`.
- :func:`blocks_round`: one round of sides taking turns in blocks of round
  trips, each side's median and mean round trip, CPU and fsyncs per trip;
  :func:`side_lines` prints them.
- :func:`worker_line`: the next line of a bench's worker process, or an error
  naming it when it exited.
- :class:`CommitCounter`: counts the writes a store asks its backend for
  (each one durable commit request) and, on LMDB, the physical write
  transactions (``last_txnid``: one fsync'd commit each, after batching).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any, TextIO


def load_average() -> str:
    """The 1, 5 and 15 minute load averages, ``"unknown"`` where there are none."""
    try:
        return " ".join(f"{value:.2f}" for value in os.getloadavg())
    except OSError:
        return "unknown"


def print_load(when: str, stream: TextIO | None = None) -> str:
    """Print ``load average <when>: ...`` (with the CPU count) and return the figures."""
    load = load_average()
    print(
        f"load average {when}: {load} ({os.cpu_count()} CPUs, shared with other work)",
        file=stream or sys.stdout,
        flush=True,
    )
    return load


def report(
    measure: Callable[[], dict[str, Any]], render: Callable[[dict[str, Any]], str], as_json: bool
) -> dict[str, Any]:
    """Run ``measure`` between two load-average readings and print its result: one
    JSON object (with ``load_before`` and ``load_after``; the readings also go to
    stderr) or ``render``'s text between the two readings."""
    stream = sys.stderr if as_json else sys.stdout
    before = print_load("before", stream)
    result = measure()
    result["load_before"], result["load_after"] = before, load_average()
    if as_json:
        print(json.dumps(result, indent=2, sort_keys=True))
    else:
        print(render(result))
    print_load("after", stream)
    return result


def worker_line(process: subprocess.Popen[str], who: str) -> str:
    """The next line a bench's worker process wrote, or :class:`RuntimeError` naming
    ``who`` and its exit status when it ended instead."""
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line:
        raise RuntimeError(f"{who} exited with {process.wait(60)}")
    return line


def rounds_main(
    doc: str,
    argv: list[str] | None,
    count: tuple[str, int, str],
    measure: Callable[[int, int], dict[str, Any]],
    render: Callable[[dict[str, Any]], str],
) -> int:
    """Parse ``--<name> N`` (``count``: name, default, help), ``--rounds N`` and
    ``--json``, then :func:`report` ``measure(N, rounds)`` with ``render``; 0."""
    name, default, help_text = count
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument(f"--{name}", type=int, default=default, help=help_text)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    report(lambda: measure(getattr(args, name), args.rounds), render, args.json)
    return 0


Block = Callable[[int], tuple[list[float], float, int]]
"""Run N round trips: each one's seconds, the process CPU seconds of all N, and the
durable flushes (fsyncs) they cost, as the side's store counts them."""


def blocks_round(
    blocks: dict[str, Block], order: Sequence[str], trips: int, block_trips: int
) -> dict[str, dict[str, float]]:
    """One round: the sides take turns in ``order``, ``block_trips`` round trips at a
    time, until each ran ``trips``; per side its median microseconds per round trip
    (``us``), its mean (``mean_us``: the median leaves out the rare slow trip, such
    as one that waited for a journal checkpoint; the mean counts it), its CPU
    microseconds per trip (``cpu_us``), its fsyncs per trip (``fsyncs``) and the
    trips run."""
    took: dict[str, list[float]] = {side: [] for side in blocks}
    cpu: dict[str, float] = dict.fromkeys(blocks, 0.0)
    fsyncs: dict[str, int] = dict.fromkeys(blocks, 0)
    whole, rest = divmod(trips, block_trips)
    for size in [block_trips] * whole + ([rest] if rest else []):
        for side in order:
            times, spent, flushed = blocks[side](size)
            took[side] += times
            cpu[side] += spent
            fsyncs[side] += flushed
    return {
        side: {
            "us": statistics.median(took[side]) * 1e6,
            "mean_us": statistics.fmean(took[side]) * 1e6,
            "cpu_us": cpu[side] / len(took[side]) * 1e6,
            "fsyncs": fsyncs[side] / len(took[side]),
            "trips": len(took[side]),
        }
        for side in blocks
    }


def side_lines(rounds: Sequence[dict[str, dict[str, float]]], sides: Sequence[str]) -> list[str]:
    """The table of :func:`blocks_round` figures: a header, then per side its round
    trip (median and mean), CPU and fsyncs per trip, median [min-max] of the rounds."""
    width = max(len("side"), *(len(side) for side in sides))
    lines = [
        f"{'side':{width}s} {'us per round trip, median':>28s}"
        f" {'us per round trip, mean':>28s} {'CPU us per round trip':>28s}"
        f" {'fsyncs per round trip':>24s}"
    ]
    for side in sides:
        us = fmt_spread([r[side]["us"] for r in rounds], 0)
        mean = fmt_spread([r[side]["mean_us"] for r in rounds], 0)
        cpu = fmt_spread([r[side]["cpu_us"] for r in rounds], 0)
        fsyncs = fmt_spread([r[side]["fsyncs"] for r in rounds], 2)
        lines.append(f"{side:{width}s} {us:>28s} {mean:>28s} {cpu:>28s} {fsyncs:>24s}")
    return lines


def spread(values: Sequence[float]) -> dict[str, float]:
    """``{"median", "min", "max"}`` of per-round figures."""
    if not values:
        return {"median": float("nan"), "min": float("nan"), "max": float("nan")}
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
    }


def fmt_spread(values: Sequence[float], digits: int = 2) -> str:
    """``median [min-max]`` of per-round figures."""
    s = spread(values)
    return f"{s['median']:,.{digits}f} [{s['min']:,.{digits}f}-{s['max']:,.{digits}f}]"


class CommitCounter:
    """Counts a store's backend writes and (on LMDB) its physical commits.

    ``writes``: every call of ``backend.write`` (one durable commit request:
    the batching writer may share one commit between several).
    :meth:`physical` is LMDB's last committed write transaction id (``None``
    off LMDB): its difference over a stretch is the commits, each one fsync'd
    transaction, that stretch cost. Wrapping is not thread-unsafe: the count
    is taken under a lock.
    """

    def __init__(self, store: Any) -> None:
        self.writes = 0
        self._lock = threading.Lock()
        self._store = store
        backend = store.backend
        inner: Callable[[Any], Any] = backend.write

        def write(fn: Any) -> Any:
            with self._lock:
                self.writes += 1
            return inner(fn)

        backend.write = write

    def physical(self) -> int | None:
        """LMDB's ``last_txnid`` (physical write transactions so far), else ``None``."""
        return lmdb_txn_id(self._store)


def lmdb_txn_id(store: Any) -> int | None:
    """LMDB's last committed write transaction id of ``store``, when it is on LMDB."""
    try:
        info: dict[str, int] = store.lmdb_backend._live().env.info()
        return int(info["last_txnid"])
    except Exception:
        return None
