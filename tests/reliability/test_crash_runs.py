"""Crash runs: real host processes SIGKILLed at named points, restarted, checked.

A short run must be green *and* show that it really killed and replayed; a
store doctored behind the oracle's back must be reported.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import msgspec
import pytest

from properties.reliability._crash import (
    CONSUMER_KILLS,
    FAULT_POINTS,
    REPLAYS,
    CrashReport,
    _note_death,
    _Run,
    minimums,
    run_crash_cycles,
    shortfalls,
)
from properties.reliability._lives import HostLife
from properties.reliability._oracle import (
    Ledger,
    Life,
    OracleLog,
    Snapshot,
    check_snapshot,
    consumer_of,
    take_snapshot,
)
from statemachines import DeliveryStatus, RunStatus
from storage import ASYNC_SUBAGENT_RESULT, DeliveryClaim, LmdbSessionStore

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def crashed(tmp_path_factory: pytest.TempPathFactory) -> tuple[CrashReport, Path]:
    workdir = tmp_path_factory.mktemp("crash")
    return run_crash_cycles(cycles=12, seed=11, workdir=workdir), workdir


def test_a_short_crash_run_is_green_and_really_killed(
    crashed: tuple[CrashReport, Path],
) -> None:
    report, _ = crashed
    assert report.violations == ()
    assert report.kills == report.cycles == 12
    assert report.restarts == report.kills  # each kill is followed by one restart
    assert sum(report.kills_by_point[p] for p in FAULT_POINTS) >= 4
    assert sum(report.faults_fired.values()) >= 4
    assert all(report.replays[path] >= 1 for path in REPLAYS), report.replays
    assert report.attempts_accepted > 0
    assert report.invariants_checked > 100
    assert report.seconds_per_cycle < 5.0


def test_two_hundred_cycles_need_five_kills_per_point_and_twenty_random_kills() -> None:
    assert minimums(200) == (5, 20, 1)
    assert minimums(10_000) == (250, 1000, 1)


def test_a_run_that_injected_nothing_is_a_violation() -> None:
    missed = shortfalls(200, {}, {})
    assert "fault point store.after_commit fired 0 times (minimum 5)" in missed
    assert "random-delay kills: 0 (minimum 20)" in missed
    assert "replay path continuation-exact-replay seen 0 times (minimum 1)" in missed
    assert "consumer kill consumer:mid_continuation fired 0 times (minimum 10)" in missed
    assert len(missed) == len(FAULT_POINTS) + len(CONSUMER_KILLS) + 1 + len(REPLAYS)
    full = dict.fromkeys(FAULT_POINTS, 5) | dict.fromkeys(CONSUMER_KILLS, 10)
    full |= {"random-delay": 20}
    assert shortfalls(200, full, dict.fromkeys(REPLAYS, 1)) == []


def _store_view(workdir: Path) -> tuple[Snapshot, Ledger]:
    store = LmdbSessionStore(workdir / "data" / "lmdb")
    try:
        snapshot = take_snapshot(store, "default")
    finally:
        store.close()
    ledger = Ledger()
    generations = {r.owner_lease.fencing_generation for r in snapshot.attempts}
    generations |= {
        r.admission_lease.fencing_generation for r in snapshot.runs if r.admission_lease
    }
    for generation in generations:
        ledger.lives[generation] = Life(generation=generation, pid=0, started=0.0)
    ledger.committed_attempts = {r.attempt_id for r in snapshot.attempts}
    return snapshot, ledger


def _second_continuation(snapshot: Snapshot, ledger: Ledger) -> str:
    run = next(
        r
        for r in snapshot.runs
        if r.trigger_type == ASYNC_SUBAGENT_RESULT and str(r.status) == "completed"
    )
    snapshot.runs.append(msgspec.structs.replace(run, run_id=run.run_id + "-twin"))
    return "2 continuation runs"


def _ungranted_owner(snapshot: Snapshot, ledger: Ledger) -> str:
    record = snapshot.attempts[0]
    lease = msgspec.structs.replace(record.owner_lease, fencing_generation=10_000)
    snapshot.attempts[0] = msgspec.structs.replace(record, owner_lease=lease)
    return "generation 10000 never granted"


def _write_after_death(snapshot: Snapshot, ledger: Ledger) -> str:
    record = snapshot.attempts[0]
    ledger.lives[record.owner_lease.fencing_generation].died = record.owner_lease.heartbeat_at - 1
    return "after it was fenced out"


def _second_terminal_record(snapshot: Snapshot, ledger: Ledger) -> str:
    record = next(r for r in snapshot.attempts if r.terminal_fingerprint is not None)
    ledger.fingerprints[record.attempt_id] = "sha256:" + "0" * 64
    return "second terminal record"


def _lost_attempt(snapshot: Snapshot, ledger: Ledger) -> str:
    ledger.committed_attempts.add("subattempt_never_stored")
    return "subattempt_never_stored is missing"


def _undelivered_result(snapshot: Snapshot, ledger: Ledger) -> str:
    # A delivered result whose consumer run is gone. (Not any record naming a
    # continuation: since a dead continuation's claim goes back unsuppressed, such a
    # record may be waiting for its replacement, and then nothing names the run.)
    record = next(
        r
        for r in snapshot.attempts
        if str(r.execution_status) == "completed"
        and str(r.delivery_status) == "delivered"
        and consumer_of(r) is not None
    )
    snapshot.runs = [r for r in snapshot.runs if r.run_id != consumer_of(record)]
    return "does not exist"


def _consumer_died(snapshot: Snapshot, ledger: Ledger) -> str:
    record = next(r for r in snapshot.attempts if str(r.delivery_status) == "delivered")
    consumer = consumer_of(record)
    snapshot.runs = [
        msgspec.structs.replace(r, status=RunStatus.FAILED) if r.run_id == consumer else r
        for r in snapshot.runs
    ]
    return "a dead consumer took the result with it"


def _claim_kept_by_ended_run(snapshot: Snapshot, ledger: Ledger) -> str:
    index, record = next(
        (i, r) for i, r in enumerate(snapshot.attempts) if str(r.delivery_status) == "delivered"
    )
    ended = consumer_of(record) or ""
    claim = DeliveryClaim(claim_id="c1", deadline=0.0, continuation_run_id=ended)
    snapshot.attempts[index] = msgspec.structs.replace(
        record, delivery_status=DeliveryStatus.CLAIMED, delivery_claim=claim
    )
    return "an ended consumer's claim was not released"


@pytest.mark.parametrize(
    "doctor",
    [
        _consumer_died,
        _claim_kept_by_ended_run,
        _second_continuation,
        _ungranted_owner,
        _write_after_death,
        _second_terminal_record,
        _lost_attempt,
        _undelivered_result,
    ],
)
def test_a_doctored_store_is_reported(
    crashed: tuple[CrashReport, Path], doctor: Callable[[Snapshot, Ledger], str]
) -> None:
    _, workdir = crashed
    snapshot, ledger = _store_view(workdir)
    assert check_snapshot(snapshot, ledger, final=True).violations == []
    snapshot, ledger = _store_view(workdir)
    expected = doctor(snapshot, ledger)
    violations = check_snapshot(snapshot, ledger).violations
    assert any(expected in v for v in violations), violations


def test_a_run_over_several_epochs_starts_fresh_data_and_keeps_its_counters(
    tmp_path: Path,
) -> None:
    report = run_crash_cycles(
        cycles=8,
        seed=5,
        workdir=tmp_path,
        epoch_cycles=3,
        kinds=("pause:admit_run", "random-delay", "store.after_commit"),
    )
    assert report.violations == ()
    assert report.epochs == 3
    assert len(report.epoch_seconds_per_cycle) == 3
    assert report.kills == 8
    assert report.settles == 3  # two epoch boundaries and the end
    assert report.attempts_accepted > 0
    assert not list(tmp_path.glob("data-epoch*"))  # clean epochs leave nothing behind


def test_a_life_killed_before_its_hello_is_no_violation_but_a_silent_one_is(
    tmp_path: Path,
) -> None:
    run = _Run(
        workdir=tmp_path,
        seed=0,
        progress=None,
        rng=random.Random(0),
        log=OracleLog(tmp_path / "oracle.log"),
    )
    early = cast(HostLife, SimpleNamespace(generation=0, pid=41, died=1.0))
    try:
        _note_death(run, early, killed=True)
        assert run.violations == []
        _note_death(run, early)
        assert run.violations == ["host life 41 never said hello"]
    finally:
        run.log.close()


def test_kills_inside_consumer_runs_lose_no_result(tmp_path: Path) -> None:
    """SIGKILL mid continuation run and right before its terminal commit (the
    acknowledgement): after every restart the result is still retained and offered,
    and in the end consumed by exactly one completed run."""
    report = run_crash_cycles(cycles=4, seed=7, workdir=tmp_path, kinds=CONSUMER_KILLS)
    assert report.violations == ()
    assert all(report.kills_by_point[kill] == 2 for kill in CONSUMER_KILLS), report.kills_by_point
    assert report.consumer_rounds == report.kills + report.settles
    assert report.consumer_checks >= report.consumer_rounds
