"""``subagents verify --report``: figures, violations and the minimums that make a run count."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import msgspec
from rich.console import Console

from properties.reliability import _report as rep
from properties.reliability._corruption import Outcome
from subagents._cli._verify import REPORT_SECTIONS

CI = rep.BUDGETS["ci"]


def _row(**overrides: object) -> rep.PropertyRow:
    fields: dict[str, object] = {
        "machine": "fencing",
        "store": "memory",
        "examples": 300,
        "steps": CI.min_steps,
        "invariants": 50_000,
        "operations": 9_000,
        "seconds": 1.0,
    }
    fields.update(overrides)
    return msgspec.convert(fields, rep.PropertyRow)


def test_the_ci_and_deep_budgets_run_at_least_the_required_sizes() -> None:
    assert CI.min_steps >= 10_000
    assert CI.crash_cycles >= 200
    deep = rep.BUDGETS["deep"]
    assert deep.min_steps >= 1_000_000
    assert deep.crash_cycles >= 10_000
    assert (deep.load_sessions, deep.load_attempts) == (64, 100)


def test_a_property_run_at_the_minimum_steps_is_green() -> None:
    section = rep.properties_section([_row(), _row(store="lmdb")], CI)
    assert section.violations == ()
    assert section.figures["steps"] == 2 * CI.min_steps
    assert section.figures["invariants checked"] == 100_000


def test_a_property_run_below_the_minimum_steps_is_a_violation() -> None:
    section = rep.properties_section([_row(steps=CI.min_steps - 1)], CI)
    assert section.violations == (
        f"fencing x memory ran {CI.min_steps - 1} steps (minimum {CI.min_steps})",
    )


def test_a_failing_machine_is_a_violation_with_its_reproduction() -> None:
    row = _row(failure="ContractViolation: two terminals\nmore", reproduction=("state.accept()",))
    (violation,) = rep.properties_section([row], CI).violations
    assert "two terminals" in violation
    assert "state.accept()" in violation
    assert "more" not in violation


def test_no_property_machine_at_all_is_a_violation() -> None:
    assert rep.properties_section([], CI).violations == ("no property machine ran",)


def test_a_section_that_raises_becomes_a_violation_and_the_rest_still_run() -> None:
    def broken() -> rep.Section:
        raise RuntimeError("host would not start")

    def fine() -> rep.Section:
        return rep.Section(name="load", figures={"lost": 0})

    sections = rep.run_sections([("crash", broken), ("load", fine)])
    assert [s.name for s in sections] == ["crash", "load"]
    assert sections[0].violations == ("raised RuntimeError: host would not start",)
    assert sections[1].violations == ()


def _report(*sections: rep.Section) -> rep.Report:
    return rep.Report(profile="ci", seed=7, commit="abc123", sections=sections, seconds=1.0)


def test_the_json_form_holds_every_figure_the_violations_and_how_to_reproduce() -> None:
    report = _report(
        rep.Section(name="load", figures={"lost": 0, "duplicates": 0}),
        rep.Section(name="crash runs", figures={"kills": 3}, violations=("fired 0 times",)),
    )
    doc = json.loads(report.to_json())
    assert doc["sections"][0]["figures"] == {"lost": 0, "duplicates": 0}
    assert doc["violations"] == ["crash runs: fired 0 times"]
    assert doc["reproduce"] == "subagents verify --report --profile ci --seed 7"
    assert doc["commit"] == "abc123"


def test_the_printed_report_names_seed_commit_invariants_and_violations() -> None:
    out = io.StringIO()
    report = _report(
        rep.Section(name="clock cases", figures={"invariants checked": 12}),
        rep.Section(name="load", figures={"invariants checked": 30}, violations=("lost 1",)),
    )
    rep.print_report(report, Console(file=out, width=200, highlight=False))
    text = out.getvalue()
    assert "seed 7" in text
    assert "commit abc123" in text
    assert "invariants checked: 42" in text
    assert "violations: 1" in text
    assert "load: lost 1" in text


def test_the_commit_is_unknown_outside_a_git_checkout(tmp_path: Path) -> None:
    assert rep.current_commit(tmp_path) == "unknown"


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "subagents._cli", "verify", "--report", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )


def test_the_cli_refuses_to_skip_every_section() -> None:
    skips = [a for s in REPORT_SECTIONS for a in ("--skip", s)]
    proc = _cli(*skips)
    assert proc.returncode == 2
    assert "every section is skipped" in proc.stderr


def test_the_cli_refuses_a_store_with_report() -> None:
    proc = _cli("--store", "memory")
    assert proc.returncode == 2
    assert "--report runs every machine" in proc.stderr


def test_every_harness_section_can_be_skipped_by_name(tmp_path: Path) -> None:
    names = [name for name, _ in rep.harness_runners(CI, 0, tmp_path)]
    assert names == ["sigstop", "crash", "hostile", "corruption", "load", "soak"]
    assert tuple(name for name, _ in rep.report_runners(CI, 0, tmp_path)) == REPORT_SECTIONS
    assert CI.sigstop_rounds >= 3


def test_a_seed_in_the_environment_that_is_not_an_integer_is_a_readable_error() -> None:
    proc = _cli("--skip", "properties", env={**os.environ, "SUBAGENTS_VERIFY_SEED": "abc"})
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "SUBAGENTS_VERIFY_SEED must be an integer, not 'abc'" in proc.stderr


def _outcomes(count: int, *bad: str) -> list[Outcome]:
    good = [
        Outcome(case=f"case {n}", category="truncated", verdict="refused") for n in range(count)
    ]
    return good + [Outcome(case=f"bad {v}", category="data bit flip", verdict=v) for v in bad]


def test_the_corruption_section_is_green_only_for_refused_whole_or_surfaced_cases() -> None:
    green = rep.corruption_section(_outcomes(40), seconds=1.0)
    assert green.violations == ()
    assert green.figures["cases"] == 40 and green.figures["refused"] == 40
    red = rep.corruption_section(_outcomes(40, "silent loss", "signal", "traceback"), 1.0)
    assert [v.split(":")[0] for v in red.violations] == [
        "bad silent loss",
        "bad signal",
        "bad traceback",
    ]
    assert red.figures["silent loss"] == red.figures["signal"] == red.figures["traceback"] == 1


def test_a_corruption_corpus_of_fewer_than_40_cases_is_a_violation() -> None:
    short = rep.corruption_section(_outcomes(39), seconds=1.0)
    assert short.violations == ("only 39 cases, want at least 40",)
