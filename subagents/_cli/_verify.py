"""``subagents verify``: the properties conformance suite, and with ``--report`` every
reliability run (properties, clock skew, SIGSTOP, crash, hostile inputs, load) at a
profile's budget, in one report.

Exit status: 0 when everything passed, 1 on a failing machine or any violation,
2 for a fixable mistake in the flags (an unknown profile, machine or section).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from statemachines._guard import require_ours

from ._common import CliError

REPORT_SECTIONS = ("properties", "clock", "sigstop", "crash", "hostile", "corruption", "load")
"""The sections of ``--report``, in run order, each skippable with ``--skip``."""


def _machine_runs(profile: str, machines: list[str], stores: list[str]) -> int:
    """Each machine against each store at ``profile``: a table, then each failure."""
    # The conformance suite needs Hypothesis (a verification dependency) and costs most of a
    # second to import: only `verify` loads it, so every other command starts without it.
    import properties  # noqa: PLC0415

    require_ours("subagents verify", "properties")
    if profile not in properties.PROFILES:
        raise CliError(
            f"unknown profile {profile!r}", f"use one of: {', '.join(properties.PROFILES)}"
        )
    machines = machines or list(properties.MACHINES)
    unknown = [m for m in machines if m not in properties.MACHINES]
    if unknown:
        raise CliError(
            f"unknown machine {unknown[0]!r}", f"use one of: {', '.join(properties.MACHINES)}"
        )
    try:
        factories = [properties.resolve_factory(spec) for spec in (stores or ["memory"])]
    except (ValueError, ImportError, AttributeError) as exc:
        raise CliError(str(exc), "use --store memory, lmdb, lmdb-reopen or module:factory") from exc
    properties.load_profile(profile)
    settings = properties.profile_settings(profile)
    results = []
    started = time.monotonic()
    console = Console(highlight=False)
    with Progress(console=console, transient=False) as progress:
        task = progress.add_task("properties", total=len(machines) * len(factories))
        for name in machines:
            for factory in factories:
                progress.update(task, description=f"{name} x {factory.name}")
                results.append(properties.run_machine(name, factory, settings))
                progress.advance(task)
    return _print_machine_runs(console, profile, results, time.monotonic() - started)


def _print_machine_runs(console: Console, profile: str, results: list[Any], seconds: float) -> int:
    table = Table(title=f"properties: profile {profile}")
    for column in ("machine", "store", "result", "examples", "steps", "ops", "seconds"):
        table.add_column(column)
    for r in results:
        table.add_row(
            r.machine,
            r.store,
            "[green]ok[/]" if r.ok else "[red]FAIL[/]",
            str(r.examples),
            str(r.steps),
            str(r.operations),
            f"{r.seconds:.1f}",
        )
    console.print(table)
    failed = [r for r in results if not r.ok]
    console.print(f"{len(results)} runs, {len(failed)} failures, {seconds:.1f}s", highlight=False)
    for r in failed:
        console.print(f"\n[red]FAILURE[/] {r.machine} x {r.store}:\n{r.failure}")
        for line in r.reproduction:
            console.print("    " + line, markup=False)
    return 1 if failed else 0


def _check_report_flags(args: argparse.Namespace, profiles: Sequence[str]) -> set[str]:
    """The sections to skip, once the flags are known to make sense with ``--report``."""
    if args.profile not in profiles:
        raise CliError(
            f"unknown report profile {args.profile!r}", f"use one of: {', '.join(profiles)}"
        )
    skip = set(args.skip or ())
    unknown = sorted(skip - set(REPORT_SECTIONS))
    if unknown:
        raise CliError(
            f"unknown section {unknown[0]!r}", f"use one of: {', '.join(REPORT_SECTIONS)}"
        )
    if args.store or args.machine:
        raise CliError(
            "--report runs every machine on the profile's stores",
            "drop --store/--machine, or run verify without --report",
        )
    if skip == set(REPORT_SECTIONS):
        raise CliError("every section is skipped", "skip fewer sections")
    return skip


def _report(args: argparse.Namespace) -> int:
    """Every reliability run at the profile's budget, one report, exit 1 on any violation."""
    # The harness needs Hypothesis and drives real host processes; like the suite it is
    # loaded only by `verify` (see _machine_runs).
    from properties import reliability  # noqa: PLC0415

    require_ours("subagents verify", "properties")

    skip = _check_report_flags(args, tuple(reliability.BUDGETS))
    budget = reliability.BUDGETS[args.profile]
    try:
        seed = args.seed if args.seed is not None else reliability.default_seed()
    except ValueError as exc:
        raise CliError(str(exc), "export an integer, or pass --seed N") from exc
    # Status lines go to stderr so `--json` keeps stdout to the one JSON document.
    err = Console(stderr=True, highlight=False)
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        if args.workdir is not None:
            workdir = Path(args.workdir)
            workdir.mkdir(parents=True, exist_ok=True)
        else:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="verify-")))
        runners = reliability.report_runners(budget, seed, workdir, progress=err.print)
        sections = reliability.run_sections(
            [(name, run) for name, run in runners if name not in skip], progress=err.print
        )
    report = reliability.Report(
        profile=args.profile,
        seed=seed,
        commit=reliability.current_commit(),
        sections=tuple(sections),
        seconds=time.monotonic() - started,
    )
    if args.json:
        sys.stdout.write(report.to_json().decode() + "\n")
    else:
        # Wide enough for the figures when stdout is a CI log rather than a terminal.
        width = None if sys.stdout.isatty() else 132
        reliability.print_report(report, Console(highlight=False, width=width))
    return 1 if report.violations else 0


def run(args: argparse.Namespace) -> int:
    if args.report:
        return _report(args)
    return _machine_runs(args.profile, list(args.machine or ()), list(args.store or ()))


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    verify = sub.add_parser("verify", help="run the properties conformance suite")
    verify.set_defaults(handler=run)
    verify.add_argument("--store", action="append", help="memory | lmdb | lmdb-reopen | mod:fn")
    verify.add_argument("--machine", action="append", help="machine name (repeatable)")
    verify.add_argument("--profile", default="ci", help="ci | deep")
    verify.add_argument(
        "--report",
        action="store_true",
        help="run every reliability run (properties, clock skew, crash, hostile, load) "
        "at the profile's budget and print the figures; exit 1 on any violation",
    )
    verify.add_argument("--seed", type=int, help="with --report: the seed (default 0)")
    verify.add_argument("--json", action="store_true", help="with --report: print one JSON")
    verify.add_argument("--workdir", help="with --report: keep the runs' files here")
    verify.add_argument(
        "--skip", action="append", choices=REPORT_SECTIONS, help="with --report: skip a section"
    )
