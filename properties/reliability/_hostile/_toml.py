"""The ``toml`` family: hostile host configurations (``parse_host_config`` /
``load_host_config``), each refused with a typed :class:`HostConfigError`."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from subagents._host._config import HostConfigError, load_host_config, parse_host_config

from ._common import (
    HUGE,
    MIB,
    untyped,
)


@dataclass(frozen=True)
class TomlCase:
    """A host configuration: text for ``parse_host_config`` or bytes written to a file
    for ``load_host_config``. ``key`` and ``fragment`` are the expected
    :class:`HostConfigError`'s key and a fragment of its problem."""

    name: str
    text: str | bytes
    key: str | None
    fragment: str


GOOD_TOML = '[profiles.default]\nmodel_id = "test:echo"\n'

TOML_CASES: tuple[TomlCase, ...] = (
    TomlCase("not-toml", "x = ", None, "not valid TOML"),
    TomlCase("unclosed-table", "[profiles.default\n", None, "not valid TOML"),
    TomlCase("unclosed-string", GOOD_TOML + 'description = "x\n', None, "not valid TOML"),
    TomlCase("duplicate-key", GOOD_TOML + 'model_id = "test:echo"\n', None, "not valid TOML"),
    TomlCase("duplicate-table", GOOD_TOML + GOOD_TOML, None, "not valid TOML"),
    TomlCase("nul-byte", GOOD_TOML + 'description = "a\x00b"\n', None, "not valid TOML"),
    TomlCase("control-char", GOOD_TOML + 'description = "a\x07b"\n', None, "not valid TOML"),
    TomlCase("empty", "", "profiles", "no profile defined"),
    TomlCase("no-profiles", "[host]\n", "profiles", "no profile defined"),
    TomlCase("unknown-top", GOOD_TOML + "[bogus]\n", "bogus", "unknown key"),
    TomlCase("unknown-host-key", GOOD_TOML + "[host]\nport = 1\n", "host.port", "unknown key"),
    TomlCase("host-not-table", "host = 3\n" + GOOD_TOML, "host", "expected a table"),
    TomlCase(
        "host-type", GOOD_TOML + '[host]\nlease_ttl = "x"\n', "host.lease_ttl", "expected a number"
    ),
    TomlCase("lease-ttl", GOOD_TOML + "[host]\nlease_ttl = 0.0\n", "host.lease_ttl", "positive"),
    TomlCase(
        "lease-ttl-tiny", GOOD_TOML + "[host]\nlease_ttl = 1e-6\n", "host.lease_ttl", "at least 0.5"
    ),
    TomlCase(
        "lease-ttl-negative", GOOD_TOML + "[host]\nlease_ttl = -5\n", "host.lease_ttl", "positive"
    ),
    TomlCase(
        "lease-ttl-inf", GOOD_TOML + "[host]\nlease_ttl = inf\n", "host.lease_ttl", "positive"
    ),
    TomlCase(
        "lease-ttl-nan", GOOD_TOML + "[host]\nlease_ttl = nan\n", "host.lease_ttl", "positive"
    ),
    TomlCase(
        "lease-ttl-bool",
        GOOD_TOML + "[host]\nlease_ttl = true\n",
        "host.lease_ttl",
        "expected a number",
    ),
    TomlCase(
        "max-request",
        GOOD_TOML + "[host]\nmax_request_bytes = 10\n",
        "host.max_request_bytes",
        "1024",
    ),
    TomlCase(
        "max-request-float",
        GOOD_TOML + "[host]\nmax_request_bytes = 1e9\n",
        "host.max_request_bytes",
        "expected an integer",
    ),
    TomlCase("max-batch", GOOD_TOML + "[host]\nmax_batch = 0\n", "host.max_batch", "at least 1"),
    TomlCase(
        "max-batch-negative-huge",
        GOOD_TOML + "[host]\nmax_batch = -9223372036854775808\n",
        "host.max_batch",
        "at least 1",
    ),
    TomlCase(
        "integer-too-long",
        GOOD_TOML + "[host]\nmax_batch = " + "9" * 5000 + "\n",
        None,
        "not valid TOML",
    ),
    TomlCase(
        "namespace", GOOD_TOML + '[host]\nnamespace = "a b"\n', "host.namespace", "not a valid name"
    ),
    TomlCase(
        "namespace-nul",
        GOOD_TOML + '[host]\nnamespace = "a\\u0000"\n',
        "host.namespace",
        "not a valid name",
    ),
    TomlCase(
        "namespace-huge",
        GOOD_TOML + '[host]\nnamespace = "' + "é" * 100_000 + '"\n',
        "host.namespace",
        "not a valid name",
    ),
    TomlCase("data-dir-type", GOOD_TOML + "[host]\ndata_dir = [1]\n", "host.data_dir", "expected"),
    TomlCase("profile-not-table", "profiles = 3\n", "profiles", "expected a table"),
    TomlCase(
        "profile-entry-type", "[profiles]\ndefault = 3\n", "profiles.default", "expected a table"
    ),
    TomlCase(
        "profile-name",
        '[profiles."a b"]\nmodel_id = "test:echo"\n',
        "profiles.a b",
        "not a valid profile name",
    ),
    TomlCase(
        "model-type", "[profiles.default]\nmodel_id = 1\n", "profiles.default.model_id", "string"
    ),
    TomlCase(
        "model-missing", "[profiles.default]\n", "profiles.default.model_id", "missing required"
    ),
    TomlCase(
        "model-no-provider",
        '[profiles.default]\nmodel_id = "gpt"\n',
        "profiles.default.model_id",
        "is not 'provider:model'",
    ),
    TomlCase(
        "model-unknown-provider",
        '[profiles.default]\nmodel_id = "nope:x"\n',
        "profiles.default.model_id",
        "unknown model provider 'nope'",
    ),
    TomlCase(
        "model-id-huge",
        '[profiles.default]\nmodel_id = "' + "x" * MIB + '"\n',
        "profiles.default.model_id",
        "is not 'provider:model'",
    ),
    TomlCase(
        "profile-typo",
        GOOD_TOML + "modelid = 1\n",
        "profiles.default.modelid",
        "unknown key",
    ),
    TomlCase(
        "instructions-type",
        GOOD_TOML + "instructions = [1]\n",
        "profiles.default.instructions[0]",
        "string",
    ),
    TomlCase(
        "toolsets-type",
        GOOD_TOML + "toolsets = {a = 1}\n",
        "profiles.default.toolsets",
        "expected a list",
    ),
    TomlCase(
        "model-settings-type",
        GOOD_TOML + "model_settings = [1]\n",
        "profiles.default.model_settings",
        "expected a table",
    ),
    TomlCase(
        "unknown-subagent",
        GOOD_TOML + 'subagents = ["ghost"]\n',
        "profiles.default.subagents[0]",
        "unknown subagent 'ghost'",
    ),
    TomlCase(
        "subagent-name-invalid",
        GOOD_TOML + 'subagents = ["a b"]\n',
        "profiles.default.subagents[0]",
        "is not a valid name",
    ),
    TomlCase(
        "duplicate-subagent",
        GOOD_TOML + 'subagents = ["r", "r"]\n[subagents.r]\nprofile = "default"\n',
        "profiles.default.subagents",
        "twice",
    ),
    TomlCase(
        "subagent-no-profile",
        GOOD_TOML + '[subagents.r]\ndescription = "x"\n',
        "subagents.r.profile",
        "missing required",
    ),
    TomlCase(
        "subagent-unknown-profile",
        GOOD_TOML + '[subagents.r]\nprofile = "ghost"\n',
        "subagents.r.profile",
        "unknown profile 'ghost'",
    ),
    TomlCase(
        "subagent-unknown-key",
        GOOD_TOML + '[subagents.r]\nprofile = "default"\nowner = "x"\n',
        "subagents.r.owner",
        "unknown key",
    ),
    TomlCase(
        "subagent-tools-type",
        GOOD_TOML + '[subagents.r]\nprofile = "default"\nrequired_tools = "grep"\n',
        "subagents.r.required_tools",
        "expected a list",
    ),
    TomlCase(
        "default-profile",
        GOOD_TOML + '[host]\ndefault_profile = "ghost"\n',
        "host.default_profile",
        "unknown profile 'ghost'",
    ),
    TomlCase(
        "10,000 nested arrays",
        GOOD_TOML + "instructions = " + "[" * 10_000 + "]" * 10_000 + "\n",
        None,
        "nested too deeply",
    ),
    TomlCase(
        "10,000 nested inline tables",
        GOOD_TOML + "model_settings = " + "{a = " * 10_000 + "1" + "}" * 10_000 + "\n",
        None,
        "nested too deeply",
    ),
    TomlCase(
        "5,000 nested table headers with an unknown key",
        GOOD_TOML + "[host." + ".".join(["a"] * 5000) + "]\n",
        "host.a",
        "unknown key",
    ),
    TomlCase(
        "16 MiB string",
        GOOD_TOML + 'description = "' + "x" * HUGE + '"\nbogus = 1\n',
        "profiles.default.bogus",
        "unknown key",
    ),
    TomlCase("invalid UTF-8 file", b"\xff\xfe\x00", None, "not UTF-8"),
    TomlCase(
        "invalid UTF-8 inside a string",
        GOOD_TOML.encode() + b'description = "\xc3\x28"\n',
        None,
        "not UTF-8",
    ),
    TomlCase("a UTF-8 BOM file", b"\xef\xbb\xbf" + GOOD_TOML.encode(), None, "not valid TOML"),
    TomlCase("UTF-16 file", GOOD_TOML.encode("utf-16"), None, "not UTF-8"),
)
"""Every hostile host configuration."""


def check_toml(case: TomlCase, workdir: Path) -> list[str]:
    """Parse (or load, for bytes) ``case``: the typed :class:`HostConfigError` it must raise."""
    where = f"toml[{case.name}]"
    if isinstance(case.text, bytes):
        workdir.mkdir(parents=True, exist_ok=True)
        path = workdir / "hostile.toml"
        path.write_bytes(case.text)
        source = os.fspath(path)
    else:
        source = "host.toml"
    try:
        if isinstance(case.text, bytes):
            load_host_config(path)
        else:
            parse_host_config(case.text, source=source)
    except HostConfigError as error:
        found = []
        if error.key != case.key:
            found.append(f"{where}: key {error.key!r}, expected {case.key!r}")
        if case.fragment not in error.problem:
            found.append(f"{where}: problem {error.problem[:120]!r} lacks {case.fragment!r}")
        prefix = f"{source}: {case.key}: " if case.key else f"{source}: "
        if not str(error).startswith(prefix):
            found.append(f"{where}: message does not start with {prefix!r}")
        if not error.fix:
            found.append(f"{where}: no fix given")
        if "Traceback" in str(error):
            found.append(f"{where}: a traceback in the message")
        return found
    except BaseException as exc:
        return [untyped(where, exc)]
    return [f"{where}: accepted, expected {case.fragment!r}"]
