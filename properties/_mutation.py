"""The mutation run: how strong are the property machines' oracles?

Each mutant of the catalogue (:mod:`properties._mutation_catalogue`) is applied
to a temporary copy of the tree (``statemachines``, ``storage``, ``actors``,
``properties``; never in place), and the property machines that exercise the
mutated file run on that copy in a fresh interpreter
(:mod:`properties._mutation_worker`, ``PYTHONPATH`` pointing at the copy) under
the ``ci`` Hypothesis profile. A mutant is

- ``killed`` when a machine reports a contract violation;
- ``timeout`` when the run did not end in time (a hang is caught too: CI fails);
- ``error`` when the run itself crashed (the mutated code does not import);
- ``survived`` when every machine passed;
- ``stale`` when its snippet no longer occurs exactly once (the code moved on:
  the catalogue entry must be refreshed; it is not run and not scored).

The score is caught (killed, timeout, error) over scored mutants: every mutant
run, less the survivors the catalogue names as equivalent (they change no
behaviour; each is printed with the reason). Before the mutants, the unmutated
tree runs once with every machine used: a failing baseline would make every
mutant look killed, so it stops the run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TextIO

from ._mutation_catalogue import CATALOGUE, MACHINES_BY_PATH, Mutant
from ._mutation_worker import KILLED

PACKAGES = ("statemachines", "storage", "actors", "properties")
"""What the copy holds: the layers the machines import (``properties`` never imports
``subagents``, tests/test_layering.py)."""
DEFAULT_TIMEOUT = 300.0
"""Seconds one mutant's run may take before it counts as ``timeout``."""
DEFAULT_MIN_SCORE = 0.95
CAUGHT = frozenset({"killed", "timeout", "error"})


@dataclass
class Verdict:
    """What happened to one mutant."""

    id: str
    path: str
    description: str
    status: str  # killed | survived | timeout | error | stale
    seconds: float = 0.0
    by: str = ""
    """The machine and store that killed it, or the last lines of an error."""
    equivalent: str | None = None

    @property
    def scored(self) -> bool:
        return self.status != "stale" and not (self.status == "survived" and self.equivalent)


@dataclass
class Options:
    """How each mutant is run."""

    root: Path
    profile: str = "ci"
    stores: tuple[str, ...] = ("memory",)
    timeout: float = DEFAULT_TIMEOUT
    examples: int | None = None
    niceness: int = 10
    machine_limit: int | None = None
    """Run only the first this many of a mutant's machines (quick checks; not a score)."""


def default_root() -> Path:
    """The tree this ``properties`` package was imported from."""
    return Path(__file__).resolve().parent.parent


def occurrences(root: Path, mutant: Mutant) -> int:
    """How often the mutant's snippet occurs in its file under ``root`` (0 if no file)."""
    path = root / mutant.path
    if not path.is_file():
        return 0
    return path.read_text(encoding="utf-8").count(mutant.original)


def machines_for(mutant: Mutant) -> list[str]:
    """The machines to run: the mutant's own first, then its file's gap machines (they
    reach what the others do not), then the rest of its file's."""
    rest = MACHINES_BY_PATH.get(mutant.path, ())
    gaps = [m for m in rest if m.endswith("-gaps")]
    return list(dict.fromkeys([*mutant.machines, *gaps, *rest]))


def copy_tree(root: Path, dest: Path) -> None:
    """Copy the packages the machines import from ``root`` into ``dest``."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".mypy_cache")
    for package in PACKAGES:
        shutil.copytree(root / package, dest / package, ignore=ignore)


def apply(mutant: Mutant, tree: Path) -> bool:
    """Apply ``mutant`` inside the copy ``tree``; ``False`` (nothing written) when stale."""
    path = tree / mutant.path
    text = path.read_text(encoding="utf-8")
    if text.count(mutant.original) != 1:
        return False
    path.write_text(text.replace(mutant.original, mutant.replacement, 1), encoding="utf-8")
    return True


def _command(machines: Sequence[str], options: Options) -> list[str]:
    cmd = [sys.executable, "-m", "properties._mutation_worker", "--profile", options.profile]
    for machine in machines:
        cmd += ["--machine", machine]
    for store in options.stores:
        cmd += ["--store", store]
    if options.examples is not None:
        cmd += ["--examples", str(options.examples)]
    nice = shutil.which("nice")
    if options.niceness > 0 and nice is not None:
        cmd = [nice, "-n", str(options.niceness), *cmd]
    return cmd


def run_tree(tree: Path, machines: Sequence[str], options: Options) -> tuple[str, str, float]:
    """Run ``machines`` on the copy ``tree``: ``(status, detail, seconds)``."""
    env = {
        **os.environ,
        "PYTHONPATH": str(tree),
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONHASHSEED": "0",
        "HYPOTHESIS_PROFILE": options.profile,
    }
    env.pop("SUBAGENTS_FAULTS", None)
    started = time.monotonic()
    proc = subprocess.Popen(
        _command(machines, options),
        cwd=tree,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=options.timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the run's own process group, started above
        proc.communicate()
        return "timeout", f"no verdict after {options.timeout:.0f}s", time.monotonic() - started
    seconds = time.monotonic() - started
    lines = out.strip().splitlines()
    if proc.returncode == KILLED:
        killer = next((ln for ln in lines if ln.startswith("killed-by ")), "killed-by ?")
        return "killed", killer.removeprefix("killed-by "), seconds
    if proc.returncode == 0:
        return "survived", "; ".join(lines), seconds
    tail = " | ".join((err.strip().splitlines() or ["no output"])[-3:])
    return "error", f"exit {proc.returncode}: {tail}", seconds


def run_mutant(mutant: Mutant, options: Options) -> Verdict:
    """Apply ``mutant`` to a fresh copy of ``options.root`` and run its machines."""
    verdict = Verdict(
        id=mutant.id,
        path=mutant.path,
        description=mutant.description,
        status="stale",
        equivalent=mutant.equivalent,
    )
    with tempfile.TemporaryDirectory(prefix=f"subagents-mutant-{mutant.id[:3]}-") as tmp:
        tree = Path(tmp)
        copy_tree(options.root, tree)
        if not apply(mutant, tree):
            found = occurrences(options.root, mutant)
            verdict.by = f"snippet occurs {found} times in {mutant.path} (expected exactly once)"
            return verdict
        machines = machines_for(mutant)[: options.machine_limit]
        verdict.status, verdict.by, verdict.seconds = run_tree(tree, machines, options)
    return verdict


def baseline(mutants: Sequence[Mutant], options: Options) -> tuple[str, str, float]:
    """Every machine the mutants use, on an unmutated copy."""
    machines = list(dict.fromkeys(m for mutant in mutants for m in machines_for(mutant)))
    with tempfile.TemporaryDirectory(prefix="subagents-mutant-baseline-") as tmp:
        copy_tree(options.root, Path(tmp))
        return run_tree(Path(tmp), machines, options)


def run_mutants(
    mutants: Sequence[Mutant],
    options: Options,
    *,
    jobs: int = 1,
    progress: Callable[[Verdict], None] | None = None,
) -> list[Verdict]:
    """Run every mutant (``jobs`` at a time); verdicts in catalogue order."""

    def one(mutant: Mutant) -> Verdict:
        verdict = run_mutant(mutant, options)
        if progress is not None:
            progress(verdict)
        return verdict

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return list(pool.map(one, mutants))


@dataclass(frozen=True)
class Score:
    caught: int
    scored: int
    survivors: tuple[Verdict, ...]
    equivalent: tuple[Verdict, ...]
    stale: tuple[Verdict, ...]

    @property
    def ratio(self) -> float:
        return self.caught / self.scored if self.scored else 0.0


def score(verdicts: Sequence[Verdict]) -> Score:
    """Caught over scored (equivalent survivors and stale mutants are not scored)."""
    scored = [v for v in verdicts if v.scored]
    return Score(
        caught=sum(v.status in CAUGHT for v in scored),
        scored=len(scored),
        survivors=tuple(v for v in scored if v.status == "survived"),
        equivalent=tuple(v for v in verdicts if v.status == "survived" and v.equivalent),
        stale=tuple(v for v in verdicts if v.status == "stale"),
    )


def _row(v: Verdict) -> str:
    status = "survived*" if v.status == "survived" and v.equivalent else v.status
    by = v.by if v.status != "survived" else ""
    return f"{v.id:<44} {status:<9} {v.seconds:>6.1f}s  {by[:110]}"


def report(verdicts: Sequence[Verdict], profile: str, out: TextIO) -> Score:
    """Print the table, the score, every survivor and every stale mutant."""
    result = score(verdicts)
    print(f"\n{'mutant':<44} {'verdict':<9} {'time':>7}  killed by", file=out)
    for v in verdicts:
        print(_row(v), file=out)
    print(
        f"\nScore ({profile} property profile alone): {result.caught}/{result.scored} caught "
        f"= {100 * result.ratio:.1f}% ({len(result.equivalent)} equivalent survivors and "
        f"{len(result.stale)} stale mutants not scored)",
        file=out,
    )
    for v in result.survivors:
        print(f"SURVIVOR {v.id} ({v.path}): {v.description}", file=out)
    for v in result.equivalent:
        print(f"EQUIVALENT {v.id} ({v.path}): {v.description}; {v.equivalent}", file=out)
    for v in result.stale:
        print(f"STALE {v.id}: {v.by} - refresh this catalogue entry!", file=out)
    return result


def select(only: Sequence[str] | None) -> list[Mutant]:
    """The catalogue, or the mutants whose id is or starts with one of ``only``."""
    if not only:
        return list(CATALOGUE)
    chosen = [m for m in CATALOGUE if any(m.id == o or m.id.startswith(o) for o in only)]
    if not chosen:
        raise SystemExit(f"no mutant matches {list(only)}; see --list")
    return chosen


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m properties.mutation",
        description="Mutation run over storage/_kernel.py, actors/_delivery.py and "
        "actors/_attempt.py: what do the property machines alone catch?",
    )
    parser.add_argument("--profile", default=os.environ.get("HYPOTHESIS_PROFILE", "ci"))
    parser.add_argument("--only", action="append", help="a mutant id or id prefix (repeatable)")
    parser.add_argument("--jobs", type=int, default=1, help="mutants run at once (default 1)")
    parser.add_argument("--json", action="store_true", help="print the verdicts as JSON")
    parser.add_argument("--list", action="store_true", help="list the catalogue and exit")
    parser.add_argument(
        "--store", action="append", help="store factory (repeatable; default memory)"
    )
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT)
    parser.add_argument(
        "--examples", type=int, help="override max_examples (a smoke run; not a score)"
    )
    parser.add_argument("--min-score", type=float, default=DEFAULT_MIN_SCORE)
    parser.add_argument("--no-baseline", action="store_true", help="skip the unmutated run")
    parser.add_argument("--root", type=Path, default=None, help="tree to mutate (default: ours)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None, out: TextIO = sys.stdout) -> int:
    """Entry point of ``python -m properties.mutation``. 0 when the score reaches
    ``--min-score`` and no mutant is stale, 1 otherwise, 2 on a failing baseline."""
    args = parse_args(argv)
    mutants = select(args.only)
    if args.list:
        for m in mutants:
            print(f"{m.id:<44} {m.path:<20} {m.description}", file=out)
        return 0
    options = Options(
        root=(args.root or default_root()).resolve(),
        profile=args.profile,
        stores=tuple(args.store or ["memory"]),
        timeout=args.timeout,
        examples=args.examples,
    )
    started = time.monotonic()
    log = sys.stderr if args.json else out
    if not args.no_baseline:
        status, detail, seconds = baseline(mutants, options)
        print(f"baseline (unmutated): {status} in {seconds:.1f}s {detail[:300]}", file=log)
        if status != "survived":
            print("the unmutated tree fails its machines: no score", file=log)
            return 2

    def progress(v: Verdict) -> None:
        print(f"  {_row(v)}", file=log, flush=True)

    verdicts = run_mutants(mutants, options, jobs=args.jobs, progress=progress)
    if args.json:
        result = score(verdicts)
        payload = {
            "profile": args.profile,
            "caught": result.caught,
            "scored": result.scored,
            "score": result.ratio,
            "verdicts": [asdict(v) for v in verdicts],
        }
        print(json.dumps(payload, indent=2), file=out)
    else:
        result = report(verdicts, args.profile, out)
        print(f"{len(verdicts)} mutants in {time.monotonic() - started:.0f}s", file=out)
    return 0 if result.ratio >= args.min_score and not result.stale else 1
