"""The host service: durable sessions, runs and events over one SessionStore.

:class:`HostService` implements every v1 method (see :mod:`._methods`). It
lives on one asyncio loop (the transport's); runs execute there as tasks,
under an admission lease renewed every ``lease_ttl / 3``. One
:class:`~actors.BackgroundSubagentSupervisor` per durable session is created
on first need and kept for the service lifetime; a maintenance tick (and
every run end) reconciles the store, expires retained results and admits the
one continuation run for each terminal background result (the store makes
that exactly-once). Store errors map to stable JSON-RPC codes
(:func:`map_store_error`); failure text that reaches the store or a client is
reduced to a safe public category.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import msgspec

from actors import (
    BackgroundSubagentSupervisor,
    ChildControl,
    ChildOutcome,
    ChildRequest,
    Deliverer,
    OwnerIdentity,
    PoolLimits,
    SupervisorLimits,
    SupervisorPools,
)
from statemachines import RunStatus, SessionStatus, SubagentsError
from storage import (
    ASYNC_SUBAGENT_RESULT,
    AdmissionLease,
    AlreadyExists,
    AttemptRecord,
    Clock,
    Conflict,
    CorruptRecord,
    Delivered,
    DeliveryClaimed,
    IdempotencyConflict,
    IdSource,
    InputPart,
    KernelStore,
    NotFound,
    QuotaExceeded,
    RandomIds,
    RetryableStorage,
    RunConflict,
    RunRecord,
    SessionRecord,
    SessionStore,
    StaleFence,
    StorageFull,
    StoreError,
)
from storage.admin import printable_key

from .._agent import Agent
from .._agent._context import AgentContext
from .._agent._ids import RunId
from .._agent._models import Model
from .._agent._tools import Tool
from .._delegation._background import _LAUNCH_KEY, ChildHistories, forget_settled_launches
from .._delegation._config import SubagentDelegationMode
from .._delegation._delivery import DURABLE_RUN_KEY
from .._errors import AgentError, ModelError, ProviderError, UsageLimitExceeded
from .._specs._agent_spec import ModelProviderRegistry, default_model_providers
from ._agents import AgentFactory
from ._buildinfo import build_commit
from ._config import HostConfig, HostSection, ProfileConfig
from ._delegation import ASYNC, DISABLED
from ._eventlog import EventFanout, EventLog, StoreEventLog
from ._jsonrpc import ERROR_CODES, Binding, Connection, Dispatcher, ErrorCode, RpcError
from ._methods import (
    EVENT_NOTIFICATION,
    METHOD_NAMES,
    METHODS,
    PROTOCOL_NAME,
    PROTOCOL_VERSION,
    CatalogResult,
    DiagnosticsResult,
    EmptyParams,
    EventsReplayParams,
    EventsReplayResult,
    EventsSubscribeParams,
    EventsSubscribeResult,
    EventsUnsubscribeParams,
    EventsUnsubscribeResult,
    HostEvent,
    InitializeParams,
    InitializeResult,
    ProfileGetParams,
    ProfileInfo,
    RunFailure,
    RunInfo,
    RunInterruptParams,
    RunListResult,
    RunRef,
    RunStartParams,
    RunSteerParams,
    RunSteerResult,
    ServerInfo,
    SessionCreateParams,
    SessionDeleteResult,
    SessionInfo,
    SessionListParams,
    SessionListResult,
    SessionRef,
    ShutdownResult,
    SubagentInfo,
    SupervisorDiagnostics,
    parse_failure,
)
from ._steering import SteeredModel

log = logging.getLogger("subagents.host")

SERVER_NAME = "subagents"
SERVER_VERSION = "0.1.0"
RPC_TRIGGER = "rpc"
OUTPUT_PREVIEW_BYTES = 64 * 1024
MAX_INPUT_BYTES = 64 * 1024
MAX_STEERING_BYTES = 16 * 1024
MAX_QUEUED_STEERING = 32
FULL_SCAN_TICKS = 60
"""Passes between two full scans for runs a dead host left (every unfinished run of
the namespace, read session by session; the passes between read only the foreign live
runs seen before). A full scan costs the namespace's run history, so, as for whole
sweeps, the passes between two grow with it: at least ``FULL_SCAN_TICKS``, and enough
that the last full scan took at most :data:`SWEEP_SHARE` of the ticks' time."""
REPLAY_PAGE = 500
"""Events read from the log per transaction while a subscriber catches up."""
CLOSE_THREADS = 8
"""Threads that shut the supervisors down when the host closes (whatever their number)."""
SWEEP_TICKS = 10
"""Ticks between two whole sweeps (retention expiry and the namespace's pending results).
A whole sweep costs what the namespace retains (every session with a retained result),
so a host makes one every ``SWEEP_TICKS`` ticks, not every tick; an attempt that ended
here, a run that started or ended here or a supervisor handed out makes the next tick
sweep the sessions active here only (index reads per session), and a reconciliation that
changed a record makes it a whole sweep. ``maintain()`` called directly always sweeps
the whole namespace. Every ``SWEEP_TICKS`` ticks the host also hibernates its idle
supervisors (:meth:`HostService.hibernate_idle`).

A whole sweep's cost grows with the namespace's retained history, so the ticks
between two whole sweeps grow with it: at least ``SWEEP_TICKS``, and enough that the
last whole sweep's time is at most :data:`SWEEP_SHARE` of the ticks' time."""
SWEEP_SHARE = 0.002
"""The largest share of the maintenance ticks' time that whole sweeps (and, paced
apart, full run scans: :data:`FULL_SCAN_TICKS`) may take: 2 ms
per second at most, timed as the sweep's elapsed time (its store reads on the loop's
thread, and the continuations it admits; the idle budget is 5 ms of CPU per second).
With a tick of 1 s a sweep up to 20 ms keeps the pace of ``SWEEP_TICKS``; one of 1 s
makes the next one due 500 ticks later. An idle host's CPU then stays bounded as its
namespace's retained history grows; the backstop for other hosts' results comes later
in proportion, while the sessions active here are still swept at the next tick."""
_TERMINAL_RUN = {RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED}
PARENT_PROFILE_KEY = "subagents.parent_profile"
"""``ChildRequest.metadata``: the delegating parent's profile (its MCP tools are inherited)."""
MCP_SESSION_KEY = "subagents.mcp"
"""Session metadata of a session an MCP client drives: its results are the client's
(``wait_subagent``, the attempt resource), never consumed by an automatic continuation."""


def map_store_error(exc: Exception) -> RpcError | None:
    """A storage or SDK error as a JSON-RPC error with a stable code (safe message)."""
    if isinstance(exc, RpcError):
        return exc
    if isinstance(exc, StorageFull):
        # Nothing was written and the call succeeds once the store has room: a
        # retryable refusal (admission backs off), not a server failure.
        log.warning("storage full: %s", exc)
        return RpcError(
            ErrorCode.STORAGE_UNAVAILABLE,
            "storage is full; retry later",
            {"reason": "storage_full"},
        )
    table: list[tuple[type[Exception], ErrorCode, str]] = [
        (NotFound, ErrorCode.NOT_FOUND, "not found"),
        (AlreadyExists, ErrorCode.ALREADY_EXISTS, "already exists with other content"),
        (IdempotencyConflict, ErrorCode.IDEMPOTENCY_CONFLICT, "idempotency key reused"),
        (RunConflict, ErrorCode.RUN_CONFLICT, "another run of the session is live"),
        (StaleFence, ErrorCode.STALE_FENCE, "the lease is no longer held"),
        (QuotaExceeded, ErrorCode.QUOTA_EXCEEDED, "a limit was reached"),
        (RetryableStorage, ErrorCode.STORAGE_UNAVAILABLE, "storage temporarily unavailable"),
        (Delivered, ErrorCode.CONFLICT, "already delivered"),
        (DeliveryClaimed, ErrorCode.CONFLICT, "claimed by another consumer"),
        (Conflict, ErrorCode.CONFLICT, "the record's state forbids this"),
    ]
    for kind, code, message in table:
        if isinstance(exc, kind):
            detail = getattr(exc, "message", "") or message
            return RpcError(code, f"{message}: {detail}" if detail != message else message)
    if isinstance(exc, CorruptRecord) and isinstance(exc.fields.get("table"), str):
        # One damaged value: the client learns which, the operator how to fix it.
        table, key = exc.fields["table"], exc.fields.get("key")
        shown = printable_key(key) if isinstance(key, bytes) else str(key or "")
        log.error("damaged value: %s (run subagents db check)", exc)
        return RpcError(
            ErrorCode.SERVER_ERROR,
            f"a stored value is damaged (table {table}); run subagents db check",
            {"reason": "corrupt_record", "table": table, "key": shown},
        )
    if isinstance(exc, StoreError):
        log.error("storage failure: %s", exc)
        return RpcError(ErrorCode.SERVER_ERROR, "durable storage operation failed")
    return None


def failure_category(exc: BaseException) -> str:
    """The safe public category of a run failure (never provider text or keys)."""
    if isinstance(exc, UsageLimitExceeded):
        return "usage_limit"
    if isinstance(exc, ModelError):
        return "model_error"
    if isinstance(exc, AgentError):
        return "agent_error"
    if isinstance(exc, StoreError):
        return "storage_error"
    return "execution_error"


def run_failure(exc: BaseException) -> RunFailure:
    """Why a run failed, as safe typed fields: the category, and for a model
    provider's failure its safe reason, HTTP status and provider name."""
    category = failure_category(exc)
    if isinstance(exc, ProviderError):
        status, provider = getattr(exc, "status", None), getattr(exc, "provider", None)
        return RunFailure(
            category=category,
            reason=str(getattr(exc, "category", "provider_error")),
            status=status if isinstance(status, int) else None,
            provider=provider if isinstance(provider, str) else None,
        )
    return RunFailure(category=category)


def _truncate(text: str, limit: int) -> str:
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    return data[:limit].decode("utf-8", errors="ignore")


@dataclass
class _LiveRun:
    session_id: str
    run_id: str
    admission_id: str
    task: asyncio.Task[None] | None = None
    steering: list[str] = field(default_factory=list)
    steering_ids: dict[str, str] = field(default_factory=dict)
    interrupt_reason: str | None = None

    def drain_steering(self) -> list[str]:
        queued, self.steering = self.steering, []
        return queued


def _paced(floor: int, seconds: float, tick_seconds: float) -> int:
    """Ticks until a scan that took ``seconds`` runs again: at least ``floor``, and
    enough that it takes at most :data:`SWEEP_SHARE` of the ticks' time."""
    ticks = seconds / (tick_seconds * SWEEP_SHARE)
    # Less a rounding error: a scan of exactly n ticks' share paces n, not n + 1.
    return max(floor, math.ceil(ticks - 1e-9))


def _transition(
    store: SessionStore,
    session_id: str,
    run_id: str,
    status: RunStatus,
    *,
    admission_id: str | None,
    output_preview: str | None = None,
    event_data: dict[str, Any],
) -> RunRecord:
    """``store.transition_run`` with the host's extras for the run's event (the
    store commits the event with the change); a store that keeps no log takes none."""
    if isinstance(store, KernelStore):
        return store.transition_run(
            session_id,
            run_id,
            status,
            admission_id=admission_id,
            output_preview=output_preview,
            event_data=event_data,
        )
    return store.transition_run(
        session_id, run_id, status, admission_id=admission_id, output_preview=output_preview
    )


def _event_log(store: SessionStore, given: EventLog | None) -> EventLog:
    """The host's event log: the store's own (its outbox) whenever it keeps one,
    whatever log was passed (a standalone log would not hold the store's run and
    attempt events); ``given`` only for a store without one."""
    if isinstance(given, StoreEventLog) and given.store is store:
        return given
    if isinstance(store, KernelStore) and store.has_events:
        return StoreEventLog(store)
    if given is None:
        raise ValueError("the store keeps no event log: pass events=")
    return given


def _shared_pools(host: HostSection) -> SupervisorPools:
    """The pools every session's supervisor shares, sized by ``[host]``, with the
    child conversations kept for continuations bounded across every session."""
    pools = SupervisorPools(
        PoolLimits(
            actor_threads=host.actor_threads,
            heartbeat_threads=host.heartbeat_threads,
            delivery_threads=host.delivery_threads,
            max_live_attempts=host.max_live_attempts,
        )
    )
    pools.extension = ChildHistories(host.max_child_histories)
    return pools


class HostService:
    """Every v1 method over one store; run it on one asyncio loop.

    Lifecycle: ``await start()`` (startup reconciliation, maintenance tick),
    serve, then ``await close()`` (stop admission, cancel live runs, shut
    every supervisor down under one deadline, reconcile, release resources).
    ``closers`` are called last, in order (the data-dir lock, the store).

    Events: the log is the store's own (:class:`StoreEventLog`): the store commits
    every run and attempt event with its change, the host appends its own
    (``session.created``, ``run.steered``, ...) to the same sequence, and live
    subscriptions are fed from the store's listener after each commit, on the
    loop. ``events`` is used only for a store that keeps no log.

    ``crash_test=True`` is crash-test mode, set only by the crash harness:
    ``start()`` then arms the fault points named in ``SUBAGENTS_FAULTS`` (see
    :mod:`storage.faults`). Otherwise the host never reads that variable.
    """

    def __init__(
        self,
        config: HostConfig,
        *,
        store: SessionStore,
        events: EventLog | None = None,
        clock: Clock | None = None,
        ids: IdSource | None = None,
        host_instance_id: str | None = None,
        fencing_generation: int | None = None,
        store_name: str = "memory",
        data_dir: str | None = None,
        providers: ModelProviderRegistry | None = None,
        tick_seconds: float = 1.0,
        shutdown_timeout: float = 5.0,
        closers: list[Callable[[], None]] | None = None,
        crash_test: bool = False,
    ) -> None:
        if not (tick_seconds > 0 and math.isfinite(tick_seconds)):
            raise ValueError(f"tick_seconds must be a positive number of seconds: {tick_seconds!r}")
        self.config = config
        self.crash_test = crash_test
        self.store = store
        self.events: EventLog = _event_log(store, events)
        self.clock: Clock = clock or store.clock  # leases run on store time
        self.ids: IdSource = ids or RandomIds()
        self.namespace_id = config.host.namespace
        self.host_instance_id = host_instance_id or f"host-{self.ids.token_hex(6)}"
        self.fencing_generation = fencing_generation or self.events.next_generation()
        self.owner = OwnerIdentity(
            host_instance_id=self.host_instance_id,
            fencing_generation=self.fencing_generation,
            lease_ttl=config.host.lease_ttl,
        )
        self.lease_ttl = config.host.lease_ttl
        self.store_name = store_name
        self.data_dir = data_dir
        self.providers = providers or default_model_providers()
        self.tick_seconds = tick_seconds
        self.shutdown_timeout = shutdown_timeout
        self._closers = list(closers or [])
        self._runs: dict[tuple[str, str], _LiveRun] = {}
        self._supervisors: dict[str, BackgroundSubagentSupervisor] = {}
        self._child_runner = self._run_child  # one bound method, not one per session
        self._supervisor_limits = SupervisorLimits(lease_ttl=self.lease_ttl)  # one, shared
        # Every session's supervisor shares these threads (sized by [host]); an idle one
        # holds none. Stopped by close(), after every supervisor's own shutdown.
        self.pools = _shared_pools(config.host)
        # The delivery engine the supervisors use, for the continuations this host admits.
        self.deliverer = Deliverer(store=store, ids=self.ids, namespace_id=self.namespace_id)
        # Live subscriptions, fed by the store's listener from the committed log.
        self._subscriptions = EventFanout(self.events)
        self._unlisten = store.add_event_listener(self._subscriptions.on_store_events)
        self._accepting = True
        self._closed = False
        self._tick: asyncio.Task[None] | None = None
        self._scan_every = FULL_SCAN_TICKS  # passes from one full run scan to the next
        self._until_scan = 1  # the first pass scans every run
        self._quiet_ticks = 0  # ticks since the last sweep
        self._sweep_every = SWEEP_TICKS  # ticks from one whole sweep to the next
        # Times whole sweeps and full run scans (seconds, monotonic; tests inject their own).
        self._sweep_timer: Callable[[], float] = time.perf_counter
        self._swept_ended = 0  # pools.ended_attempts at the last sweep
        self._watched: set[tuple[str, str]] = set()
        # Sessions touched (a supervisor handed out, a run ended) since the last sweep and
        # in the sweep before; sessions with a live attempt at the last sweep.
        self._touched: set[str] = set()
        self._touched_before: set[str] = set()
        self._live_before: set[str] = set()
        self._started_at = time.monotonic()
        self.shutdown_requested = asyncio.Event()
        self.agents = AgentFactory(config, self.providers)
        self.warnings: list[str] = list(self.agents.warnings)
        # What the parents get, known from the config before any session exists;
        # build_agent records what the SDK actually installed.
        parents = [name for name in config.profiles if self._profile_delegation(name) == ASYNC]
        self.delegation = ASYNC if parents else DISABLED
        self.markdown = self.agents.markdown

    # -- configuration ------------------------------------------------------------------------

    def _profile(self, name: str) -> ProfileConfig:
        profile = self.config.profiles.get(name)
        if profile is None:
            raise RpcError(
                ErrorCode.CONFIGURATION_FAILED,
                f"unknown profile {name!r}",
                {
                    "reason": "unknown_profile",
                    "profile": name,
                    "known": sorted(self.config.profiles),
                },
            )
        return profile

    def build_agent(
        self, profile_name: str, session_id: str | None, live: _LiveRun | None = None
    ) -> Agent:
        """The parent agent of ``profile_name`` (async-only delegation when it has subagents).

        With ``live``, the run's queued steering joins the conversation at each turn.
        """
        self._profile(profile_name)
        names = self.agents.subagent_names(profile_name)
        supervisor = self.supervisor(session_id) if names and session_id else None
        wrap = None
        if live is not None:
            run = live

            def delivered(count: int) -> None:
                self.emit(run.session_id, "run.steering_delivered", run.run_id, {"count": count})

            def wrap(model: Model) -> Model:
                return SteeredModel(model, run.drain_steering, delivered)

        agent, mode = self.agents.build(
            profile_name, SubagentDelegationMode.ASYNC, supervisor, wrap_model=wrap
        )
        if names:
            self.delegation = mode
        return agent

    # -- supervisors --------------------------------------------------------------------------

    def supervisor(self, session_id: str) -> BackgroundSubagentSupervisor:
        """The session's supervisor, created on first need and kept for the service lifetime."""
        self._touched.add(session_id)
        found = self._supervisors.get(session_id)
        if found is not None:
            return found
        if not self._accepting:
            raise RpcError(ErrorCode.SHUTTING_DOWN, "the host is shutting down")
        supervisor = BackgroundSubagentSupervisor(
            runner=self._child_runner,
            store=self.store,
            owner=self.owner,
            namespace_id=self.namespace_id,
            session_id=session_id,
            limits=self._supervisor_limits,
            clock=self.clock,
            ids=self.ids,
            pools=self.pools,
        )
        self._supervisors[session_id] = supervisor
        return supervisor

    def _parent_mcp_tools(self, request: ChildRequest) -> list[Tool]:
        """The delegating parent's MCP tools: from its tool registry (a model's
        ``delegate``), else from the profile an MCP client delegates under."""
        launch = request.metadata.get(_LAUNCH_KEY)
        parent_tools = getattr(launch, "parent_tools", None)
        if parent_tools is not None:
            return [t for t in parent_tools if getattr(t, "metadata", {}).get("kind") == "mcp"]
        profile = request.metadata.get(PARENT_PROFILE_KEY)
        return self.agents.profile_mcp_tools(profile) if isinstance(profile, str) else []

    async def _run_child(self, request: ChildRequest, control: ChildControl) -> ChildOutcome:
        agent = self.agents.child_agent(request.subagent_name, self._parent_mcp_tools(request))
        run = asyncio.ensure_future(agent.run(request.prompt))
        cancelled = asyncio.ensure_future(control.wait_cancelled())
        try:
            await asyncio.wait({run, cancelled}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            cancelled.cancel()
        if not run.done():
            run.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await run
            raise asyncio.CancelledError
        try:
            result = run.result()
        except Exception as exc:
            return ChildOutcome.failed(run_failure(exc).describe())
        return ChildOutcome.completed(result.output, child_run_id=result.run_id.as_str())

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        """Reconcile what a previous host left, then start the maintenance tick.

        In crash-test mode the fault points in ``SUBAGENTS_FAULTS`` are armed first.
        """
        if self.crash_test:
            # Imported here on purpose: a production host never loads the arming API.
            from storage.faults import arm_from_env  # noqa: PLC0415

            arm_from_env(default_sleep_seconds=2 * self.lease_ttl)
        await self.maintain()
        self._tick = asyncio.get_running_loop().create_task(self._tick_loop())

    async def _tick_loop(self) -> None:
        ticks = 0
        while True:
            await asyncio.sleep(self.tick_seconds)
            ticks += 1
            try:
                await self.maintain(sweep=self._sweep_due())
                if ticks % SWEEP_TICKS == 0:
                    await self.hibernate_idle()
            except Exception:
                log.exception("maintenance tick failed")

    async def hibernate_idle(self) -> int:
        """Stop the actor of every awake supervisor whose session has no live run here
        and that is idle (:meth:`BackgroundSubagentSupervisor.hibernate`); how many
        stopped. Each stays the session's supervisor (kept for the service lifetime)
        and starts a fresh actor at its next call. The maintenance tick calls this
        every ``SWEEP_TICKS`` ticks; it runs on a worker thread (each answer is one
        round trip through the actor pool) and stops early once the host closes."""
        busy = {session_id for session_id, _ in self._runs}
        awake = [s for k, s in self._supervisors.items() if s.awake and k not in busy]
        if not awake:
            return 0

        def stop_idle() -> int:
            stopped = [s for s in awake if self._accepting and s.hibernate()]
            for supervisor in stopped:
                forget_settled_launches(supervisor)
            return len(stopped)

        return await asyncio.to_thread(stop_idle)

    def _sweep_due(self) -> bool | None:
        """This tick's sweep: ``True`` (the whole namespace) once ``SWEEP_TICKS`` ticks
        went by since the last whole sweep (the backstop for what other hosts did);
        ``None`` (the sessions active here) when something happened here since the
        last sweep; else ``False``."""
        self._quiet_ticks += 1
        if self._quiet_ticks >= self._sweep_every:
            return True
        return (
            None
            if self.pools.ended_attempts != self._swept_ended
            or frozenset(self._runs) != self._swept_runs
            or self._touched
            else False
        )

    async def maintain(self, *, sweep: bool | None = True) -> None:
        """One reconciliation pass: lost runs, lost attempts, then the sweep: with
        ``sweep=True`` retention expiry and the continuations of every pending result
        of the namespace; with ``None`` only those of the sessions active here (see
        :meth:`_active_sessions`); with ``False`` none. A reconciliation that changed a
        record makes it a whole sweep."""
        if self._closed:
            return
        swept = 0.0  # seconds this whole sweep took (expiry and the pending results)
        try:
            # First: results claimed by runs whose host is gone go back, unsuppressed.
            if self.store.reconcile(self.namespace_id):
                sweep = True
            if sweep:
                started = self._sweep_timer()
                self.store.expire_retention(self.namespace_id)
                swept = self._sweep_timer() - started
        except StoreError as exc:
            log.warning("store reconciliation failed: %s", exc)
        self._reconcile_runs()
        if sweep is False:
            return
        # Read before the sweep: whatever ends while it runs makes the next tick sweep.
        if sweep:
            self._quiet_ticks = 0
        self._swept_ended = self.pools.ended_attempts
        self._swept_runs = frozenset(self._runs)
        active = self._active_sessions()  # a whole sweep starts the next generation too
        sessions = None if sweep else active
        if self._accepting:
            started = self._sweep_timer()
            self._admit_continuations(sessions)
            swept += self._sweep_timer() - started
        if sweep:
            self._pace_sweeps(swept)

    def _pace_sweeps(self, seconds: float) -> None:
        """Ticks until the next whole sweep, after one that took ``seconds``: at least
        ``SWEEP_TICKS``, and enough that the sweep takes at most :data:`SWEEP_SHARE`
        of the ticks' time."""
        self._sweep_every = _paced(SWEEP_TICKS, seconds, self.tick_seconds)

    def _active_sessions(self) -> set[str]:
        """The sessions a result may have become pending in since the last sweep: those
        with an attempt live now or at the last sweep, a live run, or a run that ended or
        a supervisor handed out since the sweep before last. An attempt that ended in
        any other session was accepted and ended between two sweeps outside any run of
        this host: the next whole sweep finds it (``SWEEP_TICKS`` ticks later, or more
        for a namespace whose sweep is long: :data:`SWEEP_SHARE`)."""
        try:
            live = {r.parent_session_id for r in self.store.list_active_attempts(self.namespace_id)}
        except StoreError as exc:
            log.warning("cannot list live attempts: %s", exc)
            live = set()
        touched, self._touched = self._touched, set()
        sessions = live | self._live_before | touched | self._touched_before
        sessions.update(session_id for session_id, _ in self._runs)
        self._live_before, self._touched_before = live, touched
        return sessions

    def _candidate_runs(self, full: bool) -> Iterator[RunRecord]:
        """Runs to check: every unfinished run on a ``full`` scan, else only the
        foreign live runs seen before, so a pass costs what is live, not the history."""
        if not full:
            for session_id, run_id in list(self._watched):
                try:
                    yield self.store.load_run(session_id, run_id)
                except StoreError:
                    self._watched.discard((session_id, run_id))
            return
        try:
            session_ids = [s.session_id for s in self.store.list_sessions(self.namespace_id)]
        except StoreError as exc:
            log.warning("cannot list sessions: %s", exc)
            return
        # One session's runs at a time, finished ones dropped at once: a scan that held
        # the whole history raised the heap's high-water mark with every session, and
        # the allocator keeps its arenas (idle sessions cost RSS; issue 16).
        for session_id in session_ids:
            try:
                runs = self.store.list_runs(session_id)
            except StoreError:
                continue
            yield from (run for run in runs if run.status not in _TERMINAL_RUN)

    def _reconcile_runs(self) -> None:
        """Runs left admitted/running by a dead host (admission lease expired) become failed.

        The store releases the results such a run had taken as a lost consumer's
        (unsuppressed: its lease had lapsed), so automatic continuation consumes them.
        A full scan paces the next one by its own time (:data:`FULL_SCAN_TICKS`).
        """
        now = self.clock.now()
        self._until_scan -= 1
        full = self._until_scan <= 0  # the first pass, then one every _scan_every
        started = self._sweep_timer()
        try:
            for run in self._candidate_runs(full):
                self._reconcile_run(run, now)
        finally:
            if full:
                seconds = self._sweep_timer() - started
                self._scan_every = _paced(FULL_SCAN_TICKS, seconds, self.tick_seconds)
                self._until_scan = self._scan_every

    def _reconcile_run(self, run: RunRecord, now: float) -> None:
        """Fail ``run`` if its host is gone; watch it while a live foreign host owns it."""
        key = (run.session_id, run.run_id)
        if run.status in _TERMINAL_RUN or key in self._runs:
            self._watched.discard(key)
            return
        lease = run.admission_lease
        if lease is not None and lease.lease_expires_at > now:
            self._watched.add(key)
            return  # a live host (maybe another one) owns it
        self._watched.discard(key)
        try:
            _transition(
                self.store,
                run.session_id,
                run.run_id,
                RunStatus.FAILED,
                admission_id=lease.admission_id if lease else None,
                output_preview="host_process_lost",
                event_data={"failure": {"category": "host_process_lost"}},
            )
        except StoreError as exc:
            log.info("run %s not reconciled: %s", run.run_id, exc)

    def _continuation_profile(self, session_id: str, parent_run_id: str) -> str | None:
        """The profile a continuation runs with, or ``None`` when it is suppressed.

        The causal parent's profile (or its ``continuation_profile``); when the
        parent is not a durable run (the attempt names the SDK's own run id), the
        session's. A cancelled parent
        or an inactive session suppresses automatic continuation, and so does a session an
        MCP client drives (``MCP_SESSION_KEY`` in its metadata: the client reads its results).
        """
        try:
            parent = self.store.load_run(session_id, parent_run_id)
        except NotFound:
            parent = None
        except StoreError:
            return None
        if parent is not None:
            if parent.status == RunStatus.CANCELLED:
                return None
            return self._continuing(parent.profile or self.config.host.default_profile)
        try:
            session = self.store.load_session(session_id)
        except StoreError:
            return None
        if session.status != SessionStatus.ACTIVE or MCP_SESSION_KEY in session.metadata:
            return None
        return self._continuing(session.profile or self.config.host.default_profile)

    def _continuing(self, profile: str) -> str:
        """The profile that continues ``profile``'s runs (its ``continuation_profile``)."""
        entry = self.config.profiles.get(profile)
        return entry.continuation_profile or profile if entry is not None else profile

    def _pending(self, sessions: Iterable[str] | None) -> list[AttemptRecord]:
        """The namespace's pending results (``sessions=None``: a scan of every session
        with a retained result), or only those of ``sessions`` (index reads per session)."""
        if sessions is None:
            return self.store.list_pending_attempts(self.namespace_id)
        found: list[AttemptRecord] = []
        for session_id in sorted(set(sessions)):
            found += self.store.list_pending_attempts(self.namespace_id, session_id)
        return found

    def _admit_continuations(self, sessions: Iterable[str] | None = None) -> None:
        """Admit a continuation run for every pending result of ``sessions`` (``None``:
        the whole namespace) whose session has no live run here."""
        try:
            pending = self._pending(sessions)
        except StoreError as exc:
            log.warning("cannot list pending results: %s", exc)
            return
        for record in pending:
            if record.automatic_continuation_suppressed_by_run_id is not None:
                continue
            if record.delivery_status != "undelivered":
                continue
            session = record.parent_session_id
            if any(key[0] == session for key in self._runs):
                continue  # the session is busy; the next tick tries again
            profile = self._continuation_profile(record.parent_session_id, record.parent_run_id)
            if profile is None:
                continue
            if profile not in self.config.profiles:
                continue  # unknown profile: keep the evidence, no automatic run
            try:
                head = self._head_run_id(session)
                receipt = self.deliverer.admit_continuation(
                    record, self._continuation_run(record, head), self.clock.now(), head
                )
            except StoreError as exc:
                log.info("no continuation for %s now: %s", record.attempt_id, exc)
                continue
            admitted = receipt.run
            lease = admitted.admission_lease
            if lease is None:  # the store admits a continuation only under its lease
                log.error("continuation %s was admitted without a lease", admitted.run_id)
                continue
            self._launch(admitted, profile, lease.admission_id)

    def _head_run_id(self, session_id: str) -> str | None:
        """The session's head run (its latest), which a continuation restores from."""
        return self.store.head_run_id(session_id)

    def _continuation_run(
        self, record: AttemptRecord, head_run_id: str | None
    ) -> Callable[[tuple[InputPart, ...], float], RunRecord]:
        """The builder of the run that consumes ``record``'s result (for the deliverer,
        which decides what the run's input is). It restores from the session's head
        run ``head_run_id`` (not from the causal parent, which may be older)."""

        def make(parts: tuple[InputPart, ...], now: float) -> RunRecord:
            run_id = f"run_{self.ids.uuid4().hex}"
            admission_id = f"adm_{self.ids.token_hex(8)}"
            metadata = {
                "async_subagent.attempt_id": record.attempt_id,
                "async_subagent.agent_id": record.agent_id,
                "async_subagent.parent_run_id": record.parent_run_id,
            }
            if record.child_run_id is not None:
                metadata["async_subagent.child_run_id"] = record.child_run_id
            return RunRecord(
                session_id=record.parent_session_id,
                run_id=run_id,
                created_at=now,
                updated_at=now,
                input=parts,
                trigger_type=ASYNC_SUBAGENT_RESULT,
                parent_run_id=record.parent_run_id,
                restore_from_run_id=head_run_id,
                profile=record.profile,
                metadata=metadata,
                trace_context=record.trace_context,
                admission_lease=self._lease(admission_id),
            )

        return make

    async def close(self) -> None:
        """Stop admission, cancel runs, shut supervisors down, reconcile, release. Idempotent."""
        if self._closed:
            return
        self._accepting = False
        if self._tick is not None:
            self._tick.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._tick
        # One deadline for everything: runs, then every supervisor at once.
        deadline = time.monotonic() + self.shutdown_timeout
        live = list(self._runs.values())
        for run in live:
            if run.task is not None:
                run.interrupt_reason = run.interrupt_reason or "host shutdown"
                run.task.cancel()
        tasks = [run.task for run in live if run.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=max(0.0, deadline - time.monotonic()))

        await asyncio.to_thread(self._stop_supervisors, deadline)
        await self._stop_pools(deadline)
        self._closed = True
        with contextlib.suppress(StoreError):
            self.store.reconcile(self.namespace_id)
        self._unlisten()
        self._subscriptions.clear()
        for closer in self._closers:
            try:
                closer()
            except Exception:
                log.exception("closing a host resource failed")

    def _stop_supervisors(self, deadline: float) -> None:
        """Every supervisor's checked shutdown under ``deadline``, on at most
        ``CLOSE_THREADS`` threads (one thread per session would be thousands at once:
        an idle supervisor stops in well under a millisecond)."""
        todo = list(self._supervisors.items())
        lock = threading.Lock()

        def worker() -> None:
            while True:
                with lock:
                    if not todo:
                        return
                    session_id, supervisor = todo.pop()
                try:
                    supervisor.shutdown_checked_sync(max(0.0, deadline - time.monotonic()))
                except Exception as exc:
                    log.warning("supervisor %s did not shut down cleanly: %s", session_id, exc)

        threads = [
            threading.Thread(target=worker, name=f"subagents-close-{n}")
            for n in range(min(CLOSE_THREADS, len(todo)))
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    async def _stop_pools(self, deadline: float) -> None:
        """End the shared threads within the shutdown deadline (on a thread of its own:
        joining threads never blocks the loop)."""
        remaining = max(0.0, deadline - time.monotonic())
        stopped = await asyncio.to_thread(self.pools.stop, remaining)
        if not stopped:
            log.warning("some supervisor threads did not end within the shutdown deadline")

    # -- events -------------------------------------------------------------------------------

    def emit(self, session_id: str, kind: str, run_id: str | None, data: dict[str, Any]) -> None:
        """Append one host event (``session.created``, ``run.steered``, ...) to the
        session's log; subscribers get it from the committed log (the store's
        listener). Run and attempt events are the store's own, committed with
        their change. A storage failure is logged, never raised."""
        try:
            event = self.events.append(session_id, kind, self.clock.now(), run_id, data)
        except StoreError as exc:
            log.error("event %s of %s not persisted: %s", kind, session_id, exc)
            return
        if not isinstance(self.events, StoreEventLog):  # a log the store does not report
            self._subscriptions.publish([event])

    def add_listener(
        self,
        session_id: str,
        push: Callable[[HostEvent], None],
        subscription_id: str | None = None,
        *,
        after: int | None = None,
    ) -> str:
        """Push the session's committed events after seq ``after`` (default: the last
        committed now) to ``push``, on the loop thread, in order, without a gap.
        Call it on the loop."""
        sub_id = subscription_id or f"sub_{self.ids.token_hex(8)}"
        start = self.events.last_seq(session_id) if after is None else after
        self._subscriptions.add(sub_id, session_id, push, start)
        return sub_id

    def remove_listener(self, subscription_id: str) -> bool:
        return self._subscriptions.remove(subscription_id)

    # -- helpers ------------------------------------------------------------------------------

    def _lease(self, admission_id: str) -> AdmissionLease:
        return AdmissionLease(
            admission_id=admission_id,
            host_instance_id=self.host_instance_id,
            fencing_generation=self.fencing_generation,
            lease_expires_at=self.clock.now() + self.lease_ttl,
        )

    def _check_accepting(self) -> None:
        if not self._accepting:
            raise RpcError(
                ErrorCode.SHUTTING_DOWN, "the host is shutting down", {"reason": "shutting_down"}
            )

    @staticmethod
    def _session_info(record: SessionRecord) -> SessionInfo:
        return SessionInfo(
            session_id=record.session_id,
            namespace_id=record.namespace_id,
            status=str(record.status),
            profile=record.profile,
            created_at=record.created_at,
            updated_at=record.updated_at,
            metadata=dict(record.metadata),
        )

    @staticmethod
    def _run_info(record: RunRecord, replay: bool = False) -> RunInfo:
        return RunInfo(
            session_id=record.session_id,
            run_id=record.run_id,
            status=str(record.status),
            profile=record.profile,
            input="".join(part.text for part in record.input),
            trigger_type=record.trigger_type,
            parent_run_id=record.parent_run_id,
            sequence_no=record.sequence_no,
            created_at=record.created_at,
            updated_at=record.updated_at,
            output_preview=record.output_preview,
            metadata=dict(record.metadata),
            idempotent_replay=replay,
            failure=(
                parse_failure(record.output_preview) if record.status is RunStatus.FAILED else None
            ),
        )

    def session(self, session_id: str) -> SessionRecord:
        """The session of this namespace (``NotFound`` / ``RpcError`` otherwise)."""
        record = self.store.load_session(session_id)
        if record.namespace_id != self.namespace_id:
            raise RpcError(ErrorCode.NOT_FOUND, f"no session {session_id!r}")
        return record

    # -- methods: protocol --------------------------------------------------------------------

    async def initialize(self, params: InitializeParams, conn: Connection) -> InitializeResult:
        if params.protocol_version is not None and params.protocol_version != PROTOCOL_VERSION:
            raise RpcError(
                ErrorCode.INVALID_PARAMS,
                f"unsupported protocol_version {params.protocol_version!r}; this host speaks "
                f"{PROTOCOL_VERSION!r}",
                {"reason": "unsupported_protocol", "supported": [PROTOCOL_VERSION]},
            )
        conn.initialized = True
        features = ["sessions", "runs", "events.replay", "durable.attempts"]
        features.append("events.subscribe" if conn.push is not None else "events.sse")
        return InitializeResult(
            protocol=PROTOCOL_NAME,
            protocol_version=PROTOCOL_VERSION,
            server=ServerInfo(name=SERVER_NAME, version=SERVER_VERSION),
            host_instance_id=self.host_instance_id,
            namespace_id=self.namespace_id,
            methods=list(METHOD_NAMES),
            features=features,
            error_codes=dict(ERROR_CODES),
        )

    async def shutdown(self, params: EmptyParams, conn: Connection) -> ShutdownResult:
        self._accepting = False
        self.shutdown_requested.set()
        return ShutdownResult(status="shutting_down")

    async def diagnostics(self, params: EmptyParams, conn: Connection) -> DiagnosticsResult:
        try:
            active = self.store.list_active_attempts(self.namespace_id)
        except StoreError:
            active = []
        supervisors = [
            SupervisorDiagnostics(
                session_id=session_id,
                active_attempts=sum(1 for r in active if r.parent_session_id == session_id),
            )
            for session_id in sorted(self._supervisors)
        ]
        return DiagnosticsResult(
            host_instance_id=self.host_instance_id,
            fencing_generation=self.fencing_generation,
            namespace_id=self.namespace_id,
            store=self.store_name,
            data_dir=self.data_dir,
            config_source=self.config.source,
            delegation=self.delegation,
            accepting=self._accepting,
            live_runs=len(self._runs),
            subscriptions=len(self._subscriptions),
            supervisors=supervisors,
            uptime_seconds=round(time.monotonic() - self._started_at, 3),
            warnings=list(self.warnings),
            build_commit=build_commit(),
        )

    # -- methods: catalog ---------------------------------------------------------------------

    def _profile_delegation(self, name: str) -> str:
        """``async`` for a parent profile with subagents; ``disabled`` otherwise, and for a
        profile some subagent runs with (a child gets no delegation tools)."""
        profile = self._profile(name)
        child = name in self.config.child_profiles()
        return ASYNC if profile.subagents and not child else DISABLED

    def _profile_info(self, name: str) -> ProfileInfo:
        profile = self._profile(name)
        child = name in self.config.child_profiles()
        return ProfileInfo(
            name=name,
            model_id=profile.model_id,
            description=profile.description,
            instructions=profile.instruction_list(),
            toolsets=list(profile.toolsets),
            subagents=list(profile.subagents),
            child=child,
            delegation=self._profile_delegation(name),
        )

    async def catalog_list(self, params: EmptyParams, conn: Connection) -> CatalogResult:
        subagents = [
            SubagentInfo(
                name=name,
                description=entry.description,
                profile=entry.profile,
                model_id=self.config.profiles[entry.profile].model_id,
                source="config",
                required_tools=list(entry.required_tools),
                optional_tools=list(entry.optional_tools),
            )
            for name, entry in sorted(self.config.subagents.items())
        ]
        for name, spec in sorted(self.markdown.items()):
            if name in self.config.subagents:
                continue
            subagents.append(
                SubagentInfo(
                    name=name,
                    description=spec.description,
                    profile=None,
                    model_id=spec.model,
                    source="markdown",
                    required_tools=list(spec.tools),
                    optional_tools=list(spec.optional_tools),
                )
            )
        return CatalogResult(
            default_profile=self.config.host.default_profile,
            profiles=[self._profile_info(name) for name in sorted(self.config.profiles)],
            subagents=subagents,
        )

    async def profile_get(self, params: ProfileGetParams, conn: Connection) -> ProfileInfo:
        if params.name not in self.config.profiles:
            raise RpcError(
                ErrorCode.NOT_FOUND,
                f"unknown profile {params.name!r}",
                {"reason": "unknown_profile", "known": sorted(self.config.profiles)},
            )
        return self._profile_info(params.name)

    # -- methods: sessions --------------------------------------------------------------------

    async def session_create(self, params: SessionCreateParams, conn: Connection) -> SessionInfo:
        self._check_accepting()
        profile = params.profile or self.config.host.default_profile
        self._profile(profile)
        session_id = params.session_id or f"session_{self.ids.uuid4().hex}"
        if params.session_id is not None:
            try:
                existing = self.store.load_session(session_id)
            except NotFound:
                pass
            else:
                # An identical retry returns the stored session; anything else collides.
                if (
                    existing.namespace_id == self.namespace_id
                    and existing.profile == profile
                    and existing.metadata == dict(params.metadata)
                ):
                    return self._session_info(existing)
                raise RpcError(
                    ErrorCode.ALREADY_EXISTS,
                    f"session {session_id!r} exists with other content",
                    {"reason": "already_exists"},
                )
        now = self.clock.now()
        record = self.store.create_session(
            SessionRecord(
                session_id=session_id,
                namespace_id=self.namespace_id,
                created_at=now,
                updated_at=now,
                profile=profile,
                metadata=dict(params.metadata),
            )
        )
        if self.events.last_seq(session_id) == 0:
            self.emit(session_id, "session.created", None, {"profile": profile})
        return self._session_info(record)

    async def session_list(self, params: SessionListParams, conn: Connection) -> SessionListResult:
        if params.status is not None and params.status not in set(SessionStatus):
            raise RpcError(
                ErrorCode.INVALID_PARAMS,
                f"invalid params: unknown status {params.status!r}",
                {"reason": "invalid_params", "path": "params.status"},
            )
        records = self.store.list_sessions(self.namespace_id)
        return SessionListResult(
            sessions=[
                self._session_info(r)
                for r in records
                if params.status is None or str(r.status) == params.status
            ]
        )

    async def session_get(self, params: SessionRef, conn: Connection) -> SessionInfo:
        return self._session_info(self.session(params.session_id))

    async def session_delete(self, params: SessionRef, conn: Connection) -> SessionDeleteResult:
        self.session(params.session_id)
        if any(key[0] == params.session_id for key in self._runs):
            raise RpcError(
                ErrorCode.RUN_CONFLICT,
                "the session has a live run; interrupt it first",
                {"reason": "live_run"},
            )
        record = self.store.fence_session_deletion(params.session_id)
        self.emit(params.session_id, "session.deleted", None, {})
        return SessionDeleteResult(session_id=record.session_id, status=str(record.status))

    # -- methods: runs ------------------------------------------------------------------------

    async def run_start(self, params: RunStartParams, conn: Connection) -> RunInfo:
        self._check_accepting()
        size = len(params.input.encode("utf-8"))
        if size > MAX_INPUT_BYTES:
            raise RpcError(
                ErrorCode.INVALID_PARAMS,
                f"invalid params: input of {size} bytes exceeds {MAX_INPUT_BYTES}",
                {"reason": "too_large", "path": "params.input"},
            )
        if not params.input:
            raise RpcError(
                ErrorCode.INVALID_PARAMS,
                "invalid params: input must not be empty",
                {"reason": "invalid_params", "path": "params.input"},
            )
        session = self.session(params.session_id)
        profile = params.profile or session.profile or self.config.host.default_profile
        self._profile(profile)
        run_id = f"run_{self.ids.uuid4().hex}"
        if params.idempotency_key is not None:
            # One key, one run: the run id is derived from the key, so a retry
            # finds the run it admitted (the store's receipt binds the exact request).
            key = f"{params.session_id}\0{params.idempotency_key}".encode()
            run_id = f"run_{hashlib.sha256(key).hexdigest()[:32]}"
            try:
                prior = self.store.load_run(params.session_id, run_id)
            except NotFound:
                pass
            else:
                same = "".join(p.text for p in prior.input) == params.input
                if not same or prior.profile != profile:
                    raise RpcError(
                        ErrorCode.IDEMPOTENCY_CONFLICT,
                        "idempotency_key reused with another request",
                        {"reason": "idempotency_conflict"},
                    )
                return self._run_info(prior, replay=True)
        admission_id = f"adm_{self.ids.token_hex(8)}"
        now = self.clock.now()
        receipt = self.store.admit_run(
            RunRecord(
                session_id=params.session_id,
                run_id=run_id,
                created_at=now,
                updated_at=now,
                input=(InputPart(text=params.input),),
                trigger_type=RPC_TRIGGER,
                profile=profile,
                admission_lease=self._lease(admission_id),
            ),
            idempotency_key=params.idempotency_key,
        )
        run = receipt.run
        if receipt.idempotent_replay:
            return self._run_info(run, replay=True)
        self._launch(run, profile, admission_id)
        return self._run_info(run)

    def _launch(self, run: RunRecord, profile: str, admission_id: str) -> None:
        live = _LiveRun(session_id=run.session_id, run_id=run.run_id, admission_id=admission_id)
        self._runs[(run.session_id, run.run_id)] = live
        live.task = asyncio.get_running_loop().create_task(self._execute(run, profile, live))

    async def _execute(self, run: RunRecord, profile: str, live: _LiveRun) -> None:
        key = (run.session_id, run.run_id)
        renew: asyncio.Task[None] | None = None
        prompt = "".join(part.text for part in run.input)
        try:
            try:
                _transition(
                    self.store,
                    run.session_id,
                    run.run_id,
                    RunStatus.RUNNING,
                    admission_id=live.admission_id,
                    event_data={"profile": profile},
                )
                renew = asyncio.get_running_loop().create_task(self._renew(run, live))
                if run.trigger_type == RPC_TRIGGER:
                    prompt += self._waiting_results(run)
                agent = self.build_agent(profile, run.session_id, live)
                # Results this run takes (wait_subagent, its next turns) are claimed
                # for it; its terminal transition acknowledges or releases them. The
                # SDK run takes the durable run's id, so an attempt's parent_run_id
                # names a run the client sees in run.list.
                context = AgentContext(metadata={DURABLE_RUN_KEY: run.run_id})
                result = await agent._run_core(
                    prompt, context, None, None, run_id=RunId.from_string(run.run_id)
                )
            except asyncio.CancelledError:
                self._finish(run, live, RunStatus.CANCELLED, live.interrupt_reason or "interrupted")
                return
            except (Exception, RpcError) as exc:
                failure = run_failure(exc)
                if not isinstance(exc, SubagentsError | RpcError | StoreError):
                    log.exception("run %s failed", run.run_id)
                self._finish(run, live, RunStatus.FAILED, failure.describe())
                return
            self._finish(run, live, RunStatus.COMPLETED, result.output)
        finally:
            if renew is not None:
                renew.cancel()
            self._runs.pop(key, None)
            self._touched.add(run.session_id)
        if self._accepting:
            # Only this session's results waited for this run to end.
            self._admit_continuations((run.session_id,))

    def _waiting_results(self, run: RunRecord) -> str:
        """Claim for explicit run ``run`` every result of its session that waits for a
        consumer (undelivered, or suppressed for automatic continuation; whichever
        host process launched it) and return their text, to follow the run's input.

        The claims are the run's: its completion acknowledges them in the store,
        its failure or cancellation (or its host's death) releases them.
        """
        records = self.deliverer.claim_for_run(run.session_id, run.run_id)
        now = self.clock.now()
        texts: list[str] = []
        for record in records:
            self.deliverer.deltas.pop(record.attempt_id)
            texts.extend(part.text for part in self.deliverer.run_input(record, now))
        if records:
            self.emit(
                run.session_id,
                "run.results_claimed",
                run.run_id,
                {"attempt_ids": [r.attempt_id for r in records]},
            )
        return "".join("\n\n" + text for text in texts)

    def _finish(self, run: RunRecord, live: _LiveRun, status: RunStatus, text: str) -> None:
        """Commit the run's terminal status; the store appends its terminal event
        (``output`` / ``error`` / ``reason``: the preview) in the same transaction,
        with the host's extras: the parsed ``failure``, ``undelivered_steering``."""
        preview = _truncate(text, OUTPUT_PREVIEW_BYTES)
        extra: dict[str, Any] = {}
        failure = parse_failure(preview) if status is RunStatus.FAILED else None
        if failure is not None:
            extra["failure"] = msgspec.to_builtins(failure)
        if live.steering:  # queued after the run's last turn: it never reached the model
            extra["undelivered_steering"] = len(live.steering)
        try:
            _transition(
                self.store,
                run.session_id,
                run.run_id,
                status,
                admission_id=live.admission_id,
                output_preview=preview,
                event_data=extra,
            )
        except StoreError as exc:
            log.warning("run %s: terminal status %s not persisted: %s", run.run_id, status, exc)

    async def _renew(self, run: RunRecord, live: _LiveRun) -> None:
        interval = self.lease_ttl / 3
        while True:
            await asyncio.sleep(interval)
            try:
                self.store.renew_run_admission(
                    run.session_id,
                    run.run_id,
                    live.admission_id,
                    self.clock.now() + self.lease_ttl,
                )
            except (StaleFence, Conflict, NotFound):
                log.warning("run %s lost its admission lease", run.run_id)
                return
            except StoreError as exc:
                log.warning("run %s: lease renewal failed, retrying: %s", run.run_id, exc)

    async def run_status(self, params: RunRef, conn: Connection) -> RunInfo:
        self.session(params.session_id)
        return self._run_info(self.store.load_run(params.session_id, params.run_id))

    async def run_list(self, params: SessionRef, conn: Connection) -> RunListResult:
        self.session(params.session_id)
        return RunListResult(
            runs=[self._run_info(r) for r in self.store.list_runs(params.session_id)]
        )

    async def run_interrupt(self, params: RunInterruptParams, conn: Connection) -> RunInfo:
        self.session(params.session_id)
        record = self.store.load_run(params.session_id, params.run_id)
        live = self._runs.get((params.session_id, params.run_id))
        if live is None or live.task is None:
            if record.status in _TERMINAL_RUN:
                return self._run_info(record)
            raise RpcError(
                ErrorCode.CONFLICT,
                "the run is not live on this host",
                {"reason": "not_live_here", "status": str(record.status)},
            )
        live.interrupt_reason = params.reason or "interrupted"
        live.task.cancel()
        await asyncio.wait({live.task})
        return self._run_info(self.store.load_run(params.session_id, params.run_id))

    async def run_steer(self, params: RunSteerParams, conn: Connection) -> RunSteerResult:
        self.session(params.session_id)
        size = len(params.message.encode("utf-8"))
        if size > MAX_STEERING_BYTES or not params.message:
            raise RpcError(
                ErrorCode.INVALID_PARAMS,
                f"invalid params: message must be 1..{MAX_STEERING_BYTES} bytes",
                {"reason": "invalid_params", "path": "params.message"},
            )
        record = self.store.load_run(params.session_id, params.run_id)
        live = self._runs.get((params.session_id, params.run_id))
        if live is None:
            raise RpcError(
                ErrorCode.CONFLICT,
                "the run is not live on this host",
                {"reason": "not_live_here", "status": str(record.status)},
            )
        steering_id = params.steering_id or f"steer_{self.ids.token_hex(8)}"
        known = live.steering_ids.get(steering_id)
        if known is not None:
            if known != params.message:
                raise RpcError(
                    ErrorCode.IDEMPOTENCY_CONFLICT, "steering_id reused with another message"
                )
        else:
            if len(live.steering) >= MAX_QUEUED_STEERING:
                raise RpcError(ErrorCode.QUOTA_EXCEEDED, "too many queued steering messages")
            live.steering.append(params.message)
            live.steering_ids[steering_id] = params.message
            self.emit(params.session_id, "run.steered", params.run_id, {"steering_id": steering_id})
        return RunSteerResult(
            status="queued",
            session_id=params.session_id,
            run_id=params.run_id,
            steering_id=steering_id,
        )

    # -- methods: events ----------------------------------------------------------------------

    async def events_replay(
        self, params: EventsReplayParams, conn: Connection
    ) -> EventsReplayResult:
        self.session(params.session_id)
        if params.after_seq < 0 or not 1 <= params.limit <= 10_000:
            raise RpcError(
                ErrorCode.INVALID_PARAMS,
                "invalid params: after_seq must be >= 0 and limit in 1..10000",
                {"reason": "invalid_params"},
            )
        events = self.events.replay(params.session_id, params.after_seq, params.limit)
        next_seq = events[-1].seq if events else params.after_seq
        return EventsReplayResult(session_id=params.session_id, events=events, next_seq=next_seq)

    async def events_subscribe(
        self, params: EventsSubscribeParams, conn: Connection
    ) -> EventsSubscribeResult:
        push = conn.push
        if push is None:
            raise RpcError(
                ErrorCode.UNSUPPORTED_FEATURE,
                "this transport cannot push; use GET /events?session_id=... (SSE)",
                {"reason": "no_push"},
            )
        self.session(params.session_id)
        sub_id = f"sub_{self.ids.token_hex(8)}"

        def deliver(event: HostEvent) -> None:
            push(
                {
                    "jsonrpc": "2.0",
                    "method": EVENT_NOTIFICATION,
                    "params": {"subscription_id": sub_id, "event": event},
                }
            )

        last = self.events.last_seq(params.session_id)
        conn.subscriptions.add(sub_id)
        if params.after_seq is not None:
            self._replay_backlog(
                params.session_id, params.after_seq, last, deliver=deliver, conn=conn, sub_id=sub_id
            )
        if sub_id in conn.subscriptions:  # not cut while it replayed
            self.add_listener(params.session_id, deliver, sub_id, after=last)
        return EventsSubscribeResult(
            subscription_id=sub_id, session_id=params.session_id, next_seq=last
        )

    def _replay_backlog(
        self,
        session_id: str,
        after: int,
        last: int,
        *,
        deliver: Callable[[HostEvent], None],
        conn: Connection,
        sub_id: str,
    ) -> None:
        """Every committed event in ``(after, last]``, page by page, however long the
        backlog (no gap before the live events). Runs on the loop without yielding, so
        no live event slips between the backlog and the listener; stops early once the
        transport cut the subscription (its buffer is full: it resumes with after_seq)."""
        while after < last and sub_id in conn.subscriptions:
            page = self.events.replay(session_id, after, min(REPLAY_PAGE, last - after))
            if not page:
                return
            for event in page:
                if sub_id not in conn.subscriptions:
                    return
                deliver(event)
            after = page[-1].seq

    async def events_unsubscribe(
        self, params: EventsUnsubscribeParams, conn: Connection
    ) -> EventsUnsubscribeResult:
        removed = params.subscription_id in conn.subscriptions and self.remove_listener(
            params.subscription_id
        )
        conn.subscriptions.discard(params.subscription_id)
        return EventsUnsubscribeResult(subscription_id=params.subscription_id, removed=removed)

    def disconnect(self, conn: Connection) -> None:
        """Drop a closed connection's subscriptions."""
        for sub_id in list(conn.subscriptions):
            self.remove_listener(sub_id)
        conn.subscriptions.clear()

    def dispatcher(self) -> Dispatcher:
        """A JSON-RPC dispatcher over this service, with the configured frame limits."""
        # Imported here: ``python -m subagents._host._openrpc`` imports this module first.
        from ._openrpc import DISCOVER, discover_binding  # noqa: PLC0415

        return Dispatcher(
            {**self.bindings(), DISCOVER: discover_binding()},
            max_request_bytes=self.config.host.max_request_bytes,
            max_batch=self.config.host.max_batch,
            map_error=map_store_error,
        )

    # -- the table ----------------------------------------------------------------------------

    def bindings(self) -> dict[str, Binding]:
        """The v1 method table bound to this service (names and params from ``METHODS``)."""
        handlers: dict[str, Any] = {
            "initialize": self.initialize,
            "shutdown": self.shutdown,
            "diagnostics.get": self.diagnostics,
            "catalog.list": self.catalog_list,
            "profile.get": self.profile_get,
            "session.create": self.session_create,
            "session.list": self.session_list,
            "session.get": self.session_get,
            "session.delete": self.session_delete,
            "run.start": self.run_start,
            "run.status": self.run_status,
            "run.list": self.run_list,
            "run.interrupt": self.run_interrupt,
            "run.steer": self.run_steer,
            "events.replay": self.events_replay,
            "events.subscribe": self.events_subscribe,
            "events.unsubscribe": self.events_unsubscribe,
        }
        return {spec.name: Binding(spec.params, handlers[spec.name]) for spec in METHODS}
