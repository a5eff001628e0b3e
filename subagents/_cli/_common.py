"""What every command shares: the fixable error, how it is printed, the host config.

A :class:`CliError` is an error the user can fix: :func:`fail` prints its
message and fix on stderr (one line each, never a traceback) and the command
exits with :data:`EXIT_USAGE`.
"""

from __future__ import annotations

import argparse
import os

from rich.console import Console
from rich.markup import escape

from statemachines import SubagentsError

from .._host import HostConfig, default_host_config, load_host_config
from .._providers._common import install_command

EXIT_USAGE = 2

FIXES: dict[str, str] = {
    "ModelResolutionError": "check the model_id (provider:model) and the provider setup",
    "MissingApiKey": "export the provider's API key, or use a test: model",
    "NotFound": "check the id (subagents attempts list --data-dir ... or --store ...)",
}
"""The fix printed for a library error that carries none, by the error's class name
(an error naming a missing ``extra`` gets the command that installs it instead)."""


def fix_for(exc: SubagentsError) -> str:
    """The ``fix:`` line of a library error: its own, the install command of the extra
    it names (:class:`ProviderNotInstalled`), else the one :data:`FIXES` lists."""
    own = getattr(exc, "fix", None)
    if own:
        return str(own)
    extra = exc.fields.get("extra")
    if isinstance(extra, str) and extra:
        return install_command(extra)
    return FIXES.get(type(exc).__name__, "see the message above")


class CliError(SubagentsError):
    """A fixable error: ``message`` and ``fix`` are printed, exit status 2."""

    fix: str

    def __init__(self, message: str, fix: str) -> None:
        super().__init__(message, fix=fix)


def error_console() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True)


def fail(message: str, fix: str) -> int:
    """Print ``error: message`` and ``fix: fix`` on stderr; returns :data:`EXIT_USAGE`."""
    console = error_console()
    console.print(f"[bold red]error:[/] {escape(message)}", markup=True)
    console.print(f"  [bold]fix:[/] {escape(fix)}", markup=True)
    return EXIT_USAGE


def config_path(path: str | None) -> str | None:
    """``--config`` when given, else ``$SUBAGENTS_CONFIG`` (``None``: the offline default)."""
    return path or os.environ.get("SUBAGENTS_CONFIG") or None


def host_config(path: str | None) -> HostConfig:
    """The host config at ``--config`` / ``$SUBAGENTS_CONFIG``, else the offline default."""
    found = config_path(path)
    return load_host_config(found) if found else default_host_config()


def add_config_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="host TOML (default: $SUBAGENTS_CONFIG, else offline)")


def positive(text: str) -> float:
    """An argparse type: a number above zero."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
    return value


def port(text: str) -> int:
    """An argparse type: a TCP port, 0 (ephemeral) to 65535."""
    if not text.isdigit() or not 0 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"not a port (0..65535): {text!r}")
    return int(text)
