"""The host on a PostgreSQL URL: masking, the shared event log, generations, open_host."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator

import pytest
from postgres_db import scratch_database

from storage import PostgresClock, PostgresSessionStore
from subagents._cli._serve import Redact as _Redact
from subagents._host import StoreUnreachable, StoreUrlError, open_host, parse_host_config
from subagents._host._datadir import is_store_url, mask_url, open_store_url, redact, url_password
from subagents._host._eventlog import PostgresEventLog


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with scratch_database("subagents_hoststore") as found:
        PostgresSessionStore(found, pool_size=1).close()  # applies the migrations
        yield found


@pytest.mark.parametrize(
    ("raw", "masked"),
    [
        ("postgresql://bob:pw@h:5432/db", "postgresql://bob:***@h:5432/db"),
        ("postgres://bob@h/db", "postgres://bob@h/db"),
        (
            "postgresql://h/db?password=pw&sslmode=require",
            "postgresql://h/db?password=***&sslmode=require",
        ),
        ("postgresql://bob:p%40ss@h/db", "postgresql://bob:***@h/db"),
        ("postgresql://bob:pw@h:99999/db", "postgresql://bob:***@h:99999/db"),
    ],
)
def test_mask_url_hides_every_password(raw: str, masked: str) -> None:
    assert mask_url(raw) == masked
    password = url_password(raw)
    if password:
        assert password not in mask_url(raw)
        assert redact(f"failed for {password}!", raw) == "failed for ***!"


def test_only_postgresql_urls_are_store_urls() -> None:
    assert is_store_url("postgresql://h/db") and is_store_url("POSTGRES://h/db")
    assert not is_store_url("/var/lib/subagents") and not is_store_url("mysql://h/db")
    with pytest.raises(StoreUrlError, match="not a PostgreSQL URL") as info:
        open_store_url("sqlite:///x")
    assert info.value.fix


def test_an_unreachable_server_is_store_unreachable_without_the_password() -> None:
    with pytest.raises(StoreUnreachable) as info:
        open_store_url("postgresql://bob:sekrit@127.0.0.1:1/db", connect_timeout=2)
    assert "sekrit" not in str(info.value) and "bob:***@" in info.value.url


def test_log_records_are_redacted() -> None:
    record = logging.LogRecord("x", logging.WARNING, __file__, 1, "lost %s", ("pw=sekrit",), None)
    assert _Redact("postgresql://bob:sekrit@h/db").filter(record)
    assert record.getMessage() == "lost pw=***"


def test_generations_come_from_one_counter_shared_by_every_event_log(url: str) -> None:
    logs = [PostgresEventLog(url), PostgresEventLog(url)]
    try:
        taken: list[int] = []
        lock = threading.Lock()

        def take(log: PostgresEventLog) -> None:
            for _ in range(10):
                value = log.next_generation()
                with lock:
                    taken.append(value)

        threads = [threading.Thread(target=take, args=(log,)) for log in logs for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(taken) == 40
        assert len(set(taken)) == 40  # no two starts ever share a generation
    finally:
        for log in logs:
            log.close()


def test_concurrent_appends_to_one_session_get_dense_sequence_numbers(url: str) -> None:
    logs = [PostgresEventLog(url), PostgresEventLog(url)]
    try:

        def append(log: PostgresEventLog, who: str) -> None:
            for index in range(15):
                log.append("shared", "note", 1.0, None, {"who": who, "i": index})

        threads = [
            threading.Thread(target=append, args=(log, f"{n}-{t}"))
            for n, log in enumerate(logs)
            for t in range(2)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        events = logs[1].replay("shared", 0, 1000)
        assert [e.seq for e in events] == list(range(1, 61))
        assert logs[0].last_seq("shared") == 60
        assert [e.seq for e in logs[0].replay("shared", 55, 3)] == [56, 57, 58]
        for who in ("0-0", "0-1", "1-0", "1-1"):
            mine = [e.data["i"] for e in events if e.data["who"] == who]
            assert mine == list(range(15))  # each writer's order kept
    finally:
        for log in logs:
            log.close()


async def test_open_host_on_a_config_store_uses_database_time_and_a_new_generation(
    url: str,
) -> None:
    config = parse_host_config(
        f'[host]\nstore = "{url}"\n[profiles.default]\nmodel_id = "test:echo"\n'
    )
    first = open_host(config, host_instance_id="host-x")
    try:
        assert first.store_name == "postgresql" and first.data_dir is None
        assert isinstance(first.clock, PostgresClock)
        assert first.owner.host_instance_id == "host-x"
    finally:
        await first.close()
    second = open_host(config, host_instance_id="host-x")
    try:
        # The same instance id, restarted: it outranks its former self.
        assert second.fencing_generation > first.fencing_generation
        assert second.owner.fencing_generation == second.fencing_generation
    finally:
        await second.close()


def test_config_store_and_data_dir_are_exclusive() -> None:
    from subagents._host import HostConfigError

    text = '[host]\nstore = "postgresql://h/db"\ndata_dir = "d"\n'
    with pytest.raises(HostConfigError) as info:
        parse_host_config(text + '[profiles.default]\nmodel_id = "test:echo"\n')
    assert info.value.key == "host.store"
    assert "both set" in info.value.problem


def test_the_postgres_example_config_names_a_store() -> None:
    from host_helpers import REPO

    from subagents._host import load_host_config

    config = load_host_config(REPO / "examples" / "host-postgres.toml")
    assert config.host.store is not None and is_store_url(config.host.store)
    assert config.host.data_dir is None
