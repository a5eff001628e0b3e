"""``subagents db migrate | status``: the PostgreSQL store's schema.

``migrate`` applies every missing migration (idempotent, safe with live hosts);
``status`` prints the schema version. The store is ``--store`` or the config's
``host.store``; its password never reaches the output.
"""

from __future__ import annotations

import argparse
import json
import sys

from storage import StoreError
from storage._postgres import LATEST_VERSION, migrate, schema_version

from .._host._datadir import check_store_url, mask_url, store_url_error
from ._common import CliError, add_config_option, config_path, host_config


def _url(store: str | None, config_file: str | None) -> str:
    config = host_config(config_file) if config_path(config_file) else None
    url = store or (config.host.store if config is not None else None)
    if not url:
        raise CliError(
            "no store to migrate",
            "pass --store postgresql://USER@HOST:PORT/DATABASE (or --config with host.store)",
        )
    check_store_url(url)
    return url


def manage_schema(
    action: str, store: str | None, config_file: str | None, schema: str, as_json: bool = False
) -> int:
    """``migrate`` (apply what is missing) or ``status`` of the schema ``schema`` at the store.

    With ``as_json``, one JSON object on stdout: ``store`` (password masked), ``schema``,
    ``version_before``, ``applied``, ``version``, ``latest``, ``needs_migration``.
    """
    url = _url(store, config_file)
    masked = mask_url(url)
    try:
        before = schema_version(url, schema=schema)
        applied = migrate(url, schema=schema) if action == "migrate" else []
        after = schema_version(url, schema=schema)
    except StoreError as exc:
        raise store_url_error(exc, url) from None
    except ValueError as exc:  # a bad --schema name
        raise CliError(str(exc), "use lower-case letters, digits and _") from None
    if as_json:
        report = {
            "store": masked,
            "schema": schema,
            "version_before": before,
            "applied": list(applied),
            "version": after,
            "latest": LATEST_VERSION,
            "needs_migration": after < LATEST_VERSION,
        }
        sys.stdout.write(json.dumps(report) + "\n")
        return 0
    if action == "migrate":
        done = ", ".join(str(v) for v in applied) if applied else "none (up to date)"
        sys.stdout.write(f"{masked} (schema {schema}): applied migrations: {done}\n")
    elif before < LATEST_VERSION:
        sys.stdout.write(f"{masked} (schema {schema}): needs `subagents db migrate`\n")
    sys.stdout.write(f"schema version {after} (latest {LATEST_VERSION})\n")
    return 0


def run(args: argparse.Namespace) -> int:
    return manage_schema(args.db_command, args.store, args.config, args.schema, args.json)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    db = sub.add_parser("db", help="the PostgreSQL store's schema")
    db.set_defaults(handler=run)
    dsub = db.add_subparsers(dest="db_command", required=True, metavar="ACTION")
    for action, text in (
        ("migrate", "apply every missing migration (idempotent, safe with live hosts)"),
        ("status", "the schema version of the database"),
    ):
        p = dsub.add_parser(action, help=text)
        add_config_option(p)
        p.add_argument("--store", metavar="URL", help="postgresql://... (default: host.store)")
        p.add_argument("--schema", default="public", help="PostgreSQL schema (default: public)")
        p.add_argument("--json", action="store_true", help="print one JSON object")
