"""The ``subagents`` parser and entry point: each command group registers its own
subcommand and handler (``set_defaults(handler=...)``); :func:`main` calls it."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import PackageNotFoundError, version

from statemachines import SubagentsError

from .._host._buildinfo import build_commit
from . import _attempts, _chat, _db, _demo, _diagram, _run, _serve, _verify
from ._common import CliError, fail, fix_for

Handler = Callable[[argparse.Namespace], int]

COMMAND_GROUPS = (_serve, _run, _diagram, _verify, _attempts, _db, _chat, _demo)
"""In the order ``subagents --help`` lists them."""


def package_version() -> str:
    """The installed distribution's version (``unknown`` when run from an uninstalled tree)."""
    try:
        return version("subagents")
    except PackageNotFoundError:
        return "unknown"


def show_library_warnings() -> None:
    """Library warnings (``subagents.*``, which has only a NullHandler) on stderr, as
    bare messages; a no-op when logging is configured already. ``serve`` sets
    ``configures_logging`` and configures its own (timestamps, ``-v``)."""
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="%(message)s")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="subagents", description="A reliable delegation kernel for LLM agents."
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"subagents {package_version()} (commit {build_commit()})",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for group in COMMAND_GROUPS:
        group.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``subagents`` console script; returns the exit status.

    0: done; 1: the command ran and found a failure (``verify``, ``chat``);
    2: a fixable error, printed as one line and its fix on stderr; 130: interrupted.
    """
    args = build_parser().parse_args(argv)
    if not getattr(args, "configures_logging", False):
        show_library_warnings()
    handler: Handler = args.handler
    try:
        return handler(args)
    except CliError as exc:
        return fail(exc.message, exc.fix)
    except SubagentsError as exc:
        message = getattr(exc, "message", None) or str(exc)
        return fail(message, fix_for(exc))
    except KeyboardInterrupt:
        return 130
