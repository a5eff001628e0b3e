"""The ``markdown`` family: hostile subagent files (:func:`~subagents.parse_subagent_markdown`,
:func:`~subagents.load_subagent_dir`, and a host loading a directory of them)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

from subagents._errors import SubagentSpecError
from subagents._specs._markdown import (
    SubagentSpec,
    load_subagent_dir,
    load_subagent_file,
    parse_subagent_markdown,
)

from ._common import (
    HUGE,
    MIB,
    untyped,
)
from ._host import hostile_host


@dataclass(frozen=True)
class MarkdownCase:
    """A subagent file. ``reason`` is a fragment of the expected
    :class:`SubagentSpecError` reason (``None``: the input is valid and parses);
    ``line`` (when not ``None``) and ``key`` are the error's location; a tuple of
    keys accepts any of them (deep nesting is refused by libyaml's own nesting limit,
    with no key, where the installed libyaml has one, else by the parser's depth
    check at the key that nests)."""

    name: str
    source: str | bytes
    reason: str | None
    line: int | None = None
    key: str | tuple[str | None, ...] | None = None


_HEAD = "---\nname: a\ndescription: b\n"
# libyaml's nesting limit answers with no key; without one, the depth check names ``x``.
_NESTING_KEYS = (None, "x")


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
        "deep flow nesting",
        "---\nname: a\nx: " + "[" * 5000 + "]" * 5000 + "\n---\n",
        "nest",
        key=_NESTING_KEYS,
    ),
    MarkdownCase(
        "10,000 levels of flow sequences",
        _HEAD + "x: " + "[" * 10_000 + "]" * 10_000 + "\n---\n",
        "nest",
        key=_NESTING_KEYS,
    ),
    MarkdownCase(
        "10,000 levels of flow mappings",
        _HEAD + "x: " + "{a: " * 10_000 + "1" + "}" * 10_000 + "\n---\n",
        "nest",
        key=_NESTING_KEYS,
    ),
    MarkdownCase(
        "10,000 levels of compact block sequences",
        _HEAD + "x:\n" + "- " * 10_000 + "a\n---\n",
        "nest",
        key=_NESTING_KEYS,
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
        if error.key not in (case.key if isinstance(case.key, tuple) else (case.key,)):
            found.append(f"{where}: key {error.key!r}, expected {case.key!r}")
        if error.path != label:
            found.append(f"{where}: path {error.path!r}, expected {label!r}")
        prefix = label if error.line is None else f"{label}:{error.line}"
        if not str(error).startswith(f"{prefix}: "):
            found.append(f"{where}: message {str(error)[:80]!r} does not start with {prefix!r}")
        return found
    except BaseException as exc:
        return [untyped(where, exc)]
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
        found.append(untyped(where, exc))
    return found


async def _host_with_markdown(directory: Path, hostile: int, expected: list[str]) -> list[str]:
    where = "markdown[host]"
    config = (
        f'[host]\nsubagents_dir = "{directory.as_posix()}"\n'
        '[profiles.default]\nmodel_id = "test:echo"\nsubagents = ["good"]\n'
    )
    async with hostile_host(config=config) as host:
        skipped = [w for w in host.service.warnings if w.startswith("subagent file skipped")]
        found = []
        if len(skipped) != hostile:
            found.append(f"{where}: {len(skipped)} files reported skipped, expected {hostile}")
        catalog = await host.call("catalog.list")
        names = [s["name"] for s in catalog.get("result", {}).get("subagents", [])]
        if sorted(names) != expected:
            found.append(f"{where}: catalog lists {names}, expected {expected}")
        return found + await host.probe(where)
