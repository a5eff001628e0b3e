"""Token and request accounting shared between a run and its delegated children."""

from __future__ import annotations

from typing import Any, Self

import msgspec

from .._errors import PayloadError


class Usage(msgspec.Struct, kw_only=True):
    """Live usage counters: requests, input/output tokens, cached input tokens, tool calls.

    Unlike payload records this is mutable on purpose: a run increments it in
    place, and a parent context absorbs a child's counters when a delegation
    ends (so a parent's usage includes its children's). Snapshots handed to
    hooks and results are copies. Not thread-safe: mutate it from the event
    loop running the agent.
    """

    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    tool_calls: int = 0
    #: Of ``input_tokens``, how many a provider read from its prompt cache.
    cache_read_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def incr(self, other: Usage) -> None:
        """Add ``other``'s counters into this one."""
        self.requests += other.requests
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.tool_calls += other.tool_calls
        self.cache_read_tokens += other.cache_read_tokens

    def since(self, start: Usage) -> Usage:
        """The counters accumulated after ``start`` was copied from this object."""
        return Usage(
            requests=self.requests - start.requests,
            input_tokens=self.input_tokens - start.input_tokens,
            output_tokens=self.output_tokens - start.output_tokens,
            tool_calls=self.tool_calls - start.tool_calls,
            cache_read_tokens=self.cache_read_tokens - start.cache_read_tokens,
        )

    def copy(self) -> Usage:
        return Usage(
            requests=self.requests,
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            tool_calls=self.tool_calls,
            cache_read_tokens=self.cache_read_tokens,
        )

    def to_value(self) -> dict[str, int]:
        """The counters as JSON; ``cache_read_tokens`` only when non-zero (it defaults to 0)."""
        value = {
            "requests": self.requests,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "tool_calls": self.tool_calls,
        }
        if self.cache_read_tokens:
            value["cache_read_tokens"] = self.cache_read_tokens
        return value

    @classmethod
    def from_value(cls, value: Any) -> Self:
        try:
            return msgspec.convert(value, cls)
        except msgspec.ValidationError as error:
            raise PayloadError(
                f"value does not decode into Usage: {error}", type="Usage", detail=str(error)
            ) from error
