"""The ``subagents`` command line.

Subcommands: ``serve --stdio | --http`` (the durable RPC host, on a data
directory or, with ``--store postgresql://...``, on a database shared by
several hosts), ``db migrate`` (apply the PostgreSQL schema), ``run``
(one-shot, blocking delegation), ``worker`` (delegation disabled),
``diagram`` (mermaid of the lifecycles), ``verify`` (the properties suite),
``attempts list|show|cancel`` (trusted operations on a data directory or a
PostgreSQL store),
``chat`` (interactive, background delegation) and ``demo`` (the offline
end-to-end story: delegate, steer, cancel, kill, restart, reconcile).

Errors a user can fix (bad config, a busy or corrupt data directory, an
unknown profile, a model that cannot be resolved) print one readable line and
the fix on stderr, never a traceback, and exit with status 2.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import secrets
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from statemachines import SubagentsError
from statemachines._guard import require_ours

from ._host import (
    AttemptView,
    HostConfig,
    default_host_config,
    load_host_config,
    open_host,
)
from ._host._datadir import (
    OpenedStore,
    check_store_url,
    mask_url,
    open_store,
    open_store_url,
    redact,
    resolve_data_dir,
    store_url_error,
    url_password,
)
from ._host._trusted import TrustedAttempts

EXIT_USAGE = 2

_FIXES: dict[str, str] = {
    "ModelResolutionError": "check the model_id (provider:model) and the provider setup",
    "MissingApiKey": "export the provider's API key, or use a test: model",
    "ProviderNotInstalled": "install the provider's extra, e.g. pip install 'subagents[openai]'",
    "NotFound": "check the id (subagents attempts list --data-dir ... or --store ...)",
}


class _CliError(Exception):
    """A fixable error: ``message`` and ``fix`` are printed, exit status 2."""

    def __init__(self, message: str, fix: str) -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix


def _err() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True)


def _fail(message: str, fix: str) -> int:
    console = _err()
    console.print(f"[bold red]error:[/] {escape(message)}", markup=True)
    console.print(f"  [bold]fix:[/] {escape(fix)}", markup=True)
    return EXIT_USAGE


def _config(args: argparse.Namespace) -> HostConfig:
    path = getattr(args, "config", None)
    if path:
        return load_host_config(path)
    env = os.environ.get("SUBAGENTS_CONFIG")
    if env:
        return load_host_config(env)
    return default_host_config()


def _profile_name(args: argparse.Namespace, config: HostConfig) -> str:
    name: str = getattr(args, "profile", None) or config.host.default_profile
    return name


# -- serve ------------------------------------------------------------------------------------


class _Redact(logging.Filter):
    """Masks a store password in every record a handler emits (messages and tracebacks)."""

    def __init__(self, url: str) -> None:
        super().__init__()
        self.url = url

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        masked = redact(text, self.url)
        if masked != text:
            record.msg, record.args = masked, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text, self.url)
        return True


def _store_url(args: argparse.Namespace, config: HostConfig) -> str | None:
    """The PostgreSQL URL the host will use (``--store``, else the config's), if any."""
    if getattr(args, "store", None):
        return str(args.store)
    if getattr(args, "data_dir", None) or getattr(args, "memory", False):
        return None
    return config.host.store


def _serve(args: argparse.Namespace) -> int:
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    config = _config(args)
    url = _store_url(args, config)
    if url is not None and url_password(url):
        for handler in logging.getLogger().handlers:
            handler.addFilter(_Redact(url))
    service = open_host(
        config,
        data_dir=args.data_dir,
        store=args.store,
        memory=args.memory,
        shared=args.shared,
        host_instance_id=args.owner,
        tick_seconds=args.tick,
    )
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve_async(service, args))
    return 0


async def _serve_async(service: Any, args: argparse.Namespace) -> None:
    from ._host._http import serve_http  # noqa: PLC0415 - starlette/uvicorn only when serving
    from ._host._stdio import serve_stdio  # noqa: PLC0415

    try:
        await service.start()
    except BaseException:
        await service.close()
        raise
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        # Stop admission and close the service cleanly, on either transport.
        loop.add_signal_handler(sig, service.shutdown_requested.set)
    dispatcher = service.dispatcher()
    if args.stdio:
        await serve_stdio(service, dispatcher)
        return
    token = os.environ.get("SUBAGENTS_HOST_TOKEN") or secrets.token_urlsafe(32)
    token_file = Path(args.token_file) if args.token_file else None
    if token_file is None and service.data_dir is not None:
        token_file = Path(service.data_dir) / "http.token"
    if token_file is not None:
        token_file.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(token)

    def ready(url: str) -> None:
        line = {"listening": url, "token_file": str(token_file) if token_file else None}
        if token_file is None:
            line["token"] = token
        import json  # noqa: PLC0415

        sys.stdout.write(json.dumps(line) + "\n")
        sys.stdout.flush()

    await serve_http(service, dispatcher, token, port=args.port, ready=ready)


# -- run / worker -----------------------------------------------------------------------------


def _prompt(args: argparse.Namespace) -> str:
    if args.prompt and args.prompt != "-":
        return str(args.prompt)
    if sys.stdin.isatty():
        raise _CliError("no prompt given", "pass the prompt as an argument, or pipe it on stdin")
    return sys.stdin.read()


def _one_shot(args: argparse.Namespace, *, worker: bool) -> int:
    from ._host._agents import AgentFactory  # noqa: PLC0415
    from ._registry import SubagentDelegationMode  # noqa: PLC0415

    config = _config(args)
    factory = AgentFactory(config)
    mode = SubagentDelegationMode.DISABLED if worker else SubagentDelegationMode.BLOCKING
    agent, _installed = factory.build(_profile_name(args, config), mode)
    prompt = _prompt(args)
    result = agent.run_sync(prompt)
    sys.stdout.write(result.output + ("\n" if not result.output.endswith("\n") else ""))
    return 0


# -- diagram / verify -------------------------------------------------------------------------


def _diagram(args: argparse.Namespace) -> int:
    from statemachines import all_mermaid  # noqa: PLC0415

    sys.stdout.write(all_mermaid())
    return 0


def _verify(args: argparse.Namespace) -> int:
    from rich.progress import Progress  # noqa: PLC0415

    import properties  # noqa: PLC0415 - only `verify` needs the conformance suite

    require_ours("subagents verify", "properties")

    if args.report:
        return _verify_report(args)

    if args.profile not in properties.PROFILES:
        raise _CliError(
            f"unknown profile {args.profile!r}", f"use one of: {', '.join(properties.PROFILES)}"
        )
    machines = list(properties.MACHINES) if not args.machine else args.machine
    unknown = [m for m in machines if m not in properties.MACHINES]
    if unknown:
        raise _CliError(
            f"unknown machine {unknown[0]!r}", f"use one of: {', '.join(properties.MACHINES)}"
        )
    try:
        factories = [properties.resolve_factory(spec) for spec in (args.store or ["memory"])]
    except (ValueError, ImportError, AttributeError) as exc:
        raise _CliError(
            str(exc), "use --store memory, lmdb, lmdb-reopen or module:factory"
        ) from exc
    properties.load_profile(args.profile)
    settings = properties.profile_settings(args.profile)
    results = []
    started = time.monotonic()
    console = Console(highlight=False)
    with Progress(console=console, transient=False) as progress:
        task = progress.add_task("properties", total=len(machines) * len(factories))
        for name in machines:
            for factory in factories:
                progress.update(task, description=f"{name} x {factory.name}")
                results.append(properties.run_machine(name, factory, settings))
                progress.advance(task)
    table = Table(title=f"properties: profile {args.profile}")
    for column in ("machine", "store", "result", "examples", "steps", "ops", "seconds"):
        table.add_column(column)
    for r in results:
        table.add_row(
            r.machine,
            r.store,
            "[green]ok[/]" if r.ok else "[red]FAIL[/]",
            str(r.examples),
            str(r.steps),
            str(r.operations),
            f"{r.seconds:.1f}",
        )
    console.print(table)
    failed = [r for r in results if not r.ok]
    console.print(
        f"{len(results)} runs, {len(failed)} failures, {time.monotonic() - started:.1f}s",
        highlight=False,
    )
    for r in failed:
        console.print(f"\n[red]FAILURE[/] {r.machine} x {r.store}:\n{r.failure}")
        for line in r.reproduction:
            console.print("    " + line, markup=False)
    return 1 if failed else 0


_REPORT_SECTIONS = ("properties", "clock", "sigstop", "crash", "hostile", "load")


def _verify_report(args: argparse.Namespace) -> int:
    """Every reliability run at the profile's budget, one report, exit 1 on any violation."""
    import tempfile  # noqa: PLC0415

    from hypothesis import settings  # noqa: PLC0415

    import properties  # noqa: PLC0415 - the CLI is the one place that runs the suite

    from ._reliability import _report as rep  # noqa: PLC0415

    if args.profile not in rep.BUDGETS:
        raise _CliError(
            f"unknown report profile {args.profile!r}", f"use one of: {', '.join(rep.BUDGETS)}"
        )
    skip = set(args.skip or ())
    unknown = sorted(skip - set(_REPORT_SECTIONS))
    if unknown:
        raise _CliError(
            f"unknown section {unknown[0]!r}", f"use one of: {', '.join(_REPORT_SECTIONS)}"
        )
    if args.store or args.machine:
        raise _CliError(
            "--report runs every machine on the profile's stores",
            "drop --store/--machine, or run verify without --report",
        )
    if skip == set(_REPORT_SECTIONS):
        raise _CliError("every section is skipped", "skip fewer sections")
    budget = rep.BUDGETS[args.profile]
    try:
        seed = args.seed if args.seed is not None else rep.default_seed()
    except ValueError as exc:
        raise _CliError(str(exc), "export an integer, or pass --seed N") from exc
    # Status lines go to stderr so `--json` keeps stdout to the one JSON document.
    err = Console(stderr=True, highlight=False)
    started = time.monotonic()

    def property_rows() -> rep.Section:
        properties.load_profile("ci" if args.profile == "ci" else "deep")
        hyp = settings(
            properties.profile_settings(),
            max_examples=budget.max_examples,
            stateful_step_count=budget.step_count,
        )
        rows = []
        for name in [*properties.MACHINES, "supervisor"]:
            for store in budget.stores:
                r = properties.run_machine(name, properties.resolve_factory(store), hyp)
                err.print(f"  {name} x {store}: {r.steps:,} steps, {r.seconds:.1f}s")
                rows.append(
                    rep.PropertyRow(
                        machine=r.machine,
                        store=r.store,
                        examples=r.examples,
                        steps=r.steps,
                        invariants=r.invariants,
                        operations=r.operations,
                        seconds=r.seconds,
                        failure=r.failure,
                        reproduction=tuple(r.reproduction),
                    )
                )
        return rep.properties_section(rows, budget)

    def clock() -> rep.Section:
        from properties._skew import run_clock_cases  # noqa: PLC0415

        return rep.clock_section(run_clock_cases(seed=seed))

    with contextlib.ExitStack() as stack:
        if args.workdir is not None:
            workdir = Path(args.workdir)
            workdir.mkdir(parents=True, exist_ok=True)
        else:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="verify-")))
        runners = [("properties", property_rows), ("clock", clock)]
        runners += rep.harness_runners(budget, seed, workdir)
        sections = rep.run_sections(
            [(name, run) for name, run in runners if name not in skip], progress=err.print
        )
    report = rep.Report(
        profile=args.profile,
        seed=seed,
        commit=rep.current_commit(),
        sections=tuple(sections),
        seconds=time.monotonic() - started,
    )
    if args.json:
        sys.stdout.write(report.to_json().decode() + "\n")
    else:
        # Wide enough for the figures when stdout is a CI log rather than a terminal.
        rep.print_report(
            report, Console(highlight=False, width=None if sys.stdout.isatty() else 132)
        )
    return 1 if report.violations else 0


# -- attempts ---------------------------------------------------------------------------------


def _attempts_store(args: argparse.Namespace) -> OpenedStore:
    """The store ``attempts`` works on: a data directory (LMDB, opened beside a
    host that may be serving it) or a PostgreSQL URL (never migrated here: an
    inspection command does not change the schema)."""
    if args.store:
        return open_store_url(args.store, schema=args.schema, migrate=False, pool_size=1)
    directory = resolve_data_dir(None, args.data_dir)
    if not (directory / "lmdb").exists():
        raise _CliError(
            f"no store in data directory {directory}",
            "pass the --data-dir a host was served with",
        )
    return open_store(directory, shared=True)


def _attempts_table(views: Sequence[AttemptView]) -> Table:
    table = Table(title=f"{len(views)} attempts")
    table.add_column("attempt", no_wrap=True)
    for column in ("subagent", "session", "phase", "execution", "owner", "lease"):
        table.add_column(column, overflow="fold")
    now = time.time()
    for v in views:
        lease = (
            f"live {v.lease_expires_at - now:.0f}s"
            if v.lease_live
            else (
                "expired"
                if v.execution_status in {"accepted", "starting", "running", "waiting"}
                else "-"
            )
        )
        table.add_row(
            v.attempt_id, v.subagent_name, v.session_id, v.phase, v.execution_status, v.owner, lease
        )
    return table


def _attempts(args: argparse.Namespace) -> int:
    console = Console(highlight=False)
    opened = _attempts_store(args)
    try:
        trusted = TrustedAttempts(opened.store, getattr(args, "namespace", "default"))
        if args.attempts_command == "list":
            console.print(_attempts_table(trusted.list(args.session)))
            return 0
        if args.attempts_command == "show":
            found = trusted.show(args.attempt_id)
            table = Table(show_header=False, title=found.attempt_id)
            table.add_column("field", no_wrap=True)
            table.add_column("value", no_wrap=True)
            for key in AttemptView.__struct_fields__:
                table.add_row(key, str(getattr(found, key)))
            console.print(table)
            return 0
        cancelled = trusted.cancel(args.attempt_id, args.reason)
    finally:
        opened.close()
    console.print(
        f"attempt {cancelled.attempt_id}: {cancelled.execution_status} ({cancelled.phase})"
    )
    return 0


# -- db -----------------------------------------------------------------------------------------


def _db(args: argparse.Namespace) -> int:
    from storage import StoreError  # noqa: PLC0415
    from storage._postgres import LATEST_VERSION, migrate, schema_version  # noqa: PLC0415

    config = _config(args) if args.config or os.environ.get("SUBAGENTS_CONFIG") else None
    url = args.store or (config.host.store if config is not None else None)
    if not url:
        raise _CliError(
            "no store to migrate",
            "pass --store postgresql://USER@HOST:PORT/DATABASE (or --config with host.store)",
        )
    check_store_url(url)
    masked = mask_url(url)
    try:
        before = schema_version(url, schema=args.schema)
        applied = migrate(url, schema=args.schema) if args.db_command == "migrate" else []
        after = schema_version(url, schema=args.schema)
    except StoreError as exc:
        raise store_url_error(exc, url) from None
    except ValueError as exc:  # a bad --schema name
        raise _CliError(str(exc), "use lower-case letters, digits and _") from None
    if args.db_command == "migrate":
        done = ", ".join(str(v) for v in applied) if applied else "none (up to date)"
        sys.stdout.write(f"{masked} (schema {args.schema}): applied migrations: {done}\n")
    elif before < LATEST_VERSION:
        sys.stdout.write(f"{masked} (schema {args.schema}): needs `subagents db migrate`\n")
    sys.stdout.write(f"schema version {after} (latest {LATEST_VERSION})\n")
    return 0


# -- demo / chat ------------------------------------------------------------------------------


def _demo(args: argparse.Namespace) -> int:
    from ._demo import DemoError, run_demo  # noqa: PLC0415

    try:
        return run_demo(args.data_dir)
    except DemoError as exc:
        raise _CliError(exc.message, exc.fix) from None
    except (SubagentsError, OSError, ValueError, RuntimeError) as exc:
        raise _CliError(
            f"the demo failed: {type(exc).__name__}: {exc}",
            "rerun with a fresh --data-dir; if it fails again, please report it",
        ) from None


def _chat(args: argparse.Namespace) -> int:
    from ._chat import run_chat  # noqa: PLC0415

    return run_chat(
        config=getattr(args, "config", None) or os.environ.get("SUBAGENTS_CONFIG"),
        profile=args.profile,
        data_dir=args.data_dir,
        wait=args.wait,
    )


def _not_built(name: str) -> int:
    _err().print(
        f'subagents {name}: not built yet. Try `subagents run "..."` or `subagents serve --stdio`.'
    )
    return EXIT_USAGE


# -- parser -----------------------------------------------------------------------------------


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
    return value


def _port(text: str) -> int:
    if not text.isdigit() or not 0 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"not a port (0..65535): {text!r}")
    return int(text)


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="subagents", description="A reliable delegation kernel for LLM agents."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def with_config(p: argparse.ArgumentParser) -> None:
        p.add_argument("--config", help="host TOML (default: $SUBAGENTS_CONFIG, else offline)")

    serve = sub.add_parser("serve", help="run the durable RPC host (JSON-RPC 2.0)")
    mode = serve.add_mutually_exclusive_group(required=True)
    mode.add_argument("--stdio", action="store_true", help="one JSON object per line")
    mode.add_argument("--http", action="store_true", help="POST /rpc and SSE on 127.0.0.1")
    with_config(serve)
    where = serve.add_mutually_exclusive_group()
    where.add_argument("--data-dir", help="where sessions, runs and events live (LMDB)")
    where.add_argument(
        "--store",
        metavar="URL",
        help="postgresql://USER@HOST:PORT/DB shared by several hosts (default: host.store)",
    )
    where.add_argument("--memory", action="store_true", help="keep everything in memory")
    serve.add_argument(
        "--shared", action="store_true", help="share the data dir with other live hosts"
    )
    serve.add_argument(
        "--owner",
        help="this host's instance id, the owner of its leases (default: random); "
        "give each host its own",
    )
    serve.add_argument("--port", type=_port, default=0, help="HTTP port (default: ephemeral)")
    serve.add_argument("--token-file", help="where to write the HTTP bearer token")
    serve.add_argument("--tick", type=_positive, default=1.0, help="maintenance tick, seconds")
    serve.add_argument("-v", "--verbose", action="store_true", help="debug logs on stderr")

    for name, text in (
        ("run", "one-shot run with blocking delegation"),
        ("worker", "one-shot run with delegation disabled"),
    ):
        p = sub.add_parser(name, help=text)
        with_config(p)
        p.add_argument("--profile", help="profile to run (default: host.default_profile)")
        p.add_argument("prompt", nargs="?", help="the prompt ('-' or omitted: read stdin)")

    sub.add_parser("diagram", help="mermaid diagrams of every lifecycle")

    verify = sub.add_parser("verify", help="run the properties conformance suite")
    verify.add_argument("--store", action="append", help="memory | lmdb | lmdb-reopen | mod:fn")
    verify.add_argument("--machine", action="append", help="machine name (repeatable)")
    verify.add_argument("--profile", default="ci", help="ci | deep")
    verify.add_argument(
        "--report",
        action="store_true",
        help="run every reliability run (properties, clock skew, crash, hostile, load) "
        "at the profile's budget and print the figures; exit 1 on any violation",
    )
    verify.add_argument("--seed", type=int, help="with --report: the seed (default 0)")
    verify.add_argument("--json", action="store_true", help="with --report: print one JSON")
    verify.add_argument("--workdir", help="with --report: keep the runs' files here")
    verify.add_argument(
        "--skip", action="append", choices=_REPORT_SECTIONS, help="with --report: skip a section"
    )

    attempts = sub.add_parser("attempts", help="inspect or cancel durable attempts (trusted)")
    asub = attempts.add_subparsers(dest="attempts_command", required=True, metavar="ACTION")
    alist = asub.add_parser("list", help="every attempt")
    alist.add_argument("--session", help="only this session")
    alist.add_argument("--namespace", default="default", help="the attempts' namespace")
    ashow = asub.add_parser("show", help="one attempt")
    ashow.add_argument("attempt_id")
    acancel = asub.add_parser("cancel", help="cancel an attempt whose owner is gone")
    acancel.add_argument("attempt_id")
    acancel.add_argument("--reason", default="cancelled by operator")
    for p in (alist, ashow, acancel):
        where = p.add_mutually_exclusive_group(required=True)
        where.add_argument("--data-dir", help="the host's data directory (LMDB)")
        where.add_argument("--store", metavar="URL", help="the hosts' postgresql://... store")
        p.add_argument("--schema", default="public", help="with --store: PostgreSQL schema")

    db = sub.add_parser("db", help="the PostgreSQL store's schema")
    dsub = db.add_subparsers(dest="db_command", required=True, metavar="ACTION")
    for action, text in (
        ("migrate", "apply every missing migration (idempotent, safe with live hosts)"),
        ("status", "the schema version of the database"),
    ):
        p = dsub.add_parser(action, help=text)
        with_config(p)
        p.add_argument("--store", metavar="URL", help="postgresql://... (default: host.store)")
        p.add_argument("--schema", default="public", help="PostgreSQL schema (default: public)")

    chat = sub.add_parser("chat", help="interactive session, background delegation")
    with_config(chat)
    chat.add_argument("--profile", help="parent profile (default: host.default_profile)")
    chat.add_argument("--data-dir", help="durable store (default: in memory)")
    chat.add_argument(
        "--wait", type=_positive, default=30.0, help="at EOF, wait this long for late results"
    )
    demo = sub.add_parser("demo", help="the offline end-to-end demo (kill, restart, reconcile)")
    demo.add_argument("--data-dir", help="a new or empty directory (default: a temp dir, kept)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``subagents`` console script."""
    args = _build_parser().parse_args(argv)
    try:
        if args.command == "serve":
            return _serve(args)
        if args.command in ("run", "worker"):
            return _one_shot(args, worker=args.command == "worker")
        if args.command == "diagram":
            return _diagram(args)
        if args.command == "verify":
            return _verify(args)
        if args.command == "attempts":
            return _attempts(args)
        if args.command == "db":
            return _db(args)
        if args.command == "demo":
            return _demo(args)
        if args.command == "chat":
            return _chat(args)
        return _not_built(args.command)
    except _CliError as exc:
        return _fail(exc.message, exc.fix)
    except SubagentsError as exc:
        fix = getattr(exc, "fix", None) or _FIXES.get(type(exc).__name__, "see the message above")
        message = getattr(exc, "message", None) or str(exc)
        return _fail(message, str(fix))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
