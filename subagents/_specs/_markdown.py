"""Subagent specs from markdown: ``parse_subagent_markdown`` and ``load_subagent_dir``.

A subagent file is markdown that opens with YAML frontmatter::

    ---
    name: debugger
    description: Debug code issues
    tools: [grep, view]
    optional_tools: edit, shell
    model: inherit
    ---
    You are a debugging expert.

The frontmatter is loaded with a *safe* YAML loader and must be a mapping; the
body, trimmed, is the system prompt. Parsing is total: whatever the input
(text or bytes), it returns a :class:`SubagentSpec` or raises
:class:`SubagentSpecError` naming the file, line and key. No other exception
escapes (a Hypothesis fuzz test holds it to that).

Keys: ``name`` and ``description`` (required strings), ``instruction``
(string), ``tools``, ``optional_tools``, ``denied_tools``,
``denied_capabilities`` (a list of strings, or one comma-separated string:
split, trimmed, empties and repeats dropped), ``inherit_hooks``,
``inherit_capabilities`` (booleans), ``model`` (string), ``model_settings``,
``model_config`` (a mapping or a preset name; ``model_cfg`` is its alias, so
``model_cfg: fast`` names the model-config preset ``fast``), ``metadata`` (a
mapping).

``spec.metadata`` holds, in this order: ``denied_tools``, ``inherit_hooks``,
``inherit_capabilities`` and ``denied_capabilities`` when given, then every
unknown key (each also reported in ``spec.warnings``, never silently dropped),
then the user's ``metadata`` mapping, which wins on a clash. A repeated key
keeps its last value (as YAML does) and is reported in ``spec.warnings`` too.

Limits, each a :class:`SubagentSpecError`: the input may be at most
:data:`MAX_SPEC_BYTES` (1 MiB) of UTF-8; the YAML may expand (aliases
counted every time they are used) to at most :data:`MAX_YAML_NODES` values,
nested at most :data:`MAX_YAML_DEPTH` deep; YAML tags that construct objects
(``!!python/object``, custom tags) are refused by the safe loader.
"""

from __future__ import annotations

import datetime
import math
import os
import unicodedata
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NamedTuple

import msgspec
import yaml

from .._agent._records import Record
from .._errors import SubagentSpecError

MAX_SPEC_BYTES = 1024 * 1024
MAX_YAML_NODES = 100_000
MAX_YAML_DEPTH = 64

_FENCE = "---"
_BOM = "\ufeff"
_LIST_KEYS = ("tools", "optional_tools", "denied_tools", "denied_capabilities")
_BOOL_KEYS = ("inherit_hooks", "inherit_capabilities")
_KNOWN_KEYS = frozenset(
    {
        "name",
        "description",
        "instruction",
        *_LIST_KEYS,
        *_BOOL_KEYS,
        "model",
        "model_settings",
        "model_config",
        "model_cfg",
        "metadata",
    }
)
_Loader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

RESERVED_SUBAGENT_NAMES = frozenset(
    {
        "delegate",
        "spawn_delegate",
        "steer_subagent",
        "cancel_subagent",
        "wait_subagent",
        "subagent_info",
    }
)
"""Names a subagent may not take: the parent's delegation tools, which it would shadow."""


class SubagentSpecDiagnostic(Record, frozen=True, kw_only=True):
    """One finding about a subagent file: a warning on a parsed spec, or why a file failed.

    ``severity`` is ``"warning"`` (the spec was still produced) or ``"error"``
    (it was not). ``path``, ``line`` (1-based) and ``key`` locate it when known;
    ``message`` is the full readable text, location included.
    """

    severity: str
    message: str
    path: str | None = None
    line: int | None = None
    key: str | None = None


class SubagentSpec(Record, frozen=True, kw_only=True):
    """The serializable part of a subagent definition (no runtime agent handle).

    ``to_value()`` / ``SubagentSpec.from_value(v)`` round-trip exactly, so
    services and CLI layers can exchange specs. ``warnings`` lists what the
    parser noticed but accepted (unknown keys); it is empty for specs built in
    code. ``model`` ``None``, empty or ``"inherit"`` means: use the host's model.
    """

    name: str
    description: str
    system_prompt: str = ""
    instruction: str | None = None
    tools: list[str] = msgspec.field(default_factory=list)
    optional_tools: list[str] = msgspec.field(default_factory=list)
    model: str | None = None
    model_settings: dict[str, Any] | str | None = None
    model_config: dict[str, Any] | str | None = None
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)
    warnings: list[SubagentSpecDiagnostic] = msgspec.field(default_factory=list)

    def denied_tools(self) -> list[str]:
        """``metadata["denied_tools"]`` as a list of names (empty when absent or malformed)."""
        return _names_in(self.metadata.get("denied_tools"))

    def denied_capabilities(self) -> list[str]:
        """``metadata["denied_capabilities"]`` as a list of ids (empty when absent or malformed)."""
        return _names_in(self.metadata.get("denied_capabilities"))


def _names_in(value: Any) -> list[str]:
    if isinstance(value, str):
        return _split_names(value)
    if isinstance(value, list):
        return [item for item in value if isinstance(item, str)]
    return []


class SubagentDirectory(NamedTuple):
    """What ``load_subagent_dir`` found: the parsed specs and one diagnostic per failed file."""

    specs: list[SubagentSpec]
    diagnostics: list[SubagentSpecDiagnostic]


# ---------------------------------------------------------------- parsing


class _Located:
    """The frontmatter text and how to map its lines back to the original input."""

    __slots__ = ("body", "first_line", "frontmatter")

    def __init__(self, frontmatter: str, first_line: int, body: str) -> None:
        self.frontmatter = frontmatter
        self.first_line = first_line  # original line number of the frontmatter's first line
        self.body = body


def _decode(source: str | bytes, path: str | None) -> str:
    if isinstance(source, bytes | bytearray | memoryview):
        raw = bytes(source)
        if len(raw) > MAX_SPEC_BYTES:
            raise SubagentSpecError(
                f"file is {len(raw)} bytes, over the {MAX_SPEC_BYTES}-byte (1 MiB) limit",
                path=path,
            )
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as error:
            line = raw.count(b"\n", 0, error.start) + 1
            raise SubagentSpecError(
                f"not valid UTF-8 text (byte 0x{raw[error.start]:02x} at offset {error.start})",
                path=path,
                line=line,
            ) from None
    if not isinstance(source, str):
        raise SubagentSpecError(
            f"expected markdown text or bytes, got {type(source).__name__}", path=path
        )
    if len(source) > MAX_SPEC_BYTES:
        raise SubagentSpecError(
            f"text is {len(source)} characters, over the {MAX_SPEC_BYTES}-byte (1 MiB) limit",
            path=path,
        )
    try:
        size = len(source.encode("utf-8"))
    except UnicodeEncodeError as error:
        line = source.count("\n", 0, error.start) + 1
        raise SubagentSpecError(
            "not valid UTF-8 text (a lone surrogate code point)", path=path, line=line
        ) from None
    if size > MAX_SPEC_BYTES:
        raise SubagentSpecError(
            f"text is {size} bytes of UTF-8, over the {MAX_SPEC_BYTES}-byte (1 MiB) limit",
            path=path,
        )
    return source


def _locate(text: str, path: str | None) -> _Located:
    """Split ``text`` into frontmatter and body; line numbers refer to ``text``."""
    if text.startswith(_BOM):
        text = text[1:]
    text = text.replace("\r\n", "\n")
    stripped = text.lstrip()
    skipped_lines = text.count("\n", 0, len(text) - len(stripped))
    lines = stripped.split("\n")
    opening = skipped_lines + 1
    if lines[0].rstrip() != _FENCE:
        raise SubagentSpecError(
            "missing frontmatter: a subagent file must start with a '---' line",
            path=path,
            line=opening,
        )
    for index in range(1, len(lines)):
        if lines[index].rstrip() == _FENCE:
            return _Located(
                "\n".join(lines[1:index]), opening + 1, "\n".join(lines[index + 1 :]).strip()
            )
    raise SubagentSpecError(
        "unterminated frontmatter: no closing '---' line after the opening one",
        path=path,
        line=opening,
    )


def _load_yaml(
    located: _Located, path: str | None
) -> tuple[Any, dict[str, int], list[tuple[str, int]]]:
    """Safe-load the frontmatter.

    Also returns each top-level key's original line (its last occurrence,
    whose value YAML keeps) and the repeated keys with the line of each repeat.
    """
    key_lines: dict[str, int] = {}
    repeats: list[tuple[str, int]] = []
    loader = _Loader(located.frontmatter)
    try:
        node = loader.get_single_node()
        if isinstance(node, yaml.MappingNode):
            for key_node, _ in node.value:
                if isinstance(key_node, yaml.ScalarNode) and key_node.tag.endswith(":str"):
                    key = str(key_node.value)
                    line = located.first_line + key_node.start_mark.line
                    if key in key_lines:
                        repeats.append((key, line))
                    key_lines[key] = line
        data = None if node is None else loader.construct_document(node)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        problem = error.problem or error.context or "malformed YAML"
        raise SubagentSpecError(
            f"invalid YAML frontmatter: {_short(problem)}",
            path=path,
            line=None if mark is None else located.first_line + mark.line,
        ) from None
    except yaml.reader.ReaderError as error:
        raise SubagentSpecError(
            f"invalid YAML frontmatter: unacceptable character #x{error.character:04x}"
            if isinstance(error.character, int)
            else "invalid YAML frontmatter: unacceptable character",
            path=path,
            line=located.first_line + located.frontmatter.count("\n", 0, max(error.position, 0)),
        ) from None
    except RecursionError:
        raise SubagentSpecError(
            "invalid YAML frontmatter: nested too deeply", path=path, line=located.first_line
        ) from None
    except Exception as error:  # the YAML library is the untrusted-input boundary
        raise SubagentSpecError(
            f"invalid YAML frontmatter: {type(error).__name__}: {_short(str(error))}",
            path=path,
            line=located.first_line,
        ) from None
    finally:
        loader.dispose()
    return data, key_lines, repeats


def _short(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class _Budget:
    """Counts values visited while copying YAML data, so aliases cannot explode it."""

    __slots__ = ("left",)

    def __init__(self) -> None:
        self.left = MAX_YAML_NODES


def _plain(value: Any, budget: _Budget, depth: int, fail: _Fail) -> Any:
    """A JSON-compatible deep copy of ``value``, bounded in size and depth."""
    budget.left -= 1
    if budget.left < 0:
        raise fail(
            f"YAML expands to more than {MAX_YAML_NODES} values "
            "(aliases count every time they are used)"
        )
    if depth > MAX_YAML_DEPTH:
        raise fail(f"YAML nested deeper than {MAX_YAML_DEPTH} levels")
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise fail(f"non-finite number {value!r} is not representable in JSON")
        return value
    if isinstance(value, datetime.date):  # datetime is a date too
        return value.isoformat()
    if isinstance(value, list):
        return [_plain(item, budget, depth + 1, fail) for item in value]
    if isinstance(value, dict):
        copy: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise fail(f"mapping keys must be strings, got {type(key).__name__}")
            copy[key] = _plain(item, budget, depth + 1, fail)
        return copy
    raise fail(f"unsupported YAML value of type {type(value).__name__}")


class _Fail:
    """Builds located errors for one key."""

    __slots__ = ("key", "line", "path")

    def __init__(self, path: str | None, line: int | None, key: str | None) -> None:
        self.path = path
        self.line = line
        self.key = key

    def __call__(self, reason: str) -> SubagentSpecError:
        return SubagentSpecError(reason, path=self.path, line=self.line, key=self.key)


def _split_names(text: str) -> list[str]:
    return _dedupe(part.strip() for part in text.split(","))


def _dedupe(names: Iterable[str]) -> list[str]:
    seen: dict[str, None] = {}
    for name in names:
        if name:
            seen.setdefault(name, None)
    return list(seen)


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _name_list(value: Any, fail: _Fail) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return _split_names(value)
    if isinstance(value, list):
        for index, item in enumerate(value):
            if not isinstance(item, str):
                raise fail(
                    f"expected a list of strings or a comma-separated string, "
                    f"but item {index} is {_type_name(item)}"
                )
        return _dedupe(item.strip() for item in value)
    raise fail(f"expected a list of strings or a comma-separated string, got {_type_name(value)}")


def parse_subagent_markdown(
    source: str | bytes, *, path: str | os.PathLike[str] | None = None
) -> SubagentSpec:
    """Parse one markdown subagent definition into a :class:`SubagentSpec`.

    ``source`` is text or raw bytes (decoded as strict UTF-8); ``path`` (text
    or a path object) only labels errors and diagnostics. A UTF-8 BOM and
    leading whitespace are ignored and CRLF line ends accepted.

    Raises :class:`SubagentSpecError` (never anything else) naming the path,
    the 1-based line in the original input and the key, for: input over
    1 MiB or not UTF-8, missing or unterminated frontmatter, invalid YAML,
    object-constructing YAML tags, alias bombs or deep nesting, frontmatter
    that is not a mapping, a missing required key and a value of the wrong
    type. Unknown and repeated keys do not raise: they are reported in
    ``spec.warnings`` (unknown keys are kept in ``metadata``).
    """
    label = None if path is None else os.fspath(path)
    try:
        return _parse(source, label)
    except SubagentSpecError:
        raise
    except RecursionError:
        raise SubagentSpecError("input nested too deeply", path=label) from None
    except Exception as error:  # a bug here must still surface as the typed error
        raise SubagentSpecError(
            f"unexpected parser failure: {type(error).__name__}: {_short(str(error))}", path=label
        ) from error


def _parse(source: str | bytes, path: str | None) -> SubagentSpec:
    located = _locate(_decode(source, path), path)
    data, key_lines, repeats = _load_yaml(located, path)
    front = _Frontmatter.read(data, key_lines, located.first_line, path)
    name = front.required_text("name").strip()
    problem = _name_problem(name)
    if problem is not None:
        raise front.fail_for("name")(problem)
    description = front.required_text("description").strip()
    lists = {key: _name_list(front.values.get(key), front.fail_for(key)) for key in _LIST_KEYS}
    metadata = front.policy_metadata(lists)
    warnings = front.warnings(repeats)
    metadata.update(front.unknown())
    metadata.update(front.user_metadata())
    return SubagentSpec(
        name=name,
        description=description,
        system_prompt=located.body,
        instruction=front.optional_text("instruction"),
        tools=lists["tools"],
        optional_tools=lists["optional_tools"],
        model=front.optional_text("model"),
        model_settings=front.mapping_or_name("model_settings"),
        model_config=front.model_config(),
        metadata=metadata,
        warnings=warnings,
    )


def _name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a subagent, or ``None`` when it can.

    Refused: the empty name; control, format (bidi overrides, zero-width) and
    other non-printing code points; path separators and ``.``/``..`` (a name
    ends up in paths, logs and tool arguments); :data:`RESERVED_SUBAGENT_NAMES`.
    """
    if not name:
        return "must not be empty"
    for index, char in enumerate(name):
        if unicodedata.category(char).startswith("C"):
            return (
                f"must not contain control or invisible characters "
                f"(U+{ord(char):04X} at position {index})"
            )
    if "/" in name or "\\" in name or name in (".", ".."):
        return f"{name[:100]!r} is not a plain name: no path separators, '.' or '..'"
    if name in RESERVED_SUBAGENT_NAMES:
        return f"{name!r} is a delegation tool's name; pick another name"
    return None


class _Frontmatter:
    """One file's frontmatter as plain values, with the line each key stands on.

    Every accessor raises :class:`SubagentSpecError` naming the file, line and key.
    """

    def __init__(
        self, values: dict[str, Any], key_lines: dict[str, int], first_line: int, path: str | None
    ) -> None:
        self.values = values
        self.key_lines = key_lines
        self.first_line = first_line
        self.path = path

    @classmethod
    def read(
        cls, data: Any, key_lines: dict[str, int], first_line: int, path: str | None
    ) -> _Frontmatter:
        if not isinstance(data, dict):
            raise SubagentSpecError(
                f"frontmatter must be a YAML mapping of keys to values, got {_type_name(data)}",
                path=path,
                line=first_line,
            )
        front = cls({}, key_lines, first_line, path)
        budget = _Budget()
        for key, value in data.items():
            if not isinstance(key, str):
                raise SubagentSpecError(
                    f"frontmatter keys must be strings, got {_type_name(key)}",
                    path=path,
                    line=first_line,
                )
            front.values[key] = _plain(value, budget, 1, front.fail_for(key))
        return front

    def fail_for(self, key: str | None) -> _Fail:
        line = self.key_lines.get(key, self.first_line) if key else None
        return _Fail(self.path, line, key)

    def required_text(self, key: str) -> str:
        if self.values.get(key) is None:
            raise SubagentSpecError(
                f"missing required key {key!r}",
                path=self.path,
                line=self.key_lines.get(key, self.first_line),
                key=key,
            )
        value = self.values[key]
        if not isinstance(value, str):
            raise self.fail_for(key)(f"expected a string, got {_type_name(value)}")
        return value

    def optional_text(self, key: str) -> str | None:
        value = self.values.get(key)
        if value is not None and not isinstance(value, str):
            raise self.fail_for(key)(f"expected a string, got {_type_name(value)}")
        return value

    def mapping_or_name(self, key: str) -> dict[str, Any] | str | None:
        value = self.values.get(key)
        if value is None or isinstance(value, dict | str):
            return value
        raise self.fail_for(key)(f"expected a mapping or a preset name, got {_type_name(value)}")

    def model_config(self) -> dict[str, Any] | str | None:
        """``model_config``, or its alias ``model_cfg``; both given must agree."""
        config = self.mapping_or_name("model_config")
        if "model_cfg" not in self.values:
            return config
        alias = self.mapping_or_name("model_cfg")
        if "model_config" in self.values and alias != config:
            raise self.fail_for("model_cfg")("model_cfg is an alias of model_config; give one")
        return alias

    def policy_metadata(self, lists: dict[str, list[str]]) -> dict[str, Any]:
        """``denied_tools``, the inherit flags and ``denied_capabilities``, when given."""
        metadata: dict[str, Any] = {}
        if "denied_tools" in self.values:
            metadata["denied_tools"] = lists["denied_tools"]
        for key in _BOOL_KEYS:
            if key in self.values:
                flag = self.values[key]
                if not isinstance(flag, bool):
                    raise self.fail_for(key)(f"expected true or false, got {_type_name(flag)}")
                metadata[key] = flag
        if "denied_capabilities" in self.values:
            metadata["denied_capabilities"] = lists["denied_capabilities"]
        return metadata

    def unknown(self) -> dict[str, Any]:
        return {key: value for key, value in self.values.items() if key not in _KNOWN_KEYS}

    def user_metadata(self) -> dict[str, Any]:
        value = self.values.get("metadata")
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.fail_for("metadata")(f"expected a mapping, got {_type_name(value)}")
        return value

    def warnings(self, repeats: Iterable[tuple[str, int]]) -> list[SubagentSpecDiagnostic]:
        """A warning per repeated key, then one per unknown key (kept in metadata)."""
        found = [
            self._warning(key, line, f"key {key!r} repeated; the last value wins")
            for key, line in repeats
        ]
        found += [
            self._warning(key, self.key_lines.get(key), f"unknown key {key!r} kept in metadata")
            for key in self.unknown()
        ]
        return found

    def _warning(self, key: str, line: int | None, what: str) -> SubagentSpecDiagnostic:
        label = self.path or "<text>"
        where = f"{label}:{line}" if line is not None else label
        return SubagentSpecDiagnostic(
            severity="warning", message=f"{where}: {what}", path=self.path, line=line, key=key
        )


def load_subagent_file(path: str | os.PathLike[str]) -> SubagentSpec:
    """Read and parse one markdown file; every failure is a :class:`SubagentSpecError`.

    The file is read as bytes, at most 1 MiB plus one byte, so an oversized
    file is refused without reading it whole.
    """
    label = os.fspath(path)
    try:
        with open(label, "rb") as handle:
            raw = handle.read(MAX_SPEC_BYTES + 1)
    except OSError as error:
        raise SubagentSpecError(
            f"cannot read file: {error.strerror or type(error).__name__}", path=label
        ) from error
    if len(raw) > MAX_SPEC_BYTES:
        raise SubagentSpecError(f"file is over the {MAX_SPEC_BYTES}-byte (1 MiB) limit", path=label)
    return parse_subagent_markdown(raw, path=label)


def load_subagent_dir(path: str | os.PathLike[str]) -> SubagentDirectory:
    """Load every ``*.md`` file directly in ``path``, in file-name order.

    Returns the specs sorted by spec name and one ``"error"`` diagnostic per
    file that failed (in file-name order), so a caller can show why an agent
    is missing. A file whose spec name repeats an earlier file's is a failure
    too (the first one wins). A symlink whose target lies outside the
    directory is not followed (an ``"error"`` diagnostic instead). Raises
    :class:`SubagentSpecError` only when the directory itself cannot be listed.
    """
    directory = Path(path)
    try:
        root = directory.resolve()
        files = sorted(
            (entry for entry in directory.iterdir() if entry.suffix == ".md" and entry.is_file()),
            key=lambda entry: entry.name,
        )
    except OSError as error:
        raise SubagentSpecError(
            f"cannot list directory: {error.strerror or type(error).__name__}",
            path=os.fspath(path),
        ) from error
    specs: dict[str, SubagentSpec] = {}
    diagnostics: list[SubagentSpecDiagnostic] = []
    for file in files:
        escape = _escaping_link(file, root)
        if escape is not None:
            diagnostics.append(spec_error_diagnostic(escape))
            continue
        try:
            spec = load_subagent_file(file)
        except SubagentSpecError as error:
            diagnostics.append(spec_error_diagnostic(error))
            continue
        if spec.name in specs:
            diagnostics.append(
                spec_error_diagnostic(
                    SubagentSpecError(
                        f"duplicate subagent name {spec.name!r} (already defined by an "
                        "earlier file); this file is ignored",
                        path=os.fspath(file),
                        line=None,
                        key="name",
                    )
                )
            )
            continue
        specs[spec.name] = spec
    return SubagentDirectory([specs[name] for name in sorted(specs)], diagnostics)


def _escaping_link(file: Path, root: Path) -> SubagentSpecError | None:
    """The error for ``file`` when it is a symlink resolving outside ``root``."""
    if not file.is_symlink():
        return None
    try:
        target = file.resolve()
    except (OSError, RuntimeError):  # a loop, or a link that cannot be read
        target = None
    if target is not None and target.is_relative_to(root):
        return None
    return SubagentSpecError(
        "symlink points outside the subagents directory; not followed",
        path=os.fspath(file),
        line=None,
        key=None,
    )


def spec_error_diagnostic(error: SubagentSpecError) -> SubagentSpecDiagnostic:
    """The ``"error"`` diagnostic describing ``error``."""
    return SubagentSpecDiagnostic(
        severity="error", message=error.message, path=error.path, line=error.line, key=error.key
    )
