"""The MCP server over a :class:`~subagents._host.HostService`, built on the official SDK.

:func:`build_server` makes the SDK's low-level ``Server`` whose handlers call
one :class:`~._bridge.McpBridge` per MCP session (stdio: the one connection;
streamable HTTP: one per ``Mcp-Session-Id``). Tools: the six of the bridge;
resources: ``subagents://attempt/<id>`` (listed, read, and on
``resources/subscribe``, or a 2026-07-28 ``subscriptions/listen`` naming it, a
``notifications/resources/updated`` once the attempt ends). A tool refusal is
a tool result with ``isError`` and the typed error in ``structuredContent.error``
(``type``, ``error_kind``, ``tool``, ``path``...); an unknown tool, an unknown
resource or bad params are JSON-RPC errors.

The SDK is imported by this module, :mod:`._stdio` and :mod:`._http` only, and
nothing imports them at ``import subagents`` (see :mod:`subagents._mcp`).
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Callable
from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ResourceUpdated
from mcp.shared.exceptions import MCPError

from .._errors import ToolError
from .._host import HostService
from .._host._service import SERVER_VERSION
from ._bridge import RESOURCE_PREFIX, STORE_PROBE_SECONDS, McpBridge, attempt_uri, encode

log = logging.getLogger("subagents.mcp")

SERVER_NAME = "subagents"
RESOURCE_NOT_FOUND = -32002
INSTRUCTIONS = (
    "Durable background subagents. delegate returns agent_id and attempt_id at once; "
    "wait_subagent waits once (bounded) and returns the result exactly once; the result "
    "is also the resource subagents://attempt/<attempt_id> (subscribe to hear when it ends). "
    "Attempts survive a restart of this server."
)

BridgeFactory = Callable[[ServerRequestContext[Any, Any]], McpBridge]


def _tool_error_result(error: ToolError) -> types.CallToolResult:
    fields = {k: v for k, v in error.fields.items() if isinstance(v, str | int | float | bool)}
    detail = {"type": type(error).__name__, "message": error.message, **fields}
    return types.CallToolResult(
        content=[types.TextContent(text=error.message)],
        structured_content={"error": detail},
        is_error=True,
    )


class _Watches:
    """The ``resources/subscribe`` watchers of one MCP session: uri → task."""

    def __init__(self) -> None:
        self.tasks: dict[str, asyncio.Task[None]] = {}

    def start(
        self, key: str, bridge: McpBridge, notify: Callable[[str], Any], uri: str | None = None
    ) -> None:
        """Watch ``uri`` (default: ``key``) until its attempt ends, then ``notify(uri)``."""
        if key in self.tasks and not self.tasks[key].done():
            return
        uri = key if uri is None else uri
        attempt_id = uri[len(RESOURCE_PREFIX) :]

        async def watch() -> None:
            while not await bridge.terminal(attempt_id):
                await asyncio.sleep(STORE_PROBE_SECONDS)  # a bounded store probe
            await notify(uri)

        task = asyncio.get_running_loop().create_task(watch())
        task.add_done_callback(lambda t: None if t.cancelled() else t.exception())
        self.tasks[key] = task

    def stop(self, key: str) -> None:
        task = self.tasks.pop(key, None)
        if task is not None:
            task.cancel()

    def close(self) -> None:
        for key in list(self.tasks):
            self.stop(key)


class _Handlers:
    """The SDK handlers over one service; ``bridge_for(ctx)`` is the request's MCP session."""

    def __init__(self, bridge_for: BridgeFactory) -> None:
        self.bridge_for = bridge_for
        self.watches: weakref.WeakKeyDictionary[McpBridge, _Watches] = weakref.WeakKeyDictionary()
        # 2026-07-28 clients: ``subscriptions/listen`` streams fed from this bus.
        self.bus = InMemorySubscriptionBus()
        self.listener = ListenHandler(self.bus)

    def _watches(self, bridge: McpBridge) -> _Watches:
        found = self.watches.get(bridge)
        if found is None:
            found = self.watches[bridge] = _Watches()
            weakref.finalize(bridge, found.close)
        return found

    async def _publish(self, uri: str) -> None:
        await self.bus.publish(ResourceUpdated(uri=uri))

    async def listen(
        self, ctx: ServerRequestContext[Any, Any], params: types.SubscriptionsListenRequestParams
    ) -> types.SubscriptionsListenResult:
        """``subscriptions/listen``: the SDK's stream; each attempt resource it names is
        watched, and its end published as ``ResourceUpdated`` (other uris never fire)."""
        bridge = self.bridge_for(ctx)
        watches = self._watches(bridge)
        for uri in params.notifications.resource_subscriptions or ():
            if await bridge.read_attempt(uri) is not None:
                # Started before the handler subscribes to the bus; they first run
                # after it did (it subscribes before its first await).
                watches.start(f"listen:{uri}", bridge, self._publish, uri=uri)
        return await self.listener(ctx, params)

    async def list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(
            tools=[
                types.Tool(name=t.name, description=t.description, input_schema=t.schema)
                for t in self.bridge_for(ctx).tools()
            ]
        )

    async def call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        bridge = self.bridge_for(ctx)
        if not bridge.has_tool(params.name):
            raise MCPError(
                types.INVALID_PARAMS,
                f"unknown tool {params.name!r}",
                {"reason": "unknown_tool", "tools": [t.name for t in bridge.tools()]},
            )
        try:
            value = await bridge.call(params.name, params.arguments)
        except ToolError as error:
            return _tool_error_result(error)
        return types.CallToolResult(
            content=[types.TextContent(text=encode(value))], structured_content=value
        )

    async def list_resources(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        records = await self.bridge_for(ctx).attempts()
        return types.ListResourcesResult(
            resources=[
                types.Resource(
                    uri=attempt_uri(r.attempt_id),
                    name=r.attempt_id,
                    description=f"{r.subagent_name}: {r.execution_status}",
                    mime_type="application/json",
                )
                for r in records
            ]
        )

    async def list_templates(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(
            resource_templates=[
                types.ResourceTemplate(
                    uri_template=RESOURCE_PREFIX + "{attempt_id}",
                    name="attempt",
                    description="A background attempt of this session and its result",
                    mime_type="application/json",
                )
            ]
        )

    async def read_resource(
        self, ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        uri = str(params.uri)
        value = await self.bridge_for(ctx).read_attempt(uri)
        if value is None:
            raise _no_resource(uri)
        text = encode(value)
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=uri, mime_type="application/json", text=text)]
        )

    async def subscribe(
        self, ctx: ServerRequestContext[Any, Any], params: types.SubscribeRequestParams
    ) -> types.EmptyResult:
        uri = str(params.uri)
        bridge = self.bridge_for(ctx)
        if await bridge.read_attempt(uri) is None:
            raise _no_resource(uri)
        # Sent on the connection's standalone channel (not this request's).
        self._watches(bridge).start(uri, bridge, ctx.session.send_resource_updated)
        return types.EmptyResult()

    async def unsubscribe(
        self, ctx: ServerRequestContext[Any, Any], params: types.UnsubscribeRequestParams
    ) -> types.EmptyResult:
        found = self.watches.get(self.bridge_for(ctx))
        if found is not None:
            found.stop(str(params.uri))
        return types.EmptyResult()


def _no_resource(uri: str) -> MCPError:
    return MCPError(
        RESOURCE_NOT_FOUND,
        f"no attempt resource {uri!r} in this session",
        {"reason": "not_found", "uri": uri},
    )


def build_server(service: HostService, bridge_for: BridgeFactory) -> Server[Any]:
    """The SDK server over ``service``; ``bridge_for(ctx)`` is the request's MCP session."""
    handlers = _Handlers(bridge_for)
    return Server(
        SERVER_NAME,
        version=SERVER_VERSION,
        instructions=INSTRUCTIONS,
        on_list_tools=handlers.list_tools,
        on_call_tool=handlers.call_tool,
        on_list_resources=handlers.list_resources,
        on_list_resource_templates=handlers.list_templates,
        on_read_resource=handlers.read_resource,
        on_subscribe_resource=handlers.subscribe,
        on_unsubscribe_resource=handlers.unsubscribe,
        on_subscriptions_listen=handlers.listen,
    )
