"""Steering a live parent run: queued guidance joins the conversation at the next turn.

:class:`SteeredModel` wraps one run's model. Before each model request (a
turn boundary) it drains the run's steering queue and appends the messages,
as user prompt parts, to the latest request of the conversation; later turns
see them at the same place, so the history the model sees only grows. Tool
returns and the steering text travel in one request, which every provider
accepts (no two user turns in a row).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence

from .._agent._models import (
    Model,
    ModelMessage,
    ModelRequest,
    ModelRequestParameters,
    ModelResponse,
    ModelStreamEvent,
    UserPromptPart,
)

STEERING_PREFIX = "[steering from the user] "


class SteeredModel(Model):
    """``inner`` plus the steering ``drain()`` returns at each turn boundary (one run only)."""

    def __init__(
        self,
        inner: Model,
        drain: Callable[[], list[str]],
        on_delivered: Callable[[int], None] | None = None,
    ) -> None:
        self.inner = inner
        self.name = inner.name
        self._drain = drain
        self._on_delivered = on_delivered
        # (index of the request in the conversation, steering parts appended to it)
        self._injected: list[tuple[int, tuple[UserPromptPart, ...]]] = []

    def _conversation(self, messages: Sequence[ModelMessage]) -> list[ModelMessage]:
        pending = self._drain()
        if pending:
            index = max(
                (i for i, m in enumerate(messages) if isinstance(m, ModelRequest)), default=-1
            )
            if index >= 0:
                parts = tuple(UserPromptPart(content=STEERING_PREFIX + text) for text in pending)
                self._injected.append((index, parts))
                if self._on_delivered is not None:
                    self._on_delivered(len(pending))
        out = list(messages)
        for index, parts in self._injected:
            if index < len(out):
                request = out[index]
                if isinstance(request, ModelRequest):
                    out[index] = ModelRequest(parts=(*request.parts, *parts))
        return out

    async def request(
        self, messages: Sequence[ModelMessage], params: ModelRequestParameters
    ) -> ModelResponse:
        return await self.inner.request(self._conversation(messages), params)

    async def request_stream(
        self, messages: Sequence[ModelMessage], params: ModelRequestParameters
    ) -> AsyncIterator[ModelStreamEvent]:
        async for event in self.inner.request_stream(self._conversation(messages), params):
            yield event
