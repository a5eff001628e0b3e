"""Prompts and steering at 0, limit-1, limit, limit+1 and 16 MiB, on the supervisor
and on the host's RPC: at or below the limit admitted, above it refused with
PromptTooLarge / SteeringTooLarge (or INVALID_PARAMS / REQUEST_TOO_LARGE over RPC),
and a refusal writes nothing."""

from __future__ import annotations

import pytest

from properties.reliability._hostile import SIZE_CASES, SizeCase, check_size, sized_text


@pytest.mark.parametrize("case", SIZE_CASES, ids=[case.name for case in SIZE_CASES])
async def test_a_sized_input_is_admitted_up_to_its_limit_and_refused_above(
    case: SizeCase,
) -> None:
    assert await check_size(case) == []


@pytest.mark.parametrize(("size", "multibyte"), [(0, True), (7, True), (8, True), (8, False)])
def test_sized_text_counts_utf8_bytes(size: int, multibyte: bool) -> None:
    assert len(sized_text(size, multibyte).encode("utf-8")) == size


def test_every_surface_gets_each_size_once() -> None:
    surfaces = {case.surface for case in SIZE_CASES}
    huge = [case.surface for case in SIZE_CASES if case.size == 16 * 1024 * 1024]

    assert sorted(huge) == sorted(surfaces) == ["delegate", "run.start", "run.steer", "steer"]
