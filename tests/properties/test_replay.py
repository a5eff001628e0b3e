"""The replay property machine passes against every built-in store."""

from __future__ import annotations

from hypothesis.stateful import run_state_machine_as_test

from properties import NamedFactory, replay_machine


def test_replay_machine_finds_no_contract_violation(factory: NamedFactory) -> None:
    machine = replay_machine(factory)
    run_state_machine_as_test(machine)
    assert machine.stats.examples > 0
    assert machine.stats.steps > 0
