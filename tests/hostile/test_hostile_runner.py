"""``run_hostile_corpus``: every family runs every case outside pytest, green."""

from __future__ import annotations

from pathlib import Path

import pytest

from properties.reliability._hostile import FAMILIES, MINIMUM_CASES, run_hostile_corpus

pytestmark = pytest.mark.timeout(240)


def test_the_runner_tries_every_case_of_every_family_and_finds_no_violation(
    tmp_path: Path,
) -> None:
    seen: list[str] = []

    report = run_hostile_corpus(workdir=tmp_path, progress=seen.append)

    assert report.violations == ()
    assert seen == list(FAMILIES)
    assert set(report.cases_by_family) == set(FAMILIES)
    for family, minimum in MINIMUM_CASES.items():
        assert report.cases_by_family[family] >= minimum
    assert report.tried == sum(report.cases_by_family.values())
    assert report.seconds > 0
    assert list(tmp_path.iterdir()) == []  # the run cleans up after itself
