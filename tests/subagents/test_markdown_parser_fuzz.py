"""Fuzz: ``parse_subagent_markdown`` returns a spec or raises ``SubagentSpecError``, nothing else.

Budgets come from the active Hypothesis profile (``HYPOTHESIS_PROFILE``;
``ci`` by default, loaded by ``tests/conftest.py``). Inputs range from
arbitrary text and bytes to frontmatter assembled from YAML fragments (tags,
anchors, aliases, flow and block collections, odd scalars) and byte-level
mutations of the example agents, so the YAML paths are exercised, not only
the "missing frontmatter" one. Every spec that does parse must round-trip
through ``to_value`` / ``from_value``.
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import example, given
from hypothesis import strategies as st

from subagents import SubagentSpec, SubagentSpecError, parse_subagent_markdown

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples" / "agents").glob("*.md"))
EXAMPLE_BYTES = [path.read_bytes() for path in EXAMPLES]

KEYS = [
    "name",
    "description",
    "instruction",
    "tools",
    "optional_tools",
    "denied_tools",
    "denied_capabilities",
    "inherit_hooks",
    "inherit_capabilities",
    "model",
    "model_settings",
    "model_config",
    "metadata",
    "extra",
    "1",
    "? [a]",
    "<<",
]
SCALARS = [
    "a",
    "grep, view",
    "''",
    '"x\\ty"',
    "~",
    "null",
    "true",
    "no",
    "3",
    "0x1f",
    "1e400",
    ".nan",
    "-.inf",
    "2001-02-30",
    "2024-01-01T10:00:00Z",
    "9" * 50,
    "!!binary aGk=",
    "!!python/object/apply:os.system ['x']",
    "!Custom v",
    "!!set {a, b}",
    "!!omap [a: 1]",
    "&anchor v",
    "*anchor",
    "*missing",
    "|\n  block\n  text",
    ">-\n  folded",
    "{a: 1, b: [2, 3]}",
    "[grep, {x: [y]}]",
    "[[[[[]]]]]",
    "'unterminated",
    "[unclosed",
    ": colon",
    "- item",
    "\t",
    "%YAML 1.1",
    "---",
    "...",
]


PRINTABLE = st.characters(categories=["L", "N", "P", "S", "Zs"])


def _check(source: str | bytes) -> None:
    try:
        spec = parse_subagent_markdown(source, path="fuzz.md")
    except SubagentSpecError as error:
        assert error.path == "fuzz.md"
        assert str(error).startswith("fuzz.md")
        assert error.line is None or error.line >= 1
        # The parser's own safety net must never fire: that would be a bug, not bad input.
        assert not error.reason.startswith("unexpected parser failure"), error.reason
        return
    assert isinstance(spec, SubagentSpec)
    assert spec.name.strip() == spec.name and spec.name
    assert all(name and isinstance(name, str) for name in [*spec.tools, *spec.optional_tools])
    assert SubagentSpec.from_value(spec.to_value()) == spec


@st.composite
def _frontmatter(draw: st.DrawFn) -> str:
    lines = []
    if draw(st.booleans()):
        lines += ["name: fuzz", "description: fuzzed"]
    for _ in range(draw(st.integers(0, 8))):
        key = draw(st.sampled_from(KEYS) | st.text(PRINTABLE, max_size=8) | st.text(max_size=8))
        value = draw(
            st.sampled_from(SCALARS) | st.text(PRINTABLE, max_size=20) | st.text(max_size=20)
        )
        indent = draw(st.sampled_from(["", "", "  ", "- "]))
        lines.append(f"{indent}{key}: {value}")
    body = draw(st.text(max_size=40))
    newline = draw(st.sampled_from(["\n", "\r\n"]))
    prefix = draw(st.sampled_from(["", "\ufeff", "\n  \n", "\ufeff\r\n"]))
    closing = draw(st.sampled_from(["---", "---", "---", "---  ", "", "--- x"]))
    return prefix + newline.join(["---", *lines, closing, body])


@st.composite
def _mutated_example(draw: st.DrawFn) -> bytes:
    data = bytearray(draw(st.sampled_from(EXAMPLE_BYTES)))
    for _ in range(draw(st.integers(1, 6))):
        position = draw(st.integers(0, len(data)))
        action = draw(st.sampled_from(["insert", "delete", "replace"]))
        chunk = draw(st.binary(min_size=1, max_size=4))
        if action == "insert":
            data[position:position] = chunk
        elif action == "delete":
            del data[position : position + len(chunk)]
        else:
            data[position : position + len(chunk)] = chunk
    return bytes(data)


@given(st.text())
@example("")
@example("---")
@example("---\n---")
@example("\ufeff---\r\nname: a\r\ndescription: b\r\n---\r\n")
def test_arbitrary_text_yields_a_spec_or_a_spec_error(text: str) -> None:
    _check(text)


@given(st.binary())
@example(b"\xff\xfe---\n")
@example(b"---\nname: \xc3\n---\n")
def test_arbitrary_bytes_yield_a_spec_or_a_spec_error(data: bytes) -> None:
    _check(data)


@given(st.text().map(lambda body: "---\n" + body + "\n---\n"))
def test_arbitrary_frontmatter_text_yields_a_spec_or_a_spec_error(text: str) -> None:
    _check(text)


@given(_frontmatter())
@example("---\nname: &a [*a]\n---\n")
@example("---\nname: a\ndescription: b\n<<: {tools: x}\n---\n")
def test_frontmatter_built_from_yaml_fragments_yields_a_spec_or_a_spec_error(text: str) -> None:
    _check(text)


@given(_mutated_example())
def test_mutated_example_agents_yield_a_spec_or_a_spec_error(data: bytes) -> None:
    _check(data)
    _check(data.decode("utf-8", "replace"))
