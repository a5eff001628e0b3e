"""``subagents chat``: an interactive session with background delegation.

One durable session on an in-process host (in memory, or ``--data-dir``) whose
supervisor lives as long as the chat. Each line on stdin is a run of the
parent profile; its answer is printed when the run ends. Results of
background subagents arrive later, as continuation runs the host admits once
per result; each is printed as it is delivered (``↳ background ...``). At the
end of input the chat waits (``--wait`` seconds at most) for the results
still running, then shuts the host down. Works with a pipe too.

Lines starting with ``/`` are commands, never prompts: ``/help``,
``/attempts`` (this session's background attempts), ``/quit``. A late result
that arrives while ``you>`` waits is printed above a fresh prompt. Ctrl-C
cancels the live run and says what it cancelled (exit status 130).
``--session ID --data-dir DIR`` resumes a durable session; results that
arrived meanwhile are delivered (and shown) as the host starts.

Without ``--config`` (and ``$SUBAGENTS_CONFIG``) it uses the offline chat
configuration shipped with the package: the scripted ``demo:assistant`` hands
each prompt to ``researcher`` (a ``test:echo`` child) in the background.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import threading
import time
from dataclasses import dataclass
from typing import TextIO

from rich.console import Console
from rich.markup import escape

from storage import ASYNC_SUBAGENT_RESULT, NotFound, RunConflict, StoreError

from .._host import DataDirBusy, HostConfig, load_host_config, open_host
from .._host._agents import UnknownProfile
from .._host._jsonrpc import Connection, ErrorCode, RpcError
from .._host._methods import (
    HostEvent,
    RunInterruptParams,
    RunStartParams,
    SessionCreateParams,
    SessionRef,
)
from .._host._service import HostService
from ._common import CliError, add_config_option, config_path, positive
from ._demo import CHAT_CONFIG, register_demo_models

_TERMINAL = {"completed", "failed", "cancelled"}
_ENDS = {"run.completed", "run.failed", "run.cancelled"}


class _Chat:
    def __init__(
        self, service: HostService, console: Console, session_id: str, interactive: bool = False
    ) -> None:
        self.service = service
        self.console = console
        self.session_id = session_id
        self.interactive = interactive
        self.at_prompt = False  # "you> " is on screen, waiting for a line
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
        self.say(
            f"[magenta]↳ background result from {escape(name)}[/] "
            f"[dim]({escape(attempt_id)})[/]: {escape(text)}"
        )

    def prompt(self) -> None:
        if self.interactive:
            self.console.print("[bold]you>[/] ", end="")
            self.at_prompt = True

    def say(self, markup: str) -> None:
        """Print a line; a late one that lands on the waiting prompt moves it below."""
        redraw = self.at_prompt
        if redraw:
            self.console.print()
            self.at_prompt = False
        self.console.print(markup, highlight=False)
        if redraw:
            self.prompt()

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
                self.say(
                    f"[magenta]↳ background result from {escape(a.subagent_name)}[/] "
                    f"[dim]({escape(a.attempt_id)})[/]: {escape(text) or a.execution_status} "
                    "[dim](handed to the parent inside a run: no continuation run needed)[/]"
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


HELP = """commands:
  /help      this list
  /attempts  this session's background attempts: id, subagent, status, delivery
  /quit      end the chat (also /exit, or end of input)
anything else is a prompt for the parent"""


def _reader(stream: TextIO) -> asyncio.Queue[str | None]:
    """Lines of ``stream`` on a queue (``None`` at the end), read by a daemon thread,
    so an interrupted chat never waits for a line that will not come."""
    loop = asyncio.get_running_loop()
    lines: asyncio.Queue[str | None] = asyncio.Queue()

    def read() -> None:
        for line in iter(stream.readline, ""):
            loop.call_soon_threadsafe(lines.put_nowait, line)
        loop.call_soon_threadsafe(lines.put_nowait, None)

    threading.Thread(target=read, name="subagents-chat-stdin", daemon=True).start()
    return lines


def _attempts_table(chat: _Chat) -> None:
    try:
        attempts = chat.service.store.list_attempts(chat.service.namespace_id)
    except StoreError as exc:
        chat.say(f"[red]cannot list attempts: {escape(str(exc))}[/]")
        return
    mine = [a for a in attempts if a.parent_session_id == chat.session_id]
    if not mine:
        chat.say("[dim]no background attempts in this session yet[/]")
    for a in mine:
        chat.say(
            f"{escape(a.attempt_id)}  {escape(a.subagent_name)}  "
            f"{a.execution_status}  {a.delivery_status}"
        )


def _command(chat: _Chat, line: str) -> bool | None:
    """A ``/command``: ``False`` to end the chat, ``True`` when handled; ``None``: a prompt."""
    if not line.startswith("/"):
        return None
    word = line.split(maxsplit=1)[0]
    if word in {"/quit", "/exit"}:
        return False
    if word == "/help":
        chat.say(escape(HELP))
    elif word == "/attempts":
        _attempts_table(chat)
    else:
        chat.say(f"[yellow]unknown command {escape(word)}[/]; /help lists the commands")
    return True


async def _interrupted(chat: _Chat, data_dir: str | None) -> int:
    """Ctrl-C: cancel the live runs of the session and say what was cancelled."""
    chat.at_prompt = False
    chat.console.print()
    try:
        runs = chat.service.store.list_runs(chat.session_id)
        attempts = chat.service.store.list_attempts(chat.service.namespace_id)
    except StoreError:
        runs, attempts = [], []
    live = [r for r in runs if str(r.status) not in _TERMINAL]
    for record in live:
        with contextlib.suppress(RpcError, StoreError):
            await chat.service.run_interrupt(
                RunInterruptParams(
                    session_id=chat.session_id, run_id=record.run_id, reason="interrupted (Ctrl-C)"
                ),
                Connection("chat"),
            )
    running = [
        a.attempt_id
        for a in attempts
        if a.parent_session_id == chat.session_id and str(a.execution_status) not in _TERMINAL
    ]
    said = f"cancelled run {', '.join(r.run_id for r in live)}" if live else "no run was live"
    chat.console.print(f"[yellow]interrupted: {escape(said)}[/]", highlight=False)
    if running:
        fate = (
            f"resume with subagents chat --data-dir {data_dir} --session {chat.session_id}"
            " (their results are delivered then)"
            if data_dir
            else "an in-memory chat keeps nothing"
        )
        chat.console.print(
            f"[yellow]cancelled {len(running)} background attempt(s) with the chat: "
            f"{escape(', '.join(running))}; {escape(fate)}[/]",
            highlight=False,
        )
    return 130


async def _converse(chat: _Chat, stdin: TextIO, wait: float) -> int:
    lines = _reader(stdin)
    while True:
        chat.prompt()
        line = await lines.get()
        chat.at_prompt = False
        if line is None:
            break
        handled = _command(chat, line.strip())
        if handled is False:
            break
        if handled or not line.strip():
            continue
        await chat.ask(line.strip(), time.monotonic() + max(wait, 30.0))
    deadline = time.monotonic() + wait
    if chat.pending():
        chat.say("[dim]waiting for background results ...[/]")
    while chat.pending():
        chat.show_in_run()
        if time.monotonic() > deadline:
            chat.say(f"[yellow]{chat.pending()} background results still pending[/]")
            return 1
        await chat.wait_change(min(0.5, max(deadline - time.monotonic(), 0.01)))
    chat.show_in_run()
    return 0


async def _chat(
    service: HostService,
    console: Console,
    options: _Options,
    stdin: TextIO,
) -> int:
    interactive = stdin.isatty() if options.interactive is None else options.interactive
    chat: _Chat | None = None
    try:
        if options.session is not None:
            # Listen before the host starts: the results delivered at start show too.
            chat = _Chat(service, console, options.session, interactive)
            service.add_listener(options.session, chat.on_event)
            await service.start()
            try:
                found = await service.session_get(
                    SessionRef(session_id=options.session), Connection("chat")
                )
            except (NotFound, RpcError) as exc:
                if isinstance(exc, RpcError) and exc.code != ErrorCode.NOT_FOUND:
                    raise
                raise CliError(
                    f"no session {options.session!r} in {options.data_dir}",
                    "check the id (subagents attempts list --data-dir DIR --json shows the"
                    " sessions), or start a new chat without --session",
                ) from None
            console.print(
                f"[dim]resumed session {found.session_id}, profile {found.profile}; "
                "/help lists the commands[/]",
                highlight=False,
            )
        else:
            await service.start()
            session = await service.session_create(
                SessionCreateParams(profile=options.profile), Connection("chat")
            )
            chat = _Chat(service, console, session.session_id, interactive)
            service.add_listener(session.session_id, chat.on_event)
            console.print(
                f"[dim]session {session.session_id}, profile {session.profile}; "
                "one prompt per line, /help lists the commands, /quit or EOF to end[/]",
                highlight=False,
            )
        return await _converse(chat, stdin, options.wait)
    except asyncio.CancelledError:  # Ctrl-C (asyncio.run cancels the main task)
        if chat is None:
            raise
        return await _interrupted(chat, options.data_dir)
    finally:
        await service.close()


@dataclass(frozen=True)
class _Options:
    profile: str | None = None
    data_dir: str | None = None
    session: str | None = None
    wait: float = 30.0
    interactive: bool | None = None


def run_chat(
    *,
    config: str | None = None,
    profile: str | None = None,
    data_dir: str | None = None,
    session: str | None = None,
    wait: float = 30.0,
    stdin: TextIO | None = None,
    console: Console | None = None,
    interactive: bool | None = None,
) -> int:
    """Run the chat loop; returns the exit status (1: results still pending at the end,
    130: interrupted). ``session`` resumes that durable session (needs ``data_dir``);
    ``interactive`` (default: whether stdin is a terminal) draws the ``you>`` prompt."""
    register_demo_models()
    if session is not None and data_dir is None:
        raise CliError(
            f"--session {session} needs the --data-dir that holds it",
            "pass --data-dir DIR (an in-memory chat keeps no sessions)",
        )
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
    options = _Options(
        profile=profile, data_dir=data_dir, session=session, wait=wait, interactive=interactive
    )
    return asyncio.run(_chat(service, console, options, stdin or sys.stdin))


def run(args: argparse.Namespace) -> int:
    return run_chat(
        config=config_path(args.config),
        profile=args.profile,
        data_dir=args.data_dir,
        session=args.session,
        wait=args.wait,
    )


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    chat = sub.add_parser("chat", help="interactive session, background delegation")
    chat.set_defaults(handler=run)
    add_config_option(chat)
    chat.add_argument("--profile", help="parent profile (default: host.default_profile)")
    chat.add_argument("--data-dir", help="durable store (default: in memory)")
    chat.add_argument(
        "--session", metavar="ID", help="resume this session of --data-dir (its results too)"
    )
    chat.add_argument(
        "--wait", type=positive, default=30.0, help="at EOF, wait this long for late results"
    )
