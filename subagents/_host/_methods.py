"""The external v1 method table: typed params and results for every method.

Params reject unknown fields and wrong types (``-32602``). Results are plain
frozen structs, encoded as JSON objects. ``METHODS`` is the single list the
server binds, ``openrpc.json`` documents and ``tests/host/test_openrpc.py``
checks against each other. Durable attempt inspection and cancellation are
trusted operations and deliberately absent (see :mod:`subagents._host._trusted`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

PROTOCOL_NAME = "subagents.host"
PROTOCOL_VERSION = "1"


class Params(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Base of every params struct: unknown fields are rejected."""


class Result(msgspec.Struct, frozen=True, kw_only=True):
    """Base of every result struct."""


# -- initialize / shutdown / diagnostics ----------------------------------------------------


class ClientInfo(Params, frozen=True, kw_only=True):
    name: str
    version: str | None = None


class InitializeParams(Params, frozen=True, kw_only=True):
    protocol_version: str | None = None
    client: ClientInfo | None = None


class ServerInfo(Result, frozen=True, kw_only=True):
    name: str
    version: str


class InitializeResult(Result, frozen=True, kw_only=True):
    protocol: str
    protocol_version: str
    server: ServerInfo
    host_instance_id: str
    namespace_id: str
    methods: list[str]
    features: list[str]
    error_codes: dict[str, int]


class EmptyParams(Params, frozen=True, kw_only=True):
    pass


class ShutdownResult(Result, frozen=True, kw_only=True):
    status: str


class SupervisorDiagnostics(Result, frozen=True, kw_only=True):
    session_id: str
    active_attempts: int


class DiagnosticsResult(Result, frozen=True, kw_only=True):
    host_instance_id: str
    fencing_generation: int
    namespace_id: str
    store: str
    data_dir: str | None
    config_source: str
    delegation: str
    accepting: bool
    live_runs: int
    subscriptions: int
    supervisors: list[SupervisorDiagnostics]
    uptime_seconds: float
    warnings: list[str]


# -- catalog / profiles ---------------------------------------------------------------------


class SubagentInfo(Result, frozen=True, kw_only=True):
    name: str
    description: str
    profile: str | None
    model_id: str | None
    source: str
    required_tools: list[str]
    optional_tools: list[str]


class ProfileInfo(Result, frozen=True, kw_only=True):
    name: str
    model_id: str
    description: str | None
    instructions: list[str]
    toolsets: list[str]
    subagents: list[str]
    child: bool
    delegation: str


class CatalogResult(Result, frozen=True, kw_only=True):
    default_profile: str
    profiles: list[ProfileInfo]
    subagents: list[SubagentInfo]


class ProfileGetParams(Params, frozen=True, kw_only=True):
    name: str


# -- sessions -------------------------------------------------------------------------------


class SessionCreateParams(Params, frozen=True, kw_only=True):
    session_id: str | None = None
    profile: str | None = None
    metadata: dict[str, str] = msgspec.field(default_factory=dict)


class SessionRef(Params, frozen=True, kw_only=True):
    session_id: str


class SessionListParams(Params, frozen=True, kw_only=True):
    status: str | None = None


class SessionInfo(Result, frozen=True, kw_only=True):
    session_id: str
    namespace_id: str
    status: str
    profile: str
    created_at: float
    updated_at: float
    metadata: dict[str, Any]


class SessionListResult(Result, frozen=True, kw_only=True):
    sessions: list[SessionInfo]


class SessionDeleteResult(Result, frozen=True, kw_only=True):
    session_id: str
    status: str


# -- runs -----------------------------------------------------------------------------------


class RunStartParams(Params, frozen=True, kw_only=True):
    session_id: str
    input: str
    profile: str | None = None
    idempotency_key: str | None = None


class RunRef(Params, frozen=True, kw_only=True):
    session_id: str
    run_id: str


class RunInterruptParams(Params, frozen=True, kw_only=True):
    session_id: str
    run_id: str
    reason: str | None = None


class RunSteerParams(Params, frozen=True, kw_only=True):
    session_id: str
    run_id: str
    message: str
    steering_id: str | None = None


class RunInfo(Result, frozen=True, kw_only=True):
    session_id: str
    run_id: str
    status: str
    profile: str
    input: str
    trigger_type: str | None
    parent_run_id: str | None
    sequence_no: int
    created_at: float
    updated_at: float
    output_preview: str | None
    metadata: dict[str, str]
    idempotent_replay: bool = False


class RunListResult(Result, frozen=True, kw_only=True):
    runs: list[RunInfo]


class RunSteerResult(Result, frozen=True, kw_only=True):
    status: str
    session_id: str
    run_id: str
    steering_id: str


# -- events ---------------------------------------------------------------------------------


class HostEvent(msgspec.Struct, frozen=True, kw_only=True):
    """One durable event of a session, numbered from 1 per session."""

    seq: int
    session_id: str
    kind: str
    at: float
    run_id: str | None = None
    data: dict[str, Any] = msgspec.field(default_factory=dict)


class EventsReplayParams(Params, frozen=True, kw_only=True):
    session_id: str
    after_seq: int = 0
    limit: int = 1000


class EventsReplayResult(Result, frozen=True, kw_only=True):
    session_id: str
    events: list[HostEvent]
    next_seq: int


class EventsSubscribeParams(Params, frozen=True, kw_only=True):
    session_id: str
    after_seq: int | None = None


class EventsSubscribeResult(Result, frozen=True, kw_only=True):
    subscription_id: str
    session_id: str
    next_seq: int


class EventsUnsubscribeParams(Params, frozen=True, kw_only=True):
    subscription_id: str


class EventsUnsubscribeResult(Result, frozen=True, kw_only=True):
    subscription_id: str
    removed: bool


EVENT_NOTIFICATION = "events.event"
"""Server → client notification carrying ``{"subscription_id", "event"}``."""


@dataclass(frozen=True)
class MethodSpec:
    name: str
    params: type[Any]
    result: type[Any]
    summary: str


METHODS: tuple[MethodSpec, ...] = (
    MethodSpec("initialize", InitializeParams, InitializeResult, "Negotiate the protocol."),
    MethodSpec("shutdown", EmptyParams, ShutdownResult, "Stop admission and shut the host down."),
    MethodSpec("diagnostics.get", EmptyParams, DiagnosticsResult, "Host identity and health."),
    MethodSpec("catalog.list", EmptyParams, CatalogResult, "Profiles and subagents."),
    MethodSpec("profile.get", ProfileGetParams, ProfileInfo, "One profile."),
    MethodSpec("session.create", SessionCreateParams, SessionInfo, "Create a durable session."),
    MethodSpec("session.list", SessionListParams, SessionListResult, "List sessions."),
    MethodSpec("session.get", SessionRef, SessionInfo, "One session."),
    MethodSpec("session.delete", SessionRef, SessionDeleteResult, "Fence a session for deletion."),
    MethodSpec("run.start", RunStartParams, RunInfo, "Admit a run and start it in the background."),
    MethodSpec("run.status", RunRef, RunInfo, "One run."),
    MethodSpec("run.list", SessionRef, RunListResult, "Runs of a session, in order."),
    MethodSpec("run.interrupt", RunInterruptParams, RunInfo, "Cancel a live run."),
    MethodSpec("run.steer", RunSteerParams, RunSteerResult, "Queue guidance for a live run."),
    MethodSpec("events.replay", EventsReplayParams, EventsReplayResult, "Replay stored events."),
    MethodSpec(
        "events.subscribe",
        EventsSubscribeParams,
        EventsSubscribeResult,
        "Push a session's events as events.event notifications (stdio).",
    ),
    MethodSpec(
        "events.unsubscribe",
        EventsUnsubscribeParams,
        EventsUnsubscribeResult,
        "Stop a subscription.",
    ),
)

METHOD_NAMES: tuple[str, ...] = tuple(spec.name for spec in METHODS)
