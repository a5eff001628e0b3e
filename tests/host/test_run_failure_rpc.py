"""A failed run tells the client why over RPC, in safe typed fields: ``run.status``
and ``run.list`` carry ``failure`` (category, the provider's safe reason, HTTP
status, provider) and the ``run.failed`` event the same, never provider text."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from host_helpers import Client, memory_service, next_event

from subagents import FunctionModel
from subagents._agent._models import ModelMessage, ModelRequestParameters
from subagents._errors import ProviderError
from subagents._host._methods import RunFailure, parse_failure
from subagents._specs._agent_spec import default_model_providers

CONFIG = """
[host]
lease_ttl = 5.0

[profiles.default]
model_id = "broken:gpt-x"

[profiles.plain]
model_id = "broken:plain"
"""

SECRET = "sk-this-must-not-leak"


def _broken(name: str, settings: Any) -> FunctionModel:
    async def run(messages: Sequence[ModelMessage], params: ModelRequestParameters) -> str:
        if name == "plain":
            raise ValueError(f"raw text {SECRET}")
        raise ProviderError(
            f"openai-chat model {name!r}: model_not_found (HTTP 404)",
            provider="openai-chat",
            model=name,
            status=404,
            category="model_not_found",
        )

    return FunctionModel(run)


async def _failed_run(profile: str) -> tuple[dict[str, Any], dict[str, Any], list[Any]]:
    providers = default_model_providers().with_provider("broken", _broken)
    service = memory_service(CONFIG, providers)
    await service.start()
    try:
        client = Client(service.dispatcher())
        await client.result("session.create", {"session_id": "s1"})
        run = await client.result(
            "run.start", {"session_id": "s1", "input": "hi", "profile": profile}
        )
        event = await next_event(service, "s1", "run.failed", run["run_id"])
        status = await client.result("run.status", {"session_id": "s1", "run_id": run["run_id"]})
        listed = (await client.result("run.list", {"session_id": "s1"}))["runs"]
        return status, dict(event.data), listed
    finally:
        await service.close()


async def test_a_provider_failure_names_its_reason_in_run_status_and_events() -> None:
    status, data, listed = await _failed_run("default")
    expected = {
        "category": "model_error",
        "reason": "model_not_found",
        "status": 404,
        "provider": "openai-chat",
    }
    assert status["status"] == "failed"
    assert status["failure"] == expected
    assert status["output_preview"] == "model_error: model_not_found (openai-chat, HTTP 404)"
    assert listed[0]["failure"] == expected
    assert data["failure"] == expected
    assert data["error"] == status["output_preview"]


async def test_another_failure_has_its_category_only_and_no_raw_text() -> None:
    status, data, _ = await _failed_run("plain")
    assert status["failure"] == {
        "category": "model_error",
        "reason": None,
        "status": None,
        "provider": None,
    }
    assert SECRET not in repr(status) and SECRET not in repr(data)


@pytest.mark.parametrize(
    "failure",
    [
        RunFailure(category="host_process_lost"),
        RunFailure(category="model_error", reason="rate_limited", status=429, provider="anthropic"),
        RunFailure(category="model_error", reason="timeout", provider="openai-responses"),
        RunFailure(category="model_error", reason="server_error", status=503),
    ],
)
def test_the_preview_text_reads_back_as_the_same_failure(failure: RunFailure) -> None:
    assert parse_failure(failure.describe()) == failure


def test_a_preview_that_is_not_a_failure_text_reads_as_none() -> None:
    assert parse_failure("the model said: Hello") is None
    assert parse_failure(None) is None
