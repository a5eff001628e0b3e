"""One :class:`ProviderCase` per provider: how to build its model and read its wire format.

The conversation tests are written once and run for every case; the case
knows the provider's endpoint, how tools and tool results look in its
request bodies, and how to build a model pointed at a fake server with an
injected, instant ``sleep`` (so retry tests never wait).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fake_provider_server import FakeProviderServer, Reply

from subagents import AnthropicModel, OpenAIChatModel, OpenAIResponsesModel, RetryPolicy
from subagents._providers import ProviderModel

API_KEY = "sk-test-DO-NOT-LEAK-0123456789abcdef"


@dataclass
class RecordingSleep:
    """An instant ``sleep`` that records every delay it was asked for."""

    delays: list[float] = field(default_factory=list)

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


def _chat_tool_names(body: dict[str, Any]) -> list[str]:
    return [tool["function"]["name"] for tool in body.get("tools", [])]


def _chat_tool_results(body: dict[str, Any]) -> list[tuple[str, str]]:
    return [(m["tool_call_id"], m["content"]) for m in body["messages"] if m["role"] == "tool"]


def _responses_tool_names(body: dict[str, Any]) -> list[str]:
    return [tool["name"] for tool in body.get("tools", [])]


def _responses_tool_results(body: dict[str, Any]) -> list[tuple[str, str]]:
    return [
        (item["call_id"], item["output"])
        for item in body["input"]
        if item.get("type") == "function_call_output"
    ]


def _anthropic_tool_names(body: dict[str, Any]) -> list[str]:
    return [tool["name"] for tool in body.get("tools", [])]


def _anthropic_tool_results(body: dict[str, Any]) -> list[tuple[str, str]]:
    return [
        (block["tool_use_id"], block["content"])
        for message in body["messages"]
        if message["role"] == "user"
        for block in message["content"]
        if block["type"] == "tool_result"
    ]


@dataclass(frozen=True)
class ProviderCase:
    provider: str
    model_class: type[ProviderModel]
    path: str
    env_var: str
    url_suffix: str
    tool_names: Callable[[dict[str, Any]], list[str]]
    tool_results: Callable[[dict[str, Any]], list[tuple[str, str]]]
    #: Text found in the first SSE event of a stream's end (its terminal event and after).
    terminal_marker: str = ""

    def reply(self, name: str) -> Reply:
        """The recorded JSON response ``name``."""
        return Reply.fixture(self.provider, name)

    def reply_stream(self, name: str) -> Reply:
        """The recorded event stream ``name``."""
        return Reply.fixture(self.provider, name, stream=True)

    def cut_stream(self, name: str) -> str:
        """The recorded stream ``name`` without its terminal event and what follows."""
        events = self.reply_stream(name).sse.split("\n\n")  # type: ignore[union-attr]
        end = next(i for i, event in enumerate(events) if self.terminal_marker in event)
        return "\n\n".join(events[:end]) + "\n\n"

    def base_url(self, server: FakeProviderServer) -> str:
        return server.url + self.url_suffix

    def model(
        self,
        server: FakeProviderServer,
        *,
        sleep: RecordingSleep | None = None,
        retry: RetryPolicy | None = None,
        **options: Any,
    ) -> ProviderModel:
        options.setdefault("api_key", API_KEY)
        return self.model_class(
            "test-model",
            base_url=self.base_url(server),
            sleep=RecordingSleep() if sleep is None else sleep,
            retry=RetryPolicy(jitter=0.0) if retry is None else retry,
            **options,
        )

    def __str__(self) -> str:
        return self.provider


CASES = [
    ProviderCase(
        provider="openai-chat",
        model_class=OpenAIChatModel,
        path="/v1/chat/completions",
        env_var="OPENAI_API_KEY",
        url_suffix="/v1",
        tool_names=_chat_tool_names,
        tool_results=_chat_tool_results,
        terminal_marker='"finish_reason":"',
    ),
    ProviderCase(
        provider="openai-responses",
        model_class=OpenAIResponsesModel,
        path="/v1/responses",
        env_var="OPENAI_API_KEY",
        url_suffix="/v1",
        tool_names=_responses_tool_names,
        tool_results=_responses_tool_results,
        terminal_marker="event: response.completed",
    ),
    ProviderCase(
        provider="anthropic",
        model_class=AnthropicModel,
        path="/v1/messages",
        env_var="ANTHROPIC_API_KEY",
        url_suffix="",
        tool_names=_anthropic_tool_names,
        tool_results=_anthropic_tool_results,
        terminal_marker="event: message_delta",
    ),
]


def other_case(case: ProviderCase) -> ProviderCase:
    """The next provider in :data:`CASES` (the child's, in cross-provider delegation)."""
    return CASES[(CASES.index(case) + 1) % len(CASES)]
