"""The hostile-input corpus: every case, its expected typed refusal, and the runner.

Six families, each a tuple of frozen case records defined once here:
``tests/hostile/`` parametrizes over the same tuples (one test per case) and
:func:`run_hostile_corpus` runs them all outside pytest for ``subagents verify
--report``.

- ``markdown``: subagent files (:func:`~subagents.parse_subagent_markdown`,
  :func:`~subagents.load_subagent_dir`, and a host loading a directory of them).
- ``toml``: host configurations (``parse_host_config`` / ``load_host_config``).
- ``jsonrpc``: frames against a running host: the in-process dispatcher, the
  HTTP app and a real ``subagents serve --stdio`` process.
- ``tool-arguments``: what a model may send the delegation tools.
- ``sizes``: prompts and steering at 0, limit-1, limit, limit+1 and 16 MiB.
- ``lmdb-full``: a full LMDB map and a full reader table under a running host.

What every case checks: the input gets a typed error (a ``SubagentsError``
subclass, a JSON-RPC error object, or a retry prompt for the model), nothing
committed is lost or partially written (the store's records are snapshotted
before and compared after), and the host keeps serving (a normal request
succeeds after each hostile one). A check returns its violations as strings;
an empty list is a pass. A check never raises: an unexpected exception is
itself a violation naming its type.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, MutableMapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from actors import (
    BackgroundSubagentError,
    BackgroundSubagentSupervisor,
    ChildControl,
    ChildOutcome,
    ChildRequest,
    SupervisorLimits,
)
from storage import KernelStore, LmdbBackend, LmdbSessionStore, MemorySessionStore, SessionStore

from .._agent import Agent
from .._agent._models import (
    FunctionModel,
    ModelMessage,
    ModelRequest,
    ModelRequestParameters,
    RetryPromptPart,
    TestModel,
)
from .._builder import AgentBuilder
from .._delegation._config import SubagentConfig, SubagentDelegationMode
from .._errors import SubagentSpecError
from .._host._config import HostConfigError, load_host_config, parse_host_config
from .._host._eventlog import MemoryEventLog
from .._host._http import build_app
from .._host._jsonrpc import Connection, Dispatcher, ErrorCode
from .._host._methods import ID_FIELDS, MAX_ID_BYTES, METHODS
from .._host._service import MAX_INPUT_BYTES, MAX_STEERING_BYTES, HostService
from .._specs._agent_spec import default_model_providers
from .._specs._markdown import (
    SubagentSpec,
    load_subagent_dir,
    load_subagent_file,
    parse_subagent_markdown,
)

FAMILIES: tuple[str, ...] = ("markdown", "toml", "jsonrpc", "tool-arguments", "sizes", "lmdb-full")

KIB = 1024
MIB = 1024 * KIB
HUGE = 16 * MIB
"""The oversized input every surface gets once."""

PARSE = int(ErrorCode.PARSE_ERROR)
INVALID = int(ErrorCode.INVALID_REQUEST)
UNKNOWN = int(ErrorCode.METHOD_NOT_FOUND)
PARAMS = int(ErrorCode.INVALID_PARAMS)
TOO_LARGE = int(ErrorCode.REQUEST_TOO_LARGE)
UNAVAILABLE = int(ErrorCode.STORAGE_UNAVAILABLE)
RESULT = 0
"""An expected reply code meaning: a successful result, not an error."""

_TIMEOUT = 30.0


class HostileReport(msgspec.Struct, frozen=True, kw_only=True):
    """What :func:`run_hostile_corpus` tried: cases per family, in total, and what broke.

    ``cases_by_family`` counts every case run on every surface it runs on;
    ``violations`` is empty when every case got its typed refusal, lost
    nothing and left the host serving, and every family ran at least its
    minimum number of cases.
    """

    cases_by_family: dict[str, int]
    tried: int
    violations: tuple[str, ...]
    seconds: float


def _untyped(where: str, exc: BaseException) -> str:
    return f"{where}: untyped {type(exc).__name__}: {str(exc)[:200]}"


# ======================================================================== markdown


@dataclass(frozen=True)
class MarkdownCase:
    """A subagent file. ``reason`` is a fragment of the expected
    :class:`SubagentSpecError` reason (``None``: the input is valid and parses);
    ``line`` (when not ``None``) and ``key`` are the error's location."""

    name: str
    source: str | bytes
    reason: str | None
    line: int | None = None
    key: str | None = None


_HEAD = "---\nname: a\ndescription: b\n"


def _bomb(levels: int = 7) -> str:
    lines = ["---", "name: bomb", "description: d", "l0: &l0 [x, x, x, x, x, x, x, x, x, x]"]
    for level in range(1, levels):
        refs = ", ".join([f"*l{level - 1}"] * 10)
        lines.append(f"l{level}: &l{level} [{refs}]")
    return "\n".join([*lines, "---", ""])


def _merge_bomb() -> str:
    lines = [_HEAD + "a0: &a0 {k0: 1, k1: 2, k2: 3, k3: 4, k4: 5, k5: 6, k6: 7, k7: 8, k8: 9}"]
    for level in range(1, 8):
        lines.append(f"a{level}: &a{level} [{', '.join([f'*a{level - 1}'] * 10)}]")
    return "\n".join([*lines, "---", ""])


MARKDOWN_CASES: tuple[MarkdownCase, ...] = (
    MarkdownCase("empty text", "", "missing frontmatter", 1),
    MarkdownCase("empty bytes", b"", "missing frontmatter", 1),
    MarkdownCase("whitespace only", " \n\t\r\n", "missing frontmatter", 3),
    MarkdownCase("a BOM only", "\ufeff", "missing frontmatter", 1),
    MarkdownCase("a BOM as bytes only", b"\xef\xbb\xbf", "missing frontmatter", 1),
    MarkdownCase("two BOMs", "\ufeff\ufeff" + _HEAD + "---\n", "missing frontmatter", 1),
    MarkdownCase("no frontmatter", "name: a\ndescription: b\n", "missing frontmatter", 1),
    MarkdownCase("text before the fence", "Intro\n---\nname: a\n---\n", "missing frontmatter", 1),
    MarkdownCase("unterminated frontmatter", "\n\n---\nname: a\n", "unterminated frontmatter", 3),
    MarkdownCase(
        "unterminated after CRLF lines",
        _HEAD.replace("\n", "\r\n"),
        "unterminated frontmatter",
        1,
    ),
    MarkdownCase(
        "old Mac CR line ends", _HEAD.replace("\n", "\r") + "---\r", "missing frontmatter"
    ),
    MarkdownCase("a list, not a mapping", "---\n- a\n- b\n---\n", "must be a YAML mapping", 2),
    MarkdownCase("a scalar, not a mapping", "---\njust text\n---\n", "got str", 2),
    MarkdownCase(
        "a wrong type after a BOM and CRLF lines",
        "\ufeff\r\n---\r\nname: a\r\ndescription: [b]\r\n---\r\n",
        "expected a string, got list",
        4,
        "description",
    ),
    MarkdownCase(
        "a BOM and CRLF lines are accepted",
        "\ufeff\r\n---\r\nname: a\r\ndescription: b\r\n---\r\nBody.\r\n",
        None,
    ),
    MarkdownCase(
        "a control character",
        "---\nname: a\n\ndescription: b\x07\n---\n",
        "unacceptable character #x0007",
        4,
    ),
    MarkdownCase(
        "a NUL byte in the frontmatter",
        "---\nname: a\ndescription: b\x00c\n---\n",
        "unacceptable character #x0000",
        3,
    ),
    MarkdownCase(
        "NUL bytes in the body are kept as prompt text", (_HEAD + "---\nx\x00y").encode(), None
    ),
    MarkdownCase("empty frontmatter", "---\n---\nbody", "got null", 2),
    MarkdownCase(
        "missing name", "---\ndescription: b\n---\n", "missing required key 'name'", 2, "name"
    ),
    MarkdownCase(
        "missing description",
        "---\nname: a\n---\n",
        "missing required key 'description'",
        2,
        "description",
    ),
    MarkdownCase(
        "null name", "---\nname:\ndescription: b\n---\n", "missing required key 'name'", 2, "name"
    ),
    MarkdownCase(
        "blank name", "---\nname: '  '\ndescription: b\n---\n", "must not be empty", 2, "name"
    ),
    MarkdownCase(
        "name not text",
        "---\nname: [a]\ndescription: b\n---\n",
        "expected a string, got list",
        2,
        "name",
    ),
    MarkdownCase(
        "description not text",
        "---\nname: a\ndescription: 3\n---\n",
        "expected a string, got int",
        3,
        "description",
    ),
    MarkdownCase(
        "tools not a list",
        _HEAD + "tools: 3\n---\n",
        "expected a list of strings or a comma-separated string, got int",
        4,
        "tools",
    ),
    MarkdownCase(
        "a tool that is not a name",
        _HEAD + "tools: [grep, {x: 1}]\n---\n",
        "item 1 is dict",
        4,
        "tools",
    ),
    MarkdownCase(
        "a nested tool list", _HEAD + "tools: [[grep]]\n---\n", "item 0 is list", 4, "tools"
    ),
    MarkdownCase(
        "denied_capabilities not a list",
        _HEAD + "denied_capabilities: {a: 1}\n---\n",
        "got dict",
        4,
        "denied_capabilities",
    ),
    MarkdownCase(
        "a flag that is not a boolean",
        _HEAD + "inherit_hooks: maybe\n---\n",
        "expected true or false, got str",
        4,
        "inherit_hooks",
    ),
    MarkdownCase(
        "metadata not a mapping",
        "---\nname: a\ndescription: b\n\nmetadata: [1]\n---\n",
        "expected a mapping, got list",
        5,
        "metadata",
    ),
    MarkdownCase(
        "model not text", _HEAD + "model: 4\n---\n", "expected a string, got int", 4, "model"
    ),
    MarkdownCase(
        "model settings neither mapping nor name",
        _HEAD + "model_settings: [1]\n---\n",
        "expected a mapping or a preset name",
        4,
        "model_settings",
    ),
    MarkdownCase(
        "instruction not text",
        _HEAD + "instruction: [x]\n---\n",
        "expected a string",
        4,
        "instruction",
    ),
    MarkdownCase(
        "a key that is not text",
        "---\n1: a\nname: a\ndescription: b\n---\n",
        "keys must be strings",
        2,
    ),
    MarkdownCase(
        "a nested key that is not text",
        _HEAD + "metadata: {1: x}\n---\n",
        "mapping keys must be strings",
        4,
        "metadata",
    ),
    MarkdownCase(
        "malformed YAML", "---\nname: a\ndescription: [b\n---\n", "invalid YAML frontmatter"
    ),
    MarkdownCase("a tab indent", _HEAD + "x:\n\t- a\n---\n", "cannot start any token", 5),
    MarkdownCase(
        "a YAML directive", "---\n%YAML 1.1\nname: a\n---\n", "invalid YAML frontmatter", 3
    ),
    MarkdownCase("an undefined alias", _HEAD + "x: *nope\n---\n", "found undefined alias", 4),
    MarkdownCase(
        "an unhashable alias key", _HEAD + "k: &k [1]\n? *k\n: v\n---\n", "unhashable key", 4
    ),
    MarkdownCase(
        "a python object tag",
        "---\nname: !!python/object/apply:os.system ['echo hi']\ndescription: b\n---\n",
        "could not determine a constructor",
        2,
    ),
    MarkdownCase(
        "a python name tag",
        _HEAD + "x: !!python/name:os.system\n---\n",
        "could not determine a constructor",
        4,
    ),
    MarkdownCase(
        "a python module tag",
        _HEAD + "x: !!python/module:os\n---\n",
        "could not determine a constructor",
        4,
    ),
    MarkdownCase(
        "a custom tag",
        "---\nname: a\ndescription: !Secret b\n---\n",
        "could not determine a constructor",
        3,
    ),
    MarkdownCase(
        "a set", _HEAD + "x: !!set {a, b}\n---\n", "unsupported YAML value of type set", 4, "x"
    ),
    MarkdownCase(
        "an ordered map",
        _HEAD + "x: !!omap [a: 1]\n---\n",
        "unsupported YAML value of type tuple",
        4,
        "x",
    ),
    MarkdownCase("an impossible date", _HEAD + "when: 2001-02-30\n---\n", "day is out of range", 2),
    MarkdownCase(
        "an impossible timestamp",
        _HEAD + "x: 2001-13-01T25:61:61Z\n---\n",
        "month must be in 1..12",
        2,
    ),
    MarkdownCase(
        "an integer too long to convert",
        _HEAD + "n: " + "9" * 5000 + "\n---\n",
        "invalid YAML frontmatter",
        2,
    ),
    MarkdownCase(
        "a non-finite number", _HEAD + "ratio: .nan\n---\n", "non-finite number", 4, "ratio"
    ),
    MarkdownCase(
        "binary data",
        _HEAD + "blob: !!binary aGVsbG8=\n---\n",
        "unsupported YAML value of type bytes",
        4,
        "blob",
    ),
    MarkdownCase(
        "a large binary blob",
        _HEAD + "blob: !!binary " + "A" * 100_000 + "\n---\n",
        "unsupported YAML value of type bytes",
        4,
        "blob",
    ),
    MarkdownCase("an alias bomb", _bomb(), "expands to more than 100000 values", 8, "l4"),
    MarkdownCase(
        "a merge-key alias bomb", _merge_bomb(), "expands to more than 100000 values", 8, "a4"
    ),
    MarkdownCase(
        "a self-referencing alias",
        _HEAD + "loop: &x [*x]\n---\n",
        "nested deeper than 64 levels",
        4,
        "loop",
    ),
    MarkdownCase(
        "deep flow nesting", "---\nname: a\nx: " + "[" * 5000 + "]" * 5000 + "\n---\n", "nest"
    ),
    MarkdownCase(
        "10,000 levels of flow sequences",
        _HEAD + "x: " + "[" * 10_000 + "]" * 10_000 + "\n---\n",
        "exceeded maximum nesting depth",
    ),
    MarkdownCase(
        "10,000 levels of flow mappings",
        _HEAD + "x: " + "{a: " * 10_000 + "1" + "}" * 10_000 + "\n---\n",
        "exceeded maximum nesting depth",
    ),
    MarkdownCase(
        "10,000 levels of compact block sequences",
        _HEAD + "x:\n" + "- " * 10_000 + "a\n---\n",
        "nest",
    ),
    MarkdownCase(
        "deep block nesting",
        _HEAD + "x:\n" + "".join("  " * i + "- \n" for i in range(1, 90)) + "---\n",
        "nested deeper than 64 levels",
        4,
        "x",
    ),
    MarkdownCase(
        "bytes that are not UTF-8", b"---\nname: a\xff\ndescription: b\n---\n", "not valid UTF-8", 2
    ),
    MarkdownCase(
        "an overlong UTF-8 encoding",
        b"---\nname: \xc0\xaf\ndescription: b\n---\n",
        "not valid UTF-8",
        2,
    ),
    MarkdownCase(
        "a truncated UTF-8 sequence",
        b"---\nname: a\ndescription: b\xe2\x82\n---\n",
        "not valid UTF-8",
        3,
    ),
    MarkdownCase("UTF-16 with its BOM", (_HEAD + "---\n").encode("utf-16"), "not valid UTF-8", 1),
    MarkdownCase(
        "a lone surrogate", "---\nname: a\ndescription: \ud800\n---\n", "not valid UTF-8", 3
    ),
    MarkdownCase("a huge key", _HEAD + "k" * 500_000 + ": 1\n---\n", "invalid YAML frontmatter", 4),
    MarkdownCase(
        "bytes over 1 MiB",
        b"---\n" + b"#" * MIB + b"\n---\n",
        "over the 1048576-byte (1 MiB) limit",
    ),
    MarkdownCase(
        "text over 1 MiB", "---\n" + "\u00e9" * (MIB // 2 + 1) + "\n---\n", "over the 1048576-byte"
    ),
    MarkdownCase("16 MiB of bytes", b"---\n" + b"x" * HUGE, "over the 1048576-byte (1 MiB) limit"),
    MarkdownCase(
        "two documents",
        "---\nname: a\n--- \n",
        "missing required key 'description'",
        2,
        "description",
    ),
)
"""Every hostile subagent file; the 16 MiB one runs once (it is refused by size first)."""


def check_markdown(case: MarkdownCase) -> list[str]:
    """Parse ``case.source``: the typed :class:`SubagentSpecError` it must raise (or a spec)."""
    where = f"markdown[{case.name}]"
    label = "agents/hostile.md"
    try:
        spec = parse_subagent_markdown(case.source, path=label)
    except SubagentSpecError as error:
        if case.reason is None:
            return [f"{where}: valid input refused: {error}"]
        found: list[str] = []
        if case.reason not in error.reason:
            found.append(f"{where}: reason {error.reason!r} lacks {case.reason!r}")
        if case.line is not None and error.line != case.line:
            found.append(f"{where}: line {error.line}, expected {case.line}")
        if error.key != case.key:
            found.append(f"{where}: key {error.key!r}, expected {case.key!r}")
        if error.path != label:
            found.append(f"{where}: path {error.path!r}, expected {label!r}")
        prefix = label if error.line is None else f"{label}:{error.line}"
        if not str(error).startswith(f"{prefix}: "):
            found.append(f"{where}: message {str(error)[:80]!r} does not start with {prefix!r}")
        return found
    except BaseException as exc:
        return [_untyped(where, exc)]
    if case.reason is not None:
        return [f"{where}: accepted, expected {case.reason!r}"]
    if not isinstance(spec, SubagentSpec) or not spec.name:
        return [f"{where}: parsed into {spec!r}"]
    return []


_GOOD_AGENT = "---\nname: good\ndescription: A good agent\n---\nBe good.\n"


def write_markdown_corpus(directory: Path) -> tuple[list[Path], set[str]]:
    """Write every markdown case as ``NNN.md`` (plus ``good.md``) into ``directory``.

    Returns the files that must fail to load (the cases with a reason, and valid
    ones repeating an earlier file's agent name) and the agent names that load.
    """
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "good.md").write_text(_GOOD_AGENT)
    failing: list[Path] = []
    names = {"good"}
    for index, case in enumerate(MARKDOWN_CASES):
        source = case.source
        if isinstance(source, str):
            try:
                data = source.encode("utf-8")
            except UnicodeEncodeError:
                data = source.encode("utf-8", "surrogatepass")
        else:
            data = source
        path = directory / f"{index:03d}.md"
        path.write_bytes(data)
        if case.reason is not None:
            failing.append(path)
        else:
            name = parse_subagent_markdown(source).name
            if name in names:
                failing.append(path)
            names.add(name)
    return failing, names


def check_markdown_directory(workdir: Path) -> list[str]:
    """The whole corpus as files in one directory: ``load_subagent_dir`` returns the
    good spec and one diagnostic per hostile file, ``load_subagent_file`` refuses a
    16 MiB file by size, and a host whose ``subagents_dir`` is that directory starts,
    reports each skipped file and serves."""
    where = "markdown[directory]"
    directory = workdir / "agents"
    found: list[str] = []
    try:
        failing, expected = write_markdown_corpus(directory)
        loaded = load_subagent_dir(directory)
        names = [spec.name for spec in loaded.specs]
        if names != sorted(expected):
            found.append(f"{where}: loaded {names}, expected {sorted(expected)}")
        failed = sorted(Path(d.path or "").name for d in loaded.diagnostics)
        if failed != sorted(path.name for path in failing):
            found.append(f"{where}: diagnostics for {failed}, expected one per hostile file")
        if any(d.severity != "error" for d in loaded.diagnostics):
            found.append(f"{where}: a diagnostic that is not an error")
        big = workdir / "huge.md"
        big.write_bytes(b"---\n" + b"x" * HUGE)
        try:
            load_subagent_file(big)
            found.append(f"{where}: a 16 MiB file was loaded")
        except SubagentSpecError as error:
            if "1 MiB" not in error.reason:
                found.append(f"{where}: 16 MiB file refused for {error.reason!r}")
        found += asyncio.run(_host_with_markdown(directory, len(failing), sorted(expected)))
    except BaseException as exc:
        found.append(_untyped(where, exc))
    return found


async def _host_with_markdown(directory: Path, hostile: int, expected: list[str]) -> list[str]:
    where = "markdown[host]"
    config = (
        f'[host]\nsubagents_dir = "{directory.as_posix()}"\n'
        '[profiles.default]\nmodel_id = "test:echo"\nsubagents = ["good"]\n'
    )
    async with _host(config=config) as host:
        skipped = [w for w in host.service.warnings if w.startswith("subagent file skipped")]
        found = []
        if len(skipped) != hostile:
            found.append(f"{where}: {len(skipped)} files reported skipped, expected {hostile}")
        catalog = await host.call("catalog.list")
        names = [s["name"] for s in catalog.get("result", {}).get("subagents", [])]
        if sorted(names) != expected:
            found.append(f"{where}: catalog lists {names}, expected {expected}")
        return found + await host.probe(where)


# ======================================================================== toml


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
        return [_untyped(where, exc)]
    return [f"{where}: accepted, expected {case.fragment!r}"]


# ======================================================================== the host


HOST_CONFIG = """
[host]
lease_ttl = 30.0

[profiles.default]
model_id = "test:echo"

[profiles.gated]
model_id = "gated:x"
"""

SEED_SESSION = "hostile-seed"


def _snapshot(store: SessionStore) -> dict[str, list[tuple[bytes, bytes]]]:
    """Every committed record of a kernel store, table by table."""
    assert isinstance(store, KernelStore)
    return store.backend.read(lambda txn: {t: list(txn.scan(t)) for t in KernelStore.TABLES})


class _Host:
    """An in-process host on one store: a dispatcher, a connection, a probe.

    ``gated:x`` models wait until :meth:`release` (so a run stays live for
    steering). Runs on the caller's event loop.
    """

    def __init__(self, service: HostService, gate: asyncio.Event, entered: asyncio.Event) -> None:
        self.service = service
        self.dispatcher: Dispatcher = service.dispatcher()
        self.conn = Connection(transport="test")
        self.gate = gate
        self.entered = entered
        self.next_id = 0

    async def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        self.next_id += 1
        frame: dict[str, Any] = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
        if params is not None:
            frame["params"] = params
        reply = await self.dispatcher.handle(json.dumps(frame).encode(), self.conn)
        return None if reply is None else json.loads(reply)

    def snapshot(self) -> dict[str, list[tuple[bytes, bytes]]]:
        return _snapshot(self.service.store)

    async def probe(self, where: str) -> list[str]:
        """The host still serves: diagnostics answer and the seed session reads back."""
        found = []
        diagnostics = await self.call("diagnostics.get")
        if not (isinstance(diagnostics, dict) and diagnostics.get("result", {}).get("accepting")):
            found.append(f"{where}: the host stopped serving: {str(diagnostics)[:200]}")
        seed = await self.call("session.get", {"session_id": SEED_SESSION})
        if not (isinstance(seed, dict) and "result" in seed):
            found.append(f"{where}: the seed session is gone: {str(seed)[:200]}")
        return found

    def release(self) -> None:
        self.gate.set()


@contextlib.asynccontextmanager
async def _host(
    *,
    store: SessionStore | None = None,
    config: str = HOST_CONFIG,
    seed: bool = True,
) -> AsyncIterator[_Host]:
    gate = asyncio.Event()
    entered = asyncio.Event()

    async def gated(messages: Sequence[ModelMessage], params: ModelRequestParameters) -> str:
        entered.set()
        await gate.wait()
        return "released"

    providers = default_model_providers().with_provider(
        "gated", lambda name, settings: FunctionModel(gated)
    )
    store = store if store is not None else MemorySessionStore()
    service = HostService(
        parse_host_config(config, providers=providers),
        store=store,
        events=MemoryEventLog(),
        providers=providers,
        tick_seconds=3600.0,
        closers=[store.close],
    )
    await service.start()
    host = _Host(service, gate, entered)
    try:
        if seed:
            created = await host.call(
                "session.create", {"session_id": SEED_SESSION, "metadata": {"k": "v"}}
            )
            assert "result" in created, created
        yield host
    finally:
        gate.set()
        await service.close()


# ======================================================================== jsonrpc


@dataclass(frozen=True)
class FrameCase:
    """One raw JSON-RPC frame. ``code`` is the expected error code (:data:`RESULT`:
    a result; ``None``: no reply at all); ``reason`` the expected ``error.data.reason``
    when given; ``batch`` the expected codes of a batch reply, in order."""

    name: str
    frame: bytes
    code: int | None
    reason: str | None = None
    batch: tuple[int, ...] | None = None
    path: str | None = None
    """The expected ``error.data.path`` (the field the error names), when given."""


def _frame(method: str, params: Any = None, *, request_id: Any = 1, **extra: Any) -> bytes:
    value: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        value["params"] = params
    value.update(extra)
    return json.dumps(value).encode()


_DIAG = {"jsonrpc": "2.0", "method": "diagnostics.get"}


def _wrong_value(kind: type[Any], name: str) -> Any:
    """A value of the wrong type for field ``name`` of params struct ``kind``."""
    for candidate in ([["list"]], {"o": 1}, 1.5, "text", True, None):
        try:
            msgspec.convert({name: candidate}, kind, strict=True)
        except msgspec.ValidationError as error:
            if f"$.{name}" in str(error):
                return candidate
    raise AssertionError(f"no wrong value for {kind.__name__}.{name}")


def _method_cases() -> Iterator[FrameCase]:
    """For every method: each params field with a wrong type, an unknown field, a
    reserved owner field, params as an array, and a duplicate of the method name
    with a trailing NUL."""
    for spec in METHODS:
        fields = msgspec.structs.fields(spec.params)
        for info in fields:
            wrong = _wrong_value(spec.params, info.name)
            yield FrameCase(
                f"{spec.name}-{info.name}-wrong-type",
                _frame(spec.name, {info.name: wrong}),
                PARAMS,
                "invalid_params",
            )
        yield FrameCase(f"{spec.name}-unknown-field", _frame(spec.name, {"bogus": 1}), PARAMS)
        yield FrameCase(
            f"{spec.name}-reserved-fencing",
            _frame(spec.name, {"owner": "h", "fencing_generation": 99}),
            PARAMS,
        )
        yield FrameCase(f"{spec.name}-params-array", _frame(spec.name, [1]), PARAMS)
        yield FrameCase(f"{spec.name}-nul-suffix", _frame(spec.name + "\u0000", {}), UNKNOWN)


_OVERLONG_IDS = {
    "one-byte-over": "x" * (MAX_ID_BYTES + 1),
    "multibyte-over": "\u00e9" * (MAX_ID_BYTES // 2 + 1),  # fewer characters than bytes
    "over-lmdb-key-limit": "k" * 600,  # LMDB refuses keys over 511 bytes
}


def _overlong_id_cases() -> Iterator[FrameCase]:
    """For every method and id-like param: the id one byte over :data:`MAX_ID_BYTES`,
    over it in bytes but not in characters, and over LMDB's key limit; the other
    params are valid, so the reply must name the id (``-32602``, on every store)."""
    for spec in METHODS:
        fields = msgspec.structs.fields(spec.params)
        base: dict[str, Any] = {}
        for info in fields:
            if info.required:
                base[info.name] = SEED_SESSION if info.name == "session_id" else "x"
        for info in fields:
            if info.name not in ID_FIELDS:
                continue
            for variant, value in _OVERLONG_IDS.items():
                yield FrameCase(
                    f"{spec.name}-{info.name}-{variant}",
                    _frame(spec.name, {**base, info.name: value}),
                    PARAMS,
                    "invalid_params",
                    path=f"params.{info.name}",
                )


_MALFORMED: tuple[FrameCase, ...] = (
    FrameCase("not-json", b"{nope", PARSE, "parse_error"),
    FrameCase("truncated", b'{"jsonrpc":"2.0","id":1,"method":"initialize"', PARSE),
    FrameCase("not-utf8", b'{"jsonrpc":"2.0","id":1,"method":"\xff"}', PARSE),
    FrameCase("overlong-utf8", b'{"jsonrpc":"2.0","id":1,"method":"\xc0\xaf"}', PARSE),
    FrameCase("utf16", _frame("diagnostics.get").decode().encode("utf-16"), PARSE),
    FrameCase("raw-nul", b'{"jsonrpc":"2.0","id":1,"method":"diag\x00"}', PARSE),
    FrameCase("nul-only", b"\x00\x00\x00", PARSE),
    FrameCase("empty", b"", PARSE),
    FrameCase("two-objects", _frame("diagnostics.get") + _frame("diagnostics.get"), PARSE),
    FrameCase("trailing-garbage", _frame("diagnostics.get") + b"x", PARSE),
    FrameCase("nan", b'{"jsonrpc":"2.0","id":NaN,"method":"diagnostics.get"}', PARSE),
    FrameCase("scalar", b"42", INVALID, "not_an_object"),
    FrameCase("string", b'"initialize"', INVALID),
    FrameCase("null", b"null", INVALID),
    FrameCase("true", b"true", INVALID),
    FrameCase("no-version", b'{"id":1,"method":"initialize"}', INVALID, "bad_version"),
    FrameCase("wrong-version", b'{"jsonrpc":"1.0","id":1,"method":"initialize"}', INVALID),
    FrameCase("version-number", b'{"jsonrpc":2.0,"id":1,"method":"initialize"}', INVALID),
    FrameCase("no-method", b'{"jsonrpc":"2.0","id":1}', INVALID, "bad_method"),
    FrameCase("method-type", b'{"jsonrpc":"2.0","id":1,"method":7}', INVALID),
    FrameCase("method-null", b'{"jsonrpc":"2.0","id":1,"method":null}', INVALID),
    FrameCase("empty-method", b'{"jsonrpc":"2.0","id":1,"method":""}', INVALID),
    FrameCase("id-object", b'{"jsonrpc":"2.0","id":{},"method":"initialize"}', INVALID, "bad_id"),
    FrameCase("id-array", b'{"jsonrpc":"2.0","id":[1],"method":"initialize"}', INVALID),
    FrameCase("id-bool", b'{"jsonrpc":"2.0","id":true,"method":"initialize"}', INVALID),
    FrameCase("id-float", b'{"jsonrpc":"2.0","id":1.5,"method":"initialize"}', INVALID),
    FrameCase(
        "id-huge-int", b'{"jsonrpc":"2.0","id":' + b"9" * 400 + b',"method":"nope"}', UNKNOWN
    ),
    FrameCase("extra-member", b'{"jsonrpc":"2.0","id":1,"method":"initialize","x":1}', INVALID),
    FrameCase(
        "duplicate-members", b'{"jsonrpc":"2.0","id":1,"method":"nope","method":"nope"}', UNKNOWN
    ),
    FrameCase("unknown-method", _frame("session.nuke"), UNKNOWN, "method_not_found"),
    FrameCase("huge-method-name", _frame("m" * 500_000), UNKNOWN),
    FrameCase("rpc-internal-name", _frame("rpc.discover"), UNKNOWN),
    FrameCase("attempts-not-public", _frame("attempts.cancel"), UNKNOWN),
    FrameCase("escaped-nul-method", _frame("diagnostics.get\u0000"), UNKNOWN),
    FrameCase("params-scalar", _frame("session.get", 3), PARAMS),
    FrameCase("params-string", _frame("session.get", "s"), PARAMS),
    FrameCase("params-missing", _frame("session.get"), PARAMS),
    FrameCase(
        "params-null", b'{"jsonrpc":"2.0","id":1,"method":"session.get","params":null}', PARAMS
    ),
    FrameCase(
        "nested-type", _frame("initialize", {"client": {"name": 1}}), PARAMS, "invalid_params"
    ),
    FrameCase(
        "bool-for-int", _frame("events.replay", {"session_id": "s", "after_seq": True}), PARAMS
    ),
    FrameCase("metadata-not-text", _frame("session.create", {"metadata": {"a": 1}}), PARAMS),
    FrameCase(
        "steer-reserved-attempt-id",
        _frame("run.steer", {"session_id": "s", "run_id": "r", "message": "m", "attempt_id": "x"}),
        PARAMS,
    ),
    FrameCase(
        "escaped-nul-session",
        _frame("session.get", {"session_id": "\u0000"}),
        int(ErrorCode.NOT_FOUND),
    ),
    FrameCase(
        "nul-in-new-session-id",
        _frame("session.create", {"session_id": "a\u0000b"}),
        int(ErrorCode.CONFLICT),
    ),
    FrameCase(
        "unknown-profile",
        _frame("session.create", {"profile": "\u0000"}),
        int(ErrorCode.CONFIGURATION_FAILED),
    ),
    FrameCase(
        "negative-after-seq",
        _frame("events.replay", {"session_id": SEED_SESSION, "after_seq": -1}),
        PARAMS,
    ),
    FrameCase(
        "huge-limit", _frame("events.replay", {"session_id": SEED_SESSION, "limit": 10**12}), PARAMS
    ),
    FrameCase("protocol-version", _frame("initialize", {"protocol_version": "999"}), PARAMS),
    FrameCase("deep-nesting", b"[" * 100_000 + b"]" * 100_000, PARSE, "too_deep"),
    FrameCase(
        "deep-params",
        b'{"jsonrpc":"2.0","id":1,"method":"session.create","params":'
        + b'{"a":' * 5000
        + b"1"
        + b"}" * 5000
        + b"}",
        PARSE,
        "too_deep",
    ),
    FrameCase(
        "over-the-frame-limit",
        _frame("run.start", {"session_id": "s", "input": "x" * MIB}),
        TOO_LARGE,
        "too_large",
    ),
    FrameCase(
        "16-mib-frame",
        _frame("run.start", {"session_id": "s", "input": "x" * HUGE}),
        TOO_LARGE,
        "too_large",
    ),
    # notifications are never answered, even when wrong
    FrameCase("notification", json.dumps(_DIAG).encode(), None),
    FrameCase("notification-unknown-method", b'{"jsonrpc":"2.0","method":"no.such"}', None),
    FrameCase(
        "notification-bad-params", b'{"jsonrpc":"2.0","method":"session.get","params":1}', None
    ),
    # batches
    FrameCase("empty-batch", b"[]", INVALID, "empty_batch"),
    FrameCase(
        "10,000-entry batch",
        json.dumps([{**_DIAG, "id": i} for i in range(10_000)]).encode(),
        INVALID,
        "batch_too_large",
    ),
    FrameCase(
        "batch-over-limit",
        json.dumps([{**_DIAG, "id": i} for i in range(33)]).encode(),
        INVALID,
        "batch_too_large",
    ),
    FrameCase(
        "batch-at-limit",
        json.dumps([{**_DIAG, "id": i} for i in range(32)]).encode(),
        RESULT,
        batch=(RESULT,) * 32,
    ),
    FrameCase("nested-empty-batch", b"[[]]", RESULT, batch=(INVALID,)),
    FrameCase(
        "nested-batch",
        b"[[" + json.dumps({**_DIAG, "id": 1}).encode() + b"]]",
        RESULT,
        batch=(INVALID,),
    ),
    FrameCase("batch-of-garbage", b'[1, "x", null, true, {}, []]', RESULT, batch=(INVALID,) * 6),
    FrameCase(
        "batch-mixed",
        b'[{"jsonrpc":"2.0","id":1,"method":"diagnostics.get"},'
        b'{"jsonrpc":"2.0","method":"diagnostics.get"},'
        b'{"jsonrpc":"2.0","id":2,"method":"nope"},7]',
        RESULT,
        batch=(RESULT, UNKNOWN, INVALID),
    ),
    FrameCase(
        "batch-duplicate-ids",
        json.dumps(
            [{**_DIAG, "id": 7}, {**_DIAG, "id": 7}, {"jsonrpc": "2.0", "id": 7, "method": "x"}]
        ).encode(),
        RESULT,
        batch=(RESULT, RESULT, UNKNOWN),
    ),
    FrameCase("batch-of-notifications", json.dumps([_DIAG, _DIAG]).encode(), None),
    FrameCase(
        "batch-of-shutdown-with-bad-params",
        json.dumps(
            [
                {"jsonrpc": "2.0", "id": i, "method": "shutdown", "params": {"now": True}}
                for i in range(3)
            ]
        ).encode(),
        RESULT,
        batch=(PARAMS,) * 3,
    ),
)

FRAME_CASES: tuple[FrameCase, ...] = (
    _MALFORMED + tuple(_method_cases()) + tuple(_overlong_id_cases())
)
"""Every hostile frame, sent on every transport (the stdio line framing skips the
frames a line cannot carry: empty and multi-line ones)."""


def judge_reply(where: str, case: FrameCase, reply: Any) -> list[str]:
    """Compare one decoded reply (``None``: nothing came back) with ``case``."""
    if case.code is None:
        return [] if reply is None else [f"{where}: a reply to a notification: {str(reply)[:200]}"]
    if reply is None:
        return [f"{where}: no reply, expected code {case.code}"]
    if "Traceback" in json.dumps(reply):
        return [f"{where}: a traceback in the reply"]
    if case.batch is not None:
        if not isinstance(reply, list) or len(reply) != len(case.batch):
            return [f"{where}: expected a batch reply of {len(case.batch)}: {str(reply)[:200]}"]
        codes = tuple(
            RESULT if isinstance(r, dict) and "result" in r else _code_of(r) for r in reply
        )
        return (
            [] if codes == case.batch else [f"{where}: batch codes {codes}, expected {case.batch}"]
        )
    if not isinstance(reply, dict) or reply.get("jsonrpc") != "2.0":
        return [f"{where}: not a JSON-RPC reply: {str(reply)[:200]}"]
    if case.code == RESULT:
        return [] if "result" in reply else [f"{where}: expected a result: {str(reply)[:200]}"]
    found = []
    error = reply.get("error")
    if not isinstance(error, dict) or error.get("code") != case.code:
        return [f"{where}: expected error {case.code}, got {str(reply)[:200]}"]
    if not isinstance(error.get("message"), str):
        found.append(f"{where}: error without a message")
    if case.reason is not None and (error.get("data") or {}).get("reason") != case.reason:
        found.append(
            f"{where}: reason {(error.get('data') or {}).get('reason')!r}, expected {case.reason!r}"
        )
    if case.path is not None and (error.get("data") or {}).get("path") != case.path:
        found.append(
            f"{where}: error names {(error.get('data') or {}).get('path')!r}, "
            f"expected {case.path!r}"
        )
    return found


def _code_of(reply: Any) -> int:
    try:
        return int(reply["error"]["code"])
    except (KeyError, TypeError, ValueError):
        return -1


async def check_frame(host: _Host, case: FrameCase, *, surface: str = "dispatcher") -> list[str]:
    """Send ``case`` to the host's dispatcher; judge the reply, the store and the probe."""
    where = f"jsonrpc[{surface}:{case.name}]"
    before = host.snapshot()
    try:
        raw = await host.dispatcher.handle(case.frame, host.conn)
        reply = None if raw is None else json.loads(raw)
    except BaseException as exc:
        return [_untyped(where, exc)]
    found = judge_reply(where, case, reply)
    if host.snapshot() != before:
        found.append(f"{where}: the store changed")
    return found + await host.probe(where)


HTTP_TOKEN = "hostile-token"


class HttpApp:
    """The host's HTTP app, called in process over ASGI (no client library needed).

    :meth:`post` sends one ``POST /rpc`` body and returns the status and the
    decoded JSON reply (``None`` for an empty body).
    """

    def __init__(self, host: _Host) -> None:
        self.app = build_app(host.service, host.dispatcher, HTTP_TOKEN)

    async def post(self, body: bytes, *, token: str | None = HTTP_TOKEN) -> tuple[int, Any]:
        headers = [(b"content-type", b"application/json")]
        headers.append((b"content-length", str(len(body)).encode()))
        if token is not None:
            headers.append((b"authorization", f"Bearer {token}".encode()))
        scope: dict[str, Any] = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": "/rpc",
            "raw_path": b"/rpc",
            "query_string": b"",
            "root_path": "",
            "headers": headers,
            "client": ("127.0.0.1", 1),
            "server": ("127.0.0.1", 80),
        }
        pending = [{"type": "http.request", "body": body, "more_body": False}]
        status = 0
        chunks: list[bytes] = []

        async def receive() -> dict[str, Any]:
            return pending.pop() if pending else {"type": "http.disconnect"}

        async def send(message: MutableMapping[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            elif message["type"] == "http.response.body":
                chunks.append(bytes(message.get("body", b"")))

        await self.app(scope, receive, send)
        data = b"".join(chunks)
        return status, json.loads(data) if data else None


async def check_http_frame(host: _Host, app: HttpApp, case: FrameCase) -> list[str]:
    """POST ``case`` to the HTTP app: 200 with the reply, 204 for none, 413 when too large."""
    where = f"jsonrpc[http:{case.name}]"
    before = host.snapshot()
    try:
        status, reply = await app.post(case.frame)
    except BaseException as exc:
        return [_untyped(where, exc)]
    found = judge_reply(where, case, reply)
    expected_status = 413 if case.code == TOO_LARGE else 204 if case.code is None else 200
    if status != expected_status:
        found.append(f"{where}: HTTP {status}, expected {expected_status}")
    if host.snapshot() != before:
        found.append(f"{where}: the store changed")
    return found + await host.probe(where)


async def check_http_unauthorized(host: _Host, app: HttpApp) -> list[str]:
    """A missing or wrong bearer token: 401 and ``UNAUTHORIZED``, nothing dispatched."""
    found = []
    for name, token in (("no-token", None), ("wrong-token", "nope")):
        where = f"jsonrpc[http:{name}]"
        try:
            status, reply = await app.post(
                _frame("session.create", {"session_id": "intruder"}), token=token
            )
        except BaseException as exc:
            found.append(_untyped(where, exc))
            continue
        if status != 401 or _code_of(reply) != int(ErrorCode.UNAUTHORIZED):
            found.append(f"{where}: HTTP {status} {str(reply)[:100]}")
        found += await host.probe(where)
    seen = await host.call("session.get", {"session_id": "intruder"})
    if "result" in seen:
        found.append("jsonrpc[http:no-token]: an unauthorized request was dispatched")
    return found


@dataclass(frozen=True)
class LineCase:
    """Raw bytes written to a stdio host. ``replies`` lists the codes of the replies
    it must produce (:data:`RESULT` for a result), in any order."""

    name: str
    data: bytes
    replies: tuple[int, ...]


def _stdio_frame_cases() -> Iterator[LineCase]:
    for case in FRAME_CASES:
        if not case.frame.strip() or b"\n" in case.frame or b"\r" in case.frame:
            continue
        if case.batch is not None:
            continue  # a batch reply is one line; judged by the dispatcher and HTTP surfaces
        replies = () if case.code is None else (case.code,)
        yield LineCase(case.name, case.frame + b"\n", replies)


LINE_CASES: tuple[LineCase, ...] = (
    LineCase("blank-line", b"\n", ()),
    LineCase("whitespace-line", b"  \t \n", ()),
    LineCase("crlf-line", _frame("diagnostics.get") + b"\r\n", (RESULT,)),
    LineCase(
        "cr-inside-a-line", b'{"jsonrpc":"2.0",\r"id":1,"method":"diagnostics.get"}\n', (RESULT,)
    ),
    LineCase("nul-line", b"\x00" * 64 + b"\n", (PARSE,)),
    LineCase("invalid-utf8-line", b"\xff\xfe\xfd\n", (PARSE,)),
    LineCase(
        "two-frames-one-line",
        _frame("diagnostics.get") + _frame("diagnostics.get") + b"\n",
        (PARSE,),
    ),
    LineCase(
        "duplicate-ids",
        _frame("diagnostics.get", request_id=5) + b"\n" + _frame("nope", request_id=5) + b"\n",
        (RESULT, UNKNOWN),
    ),
    LineCase("line-over-the-limit", b"x" * (MIB + 1) + b"\n", (TOO_LARGE,)),
    LineCase("16-mib-line", b'{"x":"' + b"y" * HUGE + b'"}\n', (TOO_LARGE,)),
    LineCase("batch-line", b'[1, {"jsonrpc":"2.0","id":1,"method":"nope"}]\n', (INVALID, UNKNOWN)),
    *_stdio_frame_cases(),
)
"""What a stdio host reads: every single frame of :data:`FRAME_CASES` as one line,
plus the framing cases (blank, CRLF, NUL, invalid UTF-8, oversized lines)."""


class StdioHostProcess:
    """``subagents serve --stdio`` as a child process on an LMDB data directory."""

    def __init__(self, workdir: Path) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        config = workdir / "host.toml"
        config.write_text(HOST_CONFIG.replace('model_id = "gated:x"', 'model_id = "test:echo"'))
        repo = Path(__file__).resolve().parents[2]
        env = dict(os.environ)
        env["PYTHONPATH"] = str(repo) + os.pathsep + env.get("PYTHONPATH", "")
        env.pop("SUBAGENTS_CONFIG", None)
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "subagents._cli",
                "serve",
                "--stdio",
                "--config",
                str(config),
                "--data-dir",
                str(workdir / "data"),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            cwd=repo,
        )
        self.lines: queue.Queue[bytes | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.next_probe = 0

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def send(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def call(self, method: str, params: dict[str, Any] | None = None) -> tuple[Any, list[Any]]:
        """Send one request; its reply and every other frame read before it."""
        self.next_probe += 1
        request_id = f"probe-{self.next_probe}"
        self.send(_frame(method, params, request_id=request_id) + b"\n")
        others: list[Any] = []
        while True:
            line = self.lines.get(timeout=_TIMEOUT)
            if line is None:
                raise EOFError("the stdio host exited")
            frame = json.loads(line)
            if isinstance(frame, dict) and frame.get("id") == request_id:
                return frame, others
            others.append(frame)

    def more(self, count: int) -> list[Any]:
        """Read ``count`` more frames (a reply that came after the probe's)."""
        frames = []
        for _ in range(count):
            line = self.lines.get(timeout=_TIMEOUT)
            if line is None:
                raise EOFError("the stdio host exited")
            frames.append(json.loads(line))
        return frames

    def close(self) -> int:
        with contextlib.suppress(BrokenPipeError, OSError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        try:
            code = self.proc.wait(timeout=_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait(timeout=_TIMEOUT)
        self._reader.join(timeout=_TIMEOUT)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return code


def _flat_codes(frames: Sequence[Any]) -> list[int]:
    """The reply codes in ``frames`` (:data:`RESULT` for a result), batches flattened."""
    codes: list[int] = []
    for frame in frames:
        for reply in frame if isinstance(frame, list) else [frame]:
            codes.append(
                RESULT if isinstance(reply, dict) and "result" in reply else _code_of(reply)
            )
    return codes


def check_line(host: StdioHostProcess, case: LineCase) -> list[str]:
    """Write ``case`` to a stdio host, then probe it: the expected replies, in any
    order, and a probe that still gets its diagnostics."""
    where = f"jsonrpc[stdio:{case.name}]"
    try:
        host.send(case.data)
        probe, replies = host.call("diagnostics.get")
        codes = _flat_codes(replies)
        while len(codes) < len(case.replies):
            codes += _flat_codes(host.more(1))
    except BaseException as exc:
        return [_untyped(where, exc)]
    found = []
    codes.sort()
    if codes != sorted(case.replies):
        found.append(f"{where}: reply codes {codes}, expected {sorted(case.replies)}")
    if not probe.get("result", {}).get("accepting"):
        found.append(f"{where}: the host stopped serving: {str(probe)[:200]}")
    return found


def run_stdio_lines(workdir: Path, cases: Sequence[LineCase] = LINE_CASES) -> tuple[int, list[str]]:
    """Every line case against one stdio host; (cases run, violations). The host's
    sessions are the same before and after, and it exits cleanly at end of input."""
    host = StdioHostProcess(workdir)
    found: list[str] = []
    tried = 0
    try:
        created, _ = host.call("session.create", {"session_id": SEED_SESSION})
        if "result" not in created:
            return 0, [f"jsonrpc[stdio]: the host did not start: {created}"]
        before, _ = host.call("session.list", {})
        for case in cases:
            found += check_line(host, case)
            tried += 1
        after, _ = host.call("session.list", {})
        if after != {**before, "id": after["id"]}:
            found.append("jsonrpc[stdio]: the sessions changed under hostile frames")
    except BaseException as exc:
        found.append(_untyped("jsonrpc[stdio]", exc))
    finally:
        code = host.close()
    if code != 0:
        found.append(f"jsonrpc[stdio]: the host exited with {code}")
    return tried, found


# ======================================================================== tool arguments


@dataclass(frozen=True)
class ToolArgsCase:
    """What a model sends one tool. ``expect`` is a fragment of the retry prompt
    the model must get back."""

    name: str
    tool: str
    arguments: dict[str, Any] | str
    expect: str


_RESERVED = (
    "owner",
    "fencing_generation",
    "attempt_id",
    "host_instance_id",
    "namespace_id",
    "session_id",
)


def _tool_cases() -> Iterator[ToolArgsCase]:
    delegate: dict[str, Any] = {"subagent_name": "research", "prompt": "x"}
    blocking: dict[str, Any] = {"name": "research", "prompt": "x"}
    for tool, good in (("delegate", blocking), ("spawn_delegate", delegate)):
        for key in _RESERVED:
            yield ToolArgsCase(f"{tool}-reserved-{key}", tool, {**good, key: "x"}, key)
        yield ToolArgsCase(f"{tool}-unknown-field", tool, {**good, "bogus": 1}, "bogus")
        yield ToolArgsCase(
            f"{tool}-metadata", tool, {**good, "metadata": {"trusted": True}}, "metadata"
        )
        yield ToolArgsCase(
            f"{tool}-parent-run-id", tool, {**good, "parent_run_id": "run-x"}, "parent_run_id"
        )
        yield ToolArgsCase(f"{tool}-prompt-number", tool, {**good, "prompt": 5}, "prompt")
        yield ToolArgsCase(f"{tool}-prompt-null", tool, {**good, "prompt": None}, "prompt")
        yield ToolArgsCase(f"{tool}-prompt-list", tool, {**good, "prompt": ["x"]}, "prompt")
        yield ToolArgsCase(
            f"{tool}-prompt-missing",
            tool,
            {k: v for k, v in good.items() if k != "prompt"},
            "prompt",
        )
        yield ToolArgsCase(f"{tool}-array", tool, "[]", "invalid arguments")
        yield ToolArgsCase(f"{tool}-number", tool, "5", "invalid arguments")
        yield ToolArgsCase(f"{tool}-null", tool, "null", "invalid arguments")
        yield ToolArgsCase(f"{tool}-not-json", tool, '{"prompt": ', "not valid JSON")
        yield ToolArgsCase(f"{tool}-raw-nul", tool, '{"prompt": "a\x00"}', "not valid JSON")
        yield ToolArgsCase(
            f"{tool}-deep-nesting", tool, "[" * 10_000 + "]" * 10_000, "nested too deeply"
        )
        yield ToolArgsCase(
            f"{tool}-huge-unknown-field", tool, {**good, "x" * MIB: "y" * MIB}, "invalid arguments"
        )
    yield ToolArgsCase(
        "delegate-agent-id",
        "delegate",
        {"name": "research", "prompt": "x", "agent_id": "a"},
        "agent_id",
    )
    yield ToolArgsCase(
        "delegate-unknown-subagent", "delegate", {"name": "ghost", "prompt": "x"}, "ghost"
    )
    yield ToolArgsCase(
        "spawn_delegate-invented-agent-id",
        "spawn_delegate",
        {"subagent_name": "research", "prompt": "x", "agent_id": "research-bg-deadbeef"},
        "unknown agent_id",
    )
    yield ToolArgsCase(
        "spawn_delegate-unknown-subagent",
        "spawn_delegate",
        {"subagent_name": "ghost", "prompt": "x"},
        "ghost",
    )
    yield ToolArgsCase(
        "spawn_delegate-name-and-alias-differ",
        "spawn_delegate",
        {"subagent_name": "research", "name": "other", "prompt": "x"},
        "alias",
    )
    yield ToolArgsCase("spawn_delegate-no-name", "spawn_delegate", {"prompt": "x"}, "subagent_name")
    yield ToolArgsCase(
        "spawn_delegate-16-mib-prompt",
        "spawn_delegate",
        {"subagent_name": "research", "prompt": "x" * HUGE},
        "too large",
    )
    controls: tuple[tuple[str, dict[str, Any]], ...] = (
        ("steer_subagent", {"attempt_id": "subattempt_x", "message": "m"}),
        ("cancel_subagent", {"attempt_id": "subattempt_x"}),
        ("wait_subagent", {"attempt_id": "subattempt_x", "timeout_seconds": 0}),
        ("subagent_info", {}),
    )
    for tool, good in controls:
        for key in ("owner", "fencing_generation", "agent_id", "bogus"):
            yield ToolArgsCase(f"{tool}-reserved-{key}", tool, {**good, key: 1}, key)
        yield ToolArgsCase(f"{tool}-array", tool, "[]", "invalid arguments")
        yield ToolArgsCase(
            f"{tool}-deep-nesting", tool, "{" + '"a":{' * 5000 + "}" * 5001, "nested too deeply"
        )
    yield ToolArgsCase(
        "steer_subagent-message-number",
        "steer_subagent",
        {"attempt_id": "a", "message": 1},
        "message",
    )
    yield ToolArgsCase(
        "steer_subagent-unknown-attempt",
        "steer_subagent",
        {"attempt_id": "a", "message": "m"},
        "attempt_id",
    )
    yield ToolArgsCase(
        "steer_subagent-16-mib-message",
        "steer_subagent",
        {"attempt_id": "subattempt_x", "message": "m" * HUGE},
        "too large",
    )
    yield ToolArgsCase(
        "cancel_subagent-reason-list",
        "cancel_subagent",
        {"attempt_id": "a", "reason": ["r"]},
        "reason",
    )
    yield ToolArgsCase(
        "cancel_subagent-huge-reason",
        "cancel_subagent",
        {"attempt_id": "subattempt_x", "reason": "r" * MIB},
        "too large",
    )
    yield ToolArgsCase(
        "wait_subagent-timeout-text",
        "wait_subagent",
        {"timeout_seconds": "soon"},
        "timeout_seconds",
    )
    yield ToolArgsCase(
        "wait_subagent-attempt-number", "wait_subagent", {"attempt_id": 3}, "attempt_id"
    )


TOOL_ARGUMENT_CASES: tuple[ToolArgsCase, ...] = tuple(_tool_cases())
"""What a model may send the blocking ``delegate`` and the background tools
(``BLOCKING_AND_ASYNC`` topology: the background delegate is ``spawn_delegate``)."""


class _ToolBench:
    """One parent agent with both delegation topologies over one supervisor."""

    def __init__(self, supervisor: BackgroundSubagentSupervisor) -> None:
        self.supervisor = supervisor
        self.child = AgentBuilder(TestModel.with_text("child")).name("research").build()

    def agent(self, call: ToolArgsCase) -> Agent:
        model = TestModel([TestModel.tool_call(call.tool, call.arguments), "done"])
        return (
            AgentBuilder(model)
            .subagent(SubagentConfig("research", self.child, "Collects facts"))
            .subagent_delegation_mode(SubagentDelegationMode.BLOCKING_AND_ASYNC)
            .background_subagent_supervisor(self.supervisor)
            .build()
        )


@contextlib.asynccontextmanager
async def tool_bench() -> AsyncIterator[_ToolBench]:
    """A supervisor (on the caller's loop, its own memory store) and agents over it."""
    supervisor = BackgroundSubagentSupervisor(
        loop=asyncio.get_running_loop(), limits=SupervisorLimits(shutdown_grace=5.0)
    )
    try:
        await supervisor.info()  # the supervisor creates its session record on first use
        yield _ToolBench(supervisor)
    finally:
        await supervisor.shutdown_checked(10.0)


async def check_tool_arguments(bench: _ToolBench, case: ToolArgsCase) -> list[str]:
    """Run a parent whose model sends ``case``: the run finishes, the model got one
    retry prompt naming the problem, and nothing reached the store."""
    where = f"tool-arguments[{case.name}]"
    before = _snapshot(bench.supervisor.store)
    try:
        result = await bench.agent(case).run("go")
    except BaseException as exc:
        return [_untyped(where, exc)]
    found = []
    retries = [
        part.content
        for message in result.messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, RetryPromptPart)
    ]
    if result.output != "done":
        found.append(f"{where}: the run ended with {result.output!r}")
    if len(retries) != 1:
        found.append(f"{where}: {len(retries)} retry prompts, expected 1")
    elif case.expect not in retries[0]:
        found.append(f"{where}: retry prompt {retries[0][:160]!r} lacks {case.expect!r}")
    info = await bench.supervisor.info()
    if info.active or info.retained:
        found.append(f"{where}: an attempt was admitted")
    if _snapshot(bench.supervisor.store) != before:
        found.append(f"{where}: the store changed")
    return found


# ======================================================================== sizes


@dataclass(frozen=True)
class SizeCase:
    """A prompt or steering message of ``size`` bytes on one surface.

    Surfaces: ``delegate`` / ``steer`` (the supervisor, limits 64 KiB / 16 KiB),
    ``run.start`` / ``run.steer`` (the host's RPC, same limits). ``accepted`` says
    whether it must be admitted; a refusal must be ``error`` (a
    :class:`BackgroundSubagentError` variant name, or a JSON-RPC code).
    ``multibyte`` builds it from two-byte characters (bytes, not characters, count).
    """

    name: str
    surface: str
    size: int
    accepted: bool
    error: str | int | None = None
    multibyte: bool = False


_PROMPT_LIMIT = SupervisorLimits().max_prompt_bytes
_STEER_LIMIT = SupervisorLimits().max_steering_bytes


def _size_cases() -> Iterator[SizeCase]:
    surfaces: tuple[tuple[str, int, str | int, str | int], ...] = (
        ("delegate", _PROMPT_LIMIT, "PromptTooLarge", "PromptTooLarge"),
        ("steer", _STEER_LIMIT, "SteeringTooLarge", "SteeringTooLarge"),
        ("run.start", MAX_INPUT_BYTES, PARAMS, TOO_LARGE),
        ("run.steer", MAX_STEERING_BYTES, PARAMS, TOO_LARGE),
    )
    for surface, limit, over, huge in surfaces:
        # Zero: the supervisor admits an empty prompt and steering (only a maximum is
        # specified); the host's RPC requires 1 byte at least (INVALID_PARAMS).
        rpc = surface.startswith("run.")
        yield SizeCase(f"{surface}-0", surface, 0, not rpc, PARAMS if rpc else None)
        yield SizeCase(f"{surface}-limit-1", surface, limit - 1, True)
        yield SizeCase(f"{surface}-limit", surface, limit, True)
        yield SizeCase(f"{surface}-limit-multibyte", surface, limit, True, multibyte=True)
        yield SizeCase(f"{surface}-limit+1", surface, limit + 1, False, over)
        yield SizeCase(
            f"{surface}-limit+1-multibyte", surface, limit + 1, False, over, multibyte=True
        )
        yield SizeCase(f"{surface}-16MiB", surface, HUGE, False, huge)


SIZE_CASES: tuple[SizeCase, ...] = tuple(_size_cases())


def sized_text(size: int, multibyte: bool) -> str:
    """Text of exactly ``size`` UTF-8 bytes (two-byte characters first when ``multibyte``)."""
    if not multibyte:
        return "x" * size
    return "\u00e9" * (size // 2) + "x" * (size % 2)


class _GatedRunner:
    """A child runner that reports when it started and ends when released.

    The attempt persists ``starting`` before it calls the runner, so once
    ``started`` is set the attempt's record stays put until its first heartbeat.
    """

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.release = asyncio.Event()

    async def __call__(self, request: ChildRequest, control: ChildControl) -> ChildOutcome:
        self.started.set()
        await self.release.wait()
        return ChildOutcome.completed("done")


async def check_supervisor_size(case: SizeCase) -> list[str]:
    """``delegate`` / ``steer`` on a supervisor of default limits."""
    where = f"sizes[{case.name}]"
    runner = _GatedRunner()
    supervisor = BackgroundSubagentSupervisor(
        runner=runner, loop=asyncio.get_running_loop(), limits=SupervisorLimits(shutdown_grace=5.0)
    )
    text = sized_text(case.size, case.multibyte)
    found: list[str] = []
    try:
        await supervisor.info()  # the supervisor creates its session record on first use
        target = None
        if case.surface == "steer":
            target = (await supervisor.delegate("research", "p")).attempt_id
            await asyncio.wait_for(runner.started.wait(), _TIMEOUT)
        before = _snapshot(supervisor.store)
        try:
            if target is None:
                await supervisor.delegate("research", text)
            else:
                await supervisor.steer(target, text)
        except BackgroundSubagentError as error:
            kind = type(error).__qualname__.rpartition(".")[2]
            if case.accepted:
                found.append(f"{where}: refused with {kind}")
            elif kind != case.error:
                found.append(f"{where}: refused with {kind}, expected {case.error}")
            elif error.fields.get("size_bytes") != case.size:
                found.append(f"{where}: size_bytes {error.fields.get('size_bytes')}")
            if _snapshot(supervisor.store) != before:
                found.append(f"{where}: a refused input changed the store")
        else:
            if not case.accepted:
                found.append(f"{where}: accepted, expected {case.error}")
    except BaseException as exc:
        found.append(_untyped(where, exc))
    finally:
        runner.release.set()
        await supervisor.shutdown_checked(10.0)
    return found


async def check_host_size(host: _Host, case: SizeCase) -> list[str]:
    """``run.start`` input / ``run.steer`` message on a running host."""
    where = f"sizes[{case.name}]"
    text = sized_text(case.size, case.multibyte)
    session = f"sizes-{case.name}"
    try:
        await host.call("session.create", {"session_id": session})
        run_id = None
        if case.surface == "run.steer":
            started = await host.call(
                "run.start", {"session_id": session, "input": "steer me", "profile": "gated"}
            )
            run_id = started["result"]["run_id"]
            # Running and inside its model: its record stays put until the lease renewal.
            await asyncio.wait_for(host.entered.wait(), _TIMEOUT)
        before = host.snapshot()
        if run_id is None:
            reply = await host.call("run.start", {"session_id": session, "input": text})
        else:
            reply = await host.call(
                "run.steer", {"session_id": session, "run_id": run_id, "message": text}
            )
    except BaseException as exc:
        return [_untyped(where, exc)]
    found = []
    if case.accepted:
        if "result" not in reply:
            found.append(f"{where}: refused: {str(reply)[:200]}")
    else:
        if _code_of(reply) != case.error:
            found.append(f"{where}: expected error {case.error}, got {str(reply)[:200]}")
        if host.snapshot() != before:
            found.append(f"{where}: a refused input changed the store")
    return found + await host.probe(where)


async def check_size(case: SizeCase, host: _Host | None = None) -> list[str]:
    """One size case on its surface (``host`` for the RPC surfaces)."""
    if case.surface in ("delegate", "steer"):
        return await check_supervisor_size(case)
    if host is not None:
        return await check_host_size(host, case)
    async with _host() as fresh:
        return await check_host_size(fresh, case)


# ======================================================================== lmdb-full


LMDB_CASES: tuple[str, ...] = (
    "map-full-session-create",
    "map-full-run-start",
    "map-full-grows-in-place",
    "map-full-reopen-larger",
    "readers-full",
)
"""The full-store cases, each run on a fresh LMDB directory."""

_SMALL_MAP = 256 * KIB


async def _fill(host: _Host, where: str) -> tuple[list[str], Any]:
    """Create sessions with 8 KiB of metadata until the store refuses one."""
    created: list[str] = []
    for n in range(10_000):
        session_id = f"fill-{n:05d}"
        reply = await host.call(
            "session.create", {"session_id": session_id, "metadata": {"pad": "p" * 8 * KIB}}
        )
        if "error" in reply:
            return created, reply
        created.append(session_id)
    raise AssertionError(f"{where}: the map never filled")


async def _all_there(host: _Host, where: str, created: Sequence[str]) -> list[str]:
    listed = await host.call("session.list", {})
    ids = {s["session_id"] for s in listed.get("result", {}).get("sessions", [])}
    missing = [s for s in created if s not in ids]
    return [f"{where}: {len(missing)} committed sessions lost"] if missing else []


async def check_lmdb(case: str, workdir: Path) -> list[str]:
    """One full-store case: the typed, retryable refusal, nothing partial, the host
    still serving, and work resuming once there is room."""
    where = f"lmdb-full[{case}]"
    path = workdir / case
    shutil.rmtree(path, ignore_errors=True)
    try:
        if case == "readers-full":
            return await _readers_full(path, where)
        return await _map_full(case, path, where)
    except BaseException as exc:
        return [_untyped(where, exc)]


async def _map_full(case: str, path: Path, where: str) -> list[str]:
    found: list[str] = []
    store = LmdbSessionStore(path, map_size=_SMALL_MAP, sync=False)
    async with _host(store=store) as host:
        created, refusal = await _fill(host, where)
        if len(created) < 5:
            found.append(f"{where}: the map filled after {len(created)} sessions")
        if _code_of(refusal) != UNAVAILABLE:
            found.append(f"{where}: a full map answered {str(refusal)[:200]}")
        before = host.snapshot()
        if case == "map-full-run-start":
            again = await host.call("run.start", {"session_id": created[0], "input": "x" * 60_000})
            runs = await host.call("run.list", {"session_id": created[0]})
            if runs.get("result", {}).get("runs"):
                found.append(f"{where}: a run was admitted into a full map")
        else:
            again = await host.call(
                "session.create", {"session_id": "refused", "metadata": {"pad": "p" * 8 * KIB}}
            )
        if _code_of(again) != UNAVAILABLE:
            found.append(f"{where}: a retry into the full map answered {str(again)[:200]}")
        if host.snapshot() != before:
            found.append(f"{where}: a refused write changed the store")
        found += await host.probe(where)
        found += await _all_there(host, where, created)
        if case == "map-full-grows-in-place":
            # Another opener on the same path turns auto_grow on for the shared environment.
            grower = LmdbBackend(
                path,
                tables=KernelStore.TABLES,
                sync=False,
                map_size=_SMALL_MAP,
                auto_grow=True,
                max_map_size=64 * MIB,
            )
            try:
                resumed = await host.call(
                    "session.create", {"session_id": "after-growth", "metadata": {"pad": "p"}}
                )
                if "result" not in resumed:
                    found.append(f"{where}: no room after growth: {str(resumed)[:200]}")
                found += await _all_there(host, where, [*created, "after-growth"])
            finally:
                grower.close()
    if case == "map-full-reopen-larger":
        bigger = LmdbSessionStore(path, map_size=4 * _SMALL_MAP, sync=False)
        async with _host(store=bigger, seed=False) as host:
            resumed = await host.call("session.create", {"session_id": "after-growth"})
            if "result" not in resumed:
                found.append(f"{where}: no room after reopening larger: {str(resumed)[:200]}")
            found += await _all_there(host, where, [SEED_SESSION, *created, "after-growth"])
            found += await host.probe(where)
    return found


async def _readers_full(path: Path, where: str) -> list[str]:
    found: list[str] = []
    backend = LmdbBackend(path, tables=KernelStore.TABLES, sync=False, max_readers=1)
    store = KernelStore(backend)
    async with _host(store=store) as host:
        entered = threading.Event()
        release = threading.Event()

        def hold(txn: Any) -> None:
            entered.set()
            release.wait(_TIMEOUT)

        holder = threading.Thread(target=lambda: backend.read(hold), daemon=True)
        holder.start()
        entered.wait(_TIMEOUT)
        try:
            refused = await host.call("session.get", {"session_id": SEED_SESSION})
            if _code_of(refused) != UNAVAILABLE:
                found.append(f"{where}: a full reader table answered {str(refused)[:200]}")
            diagnostics = await host.call("diagnostics.get")
            if "result" not in diagnostics:
                found.append(f"{where}: the host stopped serving: {str(diagnostics)[:200]}")
        finally:
            release.set()
            holder.join(_TIMEOUT)
        found += await host.probe(where)
    return found


# ======================================================================== the runner


MINIMUM_CASES: dict[str, int] = {
    "markdown": len(MARKDOWN_CASES) + 1,
    "toml": len(TOML_CASES),
    "jsonrpc": 2 * len(FRAME_CASES) + len(LINE_CASES) + 1,
    "tool-arguments": len(TOOL_ARGUMENT_CASES),
    "sizes": len(SIZE_CASES),
    "lmdb-full": len(LMDB_CASES),
}
"""Each family must really run every one of its cases (a run that tried fewer is red)."""


def run_hostile_corpus(
    *, workdir: Path, progress: Callable[[str], None] | None = None
) -> HostileReport:
    """Run every case of every family outside pytest; count them and collect violations.

    ``workdir`` receives the files and LMDB directories the cases need (a fresh
    subdirectory per run). ``progress`` is told each family as it starts.
    Never raises for a failing case: failures are violations in the report.
    """
    started = time.monotonic()
    workdir.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="hostile-", dir=workdir))
    counts: dict[str, int] = dict.fromkeys(FAMILIES, 0)
    violations: list[str] = []

    def family(name: str, run: Callable[[], tuple[int, list[str]]]) -> None:
        if progress is not None:
            progress(name)
        try:
            tried, found = run()
        except BaseException as exc:
            tried, found = 0, [_untyped(name, exc)]
        counts[name] += tried
        violations.extend(found)

    def markdown() -> tuple[int, list[str]]:
        found = [v for case in MARKDOWN_CASES for v in check_markdown(case)]
        found += check_markdown_directory(root / "markdown")
        return len(MARKDOWN_CASES) + 1, found

    def toml() -> tuple[int, list[str]]:
        return len(TOML_CASES), [v for c in TOML_CASES for v in check_toml(c, root / "toml")]

    def jsonrpc() -> tuple[int, list[str]]:
        async def in_process() -> list[str]:
            store = LmdbSessionStore(root / "jsonrpc-lmdb", sync=False)
            found: list[str] = []
            async with _host(store=store) as host:
                for case in FRAME_CASES:
                    found += await check_frame(host, case)
                app = HttpApp(host)
                for case in FRAME_CASES:
                    found += await check_http_frame(host, app, case)
                found += await check_http_unauthorized(host, app)
            return found

        found = asyncio.run(in_process())
        lines, stdio_found = run_stdio_lines(root / "stdio")
        return 2 * len(FRAME_CASES) + 1 + lines, found + stdio_found

    def tools() -> tuple[int, list[str]]:
        async def run() -> list[str]:
            async with tool_bench() as bench:
                return [
                    v for c in TOOL_ARGUMENT_CASES for v in await check_tool_arguments(bench, c)
                ]

        return len(TOOL_ARGUMENT_CASES), asyncio.run(run())

    def sizes() -> tuple[int, list[str]]:
        async def run() -> list[str]:
            found: list[str] = []
            async with _host() as host:
                for case in SIZE_CASES:
                    found += await check_size(case, host)
            return found

        return len(SIZE_CASES), asyncio.run(run())

    def lmdb_full() -> tuple[int, list[str]]:
        async def run() -> list[str]:
            return [v for c in LMDB_CASES for v in await check_lmdb(c, root / "lmdb")]

        return len(LMDB_CASES), asyncio.run(run())

    # Hostile input makes the host log what it refused (a full map, say); the report
    # carries the verdicts, so keep the host's log quiet for the run.
    host_log = logging.getLogger("subagents.host")
    level = host_log.level
    host_log.setLevel(logging.CRITICAL)
    try:
        family("markdown", markdown)
        family("toml", toml)
        family("jsonrpc", jsonrpc)
        family("tool-arguments", tools)
        family("sizes", sizes)
        family("lmdb-full", lmdb_full)
    finally:
        host_log.setLevel(level)
        shutil.rmtree(root, ignore_errors=True)
    for name, minimum in MINIMUM_CASES.items():
        if counts[name] < minimum:
            violations.append(
                f"hostile family {name} tried {counts[name]} cases (minimum {minimum})"
            )
    return HostileReport(
        cases_by_family=counts,
        tried=sum(counts.values()),
        violations=tuple(violations),
        seconds=time.monotonic() - started,
    )
