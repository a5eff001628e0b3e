"""``subagents chat``: an interactive session with background delegation.

One durable session on an in-process host (in memory, or ``--data-dir``) whose
supervisor lives as long as the chat. Each line on stdin is a run of the
parent profile; its answer is printed when the run ends. Results of
background subagents arrive later, as continuation runs the host admits once
per result; each is printed as it is delivered (``↳ background ...``). At the
end of input the chat waits (``--wait`` seconds at most) for the results
still running, then shuts the host down. Works with a pipe too.

Without ``--config`` (and ``$SUBAGENTS_CONFIG``) it uses the offline chat
configuration shipped with the package: the scripted ``demo:assistant`` hands
each prompt to ``researcher`` (a ``test:echo`` child) in the background.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
from typing import TextIO

from rich.console import Console
from rich.markup import escape

from storage import ASYNC_SUBAGENT_RESULT, RunConflict, StoreError

from .._host import DataDirBusy, HostConfig, load_host_config, open_host
from .._host._agents import UnknownProfile
from .._host._jsonrpc import Connection, ErrorCode, RpcError
from .._host._methods import HostEvent, RunStartParams, SessionCreateParams
from .._host._service import HostService
from ._common import CliError, add_config_option, config_path, positive
from ._demo import CHAT_CONFIG, register_demo_models

_TERMINAL = {"completed", "failed", "cancelled"}
_ENDS = {"run.completed", "run.failed", "run.cancelled"}


class _Chat:
    def __init__(self, service: HostService, console: Console, session_id: str) -> None:
        self.service = service
        self.console = console
        self.session_id = session_id
        self.changed = asyncio.Event()
        self.ends: dict[str, HostEvent] = {}
        self.continuations: dict[str, str] = {}  # run id -> attempt id
        self.shown: set[str] = set()  # attempt ids whose delivery was shown

    def on_event(self, event: HostEvent) -> None:
        if event.kind == "run.admitted" and event.data.get("trigger_type") == ASYNC_SUBAGENT_RESULT:
            self.continuations[event.run_id or ""] = str(event.data.get("attempt_id", ""))
        elif event.kind in _ENDS and event.run_id is not None:
            self.ends[event.run_id] = event
            attempt_id = self.continuations.get(event.run_id)
            if attempt_id is not None and attempt_id not in self.shown:
                self.shown.add(attempt_id)
                self.show_background(attempt_id, event)
        self.show_in_run()
        self.changed.set()

    def show_background(self, attempt_id: str, event: HostEvent) -> None:
        name = "subagent"
        with contextlib.suppress(StoreError):
            name = self.service.store.load_attempt(attempt_id).subagent_name
        text = str(event.data.get("output") or event.data.get("error") or event.data)
        self.console.print(
            f"[magenta]↳ background result from {escape(name)}[/] "
            f"[dim]({escape(attempt_id)})[/]: {escape(text)}",
            highlight=False,
        )

    async def wait_change(self, timeout: float) -> None:
        self.changed.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.changed.wait(), timeout)

    async def ask(self, prompt: str, deadline: float) -> None:
        while True:
            try:
                run = await self.service.run_start(
                    RunStartParams(session_id=self.session_id, input=prompt), Connection("chat")
                )
                break
            except RunConflict:
                pass  # a continuation run is live: ask again once a run ends
            except RpcError as exc:
                if exc.code != ErrorCode.RUN_CONFLICT:
                    raise
            if time.monotonic() > deadline:
                raise TimeoutError("the session stayed busy")
            await self.wait_change(deadline - time.monotonic())
        while run.run_id not in self.ends:
            if time.monotonic() > deadline:
                raise TimeoutError("the run did not end")
            await self.wait_change(deadline - time.monotonic())
        end = self.ends[run.run_id]
        self.show_in_run()
        if end.kind == "run.completed":
            self.console.print(
                f"[bold green]parent>[/] {escape(str(end.data.get('output', '')))}",
                highlight=False,
            )
        else:
            detail = end.data.get("error") or end.data.get("reason") or end.kind
            self.console.print(f"[bold red]parent ({end.kind}):[/] {escape(str(detail))}")

    def show_in_run(self) -> None:
        """Results the parent received inside one of its runs (no continuation run needed)."""
        try:
            attempts = self.service.store.list_attempts(self.service.namespace_id)
        except StoreError:
            return
        for a in attempts:
            if (
                a.parent_session_id == self.session_id
                and a.attempt_id not in self.shown
                and str(a.delivery_status) == "delivered"
                and a.continuation_run_id is None
            ):
                self.shown.add(a.attempt_id)
                ref = a.result_ref
                text = (ref.content or ref.error or "") if ref is not None else ""
                self.console.print(
                    f"[magenta]↳ background result from {escape(a.subagent_name)}[/] "
                    f"[dim]({escape(a.attempt_id)})[/]: {escape(text) or a.execution_status} "
                    "[dim](handed to the parent inside a run: no continuation run needed)[/]",
                    highlight=False,
                )

    def pending(self) -> int:
        """Background attempts of this session whose result is not delivered yet, plus live runs."""
        try:
            attempts = self.service.store.list_attempts(self.service.namespace_id)
            runs = self.service.store.list_runs(self.session_id)
        except StoreError:
            return 0
        waiting = [
            a
            for a in attempts
            if a.parent_session_id == self.session_id
            and not (str(a.execution_status) in _TERMINAL and str(a.delivery_status) == "delivered")
        ]
        return len(waiting) + sum(1 for r in runs if str(r.status) not in _TERMINAL)


async def _read_line(stream: TextIO) -> str | None:
    line = await asyncio.get_running_loop().run_in_executor(None, stream.readline)
    return line if line else None


async def _chat(
    service: HostService, console: Console, profile: str | None, stdin: TextIO, wait: float
) -> int:
    await service.start()
    try:
        session = await service.session_create(
            SessionCreateParams(profile=profile), Connection("chat")
        )
        chat = _Chat(service, console, session.session_id)
        service.add_listener(session.session_id, chat.on_event)
        interactive = stdin.isatty()
        console.print(
            f"[dim]session {session.session_id}, profile {session.profile}; "
            "one prompt per line, /quit or EOF to end[/]",
            highlight=False,
        )
        while True:
            if interactive:
                console.print("[bold]you>[/] ", end="")
            line = await _read_line(stdin)
            if line is None or line.strip() in {"/quit", "/exit"}:
                break
            if not line.strip():
                continue
            await chat.ask(line.strip(), time.monotonic() + max(wait, 30.0))
        deadline = time.monotonic() + wait
        if chat.pending():
            console.print("[dim]waiting for background results ...[/]")
        while chat.pending():
            chat.show_in_run()
            if time.monotonic() > deadline:
                console.print(f"[yellow]{chat.pending()} background results still pending[/]")
                return 1
            await chat.wait_change(min(0.5, max(deadline - time.monotonic(), 0.01)))
        chat.show_in_run()
        return 0
    finally:
        await service.close()


def run_chat(
    *,
    config: str | None = None,
    profile: str | None = None,
    data_dir: str | None = None,
    wait: float = 30.0,
    stdin: TextIO | None = None,
    console: Console | None = None,
) -> int:
    """Run the chat loop; returns the exit status (1: results still pending at the end)."""
    register_demo_models()
    host_config: HostConfig = load_host_config(config or CHAT_CONFIG)
    if profile is not None and profile not in host_config.profiles:
        known = ", ".join(sorted(host_config.profiles))
        raise UnknownProfile(
            f"unknown profile {profile!r} (profiles: {known})",
            profile=profile,
            known=sorted(host_config.profiles),
            fix=f"use one of: {known}, or add [profiles.{profile}] to the config",
        )
    try:
        service = open_host(
            host_config, data_dir=data_dir, memory=data_dir is None, tick_seconds=0.1
        )
    except DataDirBusy as exc:  # its fix names --shared, which chat does not take
        raise CliError(
            exc.message, "stop that host, or give chat another --data-dir (or none: in memory)"
        ) from None
    console = console or Console(highlight=False)
    return asyncio.run(_chat(service, console, profile, stdin or sys.stdin, wait))


def run(args: argparse.Namespace) -> int:
    return run_chat(
        config=config_path(args.config),
        profile=args.profile,
        data_dir=args.data_dir,
        wait=args.wait,
    )


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    chat = sub.add_parser("chat", help="interactive session, background delegation")
    chat.set_defaults(handler=run)
    add_config_option(chat)
    chat.add_argument("--profile", help="parent profile (default: host.default_profile)")
    chat.add_argument("--data-dir", help="durable store (default: in memory)")
    chat.add_argument(
        "--wait", type=positive, default=30.0, help="at EOF, wait this long for late results"
    )
