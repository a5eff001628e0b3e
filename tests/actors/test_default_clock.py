"""A supervisor that builds its own memory store keeps store time through wall-clock steps."""

from __future__ import annotations

import time

import pytest

from actors import BackgroundSubagentSupervisor


def test_a_wall_clock_step_does_not_move_the_own_stores_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    supervisor = BackgroundSubagentSupervisor()
    try:
        before = supervisor.store.clock.now()
        real = time.time
        monkeypatch.setattr(time, "time", lambda: real() + 600.0)
        after = supervisor.store.clock.now()
        assert 0.0 <= after - before < 60.0
    finally:
        monkeypatch.undo()
        supervisor.shutdown()
