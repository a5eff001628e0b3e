"""``subagents attempts list | show | cancel``: trusted operations on durable attempts.

They work on a data directory (LMDB, opened without the host lock, beside a
host that may be serving it) or on a PostgreSQL store (``--store URL``, never migrated here: an
inspection command does not change the schema).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import TypeVar

import msgspec
from rich import box
from rich.console import Console
from rich.table import Table

from .._host import AttemptView
from .._host._datadir import OpenedStore, open_store, open_store_url, resolve_data_dir
from .._host._trusted import TrustedAttempts
from ._common import CliError

_LIVE = {"accepted", "starting", "running", "waiting"}


def _open(data_dir: str | None, store: str | None, schema: str) -> OpenedStore:
    """The store ``attempts`` works on: ``store`` (a URL) or the data directory."""
    if store:
        return open_store_url(store, schema=schema, migrate=False, pool_size=1)
    directory = resolve_data_dir(None, data_dir)
    if not (directory / "lmdb").exists():
        raise CliError(
            f"no store in data directory {directory}",
            "pass the --data-dir a host was served with",
        )
    return open_store(directory, lock=False)


_T = TypeVar("_T")

_TIMES = ("lease_expires_at", "accepted_at", "terminal_at")
"""The :class:`AttemptView` fields that are Unix timestamps (shown as ISO-8601)."""


def iso(timestamp: float | None) -> str:
    """``timestamp`` (Unix seconds) as ISO-8601 in UTC to the second (``...Z``); ``-``
    for ``None``."""
    if timestamp is None:
        return "-"
    return datetime.fromtimestamp(timestamp, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def write_json(value: object) -> None:
    """``value`` as one JSON document on stdout (timestamps stay Unix seconds)."""
    sys.stdout.write(msgspec.json.encode(value).decode() + "\n")


def attempts_table(views: Sequence[AttemptView]) -> Table:
    """One row per attempt: ids, phase, execution, owner and how long its lease lives."""
    table = Table(title=f"{len(views)} attempts", box=box.SIMPLE_HEAD)
    table.add_column("attempt", no_wrap=True)
    for column in ("subagent", "session", "phase", "execution", "owner", "lease"):
        table.add_column(column, overflow="fold")
    table.add_column("accepted", no_wrap=True)
    now = time.time()
    for v in views:
        if v.lease_live:
            lease = f"live {v.lease_expires_at - now:.0f}s"
        else:
            lease = "expired" if v.execution_status in _LIVE else "-"
        table.add_row(
            v.attempt_id,
            v.subagent_name,
            v.session_id,
            v.phase,
            v.execution_status,
            v.owner,
            lease,
            iso(v.accepted_at),
        )
    return table


def attempt_table(found: AttemptView) -> Table:
    """Every field of one attempt, one row each."""
    table = Table(show_header=False, title=found.attempt_id)
    table.add_column("field", no_wrap=True)
    table.add_column("value", no_wrap=True)
    for key in AttemptView.__struct_fields__:
        value = getattr(found, key)
        table.add_row(key, iso(value) if key in _TIMES else str(value))
    return table


def _print(console: Console, as_json: bool, value: _T, table: Callable[[_T], Table]) -> None:
    if as_json:
        write_json(value)
    else:
        console.print(table(value))


def run(args: argparse.Namespace) -> int:
    # Piped, every attempt stays on one line (for grep and awk) instead of folding at 80.
    console = Console(highlight=False, width=None if sys.stdout.isatty() else 200)
    opened = _open(args.data_dir, args.store, args.schema)
    try:
        trusted = TrustedAttempts(opened.store, getattr(args, "namespace", "default"))
        if args.attempts_command == "list":
            views = trusted.list(args.session)
            _print(console, args.json, views, attempts_table)
            return 0
        if args.attempts_command == "show":
            _print(console, args.json, trusted.show(args.attempt_id), attempt_table)
            return 0
        cancelled = trusted.cancel(args.attempt_id, args.reason)
    finally:
        opened.close()
    console.print(
        f"attempt {cancelled.attempt_id}: {cancelled.execution_status} ({cancelled.phase})"
    )
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    attempts = sub.add_parser("attempts", help="inspect or cancel durable attempts (trusted)")
    attempts.set_defaults(handler=run)
    asub = attempts.add_subparsers(dest="attempts_command", required=True, metavar="ACTION")
    alist = asub.add_parser("list", help="every attempt")
    alist.add_argument("--session", help="only this session")
    alist.add_argument("--namespace", default="default", help="the attempts' namespace")
    ashow = asub.add_parser("show", help="one attempt")
    ashow.add_argument("attempt_id", help="the full id, or a unique prefix of it")
    for p in (alist, ashow):
        p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    acancel = asub.add_parser("cancel", help="cancel an attempt whose owner is gone")
    acancel.add_argument("attempt_id")
    acancel.add_argument("--reason", default="cancelled by operator")
    for p in (alist, ashow, acancel):
        where = p.add_mutually_exclusive_group(required=True)
        where.add_argument("--data-dir", help="the host's data directory (LMDB)")
        where.add_argument("--store", metavar="URL", help="the hosts' postgresql://... store")
        p.add_argument("--schema", default="public", help="with --store: PostgreSQL schema")
