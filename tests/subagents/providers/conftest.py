"""Fixtures: every fake server a test starts is closed; provider env vars are cleared."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fake_provider_server import FakeProviderServer, ServerFactory
from provider_cases import CASES, ProviderCase


@pytest.fixture(autouse=True)
def _no_ambient_provider_config(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests see only the keys and URLs they set: never a developer's real ones."""
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def new_server() -> Iterator[ServerFactory]:
    servers: list[FakeProviderServer] = []

    def start() -> FakeProviderServer:
        server = FakeProviderServer()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close()


@pytest.fixture
def server(new_server: ServerFactory) -> FakeProviderServer:
    return new_server()


@pytest.fixture(params=CASES, ids=str)
def case(request: pytest.FixtureRequest) -> ProviderCase:
    found: ProviderCase = request.param
    return found
