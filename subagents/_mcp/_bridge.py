"""One MCP session over the host: its durable session, the six tools and the attempt resources.

Nothing here imports the ``mcp`` SDK: :class:`McpBridge` speaks plain values
(tool arguments in, JSON values out, :class:`~subagents.ToolError` on refusal),
and :mod:`._server` puts it on the wire. Every operation is a
:class:`~subagents._host.HostService` one: the session's supervisor
(:meth:`HostService.supervisor`), its store, its deliverer. The tool schemas
are :func:`~subagents.struct_schema` of the model tools' argument Structs
(:mod:`subagents._delegation._args`), and arguments are converted into the
same Structs, so an unknown field is refused with its JSON path.

Durability: ``wait_subagent`` asks the session's supervisor first; an attempt
it does not know (a previous host process accepted it) is read from the store,
where reconciliation made it terminal, and delivered through the host's
deliverer: claimed and acknowledged once, so a second wait reports it
delivered (``owned_elsewhere``) without the result.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec

from actors import BackgroundSubagentError, WaitResult
from statemachines import is_active_execution
from storage import AttemptRecord, NotFound, StoreError

from .._agent._tools import struct_schema
from .._delegation._args import (
    _AsyncDelegateArgs,
    _CancelArgs,
    _convert,
    _delegate_args,
    _delegate_schema,
    _NoArgs,
    _SteerArgs,
    _WaitArgs,
)
from .._delegation._background_tools import _tool_error
from .._errors import ToolError
from .._host import HostService
from .._host._jsonrpc import Connection, RpcError
from .._host._methods import EmptyParams, SessionCreateParams
from .._host._service import MCP_SESSION_KEY, PARENT_PROFILE_KEY

RESOURCE_PREFIX = "subagents://attempt/"
PREVIEW_BYTES = 4096
MAX_WAIT_SECONDS = 300.0
STORE_PROBE_SECONDS = 0.05
"""How often a wait on an attempt of a previous host process re-reads the store."""


@dataclass(frozen=True)
class McpTool:
    """One tool as an MCP client sees it."""

    name: str
    description: str
    schema: dict[str, Any]


def attempt_uri(attempt_id: str) -> str:
    return f"{RESOURCE_PREFIX}{attempt_id}"


def clamp_wait(timeout: float | None) -> float:
    """The spec's bound: [0, 300] seconds, default 30, non-finite 300."""
    if timeout is None:
        return 30.0
    if not math.isfinite(timeout):
        return MAX_WAIT_SECONDS
    return min(max(timeout, 0.0), MAX_WAIT_SECONDS)


def _preview(text: str) -> str:
    return text.encode("utf-8")[:PREVIEW_BYTES].decode("utf-8", errors="ignore")


class McpBridge:
    """One MCP session's durable session on ``service``, created on first use.

    ``session_id`` names the durable session (``None``: a fresh one, made at
    the first tool call); ``profile`` is the parent profile whose subagents
    the client may delegate to (default: the host's default profile).
    """

    def __init__(
        self, service: HostService, *, session_id: str | None = None, profile: str | None = None
    ) -> None:
        self.service = service
        self.profile = profile or service.config.host.default_profile
        self.requested_session = session_id
        self._session_id: str | None = None
        self._handlers: dict[str, Callable[[Any], Any]] = {
            "list_subagents": self._list_subagents,
            "delegate": self._delegate,
            "steer_subagent": self._steer,
            "cancel_subagent": self._cancel,
            "wait_subagent": self._wait,
            "subagent_info": self._info,
        }

    # -- the tools ----------------------------------------------------------------------------

    def roster(self) -> list[str]:
        return self.service.agents.subagent_names(self.profile)

    def tools(self) -> list[McpTool]:
        """The six tools, their schemas made from the model tools' Structs."""
        return [
            McpTool(
                "list_subagents",
                "List the subagents you can delegate to: name, description, "
                "availability and the tools they inherit.",
                struct_schema(_NoArgs),
            ),
            McpTool(
                "delegate",
                "Start a subagent in the background; returns agent_id and attempt_id at "
                "once. Read the result with wait_subagent or the resource "
                "subagents://attempt/<attempt_id>.",
                _delegate_schema(_AsyncDelegateArgs, self.roster()),
            ),
            McpTool(
                "steer_subagent",
                "Send guidance to a running background subagent (seen at its next turn).",
                struct_schema(_SteerArgs),
            ),
            McpTool(
                "cancel_subagent",
                "Ask a background subagent to stop; its cancelled result is still kept.",
                struct_schema(_CancelArgs),
            ),
            McpTool(
                "wait_subagent",
                "Wait once, bounded (0 to 300 s, default 30), for a background result. "
                "A result is returned once; a later wait reports it delivered.",
                struct_schema(_WaitArgs),
            ),
            McpTool(
                "subagent_info",
                "The subagents and this session's background attempts: active ones and "
                "retained undelivered results.",
                struct_schema(_NoArgs),
            ),
        ]

    def has_tool(self, name: str) -> bool:
        return name in self._handlers

    async def call(self, name: str, arguments: Any) -> Any:
        """Run tool ``name``: its JSON result, or :class:`ToolError` (a typed refusal)."""
        handler = self._handlers.get(name)
        if handler is None:
            raise ToolError(
                f"unknown tool {name!r}; tools: {sorted(self._handlers)}",
                tool=name,
                error_kind="UnknownTool",
            )
        try:
            result: Any = await handler({} if arguments is None else arguments)
        except BackgroundSubagentError as error:
            raise _tool_error(name, error) from error
        except RpcError as error:
            raise ToolError(
                f"{name} refused: {error.message}", tool=name, error_kind=error.code.name
            ) from error
        except StoreError as error:
            raise ToolError(
                f"{name} failed: the store did not answer; retry later",
                tool=name,
                error_kind="Durability",
            ) from error
        return result

    # -- the durable session ------------------------------------------------------------------

    async def session_id(self) -> str:
        """The durable session, created (or reopened by name) on first use."""
        if self._session_id is not None:
            return self._session_id
        params = SessionCreateParams(
            session_id=self.requested_session,
            profile=self.profile,
            metadata={MCP_SESSION_KEY: "true"},
        )
        info = await self.service.session_create(params, Connection(transport="mcp"))
        self._session_id = info.session_id
        return info.session_id

    async def _supervisor_session(self) -> str:
        session_id = await self.session_id()
        self.service.supervisor(session_id)
        return session_id

    def _attempt_of_session(self, session_id: str, attempt_id: str) -> AttemptRecord | None:
        """The attempt if it belongs to this durable session, else ``None`` (invented)."""
        try:
            record = self.service.store.load_attempt(attempt_id)
        except NotFound:
            return None
        if (
            record.namespace_id != self.service.namespace_id
            or record.parent_session_id != session_id
        ):
            return None
        return record

    # -- handlers -----------------------------------------------------------------------------

    async def _list_subagents(self, arguments: Any) -> Any:
        _convert("list_subagents", arguments, _NoArgs)
        return {"subagents": await self._subagent_report()}

    async def _subagent_report(self) -> list[dict[str, Any]]:
        """The host catalog's subagents this session's profile exposes."""
        catalog = await self.service.catalog_list(EmptyParams(), Connection(transport="mcp"))
        roster = self.roster()
        return [
            {
                "name": info.name,
                "description": info.description,
                "available": True,
                "source": info.source,
                "required_tools": info.required_tools,
                "optional_tools": info.optional_tools,
            }
            for info in catalog.subagents
            if info.name in roster
        ]

    async def _delegate(self, arguments: Any) -> Any:
        args = _delegate_args("delegate", arguments, _AsyncDelegateArgs)
        roster = self.roster()
        if args.subagent_name not in roster:
            raise ToolError(
                f"delegate refused: no subagent named {args.subagent_name!r}; "
                f"registered subagents: {roster}",
                tool="delegate",
                error_kind="NotFound",
                subagent_name=args.subagent_name,
            )
        session_id = await self._supervisor_session()
        accepted = await self.service.supervisor(session_id).delegate(
            args.subagent_name,
            args.prompt,
            args.agent_id,
            args.linked_task_id,
            parent_run_id=f"mcp_{session_id}",
            profile=self.profile,
            metadata={PARENT_PROFILE_KEY: self.profile},  # its MCP tools are inherited
        )
        value: dict[str, Any] = accepted.to_value()
        value["resource"] = attempt_uri(accepted.attempt_id)
        return value

    async def _steer(self, arguments: Any) -> Any:
        args = _convert("steer_subagent", arguments, _SteerArgs)
        session_id = await self._supervisor_session()
        receipt = await self.service.supervisor(session_id).steer(
            args.attempt_id, args.message, args.steering_id
        )
        return receipt.to_value()

    async def _cancel(self, arguments: Any) -> Any:
        args = _convert("cancel_subagent", arguments, _CancelArgs)
        session_id = await self._supervisor_session()
        cancelled = await self.service.supervisor(session_id).cancel(
            args.attempt_id, args.reason, args.cancellation_id
        )
        return cancelled.to_value()

    async def _info(self, arguments: Any) -> Any:
        _convert("subagent_info", arguments, _NoArgs)
        session_id = await self._supervisor_session()
        background = await self.service.supervisor(session_id).info()
        return {
            "session_id": session_id,
            "subagents": await self._subagent_report(),
            "background": background.to_value(),
        }

    async def _wait(self, arguments: Any) -> Any:
        args = _convert("wait_subagent", arguments, _WaitArgs)
        timeout = clamp_wait(args.timeout_seconds)
        deadline = time.monotonic() + timeout
        session_id = await self._supervisor_session()
        supervisor = self.service.supervisor(session_id)
        waited = await supervisor.wait(args.attempt_id, timeout)
        if waited.status != "not_found" or args.attempt_id is None:
            return waited.to_value()
        record = self._attempt_of_session(session_id, args.attempt_id)
        if record is None:
            return waited.to_value()  # invented, or another session's: not found
        return (await self._wait_in_store(record, deadline)).to_value()

    async def _wait_in_store(self, record: AttemptRecord, deadline: float) -> WaitResult:
        """A wait on an attempt a previous host process accepted: until reconciliation
        makes it terminal (or the deadline), then delivered once, through the host."""
        attempt_id = record.attempt_id
        while is_active_execution(str(record.execution_status)):
            left = deadline - time.monotonic()
            if left <= 0:
                return WaitResult.still_running(
                    record, "Still running (accepted by an earlier host process)."
                )
            await asyncio.sleep(min(STORE_PROBE_SECONDS, left))
            record = self.service.store.load_attempt(attempt_id)
        deliverer = self.service.deliverer
        try:
            result, delivered = await asyncio.to_thread(deliverer.deliver, attempt_id, "wait")
        except (BackgroundSubagentError.Delivered, BackgroundSubagentError.DeliveryClaimed) as e:
            latest = self.service.store.load_attempt(attempt_id)
            claimed = isinstance(e, BackgroundSubagentError.DeliveryClaimed)
            return WaitResult(
                status=str(latest.execution_status),
                attempt_id=attempt_id,
                agent_id=latest.agent_id,
                subagent_name=latest.subagent_name,
                linked_task_id=latest.linked_task_id,
                owned_elsewhere=True,
                delivery_status="claimed" if claimed else "delivered",
                retention_status=str(latest.retention_status),
                failure_category=latest.failure_category,
                cancellation_reason=latest.cancellation_reason,
                message="Another consumer owns this result.",
            )
        return WaitResult(
            status=result.status,
            attempt_id=attempt_id,
            agent_id=result.agent_id,
            subagent_name=result.subagent_name,
            linked_task_id=result.linked_task_id,
            delivery_status=str(delivered.delivery_status),
            retention_status=result.retention_status,
            failure_category=result.failure_category,
            cancellation_reason=result.cancellation_reason,
            result=result.output,
            error=result.error,
        )

    # -- resources ----------------------------------------------------------------------------

    async def attempts(self) -> list[AttemptRecord]:
        """This session's attempts: active ones and retained undelivered results."""
        session_id = await self.session_id()
        store = self.service.store
        found = {
            r.attempt_id: r
            for r in store.list_active_attempts(self.service.namespace_id)
            if r.parent_session_id == session_id
        }
        for r in store.list_pending_attempts(self.service.namespace_id, session_id):
            found.setdefault(r.attempt_id, r)
        return list(found.values())

    async def read_attempt(self, uri: str) -> dict[str, Any] | None:
        """The resource ``subagents://attempt/<id>`` of this session (``None``: no such
        attempt here). Reading never delivers; an oversized result comes from its
        artifact, with its preview, digest and size."""
        if not uri.startswith(RESOURCE_PREFIX):
            return None
        attempt_id = uri[len(RESOURCE_PREFIX) :]
        record = self._attempt_of_session(await self.session_id(), attempt_id)
        if record is None:
            return None
        value: dict[str, Any] = {
            "attempt_id": record.attempt_id,
            "agent_id": record.agent_id,
            "subagent_name": record.subagent_name,
            "status": str(record.execution_status),
            "delivery_status": str(record.delivery_status),
            "retention_status": str(record.retention_status),
            "terminal": not is_active_execution(str(record.execution_status)),
        }
        if not value["terminal"]:
            return value
        built = self.service.deliverer.build(record, with_delta=False)
        ref = record.result_ref
        text = built.output if built.output is not None else built.error
        value.update(
            result=built.output,
            error=built.error,
            failure_category=built.failure_category,
            cancellation_reason=built.cancellation_reason,
            digest=built.digest,
            size_bytes=built.size_bytes,
            from_artifact=ref is not None and ref.artifact_ref is not None,
            preview=None if text is None else _preview(text),
        )
        return value

    async def terminal(self, attempt_id: str) -> bool:
        """Whether this session's attempt has ended (``False`` for an unknown one)."""
        record = self._attempt_of_session(await self.session_id(), attempt_id)
        return record is not None and not is_active_execution(str(record.execution_status))


def encode(value: Any) -> str:
    """A tool result or a resource as JSON text."""
    return msgspec.json.encode(value).decode("utf-8")
