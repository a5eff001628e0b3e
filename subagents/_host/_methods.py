"""The external v1 method table: typed params and results for every method.

Params reject unknown fields and wrong types (``-32602``), and id-like params
(:data:`ID_FIELDS`) longer than :data:`MAX_ID_BYTES` UTF-8 bytes, naming the
field. Results are plain
frozen structs, encoded as JSON objects. ``METHODS`` is the single list the
server binds, ``openrpc.json`` documents and ``tests/host/test_openrpc.py``
checks against each other. Durable attempt inspection and cancellation are
trusted operations and deliberately absent (see :mod:`subagents._host._trusted`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Any

import msgspec

PROTOCOL_NAME = "subagents.host"
PROTOCOL_VERSION = "1"


MAX_ID_BYTES = 128
"""The longest id-like param, in UTF-8 bytes (the store's own limit).

Ids become store keys: LMDB refuses keys over 511 bytes and one key can hold
three ids (namespace, session, attempt), so 128 bytes each always fit. The
store refuses longer ids too (``InvalidRecord``), on every backend alike."""

ID_FIELDS = frozenset({"session_id", "run_id", "idempotency_key", "steering_id", "subscription_id"})
"""Params checked against :data:`MAX_ID_BYTES`."""

Id = Annotated[
    str,
    msgspec.Meta(
        max_length=MAX_ID_BYTES,
        description=f"An id of at most {MAX_ID_BYTES} UTF-8 bytes (longer is -32602).",
    ),
]


MAX_SEQ = 2**63 - 1
"""The largest event sequence number a param may name (the log stores 8-byte numbers)."""

Seq = Annotated[
    int,
    msgspec.Meta(ge=0, le=MAX_SEQ, description="An event sequence number, 0..2^63-1."),
]
ReplayLimit = Annotated[int, msgspec.Meta(ge=1, le=10_000, description="1..10000 events.")]


class Params(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Base of every params struct: unknown fields are rejected, and so are id-like
    fields (:data:`ID_FIELDS`) over :data:`MAX_ID_BYTES` UTF-8 bytes."""

    def __post_init__(self) -> None:
        for name in self.__struct_fields__:
            if name not in ID_FIELDS:
                continue
            value = getattr(self, name)
            if isinstance(value, str) and len(value.encode("utf-8", "surrogatepass")) > (
                MAX_ID_BYTES
            ):
                # msgspec reports a ValueError from here as a ValidationError; the
                # suffix is its own path format, so the -32602 reply names the field.
                raise ValueError(
                    f"{name} is longer than {MAX_ID_BYTES} UTF-8 bytes - at `$.{name}`"
                )


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
    build_commit: str = "unknown"
    """The commit this host's code was built from (``+dirty``: with local changes)."""


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
    session_id: Id | None = None
    profile: str | None = None
    metadata: dict[str, str] = msgspec.field(default_factory=dict)


class SessionRef(Params, frozen=True, kw_only=True):
    session_id: Id


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
    session_id: Id
    input: str
    profile: str | None = None
    idempotency_key: Id | None = None


class RunRef(Params, frozen=True, kw_only=True):
    session_id: Id
    run_id: Id


class RunInterruptParams(Params, frozen=True, kw_only=True):
    session_id: Id
    run_id: Id
    reason: str | None = None


class RunSteerParams(Params, frozen=True, kw_only=True):
    session_id: Id
    run_id: Id
    message: str
    steering_id: Id | None = None


class RunFailure(msgspec.Struct, frozen=True, kw_only=True):
    """Why a run failed, in safe public terms (never provider text or keys).

    ``category``: ``model_error``, ``agent_error``, ``usage_limit``,
    ``storage_error``, ``execution_error`` or ``host_process_lost``; ``reason``:
    the provider's safe category when a model provider failed
    (``model_not_found``, ``authentication``, ``rate_limited``, ``server_error``,
    ``timeout``, ``invalid_request``, ``output_truncated``, ...); ``status``: its
    HTTP status; ``provider``: ``openai-chat``, ``openai-responses``, ``anthropic``.
    """

    category: str
    reason: str | None = None
    status: int | None = None
    provider: str | None = None

    def describe(self) -> str:
        """The one-line text a failed run keeps as its ``output_preview``:
        ``model_error: model_not_found (openai-chat, HTTP 404)``."""
        text = self.category if self.reason is None else f"{self.category}: {self.reason}"
        where = [part for part in (self.provider, self.status and f"HTTP {self.status}") if part]
        return f"{text} ({', '.join(where)})" if where else text


_FAILURE_TEXT = re.compile(
    r"(?P<category>[a-z_]+)(?:: (?P<reason>[a-z_]+))?"
    r"(?: \((?:(?P<provider>[a-z][a-z0-9_.-]*))?(?:, )?(?:HTTP (?P<status>\d{3}))?\))?"
)


def parse_failure(text: str | None) -> RunFailure | None:
    """The :class:`RunFailure` a failed run's preview says (``None``: not one of ours)."""
    found = _FAILURE_TEXT.fullmatch(text or "")
    if found is None:
        return None
    status = found["status"]
    return RunFailure(
        category=found["category"],
        reason=found["reason"],
        status=int(status) if status else None,
        provider=found["provider"],
    )


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
    failure: RunFailure | None = None
    """Set when the run failed: why, as typed fields (the preview says the same in words)."""


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
    session_id: Id
    after_seq: Seq = 0
    limit: ReplayLimit = 1000


class EventsReplayResult(Result, frozen=True, kw_only=True):
    session_id: str
    events: list[HostEvent]
    next_seq: int


class EventsSubscribeParams(Params, frozen=True, kw_only=True):
    session_id: Id
    after_seq: Seq | None = None


class EventsSubscribeResult(Result, frozen=True, kw_only=True):
    subscription_id: str
    session_id: str
    next_seq: int


class EventsUnsubscribeParams(Params, frozen=True, kw_only=True):
    subscription_id: Id


class EventsUnsubscribeResult(Result, frozen=True, kw_only=True):
    subscription_id: str
    removed: bool


EVENT_NOTIFICATION = "events.event"
"""Server → client notification carrying ``{"subscription_id", "event"}``."""

OVERFLOW_NOTIFICATION = "events.overflow"
"""Server → client notification: the subscription fell behind and was dropped.

Params ``{"subscription_id", "session_id", "last_seq", "reason"}``: every event up
to ``last_seq`` was sent before it and none after; ``events.subscribe`` with
``after_seq = last_seq`` resumes without a gap."""


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
