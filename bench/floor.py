"""One durable background round trip at concurrency 1 against its own shape with nothing else in it.

Run: ``python bench/floor.py [--trips N] [--rounds N] [--json]``.

Three sides, each one caller doing one round trip at a time:

- ``shape``: the round trip's threads and durable writes and nothing else, in
  plain Python: the caller hands a request to a worker thread (a
  ``queue.SimpleQueue``), which makes it durable (a 4 KiB ``pwrite`` and
  ``fdatasync`` on a pre-written file, the cost of one journal entry), answers
  the caller and starts a task on an asyncio loop thread; the task returns at
  once and its done-callback hands the end to the worker, which makes it
  durable the same way and wakes the caller. Two flushed writes and five
  wake-ups between threads, like the kernel's round trip, and no records, no
  checks, no actors: the floor of this design on this machine.
- ``journal``: ``bench/supervisor.py``'s kernel side on
  ``LmdbSessionStore(journal=True)``: delegate, the child returns ``"ok"`` on
  the loop, wait (handed the result by the terminal commit).
- ``sync``: the same on ``LmdbSessionStore(sync=True)`` (LMDB flushes each commit).

No side makes a model request, keeps a message history or counts usage. The
sides take turns in blocks of 50 round trips, the order rotating each round;
a side's figure in a round is the median (and the mean) microseconds of a round
trip, its process CPU per trip (all threads, ``time.process_time``) and its
fsyncs per trip (the shape's own flushes; the kernel's, counted by its store:
two commits, and the journal's checkpoints or LMDB's), and every ratio
(``shape / journal``: how far the kernel is from its floor) is taken per round
from the same round's two sides. The load average is printed before and after.
A benchmark, not a test: it never asserts timing and exits 0.
"""

from __future__ import annotations

import asyncio
import functools
import os
import queue
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

from bench._common import blocks_round, fmt_spread, rounds_main, side_lines  # noqa: E402

BLOCK_TRIPS = 50
SIDES = ("shape", "journal", "sync")
FILE_BYTES = 16 << 20
WARMUP = 100


class Shape:
    """The round trip's threads and two flushed 4 KiB writes, nothing else."""

    def __init__(self, directory: Path) -> None:
        self.fd = os.open(directory / "flushes", os.O_RDWR | os.O_CREAT, 0o600)
        os.write(self.fd, bytes(FILE_BYTES))  # written whole: no extent changes later
        os.fsync(self.fd)
        self.at = 0
        self.flushes = 0
        self.work: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self.worker = threading.Thread(target=self._serve, name="floor-worker")
        self.loop = asyncio.new_event_loop()
        self.loop_thread = threading.Thread(target=self.loop.run_forever, name="floor-loop")
        self.worker.start()
        self.loop_thread.start()

    def _serve(self) -> None:
        while (job := self.work.get()) is not None:
            job()

    def _flush(self) -> None:
        os.pwrite(self.fd, b"j" * 4096, self.at)
        os.fdatasync(self.fd)
        self.flushes += 1
        self.at = (self.at + 4096) % FILE_BYTES

    def one(self) -> None:
        answered, ended = threading.Event(), threading.Event()

        async def child() -> str:
            return "ok"

        def end() -> None:
            self._flush()
            ended.set()

        def finished(_: object) -> None:
            self.work.put(end)

        def launch() -> None:
            self.loop.create_task(child()).add_done_callback(finished)

        def accept() -> None:
            self._flush()
            answered.set()
            self.loop.call_soon_threadsafe(launch)

        self.work.put(accept)
        answered.wait()
        ended.wait()

    def fsyncs(self) -> int:
        return self.flushes

    def close(self) -> None:
        self.work.put(None)
        self.worker.join()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.loop_thread.join()
        self.loop.close()
        os.close(self.fd)


class Kernel:
    """``bench/supervisor.py``'s kernel side (its own store directory)."""

    def __init__(self, directory: Path, *, journal: bool) -> None:
        from bench.supervisor import KernelSide

        self.side = KernelSide(directory, journal=journal)

    def one(self) -> None:
        self.side.one(0)

    def fsyncs(self) -> int:
        return self.side.store.counters().fsyncs

    def close(self) -> None:
        self.side.close()


def _block(side: Shape | Kernel, trips: int) -> tuple[list[float], float, int]:
    """Per-trip seconds, the process CPU seconds and the fsyncs of ``trips`` round trips."""
    took: list[float] = []
    flushed = side.fsyncs()
    cpu = time.process_time()
    for _ in range(trips):
        began = time.perf_counter()
        side.one()
        took.append(time.perf_counter() - began)
    return took, time.process_time() - cpu, side.fsyncs() - flushed


def measure(trips: int, rounds: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-floor-") as tmp:
        for side in SIDES:
            (Path(tmp) / side).mkdir()
        sides: dict[str, Shape | Kernel] = {
            "shape": Shape(Path(tmp) / "shape"),
            "journal": Kernel(Path(tmp) / "journal" / "store", journal=True),
            "sync": Kernel(Path(tmp) / "sync" / "store", journal=False),
        }
        try:
            for side in sides.values():
                _block(side, WARMUP)
            per_round = [_round(sides, trips, r) for r in range(rounds)]
        finally:
            for side in sides.values():
                side.close()
    return {"trips": trips, "rounds": per_round}


def _round(
    sides: dict[str, Shape | Kernel], trips: int, number: int
) -> dict[str, dict[str, float]]:
    """One round, the order rotating: each side's figures (:func:`blocks_round`)."""
    order = SIDES[number % len(SIDES) :] + SIDES[: number % len(SIDES)]
    blocks = {side: functools.partial(_block, sides[side]) for side in SIDES}
    return blocks_round(blocks, order, trips, BLOCK_TRIPS)


def render(result: dict[str, Any]) -> str:
    rounds = result["rounds"]
    lines = [
        f"one round trip at a time, {result['trips']} per side per round, {len(rounds)} rounds;"
        " median [min-max] of the rounds",
        "",
        *side_lines(rounds, SIDES),
    ]
    lines += ["", "ratios of rates, per round (median [min-max]):"]
    for kernel in ("journal", "sync"):
        ratios = fmt_spread([r["shape"]["us"] / r[kernel]["us"] for r in rounds])
        lines.append(f"  {kernel + ' / shape':16s} {ratios}  (the kernel against its floor)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    count = ("trips", 1000, "round trips per side per round")
    return rounds_main(__doc__, argv, count, measure, render)


if __name__ == "__main__":
    raise SystemExit(main())
