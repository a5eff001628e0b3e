"""Fixtures: every fake server a test starts is closed; provider env vars are cleared;
no test can open a connection (or resolve a name) beyond the loopback interface.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest
from fake_provider_server import FakeProviderServer, ServerFactory
from llmock_server import LLMock
from provider_cases import CASES, ProviderCase


@pytest.fixture(autouse=True)
def _no_ambient_provider_config(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests see only the keys and URLs they set: never a developer's real ones."""
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


LOOPBACK = {"127.0.0.1", "::1", "localhost"}


@pytest.fixture(autouse=True)
def _loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail any attempt to reach the internet, whatever the SDKs try."""
    real_connect = socket.socket.connect
    real_getaddrinfo = socket.getaddrinfo

    def connect(self: socket.socket, address: Any) -> None:
        if self.family in (socket.AF_INET, socket.AF_INET6) and address[0] not in LOOPBACK:
            raise OSError(f"a test tried to connect to {address!r}; only loopback is allowed")
        real_connect(self, address)

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        name = host.decode() if isinstance(host, bytes) else host
        if name is not None and name not in LOOPBACK:
            raise OSError(f"a test tried to resolve {host!r}; only loopback is allowed")
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


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


@pytest.fixture(scope="session")
def llmock_server() -> Iterator[LLMock]:
    """One llmock subprocess for the session, stopped at its end."""
    server = LLMock.start()
    yield server
    server.stop()


@pytest.fixture
def llmock(llmock_server: LLMock) -> Iterator[LLMock]:
    """The llmock server with no queued behaviour and an empty journal."""
    llmock_server.reset()
    yield llmock_server
    llmock_server.reset()
