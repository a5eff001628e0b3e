"""``subagents verify``: the properties conformance suite, and with ``--report`` every
reliability run (properties, clock skew, SIGSTOP, crash, hostile inputs, load) at a
profile's budget, in one report.

Exit status: 0 when everything passed, 1 on a failing machine or any violation,
2 for a fixable mistake in the flags (an unknown profile, machine or section).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
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

REPORT_SECTIONS = (
    "properties",
    "clock",
    "sigstop",
    "crash",
    "hostile",
    "corruption",
    "load",
    "soak",
)
"""The sections of ``--report``, in run order, each skippable with ``--skip``."""


STORE_HELP = (
    "memory | lmdb | lmdb-reopen | lmdb-journal | all | postgres | postgres-reopen"
    " | module:factory (repeatable; default memory)"
)
MACHINE_HELP = (
    "fencing | replay | delivery | retention | supervisor | all (repeatable; default all)"
)


def profile_name(flag: str | None) -> str:
    """``--profile`` when given, else ``$HYPOTHESIS_PROFILE``, else ``ci``."""
    return flag or os.environ.get("HYPOTHESIS_PROFILE") or "ci"


def report_profile(flag: str | None, budgets: Sequence[str]) -> str:
    """``--profile``, else ``$HYPOTHESIS_PROFILE`` when it names a report budget, else ``ci``."""
    if flag:
        return flag
    env = os.environ.get("HYPOTHESIS_PROFILE", "ci")
    return env if env in budgets else "ci"


def _suite(profile: str, machines: list[str], stores: list[str]) -> tuple[list[str], list[Any]]:
    """The machine names and store factories the flags name (``all`` expanded)."""
    # The conformance suite needs Hypothesis (a verification dependency) and costs most of a
    # second to import: only `verify` loads it, so every other command starts without it.
    import properties  # noqa: PLC0415

    require_ours("subagents verify", "properties")  # before reaching into its modules
    from properties._runner import SUPERVISOR_MACHINES  # noqa: PLC0415

    if profile not in properties.PROFILES:
        raise CliError(
            f"unknown profile {profile!r}",
            f"use one of: {', '.join(properties.PROFILES)} (--profile, or $HYPOTHESIS_PROFILE)",
        )
    every = [*properties.MACHINES, *SUPERVISOR_MACHINES]
    chosen = machines or ["all"]
    unknown = [m for m in chosen if m not in every and m != "all"]
    if unknown:
        raise CliError(f"unknown machine {unknown[0]!r}", f"use one of: {', '.join(every)}, all")
    names = every if "all" in chosen else list(dict.fromkeys(chosen))
    factories: list[Any] = []
    for spec in stores or ["memory"]:
        try:
            if spec == "all":
                factories.extend(properties.BUILTIN_FACTORIES.values())
            else:
                factories.append(properties.resolve_factory(spec))
        except (ValueError, ImportError, AttributeError) as exc:
            raise CliError(
                f"--store {spec}: {exc}",
                "use --store memory, lmdb, lmdb-reopen, lmdb-journal, all or mod:fn",
            ) from exc
    return names, factories


def _machine_runs(args: argparse.Namespace) -> int:
    """Each machine against each store at the profile: a table, then each failure.

    ``--decisions`` prints the reference model's reading of open contract points
    instead; ``--planted`` runs each machine against its planted bug (exit 1 when
    one is missed); ``--paths`` adds the coverage of each outcome path. With
    ``--json`` the progress goes to stderr and stdout holds one JSON document.
    """
    import properties  # noqa: PLC0415

    require_ours("subagents verify", "properties")  # before reaching into its modules
    from properties._runner import print_paths, run_planted  # noqa: PLC0415

    if args.decisions:
        for decision in properties.DECISIONS:
            sys.stdout.write(f"- {decision}\n")
        return 0
    profile = profile_name(args.profile)
    machines, factories = _suite(profile, list(args.machine or ()), list(args.store or ()))
    if args.planted:
        return run_planted(machines, factories, profile=profile, out=sys.stdout)
    properties.load_profile(profile)
    settings = properties.profile_settings(profile)
    results = []
    started = time.monotonic()
    console = Console(highlight=False, stderr=args.json)
    with Progress(console=console, transient=False) as progress:
        task = progress.add_task("properties", total=len(machines) * len(factories))
        for name in machines:
            for factory in factories:
                progress.update(task, description=f"{name} x {factory.name}")
                results.append(properties.run_machine(name, factory, settings))
                progress.advance(task)
                if not console.is_terminal:  # piped: one line per run instead of a bar
                    console.print(
                        f"  {name} x {factory.name}: {'ok' if results[-1].ok else 'FAIL'}"
                    )
    if args.json:
        runs = [{**dataclasses.asdict(r), "ok": r.ok} for r in results]
        document = {"profile": profile, "runs": runs, "failures": sum(not r.ok for r in results)}
        sys.stdout.write(json.dumps(document) + "\n")
        return 1 if document["failures"] else 0
    if args.paths:
        print_paths(results, sys.stdout)
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
    profile = report_profile(args.profile, profiles)
    if profile not in profiles:
        raise CliError(f"unknown report profile {profile!r}", f"use one of: {', '.join(profiles)}")
    skip = set(args.skip or ())
    unknown = sorted(skip - set(REPORT_SECTIONS))
    if unknown:
        raise CliError(
            f"unknown section {unknown[0]!r}", f"use one of: {', '.join(REPORT_SECTIONS)}"
        )
    if args.store or args.machine or args.planted or args.decisions or args.paths:
        raise CliError(
            "--report runs every machine on the profile's stores",
            "drop --store/--machine/--planted/--decisions/--paths, or run verify without --report",
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
    profile = report_profile(args.profile, tuple(reliability.BUDGETS))
    budget = reliability.BUDGETS[profile]
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
        profile=profile,
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
    """``verify``: SIGTERM and SIGHUP interrupt it as Ctrl-C does (exit 130), so the
    scratch PostgreSQL databases of ``--store postgres`` are dropped either way."""
    require_ours("subagents verify", "properties")  # before reaching into its modules
    from properties._interrupts import termination_interrupts  # noqa: PLC0415

    with termination_interrupts():
        if args.report:
            return _report(args)
        return _machine_runs(args)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    verify = sub.add_parser(
        "verify",
        help="run the properties conformance suite",
        description="The options of `python -m properties`, plus --report (the reliability "
        "harness) and its flags.",
    )
    verify.set_defaults(handler=run)
    verify.add_argument("--store", action="append", help=STORE_HELP)
    verify.add_argument("--machine", action="append", help=MACHINE_HELP)
    verify.add_argument("--profile", help="ci | dev | deep (default: $HYPOTHESIS_PROFILE, else ci)")
    verify.add_argument(
        "--planted",
        action="store_true",
        help="instead, run each machine against its planted-bug store: each must fail",
    )
    verify.add_argument(
        "--paths",
        action="store_true",
        help="print how often each operation outcome was exercised (coverage)",
    )
    verify.add_argument(
        "--decisions", action="store_true", help="print the model's reading of open contract points"
    )
    verify.add_argument(
        "--report",
        action="store_true",
        help="run every reliability run (properties, clock skew, crash, hostile, load) "
        "at the profile's budget and print the figures; exit 1 on any violation",
    )
    verify.add_argument("--seed", type=int, help="with --report: the seed (default 0)")
    verify.add_argument(
        "--json",
        action="store_true",
        help="print one JSON document: the runs, or with --report the report",
    )
    verify.add_argument("--workdir", help="with --report: keep the runs' files here")
    verify.add_argument(
        "--skip", action="append", choices=REPORT_SECTIONS, help="with --report: skip a section"
    )
