"""One durable background round trip at concurrency 1, step by step: where its time goes.

Run: ``python bench/critical_path.py [--attempts N] [--json]``.

The work is ``bench/supervisor.py``'s kernel side at concurrency 1:
``BackgroundSubagentSupervisor`` on ``LmdbSessionStore(sync=True)`` (every commit
fsync'd before it returns), a child runner that returns ``"ok"`` at once (no model
request, no message history, no usage), one caller doing delegate -> wait. A wait
that was waiting when the child ended is handed the result by the terminal commit
(``TerminalCommit.deliver_claim_id``): two durable commits per attempt; one that
came after the end claims and acknowledges it itself: three. The child returns at
once, so both happen; the table follows the more common order, and the count of
attempts handed over in their terminal commit is printed beside it.

Each attempt is cut at :data:`MARKS`: the caller's call and return, the child's
start on the event loop, and the entry and exit of six of the kernel's own
methods (the supervisor actor's handling of a delegate message, the store's
accept, terminal commit and claim-and-acknowledge, and the attempt actor's
launch of the child onto the loop and handling of the child's end), each wrapped
to note a ``time.perf_counter`` mark. From the launch to the child's start is the
loop thread's wake-up (the launch's entry is marked: the loop may start the
child before the launching method has returned). That wraps
private methods, which is why this is a bench and not a test or an API; the
wrappers cost about a microsecond per mark. Every row is the median, over the
attempts whose marks came in the usual order, of the time from one mark to the
next. Between two attempts, one plain py-lmdb durable commit (one small put) runs
on an environment of its own in the same directory, so the commit rows can be
read against the physical cost of a commit on this disk at that moment.

What is not a commit is hand-offs between threads (the caller, the actor pool,
the children's event loop; each a wake-up of a sleeping thread) and the kernel's
own CPU. The fsyncs per attempt are counted by the store over the timed attempts.
The load average is printed before and after. This is a benchmark, not
a test: it never asserts timing and exits 0.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench._common import load_average, print_load  # noqa: E402

MAP_SIZE = 1 << 30
COMMITS = ("accept>", "terminal>", "claim_ack>")
"""The marks that open a durable commit (each closed by the same name with ``<``)."""
MARKS = {
    "call>": "the caller calls delegate_sync",
    "supervisor>": "the supervisor actor handles the delegate message",
    "accept>": "the store's accept_attempt",
    "accept<": "accept committed",
    "supervisor<": "the supervisor actor answered (the attempt's actor started)",
    "launch>": "the attempt's actor hands the child to the event loop",
    "child>": "the child starts on the event loop",
    "finished>": "the attempt actor takes the child's end",
    "terminal>": "the store's commit_terminal (delivering to a wait that came first)",
    "terminal<": "terminal committed",
    "claim_ack>": "the caller's wait claims and acknowledges",
    "claim_ack<": "claim and acknowledgement committed",
    "call<": "wait_sync returns to the caller",
}


class Marks:
    """``perf_counter`` marks of the attempt in progress (one attempt at a time)."""

    def __init__(self) -> None:
        self.now = time.perf_counter
        self.current: list[tuple[str, float]] = []

    def note(self, name: str) -> None:
        self.current.append((name, self.now()))

    def wrap(self, owner: type, method: str, name: str) -> Callable[[], None]:
        """Mark ``name>`` and ``name<`` around ``owner.method``; returns the undo."""
        original = getattr(owner, method)

        @functools.wraps(original)
        def marked(*args: Any, **kwargs: Any) -> Any:
            self.note(name + ">")
            try:
                return original(*args, **kwargs)
            finally:
                self.note(name + "<")

        setattr(owner, method, marked)
        return lambda: setattr(owner, method, original)


def instrument(marks: Marks) -> list[Callable[[], None]]:
    """Wrap the kernel's methods named in :data:`MARKS`; the undos, in order."""
    from actors import _attempt, _supervisor
    from storage import _kernel

    return [
        marks.wrap(_supervisor.SupervisorActor, "_delegate", "supervisor"),
        marks.wrap(_kernel.KernelStore, "accept_attempt", "accept"),
        marks.wrap(_attempt.AttemptActor, "_launch_child", "launch"),
        marks.wrap(_attempt.AttemptActor, "_on_child_finished", "finished"),
        marks.wrap(_kernel.KernelStore, "commit_terminal", "terminal"),
        marks.wrap(_kernel.KernelStore, "claim_and_acknowledge", "claim_ack"),
    ]


def _kept(trace: list[tuple[str, float]]) -> tuple[tuple[str, ...], list[float]]:
    """The marks of :data:`MARKS` in time order (the first of each name)."""
    seen: dict[str, float] = {}
    for name, at in trace:
        if name in MARKS and name not in seen:
            seen[name] = at
    ordered = sorted(seen.items(), key=lambda item: item[1])
    return tuple(n for n, _ in ordered), [at for _, at in ordered]


def run(attempts: int, warmup: int = 50, *, journal: bool = False) -> dict[str, Any]:
    """Time ``attempts`` round trips (after ``warmup``) and one raw commit after each;
    ``journal``: the store makes its commits durable with its redo journal."""
    from actors import BackgroundSubagentSupervisor, ChildOutcome, OwnerIdentity
    from bench.store import RawLmdb
    from storage import LmdbSessionStore

    marks = Marks()

    async def child(request: Any, control: Any) -> Any:
        marks.note("child>")
        return ChildOutcome.completed("ok")

    traces: list[tuple[tuple[str, ...], list[float]]] = []
    raw_commits: list[float] = []
    with tempfile.TemporaryDirectory(prefix="bench-critical-") as tmp:
        store = LmdbSessionStore(Path(tmp) / "store", sync=True, map_size=MAP_SIZE, journal=journal)
        raw = RawLmdb(Path(tmp) / "raw")
        supervisor = BackgroundSubagentSupervisor(
            runner=child,
            store=store,
            owner=OwnerIdentity(host_instance_id="bench-host", fencing_generation=1),
        )
        undo = instrument(marks)
        fsyncs = 0
        try:
            for n in range(warmup + attempts):
                if n == warmup:
                    fsyncs = store.counters().fsyncs
                marks.current = []
                marks.note("call>")
                attempt = supervisor.delegate_sync("worker", "go").attempt_id
                result = supervisor.wait_sync(attempt, 60)
                marks.note("call<")
                if result.status != "completed" or result.result != "ok":
                    raise RuntimeError(f"unexpected wait result {result!r}")
                raw_seconds = raw.commit(1)
                if n >= warmup:
                    traces.append(_kept(marks.current))
                    raw_commits.append(raw_seconds)
            fsyncs = store.counters().fsyncs - fsyncs
        finally:
            for restore in reversed(undo):
                restore()
            supervisor.shutdown_checked_sync(60)
            store.close()
            raw.close()
    return summarize(traces, raw_commits) | {"fsyncs_per_attempt": fsyncs / attempts}


def summarize(
    traces: list[tuple[tuple[str, ...], list[float]]], raw_commits: list[float]
) -> dict[str, Any]:
    """Per-step medians (microseconds) over the traces in the most common order."""
    order, _count = Counter(names for names, _ in traces).most_common(1)[0]
    kept = [times for names, times in traces if names == order]
    steps = []
    for i in range(1, len(order)):
        gaps = [(times[i] - times[i - 1]) * 1e6 for times in kept]
        steps.append({"from": order[i - 1], "to": order[i], "us": statistics.median(gaps)})
    totals = [(times[-1] - times[0]) * 1e6 for times in kept]
    commits = sum(1 for name in order if name in COMMITS)
    commit_us = sum(s["us"] for s in steps if s["from"] in COMMITS)
    raw_us = statistics.median(raw_commits) * 1e6
    total = statistics.median(totals)
    return {
        "attempts": len(traces),
        "in_usual_order": len(kept),
        "handed_over": sum(1 for names, _ in traces if "claim_ack>" not in names),
        "order": list(order),
        "steps": steps,
        "total_us": total,
        "attempts_per_s": 1e6 / total,
        "commits": commits,
        "commits_us": commit_us,
        "raw_commit_us": raw_us,
        "commits_over_raw": commit_us / (commits * raw_us),
        "not_commits_us": sum(s["us"] for s in steps) - commit_us,
    }


def table(result: dict[str, Any]) -> str:
    total = sum(s["us"] for s in result["steps"])
    lines = [
        f"one attempt at concurrency 1, {result['in_usual_order']} of {result['attempts']} "
        "attempts in the usual order; median microseconds from each mark to the next",
        f"handed the result by the terminal commit (the wait came first): "
        f"{result['handed_over']} of {result['attempts']}",
        "",
        f"{'from':<13} {'to':<13} {'us':>7} {'share':>6}  until",
        f"{'-' * 13} {'-' * 13} {'-' * 7} {'-' * 6}  {'-' * 5}",
    ]
    for step in result["steps"]:
        lines.append(
            f"{step['from']:<13} {step['to']:<13} {step['us']:>7.1f} "
            f"{step['us'] / total:>6.1%}  {MARKS[step['to']]}"
        )
    raw = result["raw_commit_us"]
    lines += [
        "",
        f"median attempt: {result['total_us']:.0f} us ({result['attempts_per_s']:.0f} "
        "attempts/s, the sum of the medians may differ a little)",
        f"the {result['commits']} durable commits: {result['commits_us']:.0f} us; a raw "
        f"py-lmdb commit (one small put) in between: {raw:.0f} us, so {result['commits']} of "
        f"them {result['commits'] * raw:.0f} us; commits / raw = "
        f"{result['commits_over_raw']:.2f}",
        f"everything else (hand-offs between threads, the kernel's CPU): "
        f"{result['not_commits_us']:.0f} us",
        f"fsyncs per attempt, counted by the store over the timed attempts: "
        f"{result['fsyncs_per_attempt']:.2f}",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--attempts", type=int, default=1000, help="timed attempts")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--journal", action="store_true", help="the store on its redo journal (journal=True)"
    )
    args = parser.parse_args(argv)
    if args.attempts < 1:
        parser.error("--attempts must be at least 1")
    before = load_average()
    if not args.json:
        print_load("before")
    result = run(args.attempts, journal=args.journal)
    result["journal"] = args.journal
    result["load_average"] = {"before": before, "after": load_average()}
    if args.json:
        print(json.dumps(result))
    else:
        print(table(result))
        print_load("after")
    return 0


if __name__ == "__main__":
    sys.exit(main())
