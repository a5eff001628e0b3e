"""The ``soak`` section of ``verify --report``: its sizes, its slopes after warm-up and
what makes it a violation (issue 16). A tiny real run is ``tests/bench``'s smoke test."""

from __future__ import annotations

import queue
from pathlib import Path
from typing import Any

import msgspec
import pytest

from properties.reliability import Section
from properties.reliability._soak import (
    SOAK_SIZES,
    Driver,
    Sample,
    SoakReport,
    _drive,
    _judge,
    _refusal_violations,
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


class _ScriptedHost:
    """A fake host over scripted frames, with a fake clock. Each ``run.start`` runs a
    parent run that delegates one attempt and ends; the continuation run is admitted
    only after ``quiet`` polls with no frame (one fake second each), and until it
    completed another ``run.start`` is refused as the real host refuses it."""

    def __init__(self, clock: list[float], *, quiet: int = 0, inline: bool = False) -> None:
        self.clock = clock
        self.quiet = quiet
        self.inline = inline
        self.frames: list[dict[str, Any]] = []
        self.later: list[dict[str, Any]] = []
        self.countdown = 0
        self.busy: set[str] = set()  # sessions with a live (or about to be admitted) run
        self.starts: list[str] = []
        self.refuse_runs = False
        self.next_id = 0
        self.inbox = self

    def get(self, timeout: float) -> dict[str, Any]:
        if self.frames:
            frame = self.frames.pop(0)
            event = frame.get("params", {}).get("event", {})
            if event.get("kind") == "run.completed" and event["run_id"].startswith("c"):
                self.busy.discard(event["session_id"])  # the continuation's commit is made
            return frame
        if self.later:
            self.clock[0] += 1.0
            self.countdown -= 1
            if self.countdown <= 0:
                self.frames, self.later = self.later, []
        raise queue.Empty

    def sample(self, sessions: int, started: float) -> Sample:
        return sample(sessions)

    def send(self, method: str, params: dict[str, Any]) -> int:
        self.next_id += 1
        answer: dict[str, Any] = {"id": self.next_id, "result": {}}
        if method == "events.subscribe":
            answer["result"] = {"subscription_id": f"sub-{params['session_id']}"}
        if method == "run.start":
            sid = params["session_id"]
            self.starts.append(sid)
            if self.refuse_runs or sid in self.busy:
                refusal = {"code": -32000, "message": "another run of the session is live"}
                answer = {"id": self.next_id, "error": refusal}
            else:
                self.frames.append(answer)
                self._round(sid, len(self.starts))
                return self.next_id
        self.frames.append(answer)
        return self.next_id

    def _round(self, sid: str, n: int) -> None:
        parent, attempt, cont = f"p{n}", f"a{n}", f"c{n}"
        self.frames += [
            _event(sid, "run.admitted", parent, trigger_type="rpc"),
            _event(sid, "attempt.accepted", parent, attempt_id=attempt),
        ]
        if self.inline:
            self.frames += [
                _event(
                    sid, "attempt.delivered", parent, attempt_id=attempt, consumer_run_id=parent
                ),
                _event(sid, "run.completed", parent),
            ]
            return
        self.busy.add(sid)
        self.frames.append(_event(sid, "run.completed", parent))
        self.countdown = self.quiet
        self.later += [
            _event(sid, "run.admitted", cont, trigger_type="async_subagent_result"),
            _event(sid, "run.completed", cont),
            _event(sid, "attempt.delivered", parent, attempt_id=attempt, consumer_run_id=cont),
        ]
        if not self.quiet:
            self.frames, self.later = self.frames + self.later, []


def _event(sid: str, kind: str, run_id: str, **data: Any) -> dict[str, Any]:
    event = {"session_id": sid, "kind": kind, "run_id": run_id, "data": data}
    return {"method": "events.event", "params": {"event": event}}


def _run(host: Any, sessions: int, attempts: int) -> Driver:
    driver = Driver(host, sessions=sessions, attempts=attempts, window=sessions)
    samples, early = _drive(host, driver, sessions, 3600.0, lambda: host.clock[0])
    assert early == ""
    assert samples[-1].sessions == sessions
    return driver


@pytest.fixture
def clock() -> list[float]:
    """A fake clock: the scripted host moves it one second per quiet poll."""
    return [0.0]


def test_a_continuation_admitted_late_never_meets_a_second_run_start(clock: list[float]) -> None:
    """Before: 5 s after its parent run ended with no continuation yet, the driver
    took the result as delivered into the parent run and started the next parent
    run, which the host refused (another run of the session is live). Now it waits
    for the attempt's delivery and its continuation run's end, however long."""
    host = _ScriptedHost(clock, quiet=12)
    driver = _run(host, sessions=1, attempts=3)
    assert host.starts == ["soak-000000"] * 3
    assert driver.violations == []
    assert clock[0] >= 30.0  # every continuation came more than 5 fake seconds late
    assert driver.refusals == []
    assert (driver.accepted, driver.inline, driver.done) == (3, 0, 1)


def test_a_result_delivered_into_its_parent_run_moves_on_at_once(clock: list[float]) -> None:
    host = _ScriptedHost(clock, inline=True)
    driver = _run(host, sessions=2, attempts=2)
    assert clock[0] == 0.0  # no waiting
    assert sorted(host.starts) == ["soak-000000"] * 2 + ["soak-000001"] * 2
    assert (driver.accepted, driver.inline, driver.violations) == (4, 4, [])


def test_a_refused_run_start_is_counted_refused_not_lost(clock: list[float]) -> None:
    host = _ScriptedHost(clock)
    host.refuse_runs = True
    driver = _run(host, sessions=2, attempts=3)
    assert len(driver.refusals) == 6  # the refused request and the 2 never asked for
    assert all("another run of the session is live" in r for r in driver.refusals)
    assert driver.accepted == 0
    assert driver.violations == []


def test_refusals_are_reported_as_violations_grouped_by_reason() -> None:
    found = _refusal_violations(["run of a refused: x", "run of a refused: x", "y"])
    assert found == ["refused (2 attempts): run of a refused: x", "refused (1 attempts): y"]
    assert not _judge(report(refused=3))  # refused is not lost: the listing above says why
