"""SIGSTOP runs: a real host paused for twice its lease TTL loses the lease, its late
writes are refused, and the lost attempt is reconciled and delivered exactly once.

A run whose pause is too short to expire anything must be reported, not passed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from properties.reliability._report import sigstop_section
from properties.reliability._sigstop import run_sigstop_cases

pytestmark = pytest.mark.timeout(120)


def test_a_host_paused_for_twice_its_ttl_is_fenced_out_and_its_work_reconciled_once(
    tmp_path: Path,
) -> None:
    report = run_sigstop_cases(seed=3, workdir=tmp_path, rounds=1)
    assert report.violations == ()
    assert report.rounds == 1
    assert report.paused_seconds_total >= 2 * report.lease_ttl
    assert report.refused_writes >= 1
    assert report.reconciled == 1
    assert report.rival_reconciles == 1  # round 0: the parent reconciles during the pause
    assert report.invariants_checked > 10
    section = sigstop_section(report)
    assert section.figures["late writes refused"] == report.refused_writes
    assert section.violations == ()


def test_a_pause_shorter_than_the_ttl_is_reported_as_nothing_happened(tmp_path: Path) -> None:
    report = run_sigstop_cases(seed=3, workdir=tmp_path, rounds=1, pause_factor=0.25)
    assert report.refused_writes == 0
    assert any("lease is still live by store time" in v for v in report.violations)
    assert any("never refused (0, minimum 1)" in v for v in report.violations)
    assert sigstop_section(report).violations == report.violations


def test_rounds_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="rounds must be at least 1"):
        run_sigstop_cases(seed=0, workdir=tmp_path, rounds=0)
