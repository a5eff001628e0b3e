"""``serve --store``, ``db migrate|status`` and ``attempts --store`` on PostgreSQL:
readable errors, masked passwords.

Every failure exits with status 2 and prints ``error:`` / ``fix:`` lines,
never a traceback, and never the password of the URL it was given. The
PostgreSQL cases need a server (skipped outside CI without one).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "host"))

import pytest
from host_helpers import run_cli, seed_two_attempts
from postgres_db import scratch_database

from storage import ManualClock

pytestmark = pytest.mark.timeout(120)

SECRET = "hunter2-not-shown"


def assert_readable_error(proc: object, *fragments: str) -> None:
    out = proc.stdout + proc.stderr  # type: ignore[attr-defined]
    assert proc.returncode == 2, out  # type: ignore[attr-defined]
    assert "Traceback" not in out
    assert SECRET not in out
    lines = [line for line in proc.stderr.splitlines() if line.strip()]  # type: ignore[attr-defined]
    assert lines[0].startswith("error: ")
    assert lines[1].strip().startswith("fix: ")
    for fragment in fragments:
        assert fragment in out


def test_a_store_that_is_not_a_postgresql_url_is_refused_before_connecting() -> None:
    proc = run_cli("serve", "--stdio", "--store", f"mysql://bob:{SECRET}@db/x")
    assert_readable_error(proc, "is not a PostgreSQL URL", "mysql://bob:***@db/x")


def test_an_unreachable_server_is_a_clear_error_with_the_password_masked() -> None:
    url = f"postgresql://bob:{SECRET}@127.0.0.1:1/nowhere"
    proc = run_cli("serve", "--stdio", "--store", url)
    assert_readable_error(proc, "cannot connect to the store", "bob:***@127.0.0.1:1/nowhere")
    migrate = run_cli("db", "migrate", "--store", url)
    assert_readable_error(migrate, "cannot connect to the store", "check that the server")


def test_a_malformed_url_names_the_problem() -> None:
    proc = run_cli("db", "migrate", "--store", f"postgresql://bob:{SECRET}@h:99999/db")
    assert_readable_error(proc, "malformed URL", "Port out of range")


def test_db_migrate_needs_a_store() -> None:
    assert_readable_error(run_cli("db", "migrate"), "no store to migrate", "--store")


def test_store_data_dir_and_memory_are_alternatives() -> None:
    proc = run_cli("serve", "--stdio", "--memory", "--store", "postgresql://h/db")
    assert proc.returncode == 2
    assert "not allowed with argument" in proc.stderr


def test_the_config_store_is_used_by_db_migrate_and_must_be_a_url(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[host]\nstore = "sqlite:///x"\n[profiles.default]\nmodel_id = "test:echo"\n')
    assert_readable_error(
        run_cli("db", "migrate", "--config", str(bad)), "host.store: must be a PostgreSQL URL"
    )


def test_db_migrate_applies_every_migration_once_and_status_reports_it(tmp_path: Path) -> None:
    with scratch_database("subagents_cli") as url:
        before = run_cli("db", "status", "--store", url)
        assert before.returncode == 0, before.stderr
        assert "needs `subagents db migrate`" in before.stdout
        assert "schema version 0" in before.stdout
        first = run_cli("db", "migrate", "--store", url)
        assert first.returncode == 0, first.stderr
        assert "applied migrations: 1, 2, 3, 4" in first.stdout
        config = tmp_path / "host.toml"
        config.write_text(f'[host]\nstore = "{url}"\n[profiles.default]\nmodel_id = "test:echo"\n')
        again = run_cli("db", "migrate", "--config", str(config))
        assert again.returncode == 0, again.stderr
        assert "applied migrations: none (up to date)" in again.stdout
        status = run_cli("db", "status", "--store", url)
        assert "schema version 4 (latest 4)" in status.stdout


def test_attempts_list_show_and_cancel_work_on_a_postgresql_store() -> None:
    from storage import PostgresSessionStore

    with scratch_database("subagents_cli") as url:
        unmigrated = run_cli("attempts", "list", "--store", url)
        assert_readable_error(unmigrated, "not migrated", "subagents db migrate")
        clock = ManualClock(start=time.time() - 1000)
        store = PostgresSessionStore(url, clock=clock, pool_size=1)  # migrates on open
        try:
            seed_two_attempts(store, clock)
        finally:
            store.close()

        listed = run_cli("attempts", "list", "--store", url)
        assert listed.returncode == 0, listed.stderr
        assert "2 attempts" in listed.stdout
        assert "subattempt_0000lost" in listed.stdout
        shown = run_cli("attempts", "show", "subattempt_0000live", "--store", url)
        assert shown.returncode == 0, shown.stderr
        assert "host-dead" in shown.stdout
        cancelled = run_cli("attempts", "cancel", "subattempt_0000lost", "--store", url)
        assert cancelled.returncode == 0, cancelled.stderr
        assert "subattempt_0000lost: cancelled" in cancelled.stdout
        owned = run_cli("attempts", "cancel", "subattempt_0000live", "--store", url)
        assert_readable_error(owned, "owned by live host host-dead")
        missing = run_cli("attempts", "show", "subattempt_nope", "--store", url)
        assert_readable_error(missing, "no such attempt")


def test_attempts_take_a_data_dir_or_a_store_not_both() -> None:
    both = run_cli("attempts", "list", "--data-dir", "d", "--store", "postgresql://h/db")
    assert both.returncode == 2
    assert "not allowed with argument" in both.stderr
    neither = run_cli("attempts", "list")
    assert neither.returncode == 2
    assert "one of the arguments --data-dir --store is required" in neither.stderr
    assert_readable_error(
        run_cli("attempts", "list", "--store", f"mysql://bob:{SECRET}@db/x"),
        "is not a PostgreSQL URL",
    )


def test_db_status_and_migrate_as_json() -> None:
    import json

    with scratch_database("subagents_cli") as url:
        before = run_cli("db", "status", "--json", "--store", url)
        assert before.returncode == 0, before.stderr
        report = json.loads(before.stdout)
        assert report["version"] == 0
        assert report["needs_migration"] is True
        assert report["schema"] == "public"
        assert report["store"].endswith(url.rsplit("/", 1)[1])
        done = json.loads(run_cli("db", "migrate", "--json", "--store", url).stdout)
        assert done["applied"] == list(range(1, done["latest"] + 1))
        after = json.loads(run_cli("db", "status", "--json", "--store", url).stdout)
        assert after["version"] == after["latest"]
        assert after["needs_migration"] is False
