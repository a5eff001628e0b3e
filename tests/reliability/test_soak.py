"""The ``soak`` section of ``verify --report``: its sizes, its slopes after warm-up and
what makes it a violation (issue 16). A tiny real run is ``tests/bench``'s smoke test."""

from __future__ import annotations

import queue
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest

from properties.reliability import Section
from properties.reliability._soak import (
    INLINE_WAIT,
    SOAK_SIZES,
    Driver,
    Sample,
    SoakReport,
    _drive,
    _judge,
    _Session,
    run_soak,
    section_fields,
    slope,
)


def sample(sessions: int, threads: int = 14, fds: int = 14, anon: int = 1000) -> Sample:
    return Sample(
        sessions=sessions,
        seconds=float(sessions),
        threads=threads,
        fds=fds,
        rss_kib=anon + 50,
        rss_anon_kib=anon,
        rss_file_kib=50,
    )


def report(**changes: object) -> SoakReport:
    base = SoakReport(
        sessions=1000,
        attempts=1000,
        seconds=10.0,
        samples=[sample(n * 100) for n in range(11)],
        warmup_sessions=200,
        thread_slope_per_1000=0.0,
        fd_slope_per_1000=0.0,
        rss_anon_kib_per_session=1.0,
        rss_file_kib_per_session=1.0,
        rss_kib_per_session=2.0,
        shutdown_seconds=1.0,
        shutdown_deadline=7.0,
        exit_status=0,
        lost=0,
        duplicates=0,
        inline=0,
        violations=[],
    )
    return msgspec.structs.replace(base, **changes)


def test_the_ci_soak_runs_at_least_2000_sessions_and_deep_the_full_100000_attempts() -> None:
    assert SOAK_SIZES["ci"].sessions >= 2_000
    deep = SOAK_SIZES["deep"]
    assert deep.sessions >= 10_000
    assert deep.sessions * deep.attempts >= 100_000


def test_the_slope_is_least_squares_per_session() -> None:
    samples = [sample(n * 1000, threads=10 + 2 * n) for n in range(5)]
    assert slope(samples, "threads") == pytest.approx(0.002)
    assert slope(samples[:1], "threads") == 0.0


def test_a_green_run_has_no_violation() -> None:
    assert _judge(report()) == []


@pytest.mark.parametrize(
    ("changes", "word"),
    [
        ({"thread_slope_per_1000": 1.0}, "threads grow"),
        ({"fd_slope_per_1000": 2.5}, "fds grow"),
        ({"shutdown_seconds": 7.5}, "SIGTERM"),
        ({"exit_status": None}, "SIGTERM"),
        ({"lost": 1}, "lost"),
        ({"duplicates": 1}, "duplicated"),
    ],
)
def test_each_broken_target_is_a_violation(changes: dict[str, object], word: str) -> None:
    found = _judge(report(**changes))
    assert len(found) == 1
    assert word in found[0]


def test_the_section_reports_every_tenth_and_the_slopes() -> None:
    section = Section(**section_fields(report(violations=["x"])))
    assert section.name == "soak"
    assert section.violations == ("x",)
    assert len(section.rows) == 11
    for key in ("threads per 1000 sessions", "RssAnon KiB per session", "lost", "duplicates"):
        assert key in section.figures


def test_a_tiny_soak_is_green_and_samples_each_tenth(tmp_path: Path) -> None:
    done = run_soak(sessions=10, attempts=1, window=5, workdir=tmp_path)
    assert done.lost == 0
    assert done.duplicates == 0
    assert done.exit_status == 0
    assert [s.sessions for s in done.samples] == list(range(11))
    assert done.samples[-1].thread_names.get("MainThread") == 1


class _QuietHost:
    """A host that never answers: sessions end only by the driver's inline wait."""

    def __init__(self) -> None:
        self.inbox: queue.SimpleQueue[dict[str, Any] | None] = queue.SimpleQueue()

    def send(self, method: str, params: dict[str, Any]) -> int:
        return 1

    def sample(self, sessions: int, started: float) -> Sample:
        return sample(sessions)


def test_sessions_that_end_by_the_inline_wait_are_sampled_too() -> None:
    """Before: a session that ended while no frame came in was never sampled, so the
    last tenth could be missing from the report."""
    host: Any = _QuietHost()
    driver = Driver(host, sessions=2, attempts=1, window=2)
    driver.waiting.clear()
    for sid in ("a", "b"):
        session = _Session(sid)
        session.runs = 1
        session.parent_ended = time.monotonic() - 2 * INLINE_WAIT
        driver.live[sid] = session
    samples, early = _drive(host, driver, 2, deadline=60.0)
    assert early == ""
    assert samples[-1].sessions == 2
