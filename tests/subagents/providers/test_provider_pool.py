"""One pooled SDK client per provider model and event loop, closed by its owner or its loop.

Warnings are errors in this suite, so a client whose sockets were left open
when its loop ended would fail the test that collects it (``gc.collect``).
"""

from __future__ import annotations

import asyncio
import gc
import threading
from typing import Any

from llmock_server import LLMock
from provider_cases import ProviderCase

from subagents import AgentBuilder
from subagents._providers import ProviderModel, _pool

API_KEY = "llmock-key-0123456789"


def _record_clients(model: ProviderModel) -> list[Any]:
    """Every SDK client the model's pool builds, in order."""
    clients: list[Any] = []
    build = model._pool._factory

    def recording(api_key: str) -> Any:
        clients.append(build(api_key))
        return clients[-1]

    model._pool._factory = recording
    return clients


def test_each_event_loop_gets_its_own_client_and_closes_it_when_it_ends(
    case: ProviderCase, llmock: LLMock
) -> None:
    llmock.queue({"type": "reply", "text": "ok", "times": 3})
    model = case.model_class("gpt-4o", api_key=API_KEY, base_url=llmock.base_url(case.provider))
    clients = _record_clients(model)
    agent = AgentBuilder(model).build()

    # Each run_sync is a new loop: a client bound to the first would fail on the second.
    assert agent.run_sync("hi").output == "ok"
    assert agent.run_sync("hi").output == "ok"
    assert len(clients) == 2
    assert all(client.is_closed() for client in clients)  # closed as each loop ended
    gc.collect()

    errors: list[BaseException] = []

    def in_a_thread() -> None:
        try:
            assert agent.run_sync("hi").output == "ok"
        except BaseException as error:  # reported to the test thread
            errors.append(error)

    thread = threading.Thread(target=in_a_thread)
    thread.start()
    thread.join()
    assert errors == []
    assert len(clients) == 3 and clients[2].is_closed()
    model.close()  # every loop has ended: nothing left to close, and no error
    model.close()


def test_close_from_sync_code_closes_a_client_whose_loop_is_still_open(
    case: ProviderCase, llmock: LLMock
) -> None:
    llmock.queue({"type": "reply", "text": "ok"})
    model = case.model_class("gpt-4o", api_key=API_KEY, base_url=llmock.base_url(case.provider))
    clients = _record_clients(model)
    loop = asyncio.new_event_loop()
    try:
        result = loop.run_until_complete(AgentBuilder(model).build().run("hi"))
        assert result.output == "ok"
        assert not clients[0].is_closed()

        model.close()  # runs the paused loop just long enough to close the client
        model.close()

        assert clients[0].is_closed()
    finally:
        loop.close()


async def test_a_model_dropped_unclosed_has_its_client_closed_on_its_loop(
    case: ProviderCase, llmock: LLMock
) -> None:
    llmock.queue({"type": "reply", "text": "ok"})
    model = case.model_class("gpt-4o", api_key=API_KEY, base_url=llmock.base_url(case.provider))
    clients = _record_clients(model)
    assert (await AgentBuilder(model).build().run("hi")).output == "ok"

    del model
    gc.collect()  # the pool's finalizer schedules the close on this loop
    await asyncio.sleep(0)  # let the scheduled callback start its task
    await asyncio.gather(*_pool._RELEASING)

    assert clients[0].is_closed()
