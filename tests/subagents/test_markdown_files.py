"""Markdown subagent files: the accepted format, every rejected input, directory loading."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest

from subagents import (
    AgentConfigError,
    PayloadError,
    SubagentSpec,
    SubagentSpecDiagnostic,
    SubagentSpecError,
    load_subagent_dir,
    load_subagent_file,
    parse_subagent_markdown,
    spec_error_diagnostic,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "agents"
MIB = 1024 * 1024
MINIMAL = "---\nname: helper\ndescription: Helps\n---\nBe helpful.\n"


# ------------------------------------------------------------------ accepted format


def test_a_minimal_file_needs_only_name_and_description() -> None:
    spec = parse_subagent_markdown(MINIMAL)

    assert spec == SubagentSpec(name="helper", description="Helps", system_prompt="Be helpful.")
    assert spec.warnings == []


def test_a_bom_leading_whitespace_and_crlf_line_ends_are_accepted() -> None:
    text = (
        "\ufeff\n  \r\n---\r\nname: helper\r\ndescription: Helps\r\n---\r\n"
        "\r\nLine one.\r\nLine two.\r\n"
    )

    spec = parse_subagent_markdown(text)

    assert spec.name == "helper"
    assert spec.system_prompt == "Line one.\nLine two."


def test_bytes_are_decoded_as_utf8() -> None:
    spec = parse_subagent_markdown("---\nname: hélper\ndescription: ✓\n---\n".encode())

    assert (spec.name, spec.description) == ("hélper", "✓")


def test_the_frontmatter_ends_at_the_first_fence_line_and_the_body_is_trimmed() -> None:
    spec = parse_subagent_markdown(
        "---   \nname: helper\ndescription: Helps\n---  \n\n  Intro.\n\n---\n\nMore.\n\n"
    )

    assert spec.system_prompt == "Intro.\n\n---\n\nMore."


def test_tool_lists_accept_a_list_or_a_comma_separated_string() -> None:
    spec = parse_subagent_markdown(
        "---\nname: a\ndescription: b\ntools: ' grep ,, view , grep'\n"
        "optional_tools: [edit, ' shell ', edit, '']\n---\n"
    )

    assert spec.tools == ["grep", "view"]
    assert spec.optional_tools == ["edit", "shell"]


def test_null_or_absent_optional_keys_take_their_defaults() -> None:
    spec = parse_subagent_markdown(
        "---\nname: a\ndescription: b\ntools:\ninstruction: null\nmodel: ~\nmetadata:\n---\n"
    )

    assert (spec.tools, spec.instruction, spec.model, spec.metadata) == ([], None, None, {})


def test_policy_keys_go_to_metadata_then_unknown_keys_then_the_users_metadata_wins() -> None:
    spec = parse_subagent_markdown(
        "---\nname: a\ndescription: b\ndenied_tools: shell\ninherit_hooks: true\n"
        "inherit_capabilities: false\ndenied_capabilities: [telemetry]\ncolor: red\n"
        "metadata:\n  color: blue\n  team: core\n  inherit_hooks: false\n---\n"
    )

    assert spec.metadata == {
        "denied_tools": ["shell"],
        "inherit_hooks": False,
        "inherit_capabilities": False,
        "denied_capabilities": ["telemetry"],
        "color": "blue",
        "team": "core",
    }
    assert spec.denied_tools() == ["shell"]
    assert spec.denied_capabilities() == ["telemetry"]


def test_unknown_keys_are_kept_and_reported_as_warnings_with_their_line() -> None:
    spec = parse_subagent_markdown(
        "---\nname: a\ndescription: b\ncolour: red\nmax_turns: 3\n---\n", path="agents/a.md"
    )

    assert spec.metadata == {"colour": "red", "max_turns": 3}
    assert spec.warnings == [
        SubagentSpecDiagnostic(
            severity="warning",
            message="agents/a.md:4: unknown key 'colour' kept in metadata",
            path="agents/a.md",
            line=4,
            key="colour",
        ),
        SubagentSpecDiagnostic(
            severity="warning",
            message="agents/a.md:5: unknown key 'max_turns' kept in metadata",
            path="agents/a.md",
            line=5,
            key="max_turns",
        ),
    ]


def test_a_repeated_key_keeps_its_last_value_and_is_reported() -> None:
    spec = parse_subagent_markdown(
        "---\nname: first\ndescription: b\ntools: grep\nname: second\n---\n"
    )

    assert spec.name == "second"
    assert [(w.key, w.line, w.message) for w in spec.warnings] == [
        ("name", 5, "<text>:5: key 'name' repeated; the last value wins")
    ]


def test_model_settings_and_config_are_mappings_or_preset_names() -> None:
    spec = parse_subagent_markdown(
        "---\nname: a\ndescription: b\nmodel: test:echo\ninstruction: Use for X\n"
        "model_settings:\n  temperature: 0.2\nmodel_config: fast\n---\n"
    )

    assert spec.model == "test:echo"
    assert spec.instruction == "Use for X"
    assert spec.model_settings == {"temperature": 0.2}
    assert spec.model_config == "fast"


def test_yaml_dates_become_iso_strings_so_the_spec_stays_json() -> None:
    spec = parse_subagent_markdown(
        "---\nname: a\ndescription: b\nmetadata:\n  reviewed: 2024-05-01\n---\n"
    )

    assert spec.metadata == {"reviewed": "2024-05-01"}


def test_a_few_aliases_are_fine() -> None:
    spec = parse_subagent_markdown(
        "---\nname: a\ndescription: b\ntools: &t [grep, view]\noptional_tools: *t\n---\n"
    )

    assert spec.optional_tools == ["grep", "view"]


def test_a_spec_round_trips_through_plain_values() -> None:
    spec = parse_subagent_markdown(
        "---\nname: a\ndescription: b\ntools: grep\nmodel_settings: {t: 1}\n"
        "extra: [1, {x: y}]\n---\nP"
    )

    value = spec.to_value()

    assert SubagentSpec.from_value(value) == spec
    assert value["warnings"][0]["key"] == "extra"


def test_a_malformed_spec_value_is_a_payload_error() -> None:
    with pytest.raises(PayloadError):
        SubagentSpec.from_value({"name": "a"})


# ------------------------------------------------------------------ rejected input
# Every rejected input (missing or unterminated frontmatter, bad YAML, object tags,
# alias bombs, deep nesting, bad UTF-8, oversized files ...) is a case of the hostile
# corpus: properties/reliability/_hostile/ MARKDOWN_CASES, run by tests/hostile/.


def test_a_spec_error_is_a_config_error_that_pickles_and_labels_bare_text() -> None:
    with pytest.raises(SubagentSpecError) as raised:
        parse_subagent_markdown("---\nname: a\n---\n")

    error = raised.value
    assert isinstance(error, AgentConfigError)
    assert str(error) == "<text>:2: key 'description': missing required key 'description'"
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.reason, copy.path, copy.line, copy.key, str(copy)) == (
        error.reason,
        error.path,
        error.line,
        error.key,
        str(error),
    )


def test_something_that_is_neither_text_nor_bytes_is_a_spec_error() -> None:
    bad: Any = 42
    with pytest.raises(SubagentSpecError, match="expected markdown text or bytes"):
        parse_subagent_markdown(bad)


def test_exactly_one_mib_is_accepted() -> None:
    head = b"---\nname: a\ndescription: b\n---\n"
    spec = parse_subagent_markdown(head + b"x" * (MIB - len(head)))

    assert len(spec.system_prompt) == MIB - len(head)


# ------------------------------------------------------------------ files and directories


def test_the_example_agents_load_without_warnings_or_failures() -> None:
    loaded = load_subagent_dir(EXAMPLES)

    assert [spec.name for spec in loaded.specs] == ["debugger", "researcher", "reviewer"]
    assert loaded.diagnostics == []
    assert all(spec.warnings == [] and spec.model == "inherit" for spec in loaded.specs)


def test_a_directory_load_returns_sorted_specs_and_one_diagnostic_per_failed_file(
    tmp_path: Path,
) -> None:
    (tmp_path / "b.md").write_text("---\nname: zed\ndescription: last\n---\n")
    (tmp_path / "a.md").write_text("---\nname: alpha\ndescription: first\n---\n")
    (tmp_path / "c.md").write_text("no frontmatter here")
    (tmp_path / "d.md").write_bytes(b"---\nname: \xfe\n---\n")
    (tmp_path / "e.md").write_text("---\nname: alpha\ndescription: again\n---\n")
    (tmp_path / "notes.txt").write_text("ignored")
    (tmp_path / "dir.md").mkdir()

    specs, diagnostics = load_subagent_dir(tmp_path)

    assert [(spec.name, spec.description) for spec in specs] == [
        ("alpha", "first"),
        ("zed", "last"),
    ]
    assert [(Path(d.path or "").name, d.severity, d.line, d.key) for d in diagnostics] == [
        ("c.md", "error", 1, None),
        ("d.md", "error", 2, None),
        ("e.md", "error", None, "name"),
    ]
    assert "missing frontmatter" in diagnostics[0].message
    assert "not valid UTF-8" in diagnostics[1].message
    assert "duplicate subagent name 'alpha'" in diagnostics[2].message
    assert diagnostics[0].message.startswith(str(tmp_path / "c.md") + ":1: ")


def test_a_missing_directory_is_a_spec_error(tmp_path: Path) -> None:
    with pytest.raises(SubagentSpecError, match="cannot list directory"):
        load_subagent_dir(tmp_path / "absent")


def test_an_unreadable_or_oversized_file_is_a_spec_error(tmp_path: Path) -> None:
    big = tmp_path / "big.md"
    big.write_bytes(b"---\n" + b"x" * MIB)

    with pytest.raises(SubagentSpecError, match="cannot read file"):
        load_subagent_file(tmp_path / "absent.md")
    with pytest.raises(SubagentSpecError, match="1 MiB") as raised:
        load_subagent_file(big)
    assert raised.value.path == str(big)


def test_a_spec_error_converts_to_an_error_diagnostic() -> None:
    error = SubagentSpecError("bad", path="x.md", line=3, key="tools")

    assert spec_error_diagnostic(error) == SubagentSpecDiagnostic(
        severity="error", message="x.md:3: key 'tools': bad", path="x.md", line=3, key="tools"
    )


# ------------------------------------------------------------------ model_cfg


def test_the_model_cfg_key_names_the_model_config_preset() -> None:
    from subagents import project_subagent_spec

    spec = parse_subagent_markdown(
        "---\nname: helper\ndescription: Helps\nmodel: test:echo\nmodel_cfg: fast\n---\nHi.\n"
    )

    assert spec.model_config == "fast"
    assert spec.warnings == []
    assert "model_cfg" not in spec.metadata
    preset = project_subagent_spec(spec).agent_spec.model
    assert preset is not None
    assert preset.config_preset == "fast"


def test_model_cfg_and_model_config_that_disagree_are_refused_naming_the_key() -> None:
    with pytest.raises(SubagentSpecError) as raised:
        parse_subagent_markdown(
            "---\nname: helper\ndescription: Helps\nmodel_config: slow\nmodel_cfg: fast\n---\n"
        )

    assert raised.value.key == "model_cfg"
    assert "alias of model_config" in raised.value.message


# ------------------------------------------------------------------ names and symlinks


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ('"a\\0b"', "U+0000"),
        ('"evil\\u202Egpj.md"', "U+202E"),
        ('"x\\u2066y"', "U+2066"),
        ('"tab\\there"', "U+0009"),
        ("../escape", "no path separators"),
        ("a/b", "no path separators"),
        ('"a\\\\b"', "no path separators"),
        ("..", "no path separators"),
        ("delegate", "delegation tool's name"),
        ("steer_subagent", "delegation tool's name"),
        ("cancel_subagent", "delegation tool's name"),
        ("wait_subagent", "delegation tool's name"),
        ("subagent_info", "delegation tool's name"),
    ],
)
def test_unsafe_or_reserved_names_are_refused_at_the_name_line(name: str, reason: str) -> None:
    text = f"---\ndescription: Helps\nname: {name}\n---\nBody\n"
    with pytest.raises(SubagentSpecError) as caught:
        parse_subagent_markdown(text, path="agents/x.md")
    error = caught.value
    assert (error.path, error.line, error.key) == ("agents/x.md", 3, "name")
    assert reason in error.reason


def test_the_reserved_names_cover_every_delegation_tool() -> None:
    from subagents._delegation._background_tools import (
        CANCEL_SUBAGENT_TOOL_NAME,
        DELEGATE_TOOL_NAME,
        SPAWN_DELEGATE_TOOL_NAME,
        STEER_SUBAGENT_TOOL_NAME,
        SUBAGENT_INFO_TOOL_NAME,
        WAIT_SUBAGENT_TOOL_NAME,
    )
    from subagents._specs._markdown import RESERVED_SUBAGENT_NAMES

    assert {
        DELEGATE_TOOL_NAME,
        SPAWN_DELEGATE_TOOL_NAME,
        STEER_SUBAGENT_TOOL_NAME,
        CANCEL_SUBAGENT_TOOL_NAME,
        WAIT_SUBAGENT_TOOL_NAME,
        SUBAGENT_INFO_TOOL_NAME,
    } <= RESERVED_SUBAGENT_NAMES


def test_ordinary_names_with_letters_digits_dashes_and_accents_are_kept() -> None:
    for name in ("code-reviewer", "research_2", "débogueur", "delegate-helper"):
        spec = parse_subagent_markdown(f"---\nname: {name}\ndescription: d\n---\n")
        assert spec.name == name


def test_a_symlink_pointing_outside_the_directory_is_not_followed(tmp_path: Path) -> None:
    agents = tmp_path / "agents"
    agents.mkdir()
    outside = tmp_path / "secret.md"
    outside.write_text("---\nname: outsider\ndescription: d\n---\n")
    (agents / "inside.md").write_text("---\nname: insider\ndescription: d\n---\n")
    (agents / "link-in.md").symlink_to(agents / "inside.md")
    (agents / "link-out.md").symlink_to(outside)
    (agents / "link-up.md").symlink_to(Path("..") / "secret.md")

    found = load_subagent_dir(agents)

    assert [spec.name for spec in found.specs] == ["insider"]
    by_path = {Path(d.path or "").name: d for d in found.diagnostics}
    assert set(by_path) == {"link-in.md", "link-out.md", "link-up.md"}
    assert "duplicate subagent name" in by_path["link-in.md"].message
    for name in ("link-out.md", "link-up.md"):
        assert by_path[name].severity == "error"
        assert "symlink points outside the subagents directory" in by_path[name].message
