"""Retries by error class, and error text that is safe to store, log and show a parent model.

Sleeps are injected and recorded, never waited.
"""

from __future__ import annotations

import email.utils
import logging
import time

import pytest
from fake_provider_server import FakeProviderServer, Reply
from provider_cases import ProviderCase, RecordingSleep

from subagents import AgentBuilder, ProviderError, ProviderRateLimited, RetryPolicy
from subagents._providers._failures import retry_after

# llama.cpp's server answers a request its chat template rejects with HTTP 500
# (ggml-org/llama.cpp#13471), the same way every time.
TEMPLATE_ERROR = {
    "error": {
        "code": 500,
        "message": "Expected 'content' to be a string or an array",
        "type": "server_error",
    }
}
HEADER_SECRET = "proxy-token-7f3a9c2e51"


def test_retry_after_reads_seconds_milliseconds_and_http_dates() -> None:
    when = "Wed, 21 Oct 2026 07:28:00 GMT"
    at = email.utils.parsedate_to_datetime(when).timestamp()

    assert retry_after({"retry-after": "3"}, now=0.0) == 3.0
    assert retry_after({"retry-after-ms": "250", "retry-after": "1"}, now=0.0) == 0.25
    assert retry_after({"retry-after": when}, now=at - 12) == 12.0
    # The server's own Date header is the reference when it sends one (no clock skew).
    date = email.utils.formatdate(at - 7, usegmt=True)
    assert retry_after({"retry-after": when, "date": date}, now=0.0) == 7.0
    assert retry_after({"retry-after": when}, now=at + 60) == 0.0
    assert retry_after({"retry-after": "soon"}, now=0.0) is None


async def test_a_retry_after_http_date_is_honoured(
    case: ProviderCase, server: FakeProviderServer
) -> None:
    sleep = RecordingSleep()
    later = email.utils.formatdate(time.time() + 30, usegmt=True)
    limited = case.reply("error_429")
    server.script(
        Reply(status=429, body=limited.body, headers={"Retry-After": later}), case.reply("text")
    )

    await AgentBuilder(case.model(server, sleep=sleep)).build().run("hi")

    [delay] = sleep.delays
    assert 28.0 <= delay <= 31.0  # the server's date, not the 0.5 s backoff


@pytest.mark.parametrize(
    ("status", "category"),
    [(400, "invalid_request"), (404, "model_not_found"), (422, "invalid_request")],
)
async def test_a_deterministic_4xx_is_never_retried(
    case: ProviderCase, server: FakeProviderServer, status: int, category: str
) -> None:
    sleep = RecordingSleep()
    body = {"error": {"message": "The model `nope` does not exist", "type": "invalid_request"}}
    server.script(*[Reply(status=status, body=body)] * 3)

    with pytest.raises(ProviderError) as raised:
        await AgentBuilder(case.model(server, sleep=sleep)).build().run("hi")

    assert (raised.value.category, raised.value.status) == (category, status)
    assert len(server.requests) == 1
    assert sleep.delays == []


async def test_a_5xx_repeating_the_same_validation_error_stops_after_two_attempts(
    case: ProviderCase, server: FakeProviderServer
) -> None:
    sleep = RecordingSleep()
    server.script(*[Reply(status=500, body=TEMPLATE_ERROR)] * 4)

    with pytest.raises(ProviderError) as raised:
        await AgentBuilder(case.model(server, sleep=sleep)).build().run("hi")

    assert (raised.value.category, raised.value.status) == ("invalid_request", 500)
    assert len(server.requests) == 2
    assert sleep.delays == [0.5]


async def test_an_error_echoing_a_header_secret_leaks_it_nowhere_safe(
    case: ProviderCase, server: FakeProviderServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="subagents.providers")
    echo = {"error": {"message": f"bad request headers: X-Proxy-Token={HEADER_SECRET}"}}
    server.script(Reply(status=429, body=echo), Reply(status=400, body=echo))
    model = case.model(server, sleep=RecordingSleep(), headers={"X-Proxy-Token": HEADER_SECRET})

    with pytest.raises(ProviderError) as raised:
        await AgentBuilder(model).build().run("hi")

    assert server.requests[0].headers["x-proxy-token"] == HEADER_SECRET
    error = raised.value
    for text in (str(error), repr(error), repr(error.fields)):
        assert HEADER_SECRET not in text
        assert "bad request headers" not in text  # raw provider text: DEBUG only
    assert error.category == "invalid_request"
    assert error.status == 400
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings and all(HEADER_SECRET not in line for line in warnings)
    assert all("rate_limited (HTTP 429)" in line for line in warnings)
    debug = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    assert any("bad request headers: X-Proxy-Token=[redacted]" in line for line in debug)
    assert HEADER_SECRET not in caplog.text


async def test_every_final_error_carries_category_and_status(
    case: ProviderCase, server: FakeProviderServer
) -> None:
    server.script(*[case.reply("error_429")] * 2)
    policy = RetryPolicy(max_retries=1, jitter=0.0)

    with pytest.raises(ProviderRateLimited) as raised:
        await (
            AgentBuilder(case.model(server, sleep=RecordingSleep(), retry=policy)).build().run("hi")
        )

    error = raised.value
    assert (error.category, error.status, error.provider, error.attempts) == (
        "rate_limited",
        429,
        case.provider,
        2,
    )
    assert str(error).startswith(f"{case.provider}:test-model request failed: rate_limited")
