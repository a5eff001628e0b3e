"""The facade talks to the supervisor actor in typed requests, and each public
operation is one body whose blocking and coroutine forms cannot drift."""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
from typing import Any

import msgspec
import pytest
from actor_helpers import SupervisorFactory

from actors import BackgroundSubagentError, BackgroundSubagentSupervisor
from actors._messages import Ask, SnapshotRequest, SupervisorRequest
from actors._twins import Await, Blocking, Steps, run_async, run_blocking

PAIRS = ("delegate", "steer", "cancel", "wait", "info", "take_pending", "shutdown_checked")


@pytest.mark.parametrize("name", PAIRS)
def test_both_forms_of_an_operation_run_one_body(name: str) -> None:
    blocking = getattr(BackgroundSubagentSupervisor, f"{name}_sync")
    coroutine = getattr(BackgroundSubagentSupervisor, name)
    assert inspect.iscoroutinefunction(coroutine)
    assert not inspect.iscoroutinefunction(blocking)
    assert blocking.__wrapped__ is coroutine.__wrapped__
    assert inspect.signature(blocking) == inspect.signature(coroutine)
    assert blocking.__doc__ and blocking.__doc__ in coroutine.__doc__


def test_every_request_is_a_frozen_keyword_only_struct() -> None:
    for request in SupervisorRequest.__args__:  # type: ignore[attr-defined]
        assert issubclass(request, msgspec.Struct)
        assert request.__struct_config__.frozen
        parameters = inspect.signature(request).parameters.values()
        assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in parameters)


def test_a_request_of_an_unknown_type_is_answered_with_an_error(
    make_supervisor: SupervisorFactory,
) -> None:
    supervisor = make_supervisor()
    ref = supervisor._ensure_started()
    reply: concurrent.futures.Future[Any] = concurrent.futures.Future()
    ref.tell(Ask(request=object(), reply=reply))  # type: ignore[arg-type]
    with pytest.raises(AssertionError):
        reply.result(timeout=5)
    # The actor survived it and still answers.
    assert supervisor._ask(SnapshotRequest()).result(timeout=5) == []


def _body(future: concurrent.futures.Future[int], log: list[str]) -> Steps[str]:
    try:
        yield Await(future, timeout=0.0)
    except TimeoutError:
        log.append("timed out")
    value = yield Blocking(lambda: 41)
    try:
        yield Blocking(_raise)
    except BackgroundSubagentError.Closing:
        log.append("raised")
    return f"{value + 1}"


def _raise() -> None:
    raise BackgroundSubagentError.Closing("closed")


def test_a_body_runs_alike_blocking_and_on_a_loop() -> None:
    blocking_log: list[str] = []
    async_log: list[str] = []
    assert run_blocking(_body(concurrent.futures.Future(), blocking_log)) == "42"
    assert asyncio.run(run_async(_body(concurrent.futures.Future(), async_log))) == "42"
    assert blocking_log == async_log == ["timed out", "raised"]
