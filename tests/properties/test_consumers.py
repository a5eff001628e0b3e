"""The consumers machine finds no contract violation, and its consumer-death rules run:
under the ``ci`` profile (the default) at least 1,000 times on the memory store. The
LMDB store reopened between steps runs a shorter budget here (same contract logic,
persistence checked); ``python -m properties --machine consumers`` runs the full budget
on every store and prints the count."""

from __future__ import annotations

from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from properties import LMDB_REOPEN, MACHINES, MEMORY, current_profile, profile_settings


def test_consumer_runs_that_die_never_lose_or_double_a_result() -> None:
    machine = MACHINES["consumers"](MEMORY)
    run_state_machine_as_test(machine, settings=profile_settings())
    assert machine.stats.steps > 0
    if current_profile().name == "ci":
        # Derandomized: the same examples every run, so the count is stable (2,867).
        assert machine.stats.consumer_deaths >= 1000, machine.stats.consumer_deaths
    else:
        assert machine.stats.consumer_deaths > 0


def test_consumer_deaths_survive_a_reopen_between_every_step() -> None:
    machine = MACHINES["consumers"](LMDB_REOPEN)
    run_state_machine_as_test(machine, settings=settings(profile_settings(), max_examples=25))
    assert machine.stats.consumer_deaths > 0
