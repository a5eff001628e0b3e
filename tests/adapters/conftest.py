"""Shared fixtures of the adapter tests: a supervisor on the test's loop."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from subagents import BackgroundSubagentSupervisor, SupervisorLimits

Factory = Callable[..., BackgroundSubagentSupervisor]


@pytest.fixture
async def make_supervisor() -> AsyncIterator[Factory]:
    made: list[BackgroundSubagentSupervisor] = []
    loop = asyncio.get_running_loop()

    def make(**kwargs: Any) -> BackgroundSubagentSupervisor:
        kwargs.setdefault("loop", loop)
        kwargs.setdefault("limits", SupervisorLimits(cancellation_grace=2.0, shutdown_grace=5.0))
        supervisor = BackgroundSubagentSupervisor(**kwargs)
        made.append(supervisor)
        return supervisor

    yield make
    for supervisor in made:
        await supervisor.shutdown_checked(5.0)
