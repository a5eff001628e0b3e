"""SIGKILL a host at every named fault point and at precise lost responses, restart, check.

Each case runs a few crash cycles of :func:`properties.reliability._crash.run_crash_cycles`
restricted to one kind of kill. After every restart the store must open
cleanly, hold every accepted attempt with exactly one terminal record, at most
one continuation run per attempt, every completed result delivered or retained,
and nothing written by a dead owner; a final life without faults must settle
all work (every attempt terminal and delivered).
"""

from __future__ import annotations

import queue
import sys
from pathlib import Path

import pytest

from properties.reliability._crash import FAULT_POINTS, PAUSES, RANDOM_DELAY, run_crash_cycles
from properties.reliability._lives import Zygote
from storage import LmdbSessionStore

pytestmark = pytest.mark.timeout(120)

SCRIPT = Path(__file__).with_name("crash_host.py")
KINDS = [*FAULT_POINTS, *(f"pause:{method}" for method in PAUSES), RANDOM_DELAY]


@pytest.mark.parametrize("kind", KINDS)
def test_sigkill_and_restart_keep_exactly_once(tmp_path: Path, kind: str) -> None:
    report = run_crash_cycles(cycles=3, seed=len(kind), workdir=tmp_path, kinds=[kind])
    assert report.violations == ()
    assert report.kills == 3
    assert report.kills_by_point[kind] >= 1, report  # the kill really happened there
    assert report.settles == 1
    if kind in FAULT_POINTS:
        assert report.faults_fired.get(kind, 0) >= 1


def test_the_script_runs_the_packaged_host(tmp_path: Path) -> None:
    zygote = Zygote(tmp_path, command=[sys.executable, str(SCRIPT)])
    try:
        life = zygote.spawn({"data_dir": str(tmp_path / "data")}, {})
        seen = []
        while "ready" not in seen:
            try:
                message = life.next(30.0)
            except queue.Empty:
                break
            if message is None:
                break
            seen.append(message["ev"])
        assert seen[:2] == ["hello", "ready"]
        life.kill()
        assert life.status is not None and life.status != 0
    finally:
        zygote.close()
    store = LmdbSessionStore(tmp_path / "data" / "lmdb")  # the killed host left a clean store
    try:
        assert store.list_sessions("default") == []
    finally:
        store.close()
