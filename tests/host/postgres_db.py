"""A scratch PostgreSQL database for host tests, created and dropped by the test.

The server is ``$SUBAGENTS_PG_ADMIN_DSN`` (default the local one; tests/storage/conftest.py
uses the same one). In CI (``$CI`` set) an unreachable server fails
the test (``.ci/pg`` makes sure one answers); elsewhere the test is skipped
with the reason.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator

import pytest

PG_ADMIN_DSN = os.environ.get(
    "SUBAGENTS_PG_ADMIN_DSN", "postgresql://postgres@127.0.0.1:5432/postgres"
)


def _reachable() -> bool:
    try:
        import psycopg
    except ImportError:
        return False
    try:
        with psycopg.connect(PG_ADMIN_DSN, connect_timeout=3):
            return True
    except psycopg.Error:
        return False


def require_postgres() -> None:
    """Skip (outside CI only) when no PostgreSQL server answers."""
    if not os.environ.get("CI") and not _reachable():
        pytest.skip(f"no PostgreSQL server at {PG_ADMIN_DSN} (CI starts one with .ci/pg)")


@contextlib.contextmanager
def scratch_database(prefix: str = "subagents_host") -> Iterator[str]:
    """A URL (``postgresql://...``) of a fresh, empty database, dropped on exit."""
    require_postgres()
    import psycopg

    from storage._postgres import create_database, drop_database

    name = f"{prefix}_{secrets.token_hex(6)}"
    create_database(PG_ADMIN_DSN, name)
    info = psycopg.conninfo.conninfo_to_dict(PG_ADMIN_DSN)
    user = info.get("user") or "postgres"
    host = info.get("host") or "127.0.0.1"
    port = info.get("port") or "5432"
    password = info.get("password")
    auth = f"{user}:{password}" if password else str(user)
    try:
        yield f"postgresql://{auth}@{host}:{port}/{name}"
    finally:
        drop_database(PG_ADMIN_DSN, name)


def admin_sql(url: str, statement: str) -> None:
    """Run one statement on the database of ``url`` (autocommit)."""
    import psycopg

    with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
        conn.execute(statement)  # type: ignore[arg-type]
