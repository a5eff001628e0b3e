"""Small fixes of wait and delegate: each test failed before its fix."""

from __future__ import annotations

import asyncio
import time

from actor_helpers import SupervisorFactory

from actors import ChildControl, ChildOutcome, ChildRequest


async def quick_runner(request: ChildRequest, control: ChildControl) -> ChildOutcome:
    return ChildOutcome.completed(
        f"out:{request.prompt}", context_delta={"history": [request.prompt]}, usage={"tokens": 3}
    )


def test_wait_on_an_unknown_attempt_answers_not_found_at_once(
    make_supervisor: SupervisorFactory,
) -> None:
    supervisor = make_supervisor(runner=quick_runner)
    start = time.monotonic()
    waited = supervisor.wait_sync("subattempt_nope", 30)
    assert waited.status == "not_found"
    assert waited.attempt_id == "subattempt_nope"
    assert waited.known_attempt_ids == []
    assert time.monotonic() - start < 5.0  # not the 30 s timeout

    async def main() -> None:
        begun = time.monotonic()
        result = await supervisor.wait("subattempt_nope", 30)
        assert result.status == "not_found"
        assert time.monotonic() - begun < 5.0

    asyncio.run(main())
