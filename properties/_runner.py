"""Run the conformance suite: every machine against every store, with a summary.

``python -m properties`` calls :func:`main`. Each (machine, store) pair runs
with :func:`hypothesis.stateful.run_state_machine_as_test` under the chosen
profile; progress is printed as each pair finishes. A failing pair shows the
contract violation and the shrunk reproduction Hypothesis reports (captured
from its reporter), and the process exits non-zero.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TextIO

from hypothesis import settings, stateful
from hypothesis.reporting import with_reporter

from ._consumers import consumer_machine
from ._delivery import delivery_machine
from ._factories import BUILTIN_FACTORIES, StoreFactory, resolve_factory
from ._fencing import fencing_machine
from ._harness import ContractMachine
from ._planted import PLANTED, planted
from ._profiles import PROFILES, load_profile, profile_settings
from ._reference import DECISIONS
from ._replay import replay_machine
from ._retention import retention_machine
from ._supervisor import SUPERVISOR_PLANTED, SupervisorMachine, supervisor_machine

# Typed here: some Hypothesis releases leave it unannotated (mypy's no-untyped-call).
_run_state_machine_as_test: Callable[..., None] = stateful.run_state_machine_as_test

MachineBuilder = Callable[[StoreFactory], type[ContractMachine]]

MACHINES: dict[str, MachineBuilder] = {
    "fencing": fencing_machine,
    "replay": replay_machine,
    "delivery": delivery_machine,
    "consumers": consumer_machine,
    "retention": retention_machine,
}
"""Every property machine by name, each a function of a store factory."""

# -- the supervisor machine (actors/ over a store) --------------------------------------------
# Registered apart from the store machines above (each of those has its own planted store bug
# in PLANTED); it runs on the same factories and joins ``--machine all``.
SUPERVISOR_MACHINES: dict[str, Callable[[StoreFactory], type[SupervisorMachine]]] = {
    "supervisor": supervisor_machine,
}
ALL_PLANTED = {**PLANTED, "supervisor": SUPERVISOR_PLANTED}


@dataclass
class RunResult:
    """The outcome of one machine against one store."""

    machine: str
    store: str
    examples: int = 0
    steps: int = 0
    invariants: int = 0
    operations: int = 0
    refusals: int = 0
    consumer_deaths: int = 0
    """Consumer runs holding results that failed, were cancelled or lost their lease."""
    seconds: float = 0.0
    failure: str | None = None
    reproduction: list[str] = field(default_factory=list)
    paths: dict[str, int] = field(default_factory=dict)
    """Coverage: how often each (operation, outcome, reason) was exercised."""

    @property
    def ok(self) -> bool:
        return self.failure is None


def run_machine(
    name: str, factory: StoreFactory, hypothesis_settings: settings | None = None
) -> RunResult:
    """Run machine ``name`` against ``factory``; never raises for a failing store."""
    cls = MACHINES[name](factory) if name in MACHINES else SUPERVISOR_MACHINES[name](factory)
    result = RunResult(machine=name, store=factory.name)
    report: list[str] = []
    started = time.monotonic()
    try:
        with with_reporter(lambda value: report.append(str(value))):
            _run_state_machine_as_test(cls, settings=hypothesis_settings or profile_settings())
    except KeyboardInterrupt:
        raise
    except BaseException as exc:
        result.failure = _describe(exc)
        # Recent Hypothesis versions attach the shrunk steps to the exception as notes.
        report.extend(getattr(exc, "__notes__", []))
    result.seconds = time.monotonic() - started
    stats = cls.stats
    result.examples = stats.examples
    result.steps = stats.steps
    result.invariants = stats.invariants
    result.operations = stats.operations
    result.refusals = stats.refusals
    result.consumer_deaths = stats.consumer_deaths
    result.paths = dict(stats.paths)
    result.reproduction = [line for line in report if line.strip()]
    return result


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        return "\n".join(_describe(e) for e in exc.exceptions)
    return f"{type(exc).__name__}: {exc}"


def _line(r: RunResult) -> str:
    status = "ok  " if r.ok else "FAIL"
    deaths = f" {r.consumer_deaths:>5} consumer deaths" if r.consumer_deaths else ""
    return (
        f"  {r.machine:<10} x {r.store:<28} {status} {r.examples:>5} examples "
        f"{r.steps:>6} steps {r.operations:>7} ops {r.invariants:>8} invariant checks "
        f"{r.seconds:>6.1f}s{deaths}"
    )


def run_suite(
    machines: Sequence[str],
    factories: Sequence[StoreFactory],
    *,
    profile: str = "ci",
    out: TextIO = sys.stdout,
) -> list[RunResult]:
    """Run every machine against every factory, printing progress to ``out``."""
    load_profile(profile)
    hyp = profile_settings(profile)
    print(
        f"properties: profile {profile} ({hyp.max_examples} examples x "
        f"{hyp.stateful_step_count} steps), stores {', '.join(f.name for f in factories)}, "
        f"machines {', '.join(machines)}; LMDB sync "
        f"{'on (durable commits)' if PROFILES[profile].lmdb_sync else 'off (speed; same logic)'}",
        file=out,
        flush=True,
    )
    results = []
    for name in machines:
        for factory in factories:
            r = run_machine(name, factory, hyp)
            results.append(r)
            print(_line(r), file=out, flush=True)
    return results


def summarize(results: Sequence[RunResult], seconds: float, out: TextIO = sys.stdout) -> None:
    failed = [r for r in results if not r.ok]
    machines = sorted({r.machine for r in results})
    stores = sorted({r.store for r in results})
    print(
        f"\nSummary: {len(results)} runs ({len(machines)} machines x {len(stores)} stores), "
        f"{sum(r.examples for r in results)} examples, {sum(r.steps for r in results)} steps, "
        f"{sum(r.operations for r in results)} store operations "
        f"({sum(r.refusals for r in results)} predicted refusals), "
        f"{sum(r.invariants for r in results)} invariant checks, "
        f"{len(failed)} failures, {seconds:.1f}s",
        file=out,
    )
    for r in failed:
        print(f"\nFAILURE {r.machine} x {r.store}:\n{r.failure}", file=out)
        if r.reproduction:
            print("Shrunk reproduction (as Hypothesis reports it):", file=out)
            for line in r.reproduction:
                print("    " + line.replace("\n", "\n    "), file=out)


def run_planted(
    machines: Sequence[str],
    factories: Sequence[StoreFactory],
    *,
    profile: str = "ci",
    out: TextIO = sys.stdout,
) -> int:
    """Run each machine against its planted bug on each store; 0 only if every bug is caught."""
    load_profile(profile)
    missed = 0
    for name in machines:
        bug = ALL_PLANTED[name]
        for factory in factories:
            r = run_machine(name, planted(factory, bug))
            verdict = "caught" if not r.ok else "MISSED"
            missed += r.ok
            print(
                f"{verdict}: {name} x {r.store} ({r.examples} examples, {r.seconds:.1f}s)", file=out
            )
            if r.failure:
                print("  " + r.failure.splitlines()[0][:300], file=out)
                for line in r.reproduction:
                    print("    " + line.replace("\n", "\n    "), file=out)
    return 1 if missed else 0


def print_paths(results: Sequence[RunResult], out: TextIO = sys.stdout) -> None:
    """Per machine (summed over stores): every exercised outcome path and its count."""
    by_machine: dict[str, dict[str, int]] = {}
    for r in results:
        paths = by_machine.setdefault(r.machine, {})
        for path, count in r.paths.items():
            paths[path] = paths.get(path, 0) + count
    for machine, paths in by_machine.items():
        print(f"\nCoverage of {machine} ({len(paths)} outcome paths):", file=out)
        for path, count in sorted(paths.items()):
            print(f"  {count:>7}  {path}", file=out)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m properties",
        description="Hypothesis conformance suite for SessionStore implementations.",
    )
    parser.add_argument(
        "--store",
        action="append",
        help=(
            "memory | lmdb | lmdb-reopen | lmdb-journal | all | postgres | postgres-reopen"
            " | module:factory (repeatable; default all: the four embedded stores)"
        ),
    )
    default_profile = os.environ.get("HYPOTHESIS_PROFILE", "ci")
    parser.add_argument(
        "--profile",
        choices=sorted(PROFILES),
        default=default_profile if default_profile in PROFILES else "ci",
        help="Hypothesis profile (default: $HYPOTHESIS_PROFILE, else ci)",
    )
    parser.add_argument(
        "--machine",
        action="append",
        choices=[*MACHINES, *SUPERVISOR_MACHINES, "all"],
        help="machine to run (repeatable; default all)",
    )
    parser.add_argument(
        "--planted",
        action="store_true",
        help="instead, run each machine against its planted-bug store: each must fail",
    )
    parser.add_argument(
        "--paths",
        action="store_true",
        help="print how often each operation outcome was exercised (coverage)",
    )
    parser.add_argument(
        "--decisions", action="store_true", help="print the model's reading of open contract points"
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None, out: TextIO = sys.stdout) -> int:
    """Entry point of ``python -m properties``; returns the exit code."""
    args = parse_args(argv)
    if args.decisions:
        for decision in DECISIONS:
            print(f"- {decision}", file=out)
        return 0
    stores: list[str] = args.store or ["all"]
    factories: list[StoreFactory] = []
    for spec in stores:
        if spec == "all":
            factories.extend(BUILTIN_FACTORIES.values())
        else:
            try:
                factories.append(resolve_factory(spec))
            except (ValueError, ImportError, AttributeError) as exc:
                print(f"error: --store {spec}: {exc}", file=sys.stderr)
                return 2
    chosen: list[str] = args.machine or ["all"]
    every = [*MACHINES, *SUPERVISOR_MACHINES]
    machines = every if "all" in chosen else list(dict.fromkeys(chosen))
    started = time.monotonic()
    if args.planted:
        return run_planted(machines, factories, profile=args.profile, out=out)
    results = run_suite(machines, factories, profile=args.profile, out=out)
    if args.paths:
        print_paths(results, out)
    summarize(results, time.monotonic() - started, out)
    return 0 if all(r.ok for r in results) else 1
