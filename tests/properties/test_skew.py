"""Clock-skew cases: every case runs, checks enough, stays green on the real runtime,
and turns red when the runtime takes its host's clock for store time."""

from __future__ import annotations

import pytest

from properties._skew import CASES, MIN_CHECKS_PER_CASE, ClockReport, run_clock_cases
from storage import ManualClock, SkewedClock


def test_every_clock_case_runs_its_checks_without_a_violation() -> None:
    report = run_clock_cases(seed=7)
    assert isinstance(report, ClockReport)
    assert report.violations == ()
    assert tuple(report.cases) == CASES
    assert set(CASES) >= {
        "jump-262",
        "jump-30",
        "jump-1",
        "jump+1",
        "jump+30",
        "jump+262",
        "oscillating",
        "backwards-during-renewal",
        "sigstop-2x-ttl",
    }
    for name, checks in report.cases.items():
        assert checks >= MIN_CHECKS_PER_CASE, name
    assert report.invariants_checked == sum(report.cases.values())
    assert report.seconds > 0


@pytest.mark.parametrize(
    ("case", "symptom"),
    [
        ("jump+262", "the TTL is 30s"),
        ("jump-30", "no full renewal"),
        ("oscillating", "host offset"),
    ],
)
def test_leases_computed_from_the_host_clock_are_caught(case: str, symptom: str) -> None:
    report = run_clock_cases(seed=7, steps=8, only=[case], lease_clock="host")
    assert report.violations, report
    assert symptom in report.violations[0]


def test_a_paused_owner_is_fenced_out_even_when_it_trusts_its_own_clock() -> None:
    # Expiry and takeover are the store's decisions: no host clock can revive the owner.
    report = run_clock_cases(seed=3, steps=8, only=["sigstop-2x-ttl"], lease_clock="host")
    assert report.violations == ()
    assert report.cases["sigstop-2x-ttl"] >= MIN_CHECKS_PER_CASE


def test_too_few_steps_or_an_unknown_case_is_refused() -> None:
    with pytest.raises(ValueError, match="steps"):
        run_clock_cases(seed=1, steps=2)
    with pytest.raises(ValueError, match="unknown"):
        run_clock_cases(seed=1, only=["jump+9000"])


def test_a_skewed_clock_moves_wall_time_but_never_monotonic_time() -> None:
    base = ManualClock(1000.0)
    host = SkewedClock(base, offset=30.0)
    assert host.now() == 1030.0
    mono = host.monotonic()
    assert host.step(-262.0) == -232.0
    assert host.now() == 1000.0 - 232.0
    assert host.monotonic() == mono
    base.advance(5.0)
    assert (host.now(), host.monotonic()) == (1000.0 - 232.0 + 5.0, mono + 5.0)
    host.set_offset(0.0)
    assert host.now() == base.now()
