"""Usage counters."""

from __future__ import annotations

import pytest

from subagents import PayloadError, Usage


def test_usage_adds_copies_and_diffs() -> None:
    total = Usage(requests=1, input_tokens=10, output_tokens=2, tool_calls=1)
    start = total.copy()

    total.incr(Usage(requests=2, input_tokens=5, output_tokens=1))

    assert total.since(start) == Usage(requests=2, input_tokens=5, output_tokens=1)
    assert start == Usage(requests=1, input_tokens=10, output_tokens=2, tool_calls=1)
    assert total.total_tokens == 18


def test_usage_round_trips_through_values() -> None:
    usage = Usage(requests=3, tool_calls=1)

    assert Usage.from_value(usage.to_value()) == usage
    with pytest.raises(PayloadError):
        Usage.from_value({"requests": "many"})
