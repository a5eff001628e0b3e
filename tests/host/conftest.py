"""Fixtures: an in-process host over a memory store, always closed."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from host_helpers import CONFIG, Client, memory_service
from host_processes import HostProc

from subagents._host import HostService


@pytest.fixture
async def service() -> AsyncIterator[HostService]:
    svc = memory_service(CONFIG)
    await svc.start()
    try:
        yield svc
    finally:
        await svc.close()


@pytest.fixture
def client(service: HostService) -> Client:
    return Client(service.dispatcher())


@pytest.fixture
def hosts() -> Iterator[list[HostProc]]:
    """Host processes a test starts (it appends them); each is stopped at teardown."""
    started: list[HostProc] = []
    try:
        yield started
    finally:
        for host in started:
            host.stop()
