"""``subagents verify --report``: every reliability run in one report with its figures.

The report gathers six sections, each a :class:`Section` of named figures and
violations: the property machines, the clock-skew cases, a real host process
SIGSTOPped for twice its lease TTL, the SIGKILL crash cycles with the fault
points they fired, the hostile-input corpus and the load run
(:func:`report_runners`, in that order). The process exit status is 0 only
when no section has a violation, and every section enforces its own minimums
("it really happened"): a run that injected nothing is a violation, never a
green report.

:data:`BUDGETS` holds the sizes: ``ci`` is the bounded run CI does on every
change; ``deep`` scales the same runs up for a long run (hours).
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import msgspec
from hypothesis import settings
from rich.console import Console
from rich.table import Table

import properties
from properties._skew import run_clock_cases

from ._corruption import ACCEPTABLE, HOST_PROBE, run_corpus
from ._corruption import summary as corruption_summary
from ._crash import run_crash_cycles
from ._hostile import run_hostile_corpus
from ._load import run_load
from ._sigstop import run_sigstop_cases
from ._soak import soak_section_fields

Figure = int | float | str


class Budget(msgspec.Struct, frozen=True, kw_only=True):
    """How big each run of a profile is."""

    name: str
    min_steps: int
    """Stateful steps every (machine, store) pair must reach, or it is a violation."""
    max_examples: int
    step_count: int
    stores: tuple[str, ...]
    crash_cycles: int
    load_sessions: int
    load_attempts: int
    sigstop_rounds: int = 3


BUDGETS: dict[str, Budget] = {
    "ci": Budget(
        name="ci",
        min_steps=10_000,
        max_examples=300,
        step_count=50,
        stores=("memory", "lmdb"),
        crash_cycles=200,
        load_sessions=32,
        load_attempts=20,
    ),
    "deep": Budget(
        name="deep",
        min_steps=1_000_000,
        max_examples=16_000,
        step_count=80,
        stores=("memory", "lmdb"),
        crash_cycles=10_000,
        load_sessions=64,
        load_attempts=100,
        sigstop_rounds=30,
    ),
}


class Section(msgspec.Struct, frozen=True, kw_only=True):
    """One run's figures (in print order) and its violations; green when none."""

    name: str
    figures: dict[str, Figure]
    violations: tuple[str, ...] = ()
    seconds: float = 0.0
    rows: tuple[tuple[str, ...], ...] = ()
    """Optional detail rows (per machine, per fault point, ...), printed under the section."""
    columns: tuple[str, ...] = ()


class Report(msgspec.Struct, frozen=True, kw_only=True):
    """The whole ``verify --report`` output, also printed as JSON with ``--json``."""

    profile: str
    seed: int
    commit: str
    sections: tuple[Section, ...]
    seconds: float

    @property
    def violations(self) -> tuple[str, ...]:
        return tuple(f"{s.name}: {v}" for s in self.sections for v in s.violations)

    def to_json(self) -> bytes:
        doc = msgspec.to_builtins(self)
        doc["violations"] = list(self.violations)
        doc["reproduce"] = reproduce_command(self.profile, self.seed)
        return msgspec.json.encode(doc)


def reproduce_command(profile: str, seed: int) -> str:
    return f"subagents verify --report --profile {profile} --seed {seed}"


def current_commit(root: Path | None = None) -> str:
    """The checkout's commit (``+dirty`` when it has changes); outside git the one
    recorded when the installed wheel was built, else ``unknown``."""
    where = root or Path(__file__).resolve().parents[2]
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=where,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        # Not a checkout (a non-editable install): the commit the build recorded (setup.py).
        try:
            recorded = Path(__file__).with_name("_build_commit.txt").read_text().strip()
        except OSError:
            recorded = ""
        return recorded or "unknown"
    return head + ("+dirty" if dirty else "")


# -- sections -----------------------------------------------------------------------------------


class PropertyRow(msgspec.Struct, frozen=True, kw_only=True):
    """One (machine, store) run of the conformance suite."""

    machine: str
    store: str
    examples: int
    steps: int
    invariants: int
    operations: int
    seconds: float
    failure: str | None = None
    reproduction: tuple[str, ...] = ()


def properties_section(rows: Sequence[PropertyRow], budget: Budget) -> Section:
    """Property machines: every pair must pass and reach ``budget.min_steps`` steps."""
    violations: list[str] = []
    for r in rows:
        if r.failure is not None:
            detail = "; ".join([r.failure.splitlines()[0][:300], *r.reproduction[:20]])
            violations.append(f"{r.machine} x {r.store} failed: {detail}")
        if r.steps < budget.min_steps:
            violations.append(
                f"{r.machine} x {r.store} ran {r.steps} steps (minimum {budget.min_steps})"
            )
    machines = sorted({r.machine for r in rows})
    if not rows:
        violations.append("no property machine ran")
    return Section(
        name="property machines",
        figures={
            "machines": len(machines),
            "stores": ", ".join(sorted({r.store for r in rows})),
            "examples": sum(r.examples for r in rows),
            "steps": sum(r.steps for r in rows),
            "min steps per machine x store": min((r.steps for r in rows), default=0),
            "store operations": sum(r.operations for r in rows),
            "invariants checked": sum(r.invariants for r in rows),
        },
        violations=tuple(violations),
        seconds=sum(r.seconds for r in rows),
        columns=("machine", "store", "examples", "steps", "invariants", "seconds", "result"),
        rows=tuple(
            (
                r.machine,
                r.store,
                f"{r.examples:,}",
                f"{r.steps:,}",
                f"{r.invariants:,}",
                f"{r.seconds:.1f}",
                "ok" if r.failure is None else "FAIL",
            )
            for r in rows
        ),
    )


def clock_section(report: Any) -> Section:
    """The clock-skew cases (:func:`properties._skew.run_clock_cases`'s report)."""
    cases: Mapping[str, int] = report.cases
    return Section(
        name="clock cases",
        figures={
            "cases": len(cases),
            "checks": sum(cases.values()),
            "invariants checked": report.invariants_checked,
        },
        violations=tuple(report.violations),
        seconds=report.seconds,
        columns=("case", "checks"),
        rows=tuple((name, f"{count:,}") for name, count in cases.items()),
    )


def crash_section(report: Any) -> Section:
    """SIGKILL crash cycles against real host processes, with the fault points fired."""
    kills: Mapping[str, int] = report.kills_by_point
    fired: Mapping[str, int] = report.faults_fired
    replays: Mapping[str, int] = report.replays
    points = sorted(set(kills) | set(fired))
    rows = [("kill at " + p, f"{kills.get(p, 0):,}", f"{fired.get(p, 0):,}") for p in points]
    rows += [("replay: " + name, f"{count:,}", "") for name, count in sorted(replays.items())]
    return Section(
        name="crash runs",
        figures={
            "cycles": report.cycles,
            "epochs": report.epochs,
            "s per cycle": report.seconds_per_cycle,
            "s per cycle, last epoch": (report.epoch_seconds_per_cycle or (0.0,))[-1],
            "kills": report.kills,
            "restarts": report.restarts,
            "attempts accepted": report.attempts_accepted,
            "faults fired": sum(fired.values()),
            "invariants checked": report.invariants_checked,
            "consumer invariant checks": report.consumer_checks,
            "consumer invariant rounds": report.consumer_rounds,
        },
        violations=tuple(report.violations),
        seconds=report.seconds,
        columns=("point / path", "kills or times", "faults fired"),
        rows=tuple(rows),
    )


def sigstop_section(report: Any) -> Section:
    """A real host process SIGSTOPped for twice its lease TTL, then resumed."""
    return Section(
        name="sigstop",
        figures={
            "rounds": report.rounds,
            "lease ttl s": report.lease_ttl,
            "paused s": report.paused_seconds_total,
            "late writes refused": report.refused_writes,
            "reconciled lost": report.reconciled,
            "reconciled by a rival": report.rival_reconciles,
            "invariants checked": report.invariants_checked,
        },
        violations=tuple(report.violations),
        seconds=report.seconds,
    )


def hostile_section(report: Any) -> Section:
    families: Mapping[str, int] = report.cases_by_family
    return Section(
        name="hostile inputs",
        figures={"tried": report.tried, "families": len(families)},
        violations=tuple(report.violations),
        seconds=report.seconds,
        columns=("family", "cases"),
        rows=tuple((name, f"{count:,}") for name, count in sorted(families.items())),
    )


def load_section(report: Any) -> Section:
    return Section(
        name="load",
        figures={
            "sessions": report.sessions,
            "attempts": report.attempts,
            "completed": report.completed,
            "delivered": report.delivered,
            "kills": report.kills,
            "lost": report.lost,
            "duplicates": report.duplicates,
        },
        violations=tuple(report.violations),
        seconds=report.seconds,
    )


MIN_CORRUPTION_CASES = 40
"""The corpus must try at least this many damaged stores, or the section is a violation."""


def corruption_section(outcomes: Sequence[Any], seconds: float) -> Section:
    """Damaged LMDB data directories, each opened by a fresh process as a host does:
    refused with a typed error, served whole, or damage surfaced as ``CorruptRecord``;
    any signal death, traceback or silent loss is a violation."""
    verdicts = corruption_summary(outcomes)
    violations = [
        f"{o.case}: {o.verdict} ({o.detail})" for o in outcomes if o.verdict not in ACCEPTABLE
    ]
    if len(outcomes) < MIN_CORRUPTION_CASES:
        violations.append(f"only {len(outcomes)} cases, want at least {MIN_CORRUPTION_CASES}")
    categories: dict[str, int] = {}
    for o in outcomes:
        categories[o.category] = categories.get(o.category, 0) + 1
    return Section(
        name="corruption",
        figures={"cases": len(outcomes), **verdicts},
        violations=tuple(violations),
        seconds=seconds,
        columns=("category", "cases"),
        rows=tuple((name, f"{count:,}") for name, count in sorted(categories.items())),
    )


def failed_section(name: str, exc: BaseException) -> Section:
    """A run that raised instead of reporting: always a violation, never a crash of the report."""
    return Section(name=name, figures={}, violations=(f"raised {type(exc).__name__}: {exc}",))


# -- running ------------------------------------------------------------------------------------


SectionRunner = Callable[[], Section]


def run_sections(
    runners: Iterable[tuple[str, SectionRunner]],
    progress: Callable[[str], None] | None = None,
) -> list[Section]:
    """Run each section in turn; one that raises becomes a violation and the rest still run."""
    sections = []
    for name, runner in runners:
        if progress is not None:
            progress(f"running {name} ...")
        started = time.monotonic()
        try:
            section = runner()
        except Exception as exc:  # a broken run is reported as a violation, not fatal
            section = failed_section(name, exc)
        if not section.seconds:
            section = msgspec.structs.replace(section, seconds=time.monotonic() - started)
        sections.append(section)
        if progress is not None:
            state = "ok" if not section.violations else f"{len(section.violations)} violations"
            progress(f"  {name}: {state} ({section.seconds:.1f}s)")
    return sections


def harness_runners(budget: Budget, seed: int, workdir: Path) -> list[tuple[str, SectionRunner]]:
    """The sections that drive real hosts or fresh processes: ``sigstop``, ``crash``,
    ``hostile``, ``corruption``, ``load``, ``soak``."""

    def sigstop() -> Section:
        where = workdir / "sigstop"
        where.mkdir(parents=True, exist_ok=True)
        return sigstop_section(
            run_sigstop_cases(seed=seed, workdir=where, rounds=budget.sigstop_rounds)
        )

    def crash() -> Section:
        where = workdir / "crash"
        where.mkdir(parents=True, exist_ok=True)
        return crash_section(run_crash_cycles(cycles=budget.crash_cycles, seed=seed, workdir=where))

    def hostile() -> Section:
        where = workdir / "hostile"
        where.mkdir(parents=True, exist_ok=True)
        return hostile_section(run_hostile_corpus(workdir=where))

    def load() -> Section:
        where = workdir / "load"
        where.mkdir(parents=True, exist_ok=True)
        return load_section(
            run_load(
                sessions=budget.load_sessions,
                attempts_per_session=budget.load_attempts,
                seed=seed,
                workdir=where,
            )
        )

    def corruption() -> Section:
        where = workdir / "corruption"
        where.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        outcomes = run_corpus(where, probe=HOST_PROBE, seed=seed)
        return corruption_section(outcomes, time.monotonic() - started)

    def soak() -> Section:
        return Section(**soak_section_fields(budget.name, workdir / "soak"))

    return [
        ("sigstop", sigstop),
        ("crash", crash),
        ("hostile", hostile),
        ("corruption", corruption),
        ("load", load),
        ("soak", soak),
    ]


def property_rows(
    budget: Budget, progress: Callable[[str], None] | None = None
) -> list[PropertyRow]:
    """Every property machine (and the supervisor machine) on each of ``budget.stores``,
    at the budget's examples and steps; ``progress`` hears one line per pair."""
    properties.load_profile("ci" if budget.name == "ci" else "deep")
    hyp = settings(
        properties.profile_settings(),
        max_examples=budget.max_examples,
        stateful_step_count=budget.step_count,
    )
    rows = []
    for name in [*properties.MACHINES, "supervisor"]:
        for store in budget.stores:
            r = properties.run_machine(name, properties.resolve_factory(store), hyp)
            if progress is not None:
                progress(f"  {name} x {store}: {r.steps:,} steps, {r.seconds:.1f}s")
            rows.append(
                PropertyRow(
                    machine=r.machine,
                    store=r.store,
                    examples=r.examples,
                    steps=r.steps,
                    invariants=r.invariants,
                    operations=r.operations,
                    seconds=r.seconds,
                    failure=r.failure,
                    reproduction=tuple(r.reproduction),
                )
            )
    return rows


def report_runners(
    budget: Budget, seed: int, workdir: Path, progress: Callable[[str], None] | None = None
) -> list[tuple[str, SectionRunner]]:
    """Every section of the report, named as ``verify --skip`` names them, in run order:
    ``properties`` and ``clock``, then :func:`harness_runners`."""

    def machines() -> Section:
        return properties_section(property_rows(budget, progress), budget)

    def clock() -> Section:
        return clock_section(run_clock_cases(seed=seed))

    return [("properties", machines), ("clock", clock), *harness_runners(budget, seed, workdir)]


# -- printing -----------------------------------------------------------------------------------


def _fmt(value: Figure) -> str:
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.2f}"
    return value


def print_report(report: Report, console: Console) -> None:
    """The human form: a summary table, each section's detail rows, then the verdict."""
    summary = Table(
        title=f"subagents verify --report: profile {report.profile}, seed {report.seed}, "
        f"commit {report.commit}"
    )
    for column in ("section", "figures", "violations", "seconds"):
        summary.add_column(column)
    for s in report.sections:
        figures = ", ".join(f"{k} {_fmt(v)}" for k, v in s.figures.items())
        summary.add_row(s.name, figures, str(len(s.violations)), f"{s.seconds:.1f}")
    console.print(summary)
    for s in report.sections:
        if not s.rows:
            continue
        detail = Table(title=s.name)
        for column in s.columns:
            detail.add_column(column)
        for row in s.rows:
            detail.add_row(*row)
        console.print(detail)
    invariants = sum(
        int(v) for s in report.sections for k, v in s.figures.items() if k == "invariants checked"
    )
    console.print(f"invariants checked: {invariants:,}", highlight=False)
    violations = report.violations
    console.print(f"violations: {len(violations)}", highlight=False)
    for v in violations:
        console.print(f"  {v}", markup=False, highlight=False)
    console.print(
        f"reproduce: {reproduce_command(report.profile, report.seed)} (commit {report.commit}); "
        f"{report.seconds:.0f}s in all",
        markup=False,
        highlight=False,
    )


def default_seed() -> int:
    """``$SUBAGENTS_VERIFY_SEED`` when set, else 0 (CI replays the same runs every time)."""
    raw = os.environ.get("SUBAGENTS_VERIFY_SEED", "0")
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"SUBAGENTS_VERIFY_SEED must be an integer, not {raw!r}") from None
