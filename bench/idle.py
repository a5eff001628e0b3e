"""What idle sessions cost a host: CPU per second, threads, RSS, against an empty host.

Run: ``python bench/idle.py [--sessions 1000] [--rounds 5] [--window 2] [--json]``.

Two host processes run side by side, each a real :class:`HostService` (memory
store and event log, the production maintenance tick of 1 s, the shared
supervisor pools of its ``[host]`` defaults), started in the same way:

- ``empty``: the baseline, no session;
- ``idle``: ``--sessions`` sessions, each of which delegated one background
  attempt to a test-model child (``test:text=...``: one model request, no
  tools) and waited for its result, so every session keeps its supervisor
  (the spec's rule) and nothing is live any more.

Once both are ready, each round measures both processes' CPU time (user +
system, the host's own ``time.process_time()``, asked for over a pipe at each
end of the window) over ``--window`` seconds, the two
windows interleaved in alternating order round by round. The figure is the
idle host's CPU per second minus the baseline's, per round: its median and
min-max are reported (target: under 5 ms/s at 1,000 sessions), with both
hosts' OS threads (``/proc/PID/status``) and RSS, and the RSS per idle
session beyond the baseline. Durability: none (memory store); both sides do
the same work but the sessions.

This is a benchmark, not a test: it never asserts timing. Exit status is 0
whether or not the target is met.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
TARGET_MS_PER_S = 5.0
CONFIG = """
[profiles.default]
model_id = "test:echo"
subagents = ["research"]

[profiles.research]
model_id = "test:text=three facts"

[subagents.research]
profile = "research"
description = "Collect facts"
"""


async def _serve(sessions: int) -> None:
    """The child process: a host with ``sessions`` idle sessions; prints ``ready``."""
    from storage import MemorySessionStore
    from subagents._host import HostService, parse_host_config
    from subagents._host._eventlog import MemoryEventLog

    service = HostService(
        parse_host_config(CONFIG), store=MemorySessionStore(), events=MemoryEventLog()
    )
    await service.start()
    for n in range(sessions):
        supervisor = service.supervisor(f"session-{n:06d}")
        accepted = await supervisor.delegate("research", f"task {n}")
        await supervisor.wait(accepted.attempt_id, 30)
    print("ready", flush=True)
    loop = asyncio.get_running_loop()
    # Each line asks for this process's CPU time (precise, unlike /proc's 10 ms ticks);
    # end of input ends the host.
    while await loop.run_in_executor(None, sys.stdin.readline):
        print(repr(time.process_time()), flush=True)
    await service.close()


def _cpu_seconds(process: subprocess.Popen[str]) -> float:
    """The host process's own ``time.process_time()`` (user + system, all threads)."""
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write("cpu\n")
    process.stdin.flush()
    return float(process.stdout.readline())


def _status(pid: int) -> dict[str, int]:
    found: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("Threads", "VmRSS"):
            found[key] = int(value.split()[0])
    return found


def _start(sessions: int) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", str(REPO))}
    return subprocess.Popen(
        [sys.executable, __file__, "--serve", str(sessions)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )


def _window(process: subprocess.Popen[str], seconds: float) -> float:
    """CPU milliseconds per second of ``process`` over one window."""
    before, start = _cpu_seconds(process), time.monotonic()
    time.sleep(seconds)
    return (_cpu_seconds(process) - before) * 1000 / (time.monotonic() - start)


def measure(sessions: int, rounds: int, window: float) -> dict[str, Any]:
    empty, idle = _start(0), _start(sessions)
    try:
        for process in (empty, idle):
            assert process.stdout is not None
            line = process.stdout.readline()
            if line.strip() != "ready":
                raise RuntimeError(f"a host did not start (exit {process.poll()})")
        time.sleep(window)  # past the start-up work
        base_ms: list[float] = []
        idle_ms: list[float] = []
        for n in range(rounds):
            order = [(empty, base_ms), (idle, idle_ms)]
            for process, into in order if n % 2 == 0 else order[::-1]:
                into.append(_window(process, window))
        base, loaded = _status(empty.pid), _status(idle.pid)
    finally:
        for process in (empty, idle):
            assert process.stdin is not None
            process.stdin.close()
        for process in (empty, idle):
            process.wait(60)
    extra = [i - b for i, b in zip(idle_ms, base_ms, strict=True)]
    rss_kib = loaded["VmRSS"] - base["VmRSS"]
    return {
        "sessions": sessions,
        "rounds": rounds,
        "window_s": window,
        "extra_cpu_ms_per_s_median": round(statistics.median(extra), 3),
        "extra_cpu_ms_per_s_min": round(min(extra), 3),
        "extra_cpu_ms_per_s_max": round(max(extra), 3),
        "empty_cpu_ms_per_s_median": round(statistics.median(base_ms), 3),
        "idle_cpu_ms_per_s_median": round(statistics.median(idle_ms), 3),
        "empty_threads": base["Threads"],
        "idle_threads": loaded["Threads"],
        "empty_rss_kib": base["VmRSS"],
        "idle_rss_kib": loaded["VmRSS"],
        "rss_kib_per_session": round(rss_kib / max(1, sessions), 2),
        "target_ms_per_s": TARGET_MS_PER_S,
        "ok": statistics.median(extra) < TARGET_MS_PER_S * max(1, sessions) / 1000,
    }


def load() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--window", type=float, default=10.0, help="seconds per measurement")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--serve", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve is not None:
        asyncio.run(_serve(args.serve))
        return 0
    load_before = load()
    row = measure(args.sessions, args.rounds, args.window)
    row["load_before"], row["load_after"] = load_before, load()
    if args.json:
        print(json.dumps(row, indent=2))
        return 0
    print(f"load average before: {row['load_before']}")
    print(f"{'host':<8}{'sessions':>9}{'cpu ms/s':>10}{'threads':>9}{'rss KiB':>10}")
    print(
        f"{'empty':<8}{0:>9}{row['empty_cpu_ms_per_s_median']:>10.2f}"
        f"{row['empty_threads']:>9}{row['empty_rss_kib']:>10}"
    )
    print(
        f"{'idle':<8}{row['sessions']:>9}{row['idle_cpu_ms_per_s_median']:>10.2f}"
        f"{row['idle_threads']:>9}{row['idle_rss_kib']:>10}"
    )
    print(
        f"idle minus empty: {row['extra_cpu_ms_per_s_median']:.2f} ms/s (min-max "
        f"{row['extra_cpu_ms_per_s_min']:.2f}-{row['extra_cpu_ms_per_s_max']:.2f}, "
        f"{row['rounds']} interleaved rounds of {row['window_s']:g} s); "
        f"{row['rss_kib_per_session']:.2f} KiB RSS per idle session"
    )
    verdict = "yes" if row["ok"] else "NO"
    print(f"target: under {TARGET_MS_PER_S:g} ms/s per 1,000 idle sessions: {verdict}")
    print(f"load average after: {row['load_after']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
