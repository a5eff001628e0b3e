"""Load: concurrent sessions of background attempts through one host, killed midway."""

from __future__ import annotations

from pathlib import Path

import pytest

from properties.reliability._load import run_load

pytestmark = pytest.mark.timeout(180)


def test_a_small_load_with_a_kill_midway_loses_nothing(tmp_path: Path) -> None:
    report = run_load(sessions=4, attempts_per_session=6, seed=5, workdir=tmp_path)
    assert report.violations == ()
    assert report.kills == 1
    assert report.attempts == 24
    assert report.delivered == 24
    assert report.lost == report.duplicates == 0
    assert report.completed + report.interrupted == 24


def test_a_small_load_without_a_kill_completes_every_attempt(tmp_path: Path) -> None:
    report = run_load(
        sessions=3, attempts_per_session=4, seed=6, workdir=tmp_path, kill_midway=False
    )
    assert report.violations == ()
    assert report.kills == 0
    assert report.completed == report.delivered == report.attempts == 12
    assert report.interrupted == 0
