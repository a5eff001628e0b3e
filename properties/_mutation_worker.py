"""One mutant's test run: ``python -m properties._mutation_worker --machine NAME ...``.

The mutation driver (:mod:`properties._mutation`) starts this module in a fresh
interpreter whose ``sys.path`` begins with a mutated copy of the tree. It runs
the named property machines in order under a Hypothesis profile (``ci`` by
default) against the named stores and stops at the first failure. Shrinking is
skipped: the verdict (does any example fail?) is the same, a shrunk
reproduction is not needed to score a mutant, and shrinking a bug found late
can take minutes.

Exit status: 0 every machine passed (the mutant survived); :data:`KILLED` a
machine failed (the first line of its failure goes to stdout as
``killed-by <machine> x <store>: <failure>``); anything else is an error of
the run itself. The process ends with ``os._exit`` so an actor thread a mutant
left running cannot keep it alive.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from hypothesis import Phase, settings, stateful

from ._factories import resolve_factory
from ._profiles import load_profile, profile_settings

KILLED = 3
"""Exit status of a run in which a machine found a contract violation."""

GAP_MACHINES: dict[str, str] = {
    "fencing-gaps": "properties._fencing_gaps:fencing_gaps_machine",
    "delivery-gaps": "properties._delivery_gaps:delivery_gaps_machine",
    "retention-gaps": "properties._index_audit:retention_gaps_machine",
    "supervisor-gaps": "properties._supervisor_gaps:supervisor_gaps_machine",
}
"""Machines added to close gaps the mutation run found (``module:builder``), beside
the registered ones of ``python -m properties``; each runs in CI from tests/properties."""


def builder(name: str) -> Callable[[Any], type[Any]]:
    """The machine builder registered as ``name`` (a function of a store factory)."""
    from ._runner import MACHINES, SUPERVISOR_MACHINES  # noqa: PLC0415 - loads every machine

    if name in MACHINES:
        return MACHINES[name]
    if name in SUPERVISOR_MACHINES:
        return SUPERVISOR_MACHINES[name]
    module, _, attr = GAP_MACHINES[name].partition(":")
    found: Callable[[Any], type[Any]] = getattr(importlib.import_module(module), attr)
    return found


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m properties._mutation_worker")
    parser.add_argument("--machine", action="append", required=True)
    parser.add_argument("--store", action="append", default=None)
    parser.add_argument("--profile", default="ci")
    parser.add_argument("--examples", type=int, default=None)
    return parser.parse_args(argv)


def run(argv: Sequence[str] | None = None) -> int:
    """Run the machines; the exit status described in the module docstring."""
    args = _parse(argv)
    # Typed here: some Hypothesis releases leave it unannotated (mypy's no-untyped-call).
    run_state_machine_as_test: Callable[..., None] = stateful.run_state_machine_as_test
    load_profile(args.profile)
    budget = settings(
        profile_settings(args.profile), phases=[Phase.explicit, Phase.reuse, Phase.generate]
    )
    if args.examples is not None:
        budget = settings(budget, max_examples=args.examples)
    for machine in args.machine:
        for store in args.store or ["memory"]:
            cls = builder(machine)(resolve_factory(store))
            started = time.monotonic()
            failure: str | None = None
            try:
                run_state_machine_as_test(cls, settings=budget)
            except Exception as exc:
                failure = f"{type(exc).__name__}: {exc}"
            examples = getattr(getattr(cls, "stats", None), "examples", 0)
            line = f"{machine} x {store}: {examples} examples, {time.monotonic() - started:.1f}s"
            if failure is not None:
                first = (failure.strip().splitlines() or ["?"])[0][:400]
                print(f"killed-by {line}: {first}", flush=True)
                return KILLED
            print(f"passed {line}", flush=True)
    return 0


if __name__ == "__main__":
    try:
        code = run()
    except BaseException as exc:
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        code = 2
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
