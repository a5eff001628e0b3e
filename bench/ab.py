"""The kernel's round trip at concurrency 1, this checkout against another revision.

Run: ``python bench/ab.py [--base REV] [--store journal|sync] [--trips N] [--rounds N] [--json]``.

A change that saves a few percent of the kernel's CPU cannot be seen by running
the bench before and after it: on a shared machine two runs minutes apart differ
by more than that. This bench runs both in one go, interleaved. Two processes, each
``bench/supervisor.py``'s kernel side (``KernelSide``: delegate, the child returns
``"ok"`` on the loop, wait; no model request, no message history, no usage) on
its own store (``LmdbSessionStore(journal=True)`` or ``sync=True``, as
``--store`` says, every commit durable before it returns):

- ``base``: the code of ``REV`` (default ``HEAD``), exported with ``git archive``;
- ``work``: this checkout as it is, uncommitted changes included.

The two take turns in blocks of 50 round trips, the order swapping each round;
each reports, per block, the microseconds of each round trip, its process CPU
(``time.process_time``: all of its threads) and the fsyncs its store counted. A
side's figure in a round is its median round trip, its mean round trip (which,
unlike the median, counts the trips that waited for a journal checkpoint), its
CPU per trip and its fsyncs per trip (the journal's flushes and its
checkpoints', or LMDB's); the ratios (``base / work``: above 1, the work is
cheaper) are taken per round from the same round's two sides. The load average
is printed before and after. A benchmark, not a test: it never asserts timing
and exits 0.
"""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SIDES = ("base", "work")
BLOCK_TRIPS = 50
WARMUP = 100


# -- a side: one process serving blocks of round trips ------------------------------------------


def serve(tree: Path, store: str) -> int:
    """Run ``tree``'s ``KernelSide`` on a store of its own; answer each line ``N`` of
    stdin with one JSON line: the N round trips' seconds, their process CPU and the
    fsyncs the store counted for them."""
    sys.path.insert(0, str(tree))
    from bench.supervisor import KernelSide

    with tempfile.TemporaryDirectory(prefix="bench-ab-") as tmp:
        side = KernelSide(Path(tmp) / "store", journal=store == "journal")
        try:
            for _ in range(WARMUP):
                side.one(0)
            print("ready", flush=True)
            for line in sys.stdin:
                took: list[float] = []
                flushed = side.store.counters().fsyncs
                cpu = time.process_time()
                for _ in range(int(line)):
                    began = time.perf_counter()
                    side.one(0)
                    took.append(time.perf_counter() - began)
                spent = time.process_time() - cpu
                fsyncs = side.store.counters().fsyncs - flushed
                print(json.dumps({"took": took, "cpu": spent, "fsyncs": fsyncs}), flush=True)
        finally:
            side.close()
    return 0


class Side:
    """The parent's handle on one serving process."""

    def __init__(self, tree: Path, store: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--serve", str(tree), "--store", store],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        if self._line() != "ready":
            raise RuntimeError(f"the side in {tree} did not start")

    def _line(self) -> str:
        from bench._common import worker_line

        return worker_line(self.process, "a side").strip()

    def block(self, trips: int) -> tuple[list[float], float, int]:
        assert self.process.stdin is not None
        self.process.stdin.write(f"{trips}\n")
        self.process.stdin.flush()
        answer = json.loads(self._line())
        return answer["took"], answer["cpu"], answer["fsyncs"]

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait(120)


# -- the parent -----------------------------------------------------------------------------------


def export(rev: str, into: Path) -> str:
    """Write ``rev``'s tree into ``into``; its full commit id."""
    found = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"],
        capture_output=True,
        text=True,
        check=False,
    )
    if found.returncode != 0:
        raise SystemExit(f"bench/ab.py: {rev!r} names no commit of {ROOT}")
    commit = found.stdout.strip()
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", commit],
        capture_output=True,
        check=True,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        # Our own repository's tree; the filter (3.11.4 on) refuses links out of it.
        if hasattr(tarfile, "data_filter"):
            tar.extractall(into, filter="data")
        else:  # pragma: no cover - Python 3.11.0 to 3.11.3
            tar.extractall(into)
    return commit


def measure(base: str, store: str, trips: int, rounds: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-ab-base-") as tmp:
        commit = export(base, Path(tmp))
        sides = {"base": Side(Path(tmp), store), "work": Side(ROOT, store)}
        try:
            per_round = [_round(sides, trips, r) for r in range(rounds)]
        finally:
            for side in sides.values():
                side.close()
    return {"base": commit, "store": store, "trips": trips, "rounds": per_round}


def _round(sides: dict[str, Side], trips: int, number: int) -> dict[str, dict[str, float]]:
    """One round, the order swapping: each side's median us per trip, CPU us per trip
    and trips run."""
    from bench._common import blocks_round

    order = SIDES if number % 2 == 0 else SIDES[::-1]
    blocks = {side: sides[side].block for side in SIDES}
    return blocks_round(blocks, order, trips, BLOCK_TRIPS)


def render(result: dict[str, Any]) -> str:
    from bench._common import fmt_spread, side_lines

    rounds = result["rounds"]
    lines = [
        f"base {result['base'][:12]} against this checkout, store {result['store']};"
        f" {result['trips']} round trips per side per round, {len(rounds)} rounds;"
        " median [min-max] of the rounds",
        "",
        *side_lines(rounds, SIDES),
    ]
    rate = fmt_spread([r["base"]["us"] / r["work"]["us"] for r in rounds], 3)
    mean = fmt_spread([r["base"]["mean_us"] / r["work"]["mean_us"] for r in rounds], 3)
    cpu = fmt_spread([r["base"]["cpu_us"] / r["work"]["cpu_us"] for r in rounds], 3)
    lines += [
        "",
        "base / work, per round (median [min-max]; above 1, the work is cheaper):",
        f"  round trip time, median  {rate}",
        f"  round trip time, mean    {mean}",
        f"  CPU per trip             {cpu}",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="HEAD", help="the revision to compare against")
    parser.add_argument("--store", choices=("journal", "sync"), default="journal")
    parser.add_argument("--trips", type=int, default=1000, help="round trips per side per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--serve", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve is not None:
        return serve(args.serve, args.store)
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from bench._common import report

    report(lambda: measure(args.base, args.store, args.trips, args.rounds), render, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
