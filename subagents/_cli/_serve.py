"""``subagents serve --stdio | --http [--mcp]``: the durable RPC host (JSON-RPC 2.0), or MCP.

:func:`serve_host` is the typed entry point: it serves an opened
:class:`HostService` on one transport until shutdown. The ``serve`` command
opens the service from its flags and calls it; the demo's host process calls it
too, on the demo config.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import secrets
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from .._host import HostConfig, HostService, open_host
from .._host._config import resolve_bind
from .._host._console import ConsoleAuth
from .._host._datadir import redact, url_password, write_token_file
from .._host._http import serve_http
from .._host._stdio import serve_stdio
from .._mcp import McpNotInstalled, require_mcp
from ._common import CliError, add_config_option, host_config, port, positive

Transport = Literal["stdio", "http"]


class Redact(logging.Filter):
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


def serve_host(
    service: HostService,
    *,
    transport: Transport,
    port: int = 0,
    bind: str | None = None,
    token_file: str | os.PathLike[str] | None = None,
    mcp: McpOptions | None = None,
) -> None:
    """Start ``service``, serve it on ``transport`` until shutdown, then close it.

    With ``mcp`` the protocol is MCP (the ``mcp`` extra, see :mod:`subagents._mcp`)
    on the same transport, store and supervisors, instead of the host's JSON-RPC.

    Runs its own event loop on the calling thread (``asyncio.run``) and returns
    when the transport ends (stdio: end of input or ``shutdown``; either: SIGTERM
    or SIGINT, which stop admission and close the service cleanly). Over HTTP it
    listens on ``bind`` (``None``: ``[host] bind``, 127.0.0.1) port ``port`` (0:
    ephemeral; a non-loopback ``bind`` needs ``$SUBAGENTS_HOST_TOKEN``, else
    :class:`HostConfigError` before anything is written) and prints one JSON line naming
    the URL and where the bearer token is (``token_file``, else ``http.token`` in
    the data directory, else the token itself) and the web console's one-time login
    link (``console``), written once the port is bound: a
    port that cannot be bound raises :class:`CliError` and writes no token. A
    ``KeyboardInterrupt`` ends it quietly; any other error of the service
    propagates after it is closed.
    """
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(service, transport, port, bind, token_file, mcp=mcp))


@dataclass(frozen=True)
class McpOptions:
    """``serve --mcp``: the durable session the client drives (``None``: a fresh one)
    and the parent profile whose subagents it may delegate to."""

    session: str | None = None
    profile: str | None = None


async def _serve(
    service: HostService,
    transport: Transport,
    port: int,
    bind: str | None,
    token_file: str | os.PathLike[str] | None,
    *,
    mcp: McpOptions | None = None,
) -> None:
    await _start(service, mcp)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        # Stop admission and close the service cleanly, on either transport.
        loop.add_signal_handler(sig, service.shutdown_requested.set)
    dispatcher = service.dispatcher()
    if transport == "stdio":
        if mcp is not None:
            await _mcp_stdio(service, mcp)
            return
        await serve_stdio(service, dispatcher)
        return
    operator_token = os.environ.get("SUBAGENTS_HOST_TOKEN")
    try:
        # Refuse a bad bind address before the token file is written.
        bind = resolve_bind(service.config, bind, operator_token=bool(operator_token))
    except BaseException:
        await service.close()
        raise
    token = operator_token or secrets.token_urlsafe(32)
    console = ConsoleAuth(token)
    listening: list[str] = []

    def ready(url: str) -> None:
        # The token file is written only once the port is bound: a host that
        # cannot listen leaves no token behind.
        path = _write_token(service, token, token_file)
        listening.append(url)
        line = {"listening": url, "token_file": str(path) if path else None}
        if path is None:
            line["token"] = token
        if mcp is None:  # the MCP server serves no console
            line["console"] = console.login_link(url)  # one-time, in the fragment
        sys.stdout.write(json.dumps(line) + "\n")
        sys.stdout.flush()

    try:
        if mcp is not None:
            await _mcp_http(
                service,
                token,
                port=port,
                bind=bind,
                operator_token=bool(operator_token),
                mcp=mcp,
                ready=ready,
            )
            return
        await serve_http(
            service,
            dispatcher,
            token,
            port=port,
            bind=bind,
            operator_token=bool(operator_token),
            ready=ready,
            console=console,
        )
    except OSError as exc:
        if listening:  # not a bind failure: the host was serving
            raise
        raise CliError(
            f"cannot listen on {bind}:{port} ({exc.strerror or exc})",
            "pass another --port (0 picks a free one), or stop what listens there",
        ) from None


async def _start(service: HostService, mcp: McpOptions | None) -> None:
    """Check the ``mcp`` extra (for ``--mcp``), then start ``service``; closed on failure."""
    try:
        if mcp is not None:
            require_mcp("mcp.server.lowlevel")
        await service.start()
    except McpNotInstalled as exc:
        await service.close()
        raise CliError(exc.message, "pip install '.[mcp]' (from the clone)") from None
    except BaseException:
        await service.close()
        raise


async def _mcp_stdio(service: HostService, mcp: McpOptions) -> None:
    from .._mcp._bridge import McpBridge  # noqa: PLC0415 (the mcp extra)
    from .._mcp._server import build_server  # noqa: PLC0415
    from .._mcp._stdio import serve_mcp_stdio  # noqa: PLC0415

    bridge = McpBridge(service, session_id=mcp.session, profile=mcp.profile)
    await serve_mcp_stdio(service, build_server(service, lambda ctx: bridge))


async def _mcp_http(
    service: HostService,
    token: str,
    *,
    port: int,
    bind: str,
    operator_token: bool,
    mcp: McpOptions,
    ready: Callable[[str], None],
) -> None:
    from .._mcp._http import serve_mcp_http  # noqa: PLC0415 (the mcp extra)

    await serve_mcp_http(
        service,
        token,
        port=port,
        bind=bind,
        operator_token=operator_token,
        session=mcp.session,
        profile=mcp.profile,
        ready=ready,
    )


def _write_token(
    service: HostService, token: str, token_file: str | os.PathLike[str] | None
) -> Path | None:
    """Write the bearer token (mode 0600) where a client can read it; ``None``: nowhere."""
    path = Path(token_file) if token_file else None
    if path is None and service.data_dir is not None:
        path = Path(service.data_dir) / "http.token"
    if path is not None:
        write_token_file(path, token)
    return path


def _store_url(args: argparse.Namespace, config: HostConfig) -> str | None:
    """The PostgreSQL URL the host will use (``--store``, else the config's), if any."""
    if args.store:
        return str(args.store)
    if args.data_dir or args.memory:
        return None
    return config.host.store


def run(args: argparse.Namespace) -> int:
    """The ``serve`` command: open the host its flags name and serve it."""
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not (args.stdio or args.http or args.mcp):
        raise CliError("serve needs a transport", "pass --stdio, --http or --mcp")
    if (args.session or args.profile) and not args.mcp:
        raise CliError("--session and --profile are MCP options", "add --mcp")
    config = host_config(args.config)
    if args.profile is not None and args.profile not in config.profiles:
        known = ", ".join(sorted(config.profiles))
        raise CliError(f"unknown profile {args.profile!r}", f"pass --profile with one of: {known}")
    url = _store_url(args, config)
    if url is not None and url_password(url):
        for handler in logging.getLogger().handlers:
            handler.addFilter(Redact(url))
    service = open_host(
        config,
        data_dir=args.data_dir,
        store=args.store,
        memory=args.memory,
        shared=args.shared,
        host_instance_id=args.owner,
        tick_seconds=args.tick,
    )
    serve_host(
        service,
        transport="http" if args.http else "stdio",
        port=args.port,
        bind=args.host,
        token_file=args.token_file,
        mcp=McpOptions(session=args.session, profile=args.profile) if args.mcp else None,
    )
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = sub.add_parser("serve", help="run the durable RPC host (JSON-RPC 2.0 or MCP)")
    mode = serve.add_mutually_exclusive_group()
    mode.add_argument("--stdio", action="store_true", help="one JSON object per line")
    mode.add_argument("--http", action="store_true", help="POST /rpc and SSE on 127.0.0.1")
    serve.add_argument(
        "--mcp",
        action="store_true",
        help="speak MCP (stdio, or streamable HTTP at /mcp with --http); needs the mcp extra",
    )
    serve.add_argument(
        "--session", metavar="ID", help="MCP: the durable session to use (default: a new one)"
    )
    serve.add_argument(
        "--profile",
        metavar="NAME",
        help="MCP: the parent profile whose subagents the client delegates to "
        "(default: [host] default_profile)",
    )
    add_config_option(serve)
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
    serve.add_argument("--port", type=port, default=0, help="HTTP port (default: ephemeral)")
    serve.add_argument(
        "--host",
        metavar="ADDR",
        help="HTTP bind address (default: [host] bind, 127.0.0.1); "
        "beyond loopback it needs $SUBAGENTS_HOST_TOKEN",
    )
    serve.add_argument("--token-file", help="where to write the HTTP bearer token")
    serve.add_argument("--tick", type=positive, default=1.0, help="maintenance tick, seconds")
    serve.add_argument("-v", "--verbose", action="store_true", help="debug logs on stderr")
    serve.set_defaults(handler=run, configures_logging=True)
