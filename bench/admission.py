"""Admission against the session's history: a delegation costs the same with 100 or
30,000 delivered results retained in its session.

Run: ``python bench/admission.py [--quick] [--json]``.

Admission refuses a delegation while ``max_undelivered_results`` (128 by default)
results of the session are undelivered. The supervisor keeps the ids it believes
undelivered; at the limit it drops the ones delivered since (its own deliveries,
then the store's word on each id) and recounts the session's pending set in the
store, a read of every retained entry of the session (24 h of results by
default), only when that still leaves it at the limit.

Two sides, each a ``BackgroundSubagentSupervisor`` on its own
``LmdbSessionStore(sync=False)`` (no fsync: the figure is CPU, not the disk) in one
temporary directory: ``small`` with :data:`SMALL` delivered results already in its
session, ``large`` with :data:`LARGE` (written by the same kind of supervisor,
delegate -> wait, before measuring). Each measured attempt is delegate -> the child
returns ``"ok"`` at once (no model request, no message history, no usage) -> the
result goes to a completion callback (``on_complete``), which the supervisor's
deliverer claims and acknowledges; the caller waits for the callback. Each round
runs :data:`PER_ROUND` attempts (twice the limit) on each side in turn, the order
alternating; the ratio is the large side's mean latency over the small side's,
per round (the mean, not the median: a recount is one slow admission in a
hundred, amortized over the others); the figure is the median of the rounds'
ratios with their min and max (target <= 1.2: admission is flat in history).
The full recounts made while measuring (the store's ``list_pending_attempts``)
are printed beside it, and the load average before and after.

This is a benchmark, not a test: it never asserts timing and exits 0.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench._common import load_average, print_load  # noqa: E402

SMALL = 100
LARGE = 30_000
PER_ROUND = 256
TARGET = 1.2
MAP_SIZE = 1 << 31


async def instant_child(request: Any, control: Any) -> Any:
    from actors import ChildOutcome

    return ChildOutcome.completed("ok")


class Side:
    """A supervisor whose session already holds ``history`` delivered results."""

    def __init__(self, directory: Path, history: int) -> None:
        from actors import BackgroundSubagentSupervisor, OwnerIdentity
        from storage import LmdbSessionStore

        self.store = LmdbSessionStore(directory, sync=False, map_size=MAP_SIZE)
        owner = OwnerIdentity(host_instance_id="bench-host", fencing_generation=1)
        writer = BackgroundSubagentSupervisor(runner=instant_child, store=self.store, owner=owner)
        for _ in range(history):  # each handed over (delivered) by its terminal commit
            writer.wait_sync(writer.delegate_sync("worker", "history").attempt_id, 60)
        writer.shutdown_checked_sync(60)
        self.done: dict[str, threading.Event] = {}
        self.lock = threading.Lock()
        self.recounts = 0  # the session's full recounts (list_pending_attempts)
        listed = self.store.list_pending_attempts

        def counted(namespace_id: str, session_id: str | None = None) -> list[Any]:
            self.recounts += 1
            return listed(namespace_id, session_id)

        self.store.list_pending_attempts = counted  # type: ignore[method-assign]
        self.supervisor = BackgroundSubagentSupervisor(
            runner=instant_child,
            store=self.store,
            owner=OwnerIdentity(host_instance_id="bench-host", fencing_generation=2),
            on_complete=self._delivered,
        )

    def _event(self, attempt_id: str) -> threading.Event:
        with self.lock:
            return self.done.setdefault(attempt_id, threading.Event())

    def _delivered(self, result: Any) -> None:
        self._event(result.attempt_id).set()

    def one(self) -> float:
        start = time.perf_counter()
        attempt = self.supervisor.delegate_sync("worker", "go").attempt_id
        if not self._event(attempt).wait(60):
            raise RuntimeError(f"no callback for {attempt}")
        with self.lock:
            del self.done[attempt]
        return time.perf_counter() - start

    def close(self) -> None:
        self.supervisor.shutdown_checked_sync(60)
        self.store.close()


def measure(rounds: int, small: int, large: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-admission-") as tmp:
        sides = {
            "small": Side(Path(tmp) / "small", small),
            "large": Side(Path(tmp) / "large", large),
        }
        try:
            for side in sides.values():  # warm up: threads, the first recount
                for _ in range(PER_ROUND // 4):
                    side.one()
                side.recounts = 0
            ratios: list[float] = []
            means: dict[str, list[float]] = {"small": [], "large": []}
            for r in range(rounds):
                order = ("small", "large") if r % 2 == 0 else ("large", "small")
                for name in order:
                    times = [sides[name].one() for _ in range(PER_ROUND)]
                    means[name].append(statistics.fmean(times))
                ratios.append(means["large"][-1] / means["small"][-1])
        finally:
            for side in sides.values():
                side.close()
    return {
        "history": {"small": small, "large": large},
        "attempts_per_round": PER_ROUND,
        "mean_us": {k: [round(v * 1e6, 1) for v in vs] for k, vs in means.items()},
        "ratio": statistics.median(ratios),
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
        "rounds": [round(x, 3) for x in ratios],
        "recounts": {name: side.recounts for name, side in sides.items()},
        "target_max": TARGET,
        "meets_target": statistics.median(ratios) <= TARGET,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small counts: a smoke test")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    before = load_average() if args.json else print_load("before")
    result = measure(
        rounds=2 if args.quick else 6, small=SMALL, large=1_000 if args.quick else LARGE
    )
    after = load_average() if args.json else ""
    if args.json:
        result["load_average"] = {"before": before, "after": after}
        print(json.dumps(result))
        return 0
    print(
        f"admission with {result['history']['large']:,} vs {result['history']['small']:,} "
        f"delivered results in the session, {PER_ROUND} attempts per side per round "
        "(delegate -> child ends -> completion callback)"
    )
    for name, values in result["mean_us"].items():
        print(f"  {name:5s} mean latency per round (us): {values}")
    ok = "yes" if result["meets_target"] else "NO"
    print(
        f"large / small: {result['ratio']:.2f} "
        f"[{result['ratio_min']:.2f}-{result['ratio_max']:.2f}]  target <= {TARGET}  {ok}"
        f"  rounds {result['rounds']}"
    )
    recounts = result["recounts"]
    print(
        f"full recounts of a session's pending results while measured: {recounts['small']} "
        f"(small), {recounts['large']} (large)"
    )
    print_load("after")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
