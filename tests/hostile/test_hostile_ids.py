"""Over-long ids: refused with a typed error naming the id, on every store alike.

LMDB cannot hold a key over 511 bytes, so ids have a byte limit that every
store enforces the same way: the host answers an over-long session id or
idempotency key with -32602 naming the field, the store refuses it with
:class:`~storage.InvalidRecord` (a ``Conflict``) naming the id, and ids at the
limit fit every LMDB key they are part of.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from properties.reliability._hostile import SEED_SESSION, hostile_host
from storage import (
    AdmissionLease,
    InputPart,
    InvalidRecord,
    LmdbSessionStore,
    MemorySessionStore,
    RunRecord,
    SessionRecord,
    SessionStore,
)
from subagents._host._methods import MAX_ID_BYTES, RunStartParams

pytestmark = pytest.mark.timeout(60)

AT_LIMIT = "a" * (MAX_ID_BYTES - 2) + "\u00e9"  # exactly MAX_ID_BYTES bytes
OVER = ("x" * (MAX_ID_BYTES + 1), "\u00e9" * (MAX_ID_BYTES // 2 + 1), "k" * 600)


@pytest.fixture(params=["memory", "lmdb"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SessionStore]:
    opened: SessionStore = (
        MemorySessionStore() if request.param == "memory" else LmdbSessionStore(tmp_path / "db")
    )
    try:
        yield opened
    finally:
        opened.close()


def _session(session_id: str, namespace_id: str = "ns") -> SessionRecord:
    return SessionRecord(
        session_id=session_id, namespace_id=namespace_id, created_at=1.0, updated_at=1.0
    )


def _run(session_id: str, run_id: str) -> RunRecord:
    return RunRecord(
        session_id=session_id,
        run_id=run_id,
        created_at=1.0,
        updated_at=1.0,
        input=(InputPart(text="hi"),),
        profile="default",
        admission_lease=AdmissionLease(
            admission_id="adm",
            host_instance_id="h",
            fencing_generation=1,
            lease_expires_at=4e9,
        ),
    )


@pytest.mark.parametrize("too_long", OVER, ids=["one-byte-over", "multibyte", "over-lmdb"])
def test_an_over_long_id_is_refused_by_the_store_naming_the_id(
    store: SessionStore, too_long: str
) -> None:
    with pytest.raises(InvalidRecord, match="session_id is longer than") as created:
        store.create_session(_session(too_long))
    assert created.value.field == "session_id"
    store.create_session(_session("s"))
    with pytest.raises(InvalidRecord, match="run_id is longer than"):
        store.admit_run(_run("s", too_long))
    with pytest.raises(InvalidRecord, match="idempotency_key is longer than") as admitted:
        store.admit_run(_run("s", "r1"), idempotency_key=too_long)
    assert admitted.value.field == "idempotency_key"
    assert store.list_runs("s") == []


def test_ids_at_the_limit_fit_every_key_they_are_part_of(store: SessionStore) -> None:
    store.create_session(_session(AT_LIMIT, namespace_id=AT_LIMIT))
    receipt = store.admit_run(_run(AT_LIMIT, AT_LIMIT), idempotency_key=AT_LIMIT)
    assert receipt.run.run_id == AT_LIMIT
    again = store.admit_run(_run(AT_LIMIT, AT_LIMIT), idempotency_key=AT_LIMIT)
    assert again.idempotent_replay
    assert [r.run_id for r in store.list_runs(AT_LIMIT)] == [AT_LIMIT]


def test_the_params_struct_names_an_over_long_idempotency_key() -> None:
    with pytest.raises(ValueError, match="idempotency_key is longer than 128 UTF-8 bytes"):
        RunStartParams(session_id="s", input="hi", idempotency_key="\u00e9" * 65)


async def test_a_host_on_lmdb_answers_an_over_long_key_with_invalid_params(
    tmp_path: Path,
) -> None:
    async with hostile_host(store=LmdbSessionStore(tmp_path / "db", sync=False)) as host:
        reply = await host.call(
            "run.start", {"session_id": SEED_SESSION, "input": "hi", "idempotency_key": "k" * 600}
        )
        assert reply["error"]["code"] == -32602
        assert reply["error"]["data"]["path"] == "params.idempotency_key"
        assert "idempotency_key" in reply["error"]["message"]
        created = await host.call("session.create", {"session_id": AT_LIMIT})
        assert created["result"]["session_id"] == AT_LIMIT
        started = await host.call(
            "run.start", {"session_id": AT_LIMIT, "input": "hi", "idempotency_key": AT_LIMIT}
        )
        assert "result" in started, started
