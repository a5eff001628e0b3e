"""Provider failures become typed errors; transient ones are retried with bounded backoff.

Sleeps are injected (recorded, never waited); only the timeout test spends
real time, bounded by its 0.2 s client timeout.
"""

from __future__ import annotations

import socket
import sys

import pytest
from fake_provider_server import FakeProviderServer, Reply
from provider_cases import API_KEY, CASES, ProviderCase, RecordingSleep

from subagents import (
    AgentBuilder,
    ContentRefused,
    MissingApiKey,
    ModelError,
    ProviderAuthenticationError,
    ProviderConnectionError,
    ProviderError,
    ProviderNotInstalled,
    ProviderRateLimited,
    ProviderServerError,
    ProviderTimeout,
    RetryPolicy,
)


async def test_a_refused_key_is_an_authentication_error_and_is_not_retried(
    case: ProviderCase, server: FakeProviderServer
) -> None:
    sleep = RecordingSleep()
    server.script(case.reply("error_401"))
    agent = AgentBuilder(case.model(server, sleep=sleep)).build()

    with pytest.raises(ProviderAuthenticationError) as raised:
        await agent.run("hi")

    assert raised.value.status == 401
    assert raised.value.provider == case.provider
    assert isinstance(raised.value, ModelError)
    assert len(server.requests) == 1
    assert sleep.delays == []


async def test_a_rate_limit_is_retried_after_the_servers_retry_after(
    case: ProviderCase, server: FakeProviderServer
) -> None:
    sleep = RecordingSleep()
    server.script(case.reply("error_429"), case.reply("text"))
    agent = AgentBuilder(case.model(server, sleep=sleep)).build()

    result = await agent.run("hi")

    assert result.output == "Paris is the capital of France."
    assert sleep.delays == [2.0]  # Retry-After: 2 beats the 0.5 s first backoff
    assert len(server.requests) == 2
    assert result.usage.requests == 1


async def test_server_errors_back_off_exponentially_and_give_up_after_max_retries(
    case: ProviderCase, server: FakeProviderServer
) -> None:
    sleep = RecordingSleep()
    server.script(*[case.reply("error_500")] * 4)
    model = case.model(server, sleep=sleep, retry=RetryPolicy(max_retries=3, jitter=0.0))

    with pytest.raises(ProviderServerError) as raised:
        await AgentBuilder(model).build().run("hi")

    assert sleep.delays == [0.5, 1.0, 2.0]
    assert len(server.requests) == 4
    assert raised.value.attempts == 4
    assert raised.value.status == 500


async def test_retries_stop_when_the_next_wait_would_pass_max_elapsed(
    case: ProviderCase, server: FakeProviderServer
) -> None:
    now = [0.0]

    class AdvancingSleep(RecordingSleep):
        async def __call__(self, seconds: float) -> None:
            await super().__call__(seconds)
            now[0] += seconds

    sleep = AdvancingSleep()
    server.script(*[case.reply("error_429_echo")] * 3)
    policy = RetryPolicy(max_retries=10, initial_delay=1.0, jitter=0.0, max_elapsed=2.5)
    model = case.model(server, sleep=sleep, retry=policy, clock=lambda: now[0])

    with pytest.raises(ProviderRateLimited) as raised:
        await AgentBuilder(model).build().run("hi")

    # Waits of 1 s then 2 s would end at 3 s > 2.5 s: only the first is taken.
    assert sleep.delays == [1.0]
    assert raised.value.attempts == 2


async def test_jitter_only_shortens_the_backoff(
    case: ProviderCase, server: FakeProviderServer
) -> None:
    sleep = RecordingSleep()
    server.script(case.reply("error_500"), case.reply("text"))
    policy = RetryPolicy(initial_delay=1.0, jitter=0.5)
    model = case.model(server, sleep=sleep, retry=policy, random=lambda: 1.0)

    await AgentBuilder(model).build().run("hi")

    assert sleep.delays == [0.5]


async def test_an_unreachable_server_is_retried_then_reported(case: ProviderCase) -> None:
    with socket.socket() as probe:  # a port nobody listens on once closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    sleep = RecordingSleep()
    model = case.model_class(
        "test-model",
        api_key=API_KEY,
        base_url=f"http://127.0.0.1:{port}{case.url_suffix}",
        sleep=sleep,
        retry=RetryPolicy(max_retries=2, jitter=0.0),
    )

    with pytest.raises(ProviderConnectionError):
        await AgentBuilder(model).build().run("hi")

    assert sleep.delays == [0.5, 1.0]


async def test_the_public_endpoints_are_out_of_reach_in_tests(case: ProviderCase) -> None:
    model = case.model_class(
        "test-model", api_key=API_KEY, sleep=RecordingSleep(), retry=RetryPolicy(max_retries=0)
    )

    with pytest.raises(ProviderConnectionError):
        await AgentBuilder(model).build().run("hi")


async def test_a_request_that_outlives_the_timeout_is_retried_within_the_bound(
    case: ProviderCase, server: FakeProviderServer
) -> None:
    sleep = RecordingSleep()
    server.script(Reply(hang=True), Reply(hang=True))
    model = case.model(server, sleep=sleep, timeout=0.2, retry=RetryPolicy(max_retries=1, jitter=0))

    with pytest.raises(ProviderTimeout) as raised:
        await AgentBuilder(model).build().run("hi")

    assert raised.value.category == "timeout"
    assert len(server.requests) == 2
    assert sleep.delays == [0.5]


async def test_a_refusal_is_content_refused_and_is_not_retried(
    case: ProviderCase, server: FakeProviderServer
) -> None:
    server.script(case.reply("refusal"))

    with pytest.raises(ContentRefused) as raised:
        await AgentBuilder(case.model(server)).build().run("something forbidden")

    assert raised.value.reason
    assert len(server.requests) == 1


@pytest.mark.parametrize("case", [c for c in CASES if c.provider != "anthropic"], ids=str)
async def test_a_content_filter_stop_is_content_refused(
    case: ProviderCase, server: FakeProviderServer
) -> None:
    server.script(case.reply("content_filter"))

    with pytest.raises(ContentRefused, match="content_filter"):
        await AgentBuilder(case.model(server)).build().run("something forbidden")


async def test_anthropic_overloaded_529_is_retried_as_a_server_error(
    server: FakeProviderServer,
) -> None:
    [case] = [c for c in CASES if c.provider == "anthropic"]
    sleep = RecordingSleep()
    server.script(case.reply("error_529"), case.reply("text"))

    result = await AgentBuilder(case.model(server, sleep=sleep)).build().run("hi")

    assert result.output == "Paris is the capital of France."
    assert sleep.delays == [0.5]


async def test_an_error_event_before_any_streamed_output_is_retried(
    server: FakeProviderServer,
) -> None:
    [case] = [c for c in CASES if c.provider == "anthropic"]
    sleep = RecordingSleep()
    server.script(case.reply_stream("error_overloaded_first"), case.reply_stream("text"))
    agent = AgentBuilder(case.model(server, sleep=sleep)).build()

    stream = agent.run_stream("hi")
    records = [record async for record in stream]

    assert stream.result.output == "Paris is the capital of France."
    assert [r.kind for r in records].count("text_delta") == 3
    assert sleep.delays == [0.5]


async def test_an_error_after_streamed_output_fails_the_turn_without_retry(
    case: ProviderCase, server: FakeProviderServer
) -> None:
    sleep = RecordingSleep()
    server.script(case.reply_stream("error_midstream"), case.reply_stream("text"))
    agent = AgentBuilder(case.model(server, sleep=sleep)).build()
    seen: list[str] = []

    with pytest.raises(ProviderServerError):
        async for record in agent.run_stream("hi"):
            seen.append(record.kind)

    assert "text_delta" in seen
    assert len(server.requests) == 1
    assert sleep.delays == []


async def test_a_missing_key_names_the_environment_variable_and_sends_nothing(
    case: ProviderCase, server: FakeProviderServer
) -> None:
    model = case.model(server, api_key=None)

    with pytest.raises(MissingApiKey, match=case.env_var) as raised:
        await AgentBuilder(model).build().run("hi")

    assert raised.value.env_var == case.env_var
    assert server.requests == []


async def test_the_key_is_read_from_the_environment_at_request_time(
    case: ProviderCase, server: FakeProviderServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = case.model(server, api_key=None)
    monkeypatch.setenv(case.env_var, "sk-from-env-0123456789")
    server.script(case.reply("text"))

    await AgentBuilder(model).build().run("hi")

    headers = server.requests[0].headers
    sent = headers.get("x-api-key") or headers["authorization"].removeprefix("Bearer ")
    assert sent == "sk-from-env-0123456789"


def test_a_missing_sdk_names_the_extra_to_install(
    case: ProviderCase, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, case.model_class.sdk_module, None)

    extra = case.model_class.extra
    with pytest.raises(ProviderNotInstalled, match=rf"\({extra} extra\): pip install '"):
        case.model_class("test-model", api_key=API_KEY)


def test_every_provider_error_is_a_model_error() -> None:
    for error in (
        MissingApiKey,
        ProviderNotInstalled,
        ProviderAuthenticationError,
        ProviderRateLimited,
        ProviderServerError,
        ProviderConnectionError,
        ProviderTimeout,
        ContentRefused,
    ):
        assert issubclass(error, ProviderError)
    assert issubclass(ProviderError, ModelError)
