"""The ``sizes`` family: prompts and steering at 0, limit-1, limit, limit+1 and 16 MiB,
on the supervisor and on the host's RPC."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass

from actors import (
    BackgroundSubagentError,
    BackgroundSubagentSupervisor,
    ChildControl,
    ChildOutcome,
    ChildRequest,
    SupervisorLimits,
)
from subagents._host._service import MAX_INPUT_BYTES, MAX_STEERING_BYTES

from ._common import (
    HUGE,
    PARAMS,
    TIMEOUT,
    TOO_LARGE,
    untyped,
)
from ._host import HostileHost, hostile_host, store_snapshot
from ._jsonrpc import code_of


@dataclass(frozen=True)
class SizeCase:
    """A prompt or steering message of ``size`` bytes on one surface.

    Surfaces: ``delegate`` / ``steer`` (the supervisor, limits 64 KiB / 16 KiB),
    ``run.start`` / ``run.steer`` (the host's RPC, same limits). ``accepted`` says
    whether it must be admitted; a refusal must be ``error`` (a
    :class:`BackgroundSubagentError` variant name, or a JSON-RPC code).
    ``multibyte`` builds it from two-byte characters (bytes, not characters, count).
    """

    name: str
    surface: str
    size: int
    accepted: bool
    error: str | int | None = None
    multibyte: bool = False


_PROMPT_LIMIT = SupervisorLimits().max_prompt_bytes
_STEER_LIMIT = SupervisorLimits().max_steering_bytes


def _size_cases() -> Iterator[SizeCase]:
    surfaces: tuple[tuple[str, int, str | int, str | int], ...] = (
        ("delegate", _PROMPT_LIMIT, "PromptTooLarge", "PromptTooLarge"),
        ("steer", _STEER_LIMIT, "SteeringTooLarge", "SteeringTooLarge"),
        ("run.start", MAX_INPUT_BYTES, PARAMS, TOO_LARGE),
        ("run.steer", MAX_STEERING_BYTES, PARAMS, TOO_LARGE),
    )
    for surface, limit, over, huge in surfaces:
        # Zero: the supervisor admits an empty prompt and steering (only a maximum is
        # specified); the host's RPC requires 1 byte at least (INVALID_PARAMS).
        rpc = surface.startswith("run.")
        yield SizeCase(f"{surface}-0", surface, 0, not rpc, PARAMS if rpc else None)
        yield SizeCase(f"{surface}-limit-1", surface, limit - 1, True)
        yield SizeCase(f"{surface}-limit", surface, limit, True)
        yield SizeCase(f"{surface}-limit-multibyte", surface, limit, True, multibyte=True)
        yield SizeCase(f"{surface}-limit+1", surface, limit + 1, False, over)
        yield SizeCase(
            f"{surface}-limit+1-multibyte", surface, limit + 1, False, over, multibyte=True
        )
        yield SizeCase(f"{surface}-16MiB", surface, HUGE, False, huge)


SIZE_CASES: tuple[SizeCase, ...] = tuple(_size_cases())


def sized_text(size: int, multibyte: bool) -> str:
    """Text of exactly ``size`` UTF-8 bytes (two-byte characters first when ``multibyte``)."""
    if not multibyte:
        return "x" * size
    return "\u00e9" * (size // 2) + "x" * (size % 2)


class _GatedRunner:
    """A child runner that reports when it started and ends when released.

    The attempt persists ``starting`` before it calls the runner, so once
    ``started`` is set the attempt's record stays put until its first heartbeat.
    """

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.release = asyncio.Event()

    async def __call__(self, request: ChildRequest, control: ChildControl) -> ChildOutcome:
        self.started.set()
        await self.release.wait()
        return ChildOutcome.completed("done")


async def check_supervisor_size(case: SizeCase) -> list[str]:
    """``delegate`` / ``steer`` on a supervisor of default limits."""
    where = f"sizes[{case.name}]"
    runner = _GatedRunner()
    supervisor = BackgroundSubagentSupervisor(
        runner=runner, loop=asyncio.get_running_loop(), limits=SupervisorLimits(shutdown_grace=5.0)
    )
    text = sized_text(case.size, case.multibyte)
    found: list[str] = []
    try:
        await supervisor.info()  # the supervisor creates its session record on first use
        target = None
        if case.surface == "steer":
            target = (await supervisor.delegate("research", "p")).attempt_id
            await asyncio.wait_for(runner.started.wait(), TIMEOUT)
        before = store_snapshot(supervisor.store)
        try:
            if target is None:
                await supervisor.delegate("research", text)
            else:
                await supervisor.steer(target, text)
        except BackgroundSubagentError as error:
            kind = type(error).__qualname__.rpartition(".")[2]
            if case.accepted:
                found.append(f"{where}: refused with {kind}")
            elif kind != case.error:
                found.append(f"{where}: refused with {kind}, expected {case.error}")
            elif error.fields.get("size_bytes") != case.size:
                found.append(f"{where}: size_bytes {error.fields.get('size_bytes')}")
            if store_snapshot(supervisor.store) != before:
                found.append(f"{where}: a refused input changed the store")
        else:
            if not case.accepted:
                found.append(f"{where}: accepted, expected {case.error}")
    except BaseException as exc:
        found.append(untyped(where, exc))
    finally:
        runner.release.set()
        await supervisor.shutdown_checked(10.0)
    return found


async def check_host_size(host: HostileHost, case: SizeCase) -> list[str]:
    """``run.start`` input / ``run.steer`` message on a running host."""
    where = f"sizes[{case.name}]"
    text = sized_text(case.size, case.multibyte)
    session = f"sizes-{case.name}"
    try:
        await host.call("session.create", {"session_id": session})
        run_id = None
        if case.surface == "run.steer":
            started = await host.call(
                "run.start", {"session_id": session, "input": "steer me", "profile": "gated"}
            )
            run_id = started["result"]["run_id"]
            # Running and inside its model: its record stays put until the lease renewal.
            await asyncio.wait_for(host.entered.wait(), TIMEOUT)
        before = host.snapshot()
        if run_id is None:
            reply = await host.call("run.start", {"session_id": session, "input": text})
        else:
            reply = await host.call(
                "run.steer", {"session_id": session, "run_id": run_id, "message": text}
            )
    except BaseException as exc:
        return [untyped(where, exc)]
    found = []
    if case.accepted:
        if "result" not in reply:
            found.append(f"{where}: refused: {str(reply)[:200]}")
    else:
        if code_of(reply) != case.error:
            found.append(f"{where}: expected error {case.error}, got {str(reply)[:200]}")
        if host.snapshot() != before:
            found.append(f"{where}: a refused input changed the store")
    return found + await host.probe(where)


async def check_size(case: SizeCase, host: HostileHost | None = None) -> list[str]:
    """One size case on its surface (``host`` for the RPC surfaces)."""
    if case.surface in ("delegate", "steer"):
        return await check_supervisor_size(case)
    if host is not None:
        return await check_host_size(host, case)
    async with hostile_host() as fresh:
        return await check_host_size(fresh, case)
