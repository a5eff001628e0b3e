"""The consumers machine passes against every built-in store, and its consumer-death
rules run: under the ``ci`` profile (the default) at least 1,000 times per store."""

from __future__ import annotations

from hypothesis.stateful import run_state_machine_as_test

from properties import MACHINES, NamedFactory, current_profile, profile_settings


def test_consumer_runs_that_die_never_lose_or_double_a_result(factory: NamedFactory) -> None:
    machine = MACHINES["consumers"](factory)
    run_state_machine_as_test(machine, settings=profile_settings())
    assert machine.stats.steps > 0
    if current_profile().name == "ci":
        # Derandomized: the same examples every run, so the count is stable.
        assert machine.stats.consumer_deaths >= 1000, machine.stats.consumer_deaths
    else:
        assert machine.stats.consumer_deaths > 0
