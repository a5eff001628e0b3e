"""The OpenRPC document of the v1 method table, generated from the method structs.

``openrpc.json`` beside this module is the shipped copy; regenerate it with
``python -m subagents._host._openrpc`` after changing :mod:`._methods`
(``tests/host/test_openrpc.py`` fails until the two agree). The host serves it
too: ``rpc.discover`` (the OpenRPC service-discovery method, no params, not
listed among the document's own methods) answers with the shipped document.
"""

from __future__ import annotations

import json
import sys
from functools import cache
from pathlib import Path
from typing import Any

import msgspec

from ._jsonrpc import Binding, Connection, ErrorCode
from ._methods import METHODS, PROTOCOL_NAME, PROTOCOL_VERSION

REF = "#/components/schemas/{name}"

_ERROR_TEXT = {
    ErrorCode.PARSE_ERROR: "The frame is not UTF-8 JSON.",
    ErrorCode.INVALID_REQUEST: "Not a JSON-RPC 2.0 request object, or a bad batch.",
    ErrorCode.METHOD_NOT_FOUND: "No such method in the v1 table.",
    ErrorCode.INVALID_PARAMS: "Params missing, of the wrong type, or with unknown fields.",
    ErrorCode.INTERNAL_ERROR: "A bug in the host; details go to the host's log only.",
    ErrorCode.SERVER_ERROR: "Durable storage or the runtime failed (message redacted).",
    ErrorCode.UNSUPPORTED_FEATURE: "The method needs what this transport lacks.",
    ErrorCode.REQUEST_TOO_LARGE: "The frame exceeds max_request_bytes.",
    ErrorCode.UNAUTHORIZED: "Missing or wrong bearer token (HTTP).",
    ErrorCode.SHUTTING_DOWN: "The host stopped admitting work.",
    ErrorCode.NOT_FOUND: "No such session, run, profile or subscription.",
    ErrorCode.ALREADY_EXISTS: "A create collided with a different record.",
    ErrorCode.IDEMPOTENCY_CONFLICT: "An idempotency key was reused with other params.",
    ErrorCode.RUN_CONFLICT: "Another run of the session is live.",
    ErrorCode.STALE_FENCE: "The caller no longer owns the fenced lease.",
    ErrorCode.STORAGE_UNAVAILABLE: "Transient storage failure: retry.",
    ErrorCode.CONFLICT: "The record's state forbids the request.",
    ErrorCode.QUOTA_EXCEEDED: "A limit was reached.",
    ErrorCode.CONFIGURATION_FAILED: "Unknown profile or unusable configuration.",
}


def params_schema(params: type[Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The OpenRPC ``params`` of one params struct, and the schemas they reference."""
    (schema,), components = msgspec.json.schema_components([params], ref_template=REF)
    name = schema["$ref"].rsplit("/", 1)[1]
    body = components.pop(name)
    required = set(body.get("required", []))
    out = [
        {"name": field, "required": field in required, "schema": prop}
        for field, prop in body.get("properties", {}).items()
    ]
    return out, components


def build_openrpc() -> dict[str, Any]:
    """The whole document, deterministic (sorted components)."""
    methods = []
    components: dict[str, Any] = {}
    for spec in METHODS:
        params, param_components = params_schema(spec.params)
        components.update(param_components)
        (result_schema,), result_components = msgspec.json.schema_components(
            [spec.result], ref_template=REF
        )
        components.update(result_components)
        methods.append(
            {
                "name": spec.name,
                "summary": spec.summary,
                "paramStructure": "by-name",
                "params": params,
                "result": {"name": "result", "schema": result_schema},
            }
        )
    errors = {code.name: {"code": int(code), "message": _ERROR_TEXT[code]} for code in ErrorCode}
    return {
        "openrpc": "1.3.2",
        "info": {
            "title": PROTOCOL_NAME,
            "version": PROTOCOL_VERSION,
            "description": (
                "The subagents durable RPC host, v1. JSON-RPC 2.0 over stdio (one object per "
                "line) or HTTP (POST /rpc with a bearer token; events as SSE on GET /events). "
                "Params are by name; unknown fields are rejected with -32602. The server pushes "
                "events.event notifications ({subscription_id, event}) after events.subscribe "
                "on stdio; a subscription more than [host] stream_buffer_events behind is "
                "dropped with an events.overflow notification ({subscription_id, session_id, "
                "last_seq, reason}); subscribe again with after_seq = last_seq to resume."
            ),
        },
        "methods": methods,
        "components": {
            "schemas": dict(sorted(components.items())),
            "errors": errors,
        },
    }


DISCOVER = "rpc.discover"
"""The OpenRPC service-discovery method (answered on every transport)."""
DOCUMENT_PATH = Path(__file__).with_name("openrpc.json")


class DiscoverParams(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``rpc.discover`` takes no params."""


@cache
def shipped_document() -> dict[str, Any]:
    """The shipped ``openrpc.json``, parsed once."""
    document: dict[str, Any] = json.loads(DOCUMENT_PATH.read_text(encoding="utf-8"))
    return document


async def _discover(params: DiscoverParams, conn: Connection) -> dict[str, Any]:
    return shipped_document()


def discover_binding() -> Binding:
    """The ``rpc.discover`` binding: the shipped OpenRPC document."""
    return Binding(params=DiscoverParams, handler=_discover)


def render() -> str:
    return json.dumps(build_openrpc(), indent=2, sort_keys=False) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
