"""An API key never appears in errors, logs, stream records, events or reprs.

The fake server echoes the key it received into its error messages, as real
servers do for a bad key, so a leak would show.
"""

from __future__ import annotations

import logging
import pickle
import traceback

import pytest
from fake_provider_server import FakeProviderServer
from provider_cases import API_KEY, ProviderCase, RecordingSleep

from subagents import AgentBuilder, AgentContext, ProviderAuthenticationError, model_from_id
from subagents._providers import Secret
from subagents._providers._common import redact


def _everything_about(error: BaseException) -> str:
    """Every text a user could get from an error: str, repr, fields, the formatted chain."""
    fields = getattr(error, "fields", {})
    return "\n".join([str(error), repr(error), repr(fields), *traceback.format_exception(error)])


async def test_an_echoed_key_is_redacted_from_errors_and_retry_logs(
    case: ProviderCase, server: FakeProviderServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    server.script(case.reply("error_429_echo"), case.reply("error_401"))
    agent = AgentBuilder(case.model(server, sleep=RecordingSleep())).build()

    with pytest.raises(ProviderAuthenticationError) as raised:
        await agent.run("hi")

    assert API_KEY in server.requests[0].headers.get(
        "x-api-key", server.requests[0].headers.get("authorization", "")
    )
    safe = f"{case.provider}:test-model request failed: authentication"
    assert str(raised.value).startswith(safe)
    assert API_KEY not in _everything_about(raised.value)
    assert raised.value.__cause__ is None
    assert raised.value.__context__ is None
    assert "retrying" in caplog.text
    assert API_KEY not in caplog.text


async def test_stream_records_and_context_events_never_carry_the_key(
    case: ProviderCase, server: FakeProviderServer
) -> None:
    server.script(case.reply("error_401"))
    agent = AgentBuilder(case.model(server)).build()
    context = AgentContext()
    stream = agent.run_stream("hi", context)
    records = []

    with pytest.raises(ProviderAuthenticationError) as raised:
        async for record in stream:
            records.append(record)

    assert API_KEY not in repr(records)
    assert API_KEY not in repr(context.events.events())
    assert API_KEY not in _everything_about(raised.value)


def test_a_model_repr_masks_its_key(case: ProviderCase) -> None:
    model = model_from_id(f"{case.provider}:test-model", api_key=API_KEY, temperature=0.1)

    assert API_KEY not in repr(model)
    assert API_KEY not in str(vars(model))
    assert "Secret('********')" in repr(model)


def test_a_secret_shows_nothing_and_refuses_pickling() -> None:
    secret = Secret(API_KEY)

    assert API_KEY not in f"{secret} {secret!r}"
    assert secret.reveal() == API_KEY
    with pytest.raises(TypeError):
        pickle.dumps(secret)


def test_redaction_also_catches_key_shaped_tokens_it_was_not_told_about() -> None:
    text = "bad key sk-other-0123456789 and header Bearer abcdef123456"

    assert redact(text) == "bad key [redacted] and header [redacted]"
