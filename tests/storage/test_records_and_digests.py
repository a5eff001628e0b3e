"""Records are frozen, keyword-only and round-trip; digests are versioned,
domain-separated and stable; the continuation input is derived canonically."""

from __future__ import annotations

import hashlib
import inspect
from typing import Any

import msgspec
import pytest
from builders import TRACE, acceptance, artifact_terminal, replace, terminal

import storage
from statemachines import DeliveryStatus, ExecutionStatus, RetentionStatus
from storage import (
    AttemptRecord,
    DeliveryClaim,
    InputPart,
    ManualClock,
    ResultRef,
    TerminalCommit,
    _records,
)

RESULT_DOMAIN = b"subagents.background_subagent.result.v1\x00"


def _struct_classes() -> list[type[msgspec.Struct]]:
    return [
        obj
        for obj in vars(_records).values()
        if isinstance(obj, type)
        and issubclass(obj, msgspec.Struct)
        and obj.__module__ == _records.__name__
    ]


# -- records -------------------------------------------------------------------------------


def test_the_records_module_defines_structs() -> None:
    names = {cls.__name__ for cls in _struct_classes()}
    assert {"AttemptRecord", "RunRecord", "SessionRecord", "Artifact", "TerminalCommit"} <= names


@pytest.mark.parametrize("cls", _struct_classes(), ids=lambda c: c.__name__)
def test_every_record_is_frozen_and_keyword_only(cls: type[msgspec.Struct]) -> None:
    assert cls.__struct_config__.frozen
    params = inspect.signature(cls).parameters.values()
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params)


def test_a_frozen_record_refuses_assignment() -> None:
    record = acceptance(ManualClock())
    with pytest.raises(AttributeError):
        record.agent_id = "other"  # type: ignore[misc]


def test_an_attempt_record_round_trips_through_msgpack() -> None:
    commit = terminal(acceptance(ManualClock()), ManualClock())
    record = replace(
        commit.record,
        delivery_status=DeliveryStatus.CLAIMED,
        delivery_claim=DeliveryClaim(claim_id="c", deadline=1.5, continuation_run_id="r"),
    )
    data = msgspec.msgpack.encode(record)
    assert msgspec.msgpack.decode(data, type=AttemptRecord) == record


def test_new_records_carry_the_current_schema_version() -> None:
    assert storage.SCHEMA_VERSION >= 1
    assert acceptance(ManualClock()).schema_version == storage.SCHEMA_VERSION


# -- result digest -------------------------------------------------------------------------


def test_the_result_digest_is_pinned_to_the_documented_formula() -> None:
    # Computed once with hashlib from DESIGN §4 and pinned here: a change of
    # canonical form must come with a new domain version, never silently.
    assert storage.result_digest("hello, world") == (
        "sha256:87a0ccd02ffb79f75481e89f207d6abb50f95a97163a0b55d416435420bc3597"
    )
    assert storage.result_digest(None, "boom") == (
        "sha256:4267d3a1b9b3bb5e06bf0b028a780562d4dd3400019cf8c9c376986ed8de76d9"
    )
    assert storage.result_digest(None) == (
        "sha256:b2581394605f686f69a4d67b1209674bea4b2bbf89b627dddfcd8e8fa726b076"
    )


@pytest.mark.parametrize("text", ["", "hello", "naïve ✓", "line\nbreak\x00nul"])
def test_the_result_digest_follows_the_documented_formula(text: str) -> None:
    payload = text.encode("utf-8")
    content = hashlib.sha256(RESULT_DOMAIN + b"content\x00" + payload).hexdigest()
    error = hashlib.sha256(RESULT_DOMAIN + b"error\x00" + payload).hexdigest()
    assert storage.result_digest(text) == f"sha256:{content}"
    assert storage.result_digest(None, text) == f"sha256:{error}"


def test_result_digests_are_domain_separated() -> None:
    assert storage.result_digest("x") != storage.result_digest(None, "x")
    assert storage.result_digest("") != storage.result_digest(None)
    assert storage.result_digest(None, "") != storage.result_digest(None)
    # Content wins over error: the digest is of the logical result.
    assert storage.result_digest("x", "y") == storage.result_digest("x")
    # Not a bare hash of the payload: the versioned domain is part of it.
    assert storage.result_digest("x") != "sha256:" + hashlib.sha256(b"x").hexdigest()


def test_every_digest_family_uses_its_own_domain() -> None:
    parts = (InputPart(text="same"),)
    digests = {
        storage.result_digest("same"),
        storage.input_digest(parts),
        storage.request_digest("same"),
        storage.request_digest([{"kind": "text", "text": "same"}]),
    }
    assert len(digests) == 4
    for digest in digests:
        assert digest.startswith("sha256:")
        assert len(digest) == len("sha256:") + 64


def test_input_and_request_digests_are_stable() -> None:
    parts = [InputPart(text="a"), InputPart(text="b")]
    assert storage.input_digest(parts) == storage.input_digest(tuple(parts))
    assert storage.input_digest(parts) != storage.input_digest(parts[::-1])
    assert storage.input_digest([]) != storage.input_digest([InputPart(text="")])
    # Deterministic: key order of the payload does not matter.
    assert storage.request_digest({"a": 1, "b": 2}) == storage.request_digest({"b": 2, "a": 1})


# -- terminal fingerprint ------------------------------------------------------------------

DELIVERY_FIELDS = {
    "delivery_status",
    "delivery_claim",
    "delivered_claim_id",
    "delivered_to_run_id",
    "continuation_run_id",
    "automatic_continuation_suppressed_by_run_id",
    "terminal_fingerprint",
}

IMMUTABLE_CHANGES: dict[str, Any] = {
    "schema_version": lambda r: r.schema_version + 1,
    "attempt_id": lambda r: r.attempt_id + "-x",
    "agent_id": lambda r: r.agent_id + "-x",
    "linked_task_id": lambda r: "task-9",
    "subagent_name": lambda r: r.subagent_name + "-x",
    "namespace_id": lambda r: r.namespace_id + "-x",
    "parent_session_id": lambda r: r.parent_session_id + "-x",
    "parent_run_id": lambda r: r.parent_run_id + "-x",
    "child_run_id": lambda r: "child-9",
    "profile": lambda r: r.profile + "-x",
    "execution_status": lambda r: ExecutionStatus.FAILED,
    "result_ref": lambda r: replace(r.result_ref, content="other"),
    "failure_category": lambda r: "execution_error",
    "cancellation_reason": lambda r: "because",
    "retention_status": lambda r: RetentionStatus.ARTIFACT,
    "retention_expires_at": lambda r: r.retention_expires_at + 1,
    "trace_context": lambda r: {"traceparent": "other"},
    "accepted_at": lambda r: r.accepted_at - 1,
    "terminal_at": lambda r: r.terminal_at + 1,
    "updated_at": lambda r: r.updated_at + 1,
}


def _commit() -> TerminalCommit:
    clock = ManualClock()
    record = replace(acceptance(clock), child_run_id="child-1")
    return terminal(replace(record, execution_status=ExecutionStatus.RUNNING), clock)


def test_every_attempt_field_is_classified_for_the_fingerprint() -> None:
    fields = {f.name for f in msgspec.structs.fields(AttemptRecord)}
    assert fields == set(IMMUTABLE_CHANGES) | DELIVERY_FIELDS | {"owner_lease"}


@pytest.mark.parametrize("field", sorted(IMMUTABLE_CHANGES))
def test_the_fingerprint_changes_with_every_immutable_field(field: str) -> None:
    commit = _commit()
    changed = replace(commit.record, **{field: IMMUTABLE_CHANGES[field](commit.record)})
    assert changed != commit.record
    assert storage.terminal_fingerprint(replace(commit, record=changed)) != (
        storage.terminal_fingerprint(commit)
    )


def test_the_fingerprint_binds_the_owner_host_and_generation() -> None:
    commit = _commit()
    lease = commit.record.owner_lease
    for change in ({"host_instance_id": "other-host"}, {"fencing_generation": 2}):
        record = replace(commit.record, owner_lease=replace(lease, **change))
        assert storage.terminal_fingerprint(replace(commit, record=record)) != (
            storage.terminal_fingerprint(commit)
        )


def test_the_fingerprint_excludes_delivery_fields() -> None:
    commit = _commit()
    delivered = replace(
        commit.record,
        delivery_status=DeliveryStatus.DELIVERED,
        delivery_claim=DeliveryClaim(claim_id="c", deadline=5.0),
        delivered_claim_id="c",
        continuation_run_id="continuation-1",
        automatic_continuation_suppressed_by_run_id="consumer-1",
        terminal_fingerprint="sha256:" + "0" * 64,
    )
    assert storage.terminal_fingerprint(replace(commit, record=delivered)) == (
        storage.terminal_fingerprint(commit)
    )


def test_the_fingerprint_binds_the_artifact_content() -> None:
    clock = ManualClock()
    record = replace(acceptance(clock), execution_status=ExecutionStatus.RUNNING)
    commit = artifact_terminal(record, clock, artifact_ref="artifact:1", content="full" * 10)
    assert commit.artifact is not None
    changed = replace(commit, artifact=replace(commit.artifact, content="FULL" * 10))
    limits = replace(
        commit, artifact_limits=storage.ArtifactLimits(max_single_bytes=10, max_retained_bytes=20)
    )
    assert storage.terminal_fingerprint(changed) != storage.terminal_fingerprint(commit)
    assert storage.terminal_fingerprint(replace(commit, artifact=None)) != (
        storage.terminal_fingerprint(commit)
    )
    # Limits are a policy of the commit, not evidence of the result.
    assert storage.terminal_fingerprint(limits) == storage.terminal_fingerprint(commit)


def test_the_fingerprint_is_stable_and_ignores_mapping_order() -> None:
    commit = _commit()
    reordered = replace(
        commit.record, trace_context=dict(reversed(list({**TRACE, "z": "1"}.items())))
    )
    again = replace(commit.record, trace_context={**TRACE, "z": "1"})
    assert storage.terminal_fingerprint(commit) == storage.terminal_fingerprint(_commit())
    assert storage.terminal_fingerprint(replace(commit, record=reordered)) == (
        storage.terminal_fingerprint(replace(commit, record=again))
    )
    assert storage.terminal_fingerprint(commit).startswith("sha256:")


# -- continuation input --------------------------------------------------------------------


def _terminal_record(**changes: Any) -> AttemptRecord:
    record = _commit().record
    return replace(record, **changes)


def test_the_continuation_input_of_an_inline_result_carries_its_content() -> None:
    record = _terminal_record()
    (part,) = storage.continuation_input(record, None)
    assert part.kind == "text"
    assert part.text.startswith("Background subagent result")
    for value in (record.subagent_name, record.agent_id, record.attempt_id, "child-1"):
        assert value in part.text
    assert part.text.endswith("durable result")
    assert storage.continuation_input(record, None) == (part,)


def test_the_continuation_input_of_an_error_result_carries_the_error() -> None:
    error = "failed: boom"
    record = _terminal_record(
        execution_status=ExecutionStatus.FAILED,
        result_ref=ResultRef(error=error, digest=storage.result_digest(None, error), size_bytes=12),
    )
    (part,) = storage.continuation_input(record, None)
    assert part.text.endswith(error)


def test_the_continuation_input_of_an_artifact_result_uses_the_full_content() -> None:
    clock = ManualClock()
    running = replace(acceptance(clock), execution_status=ExecutionStatus.RUNNING)
    full = "complete artifact body " * 20
    record = artifact_terminal(running, clock, artifact_ref="artifact:1", content=full).record
    (with_artifact,) = storage.continuation_input(record, full)
    (preview_only,) = storage.continuation_input(record, None)
    assert with_artifact.text.endswith(full)
    assert "oversized-result-preview" not in with_artifact.text
    assert with_artifact != preview_only


def test_the_continuation_input_of_an_expired_result_is_an_expiry_summary() -> None:
    record = _terminal_record()
    assert record.result_ref is not None
    expired = replace(
        record,
        retention_status=RetentionStatus.EXPIRED,
        result_ref=ResultRef(digest=record.result_ref.digest, size_bytes=14),
    )
    (part,) = storage.continuation_input(expired, "ignored artifact content")
    assert "durable result" not in part.text
    assert "ignored artifact content" not in part.text
    assert str(record.result_ref.digest) in part.text
    assert "14" in part.text
    assert "expired" in part.text


def test_an_unknown_child_run_is_named_unknown_in_the_input() -> None:
    (part,) = storage.continuation_input(_terminal_record(child_run_id=None), None)
    assert "child_run_id: unknown" in part.text


def test_the_continuation_cause_binds_the_record_and_the_exact_input() -> None:
    record = _terminal_record()
    parts = storage.continuation_input(record, None)
    cause = storage.continuation_cause(record, parts)
    assert record.result_ref is not None
    assert (cause.attempt_id, cause.agent_id) == (record.attempt_id, record.agent_id)
    assert (cause.parent_session_id, cause.parent_run_id) == (
        record.parent_session_id,
        record.parent_run_id,
    )
    assert cause.child_run_id == record.child_run_id
    assert cause.result_digest == record.result_ref.digest
    assert cause.result_size_bytes == record.result_ref.size_bytes
    assert cause.trace_context == record.trace_context
    assert cause.input_digest == storage.input_digest(parts)
    forged = storage.continuation_cause(record, (InputPart(text="other"),))
    assert forged.input_digest != cause.input_digest
