"""Hostile tool arguments from the model: unknown fields, reserved owner keys, wrong
types, huge strings. The model gets one retry prompt naming the problem, the run
finishes, no attempt is admitted and the store is unchanged."""

from __future__ import annotations

import pytest

from properties.reliability._hostile import (
    TOOL_ARGUMENT_CASES,
    ToolArgsCase,
    check_tool_arguments,
    tool_bench,
)


@pytest.mark.parametrize(
    "case", TOOL_ARGUMENT_CASES, ids=[case.name for case in TOOL_ARGUMENT_CASES]
)
async def test_hostile_tool_arguments_become_a_retry_prompt_and_reach_no_store(
    case: ToolArgsCase,
) -> None:
    async with tool_bench() as bench:
        assert await check_tool_arguments(bench, case) == []


def test_every_tool_of_both_topologies_is_covered() -> None:
    tools = {case.tool for case in TOOL_ARGUMENT_CASES}

    assert tools == {
        "delegate",
        "spawn_delegate",
        "steer_subagent",
        "cancel_subagent",
        "wait_subagent",
        "subagent_info",
    }


async def test_valid_arguments_are_a_violation_of_the_hostile_check() -> None:
    fine = ToolArgsCase("valid", "subagent_info", {}, "x")

    async with tool_bench() as bench:
        found = await check_tool_arguments(bench, fine)

    assert found == ["tool-arguments[valid]: 0 retry prompts, expected 1"]
