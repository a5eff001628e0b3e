"""Each property machine catches the bug planted for it: a suite that cannot fail proves nothing."""

from __future__ import annotations

import pytest
from hypothesis import Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from properties import MACHINES, MEMORY, PLANTED, ContractViolation, planted, profile_settings

# What the shrunk violation must be about, per machine: the planted bug, not a side effect.
SYMPTOM = {
    "fencing": "heartbeat_attempt",
    "replay": "commit_terminal(forged",
    "delivery": "acquire_continuation",
    "retention": "expected QuotaExceeded (aggregate",
    "consumers": "automatic_continuation_suppressed_by_run_id",
}


@pytest.mark.parametrize("machine", sorted(PLANTED))
def test_machine_catches_its_planted_bug(machine: str) -> None:
    bugged = planted(MEMORY, PLANTED[machine])
    # Finding the bug is the point; shrinking it (the slow part) is not needed here.
    no_shrink = settings(profile_settings(), phases=[Phase.explicit, Phase.generate])
    with pytest.raises(ContractViolation) as caught:
        run_state_machine_as_test(MACHINES[machine](bugged), settings=no_shrink)
    assert SYMPTOM[machine] in str(caught.value)


def test_every_machine_has_a_planted_bug() -> None:
    assert set(PLANTED) == set(MACHINES)
