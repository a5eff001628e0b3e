"""Versioned, domain-separated SHA-256 digests shared by the SDK and every store.

A digest is ``sha256:<hex>`` over a NUL-terminated domain string followed by
the payload. Domains are versioned, so a change of canonical form is a new
domain and never silently matches an old digest.
"""

from __future__ import annotations

import hashlib

import msgspec

from ._records import InputPart, ResultRef, TerminalCommit

RESULT_DOMAIN = b"subagents.background_subagent.result.v1\x00"
TERMINAL_DOMAIN = b"subagents.background_subagent.terminal_commit.v1\x00"
INPUT_DOMAIN = b"subagents.background_subagent.continuation_input.v1\x00"
REQUEST_DOMAIN = b"subagents.session.run_admission.v1\x00"

_json = msgspec.json.Encoder(order="deterministic")


def _sha(domain: bytes, *parts: bytes) -> str:
    h = hashlib.sha256(domain)
    for part in parts:
        h.update(part)
    return "sha256:" + h.hexdigest()


def result_digest(content: str | None, error: str | None = None) -> str:
    """Digest of one logical terminal result: its content, else its error, else empty."""
    if content is not None:
        return _sha(RESULT_DOMAIN, b"content\x00", content.encode("utf-8"))
    if error is not None:
        return _sha(RESULT_DOMAIN, b"error\x00", error.encode("utf-8"))
    return _sha(RESULT_DOMAIN, b"empty\x00")


class _TerminalEvidence(msgspec.Struct, frozen=True, kw_only=True):
    # Every immutable terminal field. Delivery, the fingerprint itself and later
    # retention projections are excluded: they change after the commit.
    schema_version: int
    attempt_id: str
    agent_id: str
    linked_task_id: str | None
    subagent_name: str
    namespace_id: str
    parent_session_id: str
    parent_run_id: str
    child_run_id: str | None
    profile: str
    owner_host_instance_id: str
    owner_fencing_generation: int
    execution_status: str
    result_ref: ResultRef | None
    failure_category: str | None
    cancellation_reason: str | None
    initial_retention_status: str
    initial_retention_expires_at: float | None
    trace_context: dict[str, str] | None
    accepted_at: float
    terminal_at: float | None
    updated_at: float
    artifact: object


def terminal_fingerprint(commit: TerminalCommit) -> str:
    """Fingerprint of a terminal commit as first committed.

    Covers the complete immutable result, the artifact binding (full content),
    trace, owner generation, terminal timestamp and the *initial* retention
    projection; excludes delivery state. An exact replay has the same
    fingerprint even after delivery or retention changed the live record.
    """
    r = commit.record
    evidence = _TerminalEvidence(
        schema_version=r.schema_version,
        attempt_id=r.attempt_id,
        agent_id=r.agent_id,
        linked_task_id=r.linked_task_id,
        subagent_name=r.subagent_name,
        namespace_id=r.namespace_id,
        parent_session_id=r.parent_session_id,
        parent_run_id=r.parent_run_id,
        child_run_id=r.child_run_id,
        profile=r.profile,
        owner_host_instance_id=r.owner_lease.host_instance_id,
        owner_fencing_generation=r.owner_lease.fencing_generation,
        execution_status=str(r.execution_status),
        result_ref=r.result_ref,
        failure_category=r.failure_category,
        cancellation_reason=r.cancellation_reason,
        initial_retention_status=str(r.retention_status),
        initial_retention_expires_at=r.retention_expires_at,
        trace_context=r.trace_context,
        accepted_at=r.accepted_at,
        terminal_at=r.terminal_at,
        updated_at=r.updated_at,
        artifact=commit.artifact,
    )
    return _sha(TERMINAL_DOMAIN, _json.encode(evidence))


def input_digest(parts: tuple[InputPart, ...] | list[InputPart]) -> str:
    """Digest of a run's exact canonical durable input."""
    return _sha(INPUT_DOMAIN, _json.encode(list(parts)))


def request_digest(payload: object) -> str:
    """Digest of an idempotent request (deterministic JSON of ``payload``)."""
    return _sha(REQUEST_DOMAIN, _json.encode(payload))
