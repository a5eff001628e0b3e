"""``subagents db migrate | status | check | backup``: a store's schema and integrity.

``migrate`` applies every missing migration (idempotent, safe with live hosts);
``status`` prints the schema version (PostgreSQL), or with ``--data-dir`` the
store's identity and the warnings a host gives when it opens it. ``check`` verifies every
record's checksum and every index entry of an LMDB data directory
(``--data-dir``) or a PostgreSQL store, and every value of the host's event
log beside it; with ``--repair`` it quarantines unreadable values, rebuilds the
indexes and the event log's counters; it exits 1 when something is wrong.
``backup DEST`` writes a consistent online copy of a data directory's store
(``check`` accepts it); for PostgreSQL it prints the ``pg_dump`` command. A
PostgreSQL store is ``--store`` or the config's ``host.store``; its password
never reaches the output.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import msgspec

from storage import Backend, KernelStore, LmdbBackend, LmdbSessionStore, StoreError
from storage._postgres import LATEST_VERSION, migrate, schema_version
from storage.admin import CheckReport, backup, check, check_lmdb, postgres_backup_command

from .._host._datadir import (
    check_store_url,
    mask_url,
    open_store,
    open_store_url,
    store_url_error,
)
from .._host._eventlog import TABLES as EVENT_TABLES
from .._host._eventlog import BackendEventLog, check_event_log
from ._attempts import iso
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


def _print_report(report: CheckReport, where: str, as_json: bool) -> int:
    """The report on stdout (one JSON document with ``--json``); 0 when ok, else 1."""
    if as_json:
        document = msgspec.to_builtins(report)
        document["findings"] = [finding.describe() for finding in report.findings]
        document["ok"] = report.ok
        sys.stdout.write(msgspec.json.encode(document).decode() + "\n")
        return 0 if report.ok else 1
    if report.refused is not None:
        sys.stdout.write(f"{where}: refused: {report.refused}\n")
        return 1
    for finding in report.findings:
        sys.stdout.write(f"  {finding.describe()}\n")
    if report.repaired:
        sys.stdout.write(
            f"repaired: {report.quarantined} value(s) quarantined, "
            f"{report.index_rewritten} index entr(ies) rewritten\n"
        )
    verdict = "ok" if report.ok else f"{len(report.findings)} problem(s)"
    sys.stdout.write(
        f"{where}: {report.records} records, {report.index_entries} index entries: {verdict}\n"
    )
    return 0 if report.ok else 1


def _with_event_log(report: CheckReport, raw: Backend, repair: bool) -> CheckReport:
    """``report`` with the host event log's values checked (and repaired) too."""
    before = check_event_log(raw)[1]
    count, findings = check_event_log(raw, repair=repair, now_us=lambda: time.time_ns() // 1000)
    repaired = repair and bool(before)
    return msgspec.structs.replace(
        report,
        records=report.records + count,
        findings=report.findings + tuple(findings),
        repaired=report.repaired or repaired,
        quarantined=report.quarantined + (len(before) - len(findings) if repaired else 0),
    )


def _check_lmdb_dir(directory: Path, repair: bool) -> CheckReport:
    """The store of a data directory, then its event log (same environment)."""
    path = directory / "lmdb"
    report = check_lmdb(path, repair=repair)
    if report.refused is not None:
        return report
    try:
        store = LmdbSessionStore(path, auto_grow=True)  # sizes the environment's tables
    except StoreError as exc:
        return msgspec.structs.replace(report, refused=exc.message)
    try:
        raw = LmdbBackend(path, tables=EVENT_TABLES)
        try:
            return _with_event_log(report, raw, repair)
        finally:
            raw.close()
    finally:
        store.close()


def check_data(args: argparse.Namespace) -> int:
    """``db check``: the data directory's LMDB store, else the PostgreSQL store; with
    each, the host's event log."""
    if args.data_dir:
        report = _check_lmdb_dir(Path(args.data_dir), args.repair)
        return _print_report(report, str(args.data_dir), args.json)
    url = _url(args.store, args.config)
    try:
        opened = open_store_url(url, schema=args.schema, migrate=False)
    except StoreError as exc:
        raise store_url_error(exc, url) from None
    try:
        store = opened.store
        if not isinstance(store, KernelStore):  # every store the host opens is one
            raise CliError(f"{mask_url(url)} cannot be checked", "report this as a bug")
        report = check(store, repair=args.repair)
        events = opened.events
        if isinstance(events, BackendEventLog):
            report = _with_event_log(report, events.raw_backend, args.repair)
    finally:
        opened.close()
    return _print_report(report, mask_url(url), args.json)


def backup_data(args: argparse.Namespace) -> int:
    """``db backup DEST``: an online copy of the data directory's store, or the pg_dump line."""
    if args.data_dir:
        # DEST becomes a data directory of its own: serve it, or check it, with --data-dir DEST.
        destination = Path(args.destination)
        destination.mkdir(mode=0o700, parents=True, exist_ok=True)
        backup(Path(args.data_dir) / "lmdb", destination / "lmdb")
        sys.stdout.write(
            f"backup written to {destination} "
            f"(check it: subagents db check --data-dir {destination})\n"
        )
        return 0
    url = _url(args.store, args.config)
    command = postgres_backup_command(url, args.destination, schema=args.schema)
    sys.stdout.write(f"a PostgreSQL store is backed up with pg_dump; run:\n  {command}\n")
    return 0


def data_dir_status(directory: Path, as_json: bool) -> int:
    """``db status --data-dir``: the store's identity and what opening it warns about."""
    if not (directory / "lmdb").is_dir():
        raise CliError(
            f"{directory} holds no store", "pass the --data-dir a host serves (or has served)"
        )
    opened = open_store(directory, lock=False)  # a live host may serve it meanwhile
    try:
        store = opened.store
        identity = store.identity if isinstance(store, KernelStore) else None
        warnings = list(opened.warnings)
    finally:
        opened.close()
    report = {
        "data_dir": str(directory),
        "store": "lmdb",
        "store_id": identity.store_id if identity else None,
        "layout": identity.layout if identity else None,
        "created_at": iso(identity.created_at) if identity else None,
        "warnings": warnings,
    }
    if as_json:
        sys.stdout.write(json.dumps(report) + "\n")
        return 0
    sys.stdout.write(
        f"{directory}: lmdb store {report['store_id']}, layout {report['layout']}, "
        f"created {report['created_at']}\n"
    )
    for warning in warnings:
        sys.stdout.write(f"warning: {warning}\n")
    return 0


def run(args: argparse.Namespace) -> int:
    if args.db_command == "check":
        return check_data(args)
    if args.db_command == "backup":
        return backup_data(args)
    if args.db_command == "status" and getattr(args, "data_dir", None):
        return data_dir_status(Path(args.data_dir), args.json)
    return manage_schema(args.db_command, args.store, args.config, args.schema, args.json)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    db = sub.add_parser("db", help="a store's schema (PostgreSQL), integrity and backups")
    db.set_defaults(handler=run)
    dsub = db.add_subparsers(dest="db_command", required=True, metavar="ACTION")
    for action, text in (
        ("migrate", "apply every missing migration (idempotent, safe with live hosts)"),
        ("status", "the schema version of the database"),
    ):
        p = dsub.add_parser(action, help=text)
        add_config_option(p)
        where = p.add_mutually_exclusive_group()
        where.add_argument("--store", metavar="URL", help="postgresql://... (default: host.store)")
        if action == "status":
            where.add_argument(
                "--data-dir", help="a data directory: its store identity and warnings"
            )
        p.add_argument("--schema", default="public", help="PostgreSQL schema (default: public)")
        p.add_argument("--json", action="store_true", help="print one JSON object")
    check_parser = dsub.add_parser("check", help="verify every record and index entry")
    backup_parser = dsub.add_parser("backup", help="a consistent online copy of the store")
    backup_parser.add_argument(
        "destination", metavar="DEST", help="a new data directory (an LMDB copy under DEST/lmdb)"
    )
    check_parser.add_argument(
        "--repair", action="store_true", help="quarantine unreadable values, rebuild the indexes"
    )
    check_parser.add_argument("--json", action="store_true", help="one JSON document")
    for p in (check_parser, backup_parser):
        add_config_option(p)
        where = p.add_mutually_exclusive_group()
        where.add_argument("--data-dir", help="the host's data directory (LMDB)")
        where.add_argument("--store", metavar="URL", help="postgresql://... (default: host.store)")
        p.add_argument("--schema", default="public", help="PostgreSQL schema (default: public)")
