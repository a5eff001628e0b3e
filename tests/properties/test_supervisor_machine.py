"""The supervisor machine passes on the memory and LMDB stores, catches its planted bug,
and runs from ``python -m properties --machine supervisor``."""

from __future__ import annotations

import io

import pytest
from hypothesis import Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from properties import (
    LMDB,
    MEMORY,
    SUPERVISOR_PLANTED,
    NamedFactory,
    SupervisorViolation,
    main,
    planted,
    profile_settings,
    supervisor_machine,
)


@pytest.mark.parametrize("factory", [MEMORY, LMDB], ids=lambda f: f.name)
def test_the_supervisor_keeps_its_guarantees(factory: NamedFactory) -> None:
    machine = supervisor_machine(factory)
    run_state_machine_as_test(machine, settings=profile_settings("ci"))
    stats = machine.stats
    assert stats.examples > 0
    assert stats.steps > 0
    # The run reached the interesting paths, not only refusals.
    for path in (
        "delegate: accepted",
        "child: complete",
        "child: raise",
        "cancel: cancellation_requested",
        "wait: delivered",
        "lease: lapsed and reconciled",
        "shutdown: completed",
        "fault: commit_terminal lost",
    ):
        assert stats.paths[path] > 0, path


def test_the_supervisor_machine_catches_a_store_that_redelivers() -> None:
    bugged = planted(MEMORY, SUPERVISOR_PLANTED)
    no_shrink = settings(profile_settings("ci"), phases=[Phase.explicit, Phase.generate])
    with pytest.raises(SupervisorViolation) as caught:
        run_state_machine_as_test(supervisor_machine(bugged), settings=no_shrink)
    assert "more than once" in str(caught.value)


def test_python_m_properties_runs_the_supervisor_machine() -> None:
    out = io.StringIO()
    code = main(["--store", "memory", "--machine", "supervisor", "--paths"], out=out)
    text = out.getvalue()
    assert code == 0, text
    assert "supervisor x memory" in text
    assert "0 failures" in text
    assert "delegate: accepted" in text
