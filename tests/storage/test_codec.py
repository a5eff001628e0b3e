"""The record codec: deterministic msgpack, typed failures, ordered keys."""

from __future__ import annotations

import msgspec
import pytest

from storage import SCHEMA_VERSION, AttemptRecord, CorruptRecord, OwnerLease, SessionRecord
from storage import _codec as codec


def _attempt(**changes: object) -> AttemptRecord:
    record = AttemptRecord(
        attempt_id="subattempt_1",
        agent_id="a-bg-00000000",
        subagent_name="a",
        namespace_id="ns",
        parent_session_id="s",
        parent_run_id="r",
        owner_lease=OwnerLease(
            host_instance_id="h", fencing_generation=1, heartbeat_at=1.0, lease_expires_at=2.0
        ),
        accepted_at=1.0,
        updated_at=1.0,
        trace_context={"b": "2", "a": "1"},
    )
    return msgspec.structs.replace(record, **changes)


def test_a_record_round_trips_through_its_codec() -> None:
    record = _attempt()
    assert codec.ATTEMPT.decode(codec.ATTEMPT.encode(record), table="attempts", key=b"k") == record


def test_encoding_is_deterministic_whatever_the_dict_insertion_order() -> None:
    one = _attempt(trace_context={"a": "1", "b": "2"})
    two = _attempt(trace_context={"b": "2", "a": "1"})
    assert codec.ATTEMPT.encode(one) == codec.ATTEMPT.encode(two)


@pytest.mark.parametrize("data", [b"", b"\xc1", b"garbage bytes", b"\x93\x01\x02\x03"])
def test_undecodable_bytes_raise_corrupt_record_with_table_and_key(data: bytes) -> None:
    with pytest.raises(CorruptRecord) as info:
        codec.ATTEMPT.decode(data, table="attempts", key=b"subattempt_1")
    assert info.value.table == "attempts"
    assert info.value.key == b"subattempt_1"


def test_a_record_of_the_wrong_type_raises_corrupt_record() -> None:
    session = SessionRecord(session_id="s", namespace_id="ns", created_at=1.0, updated_at=1.0)
    with pytest.raises(CorruptRecord):
        codec.ATTEMPT.decode(codec.SESSION.encode(session), table="attempts", key=b"s")


def test_an_unknown_enum_value_raises_corrupt_record() -> None:
    raw = msgspec.msgpack.encode(
        msgspec.structs.asdict(_attempt()) | {"execution_status": "zombie"}
    )
    with pytest.raises(CorruptRecord):
        codec.ATTEMPT.decode(raw, table="attempts", key=b"k")


def test_a_newer_schema_version_raises_corrupt_record() -> None:
    raw = codec.ATTEMPT.encode(_attempt(schema_version=SCHEMA_VERSION + 1))
    with pytest.raises(CorruptRecord) as info:
        codec.ATTEMPT.decode(raw, table="attempts", key=b"k")
    assert info.value.schema_version == SCHEMA_VERSION + 1


def test_time_keys_sort_like_the_times_they_encode() -> None:
    times = [-1e9, -2.5, -0.0, 0.0, 1e-9, 1.0, 1_700_000_000.0, 1_700_000_000.5, 1e18]
    keys = [codec.time_key(t) for t in times]
    assert keys == sorted(keys)
    assert [codec.time_from_key(k) for k in keys] == times


def test_sequence_keys_sort_numerically_within_a_session() -> None:
    keys = [codec.seq_key("s", n) for n in (1, 2, 10, 255, 256, 70000)]
    assert keys == sorted(keys)
    assert all(k.startswith(codec.iprefix(codec.SEQ, "s")) for k in keys)


def test_a_prefix_selects_only_its_own_namespace() -> None:
    assert codec.key("ns", "a").startswith(codec.prefix("ns"))
    assert not codec.key("ns2", "a").startswith(codec.prefix("ns"))
