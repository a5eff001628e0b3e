"""The shipped openrpc.json agrees with the server's method table and param schemas."""

from __future__ import annotations

import json

from subagents._host import ERROR_CODES, METHOD_NAMES, OPENRPC_PATH, HostService
from subagents._host._methods import ID_FIELDS, MAX_ID_BYTES, METHODS
from subagents._host._openrpc import build_openrpc, params_schema

DOC = json.loads(OPENRPC_PATH.read_text(encoding="utf-8"))


def test_document_is_current() -> None:
    assert build_openrpc() == DOC, (
        "openrpc.json is stale: python -m subagents._host._openrpc > subagents/_host/openrpc.json"
    )


def test_method_table_matches_the_server(service: HostService) -> None:
    documented = [m["name"] for m in DOC["methods"]]
    assert documented == list(METHOD_NAMES)
    assert sorted(service.bindings()) == sorted(documented)
    assert documented == [
        "initialize",
        "shutdown",
        "diagnostics.get",
        "catalog.list",
        "profile.get",
        "session.create",
        "session.list",
        "session.get",
        "session.delete",
        "run.start",
        "run.status",
        "run.list",
        "run.interrupt",
        "run.steer",
        "events.replay",
        "events.subscribe",
        "events.unsubscribe",
    ]


def test_param_schemas_match_the_bound_structs(service: HostService) -> None:
    by_name = {m["name"]: m for m in DOC["methods"]}
    bindings = service.bindings()
    for spec in METHODS:
        method = by_name[spec.name]
        assert bindings[spec.name].params is spec.params
        params, _ = params_schema(bindings[spec.name].params)
        assert method["params"] == params, spec.name
        assert method["paramStructure"] == "by-name"
        fields = spec.params.__struct_fields__
        assert [p["name"] for p in method["params"]] == list(fields)
        # Unknown fields are rejected by every params struct.
        assert spec.params.__struct_config__.forbid_unknown_fields, spec.name


def test_every_reference_resolves() -> None:
    schemas = DOC["components"]["schemas"]

    def walk(node: object) -> None:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str):
                assert ref.startswith("#/components/schemas/")
                assert ref.rsplit("/", 1)[1] in schemas, ref
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(DOC)


def test_error_table_matches() -> None:
    documented = {name: e["code"] for name, e in DOC["components"]["errors"].items()}
    assert documented == ERROR_CODES


def test_trusted_operations_are_not_in_the_table() -> None:
    names = set(METHOD_NAMES)
    assert not any(name.startswith("attempt") for name in names)
    assert "run.cancel" not in names


def test_every_id_param_is_documented_with_its_byte_limit() -> None:
    seen = set()
    for method in DOC["methods"]:
        for param in method["params"]:
            if param["name"] not in ID_FIELDS:
                continue
            seen.add(param["name"])
            schema = param["schema"]
            options = schema.get("anyOf", [schema])
            text = next(o for o in options if o.get("type") == "string")
            assert text["maxLength"] == MAX_ID_BYTES, (method["name"], param["name"])
            assert f"at most {MAX_ID_BYTES} UTF-8 bytes" in text["description"]
    assert seen == ID_FIELDS
