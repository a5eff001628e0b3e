"""Soak: one host process, many sessions each delegating in the background, then SIGTERM.

Run: ``python bench/soak.py [--sessions 10000] [--attempts 10] [--window 64] [--json]``
(the issue's full size, the default: 10,000 sessions x 10 attempts = 100,000 attempts).

The run is :func:`properties.reliability._soak.run_soak` (the ``soak`` section of
``subagents verify --report`` runs the same code; see that module for the whole
protocol): one real host process (LMDB data directory, the host's default
durability, the scripted offline parent ``planner:x`` and a child answering after
0.2 s, the maintenance tick at ``--tick``) driven through JSON-RPC on stdio. Each
session is created, subscribed to and runs ``--attempts`` parent runs in turn; each
parent run delegates one background attempt, whose result comes back as a
continuation run; then the session is unsubscribed and stays idle. ``--window``
sessions are in flight at once.

At every tenth of the sessions done it prints the host's OS threads, open fds,
``VmRSS``, ``RssAnon`` and ``RssFile`` and its Python threads by name; then the
slopes per 1,000 sessions (threads, fds) and per session (RSS) after warm-up (the
first two tenths are left out: pools starting their threads up to their bounds,
the allocator's arenas, the first LMDB pages), by least squares; the SIGTERM
shutdown time against its deadline; and the store check: lost and duplicated
results (must be 0).

Targets (issue 16): threads and fds slope under 1 per 1,000 sessions; RSS growth
under 2 KiB per idle session, judged on ``RssAnon`` (private memory: what idle
sessions retain). ``RssFile`` is file-backed pages, mostly the LMDB map's pages
the process touched (the page cache: shared, evictable, grown by the data the run
writes), reported and not judged. Shutdown within its deadline; 0 lost; 0
duplicates.

The host process inherits the environment, so ``PYTHONMALLOC=malloc python
bench/soak.py`` measures a host on the C allocator instead of pymalloc (the line
``allocator:`` says which): pymalloc returns a 1 MiB arena only once every block in
it is free, and each idle session's few long-lived objects land among short-lived
ones, so ``RssAnon`` can grow faster than the live objects do.

This is a benchmark, not a test: it never asserts timing. Exit status is 0
whether or not the targets are met (the verify ``soak`` section is the check).
At each tenth the host also writes its allocators' statistics to
``--workdir``/probes/``probe-N.malloc`` (pymalloc's arenas and pools, glibc's
arenas): when ``RssAnon`` grows faster than the live objects, the count of
arenas against the bytes in allocated blocks says whether it is fragmentation.
``--trace`` has the host keep a tracemalloc snapshot at each tenth (slow) to find
what idle sessions retain, and list the cyclic garbage collected just before it
(its kinds and the frames in it: a cycle through a traceback names its code).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from properties.reliability._soak import (
    RSS_TARGET_KIB,
    SoakReport,
    run_soak,
)


def load() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def print_report(report: SoakReport) -> None:
    print(
        f"{'sessions':>9}{'seconds':>9}{'threads':>8}{'fds':>5}"
        f"{'VmRSS KiB':>11}{'RssAnon KiB':>13}{'RssFile KiB':>13}  python threads"
    )
    for s in report.samples:
        names = ", ".join(f"{name} {n}" for name, n in s.thread_names.items())
        print(
            f"{s.sessions:>9}{s.seconds:>9.1f}{s.threads:>8}{s.fds:>5}"
            f"{s.rss_kib:>11}{s.rss_anon_kib:>13}{s.rss_file_kib:>13}  {names}"
        )
    print(
        f"{report.sessions} sessions, {report.attempts} attempts in {report.seconds:.1f} s; "
        f"after warm-up ({report.warmup_sessions} sessions): "
        f"threads {report.thread_slope_per_1000:.2f} and fds {report.fd_slope_per_1000:.2f} "
        f"per 1,000 sessions; RSS per session: RssAnon {report.rss_anon_kib_per_session:.2f} "
        f"KiB (target {RSS_TARGET_KIB:g}), RssFile {report.rss_file_kib_per_session:.2f} KiB, "
        f"VmRSS {report.rss_kib_per_session:.2f} KiB"
    )
    print(
        f"SIGTERM: exit {report.exit_status} in {report.shutdown_seconds:.2f} s "
        f"(deadline {report.shutdown_deadline:g} s); lost {report.lost}, "
        f"duplicates {report.duplicates}, refused {report.refused} "
        f"({report.inline} delivered into their parent run)"
    )
    met = report.rss_anon_kib_per_session < RSS_TARGET_KIB and not report.violations
    print(f"targets met: {'yes' if met else 'no'}")
    for violation in report.violations:
        print(f"VIOLATION: {violation}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--attempts", type=int, default=10, help="attempts per session")
    parser.add_argument("--window", type=int, default=64, help="sessions in flight")
    parser.add_argument("--tick", type=float, default=0.1, help="the host's maintenance tick")
    parser.add_argument("--deadline", type=float, default=4 * 3600.0, help="give up after (s)")
    parser.add_argument("--workdir", type=Path, help="keep the data and probes here")
    parser.add_argument("--trace", action="store_true", help="tracemalloc snapshots (slow)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    load_before = load()
    report = run_soak(
        sessions=args.sessions,
        attempts=args.attempts,
        window=args.window,
        tick=args.tick,
        workdir=args.workdir,
        deadline=args.deadline,
        trace=args.trace,
    )
    if args.json:
        print(msgspec.json.encode(report).decode())
        return 0
    print(f"load average before: {load_before}")
    print(f"allocator: {os.environ.get('PYTHONMALLOC') or 'pymalloc (the default)'}")
    print_report(report)
    print(f"load average after: {load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
