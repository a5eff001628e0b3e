"""Host TOML: a table of bad configs, each with the key it names and its message."""

from __future__ import annotations

from pathlib import Path

import pytest
from host_helpers import REPO

from subagents._host import HostConfigError, load_host_config, parse_host_config

GOOD = '[profiles.default]\nmodel_id = "test:echo"\n'

BAD: list[tuple[str, str, str | None, str]] = [
    # (id, toml, key, message fragment)
    ("not-toml", "x = ", None, "not valid TOML"),
    ("no-profiles", "[host]\n", "profiles", "no profile defined"),
    ("unknown-top", GOOD + "[bogus]\n", "bogus", "unknown key"),
    ("unknown-host-key", GOOD + "[host]\nport = 1\n", "host.port", "unknown key"),
    ("host-type", GOOD + '[host]\nlease_ttl = "x"\n', "host.lease_ttl", "expected a number"),
    ("lease-ttl", GOOD + "[host]\nlease_ttl = 0.0\n", "host.lease_ttl", "positive"),
    ("max-request", GOOD + "[host]\nmax_request_bytes = 10\n", "host.max_request_bytes", "1024"),
    ("max-batch", GOOD + "[host]\nmax_batch = 0\n", "host.max_batch", "at least 1"),
    ("namespace", GOOD + '[host]\nnamespace = "a b"\n', "host.namespace", "not a valid name"),
    ("profile-not-table", "profiles = 3\n", "profiles", "expected a table"),
    ("profile-entry-type", "[profiles]\ndefault = 3\n", "profiles.default", "expected a table"),
    ("model-type", "[profiles.default]\nmodel_id = 1\n", "profiles.default.model_id", "string"),
    ("model-missing", "[profiles.default]\n", "profiles.default.model_id", "missing required"),
    (
        "model-no-provider",
        '[profiles.default]\nmodel_id = "gpt"\n',
        "profiles.default.model_id",
        "is not 'provider:model'",
    ),
    (
        "model-unknown-provider",
        '[profiles.default]\nmodel_id = "nope:x"\n',
        "profiles.default.model_id",
        "unknown model provider 'nope'",
    ),
    (
        "profile-typo",
        '[profiles.default]\nmodel_id = "test:echo"\nmodelid = 1\n',
        "profiles.default.modelid",
        "unknown key",
    ),
    (
        "instructions-type",
        '[profiles.default]\nmodel_id = "test:echo"\ninstructions = [1]\n',
        "profiles.default.instructions[0]",
        "string",
    ),
    (
        "unknown-subagent",
        '[profiles.default]\nmodel_id = "test:echo"\nsubagents = ["ghost"]\n',
        "profiles.default.subagents[0]",
        "unknown subagent 'ghost'",
    ),
    (
        "duplicate-subagent",
        GOOD + 'subagents = ["r", "r"]\n[subagents.r]\nprofile = "default"\n',
        "profiles.default.subagents",
        "twice",
    ),
    (
        "subagent-no-profile",
        GOOD + '[subagents.r]\ndescription = "x"\n',
        "subagents.r.profile",
        "missing required",
    ),
    (
        "subagent-unknown-profile",
        GOOD + '[subagents.r]\nprofile = "ghost"\n',
        "subagents.r.profile",
        "unknown profile 'ghost'",
    ),
    (
        "subagent-tools-type",
        GOOD + '[subagents.r]\nprofile = "default"\nrequired_tools = "grep"\n',
        "subagents.r.required_tools",
        "expected a list",
    ),
    (
        "default-profile",
        GOOD + '[host]\ndefault_profile = "ghost"\n',
        "host.default_profile",
        "unknown profile 'ghost'",
    ),
]


@pytest.mark.parametrize(("text", "key", "fragment"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_config_names_file_key_and_problem(text: str, key: str | None, fragment: str) -> None:
    with pytest.raises(HostConfigError) as info:
        parse_host_config(text, source="host.toml")
    err = info.value
    assert err.key == key
    assert fragment in err.problem
    assert str(err).startswith(f"host.toml: {key}: " if key else "host.toml: ")
    assert err.fix  # every error says how to fix it
    assert "Traceback" not in str(err)


def test_good_config_and_defaults() -> None:
    config = parse_host_config(
        GOOD + 'instructions = "be brief"\nsubagents = ["r"]\n'
        '[profiles.child]\nmodel_id = "test:text=x"\nsubagents = ["r"]\n'
        '[subagents.r]\nprofile = "child"\nrequired_tools = ["grep"]\n'
    )
    assert config.host.namespace == "default"
    assert config.profiles["default"].instruction_list() == ["be brief"]
    assert config.subagents["r"].required_tools == ["grep"]
    assert config.child_profiles() == {"child"}


def test_file_errors(tmp_path: Path) -> None:
    with pytest.raises(HostConfigError, match="file not found"):
        load_host_config(tmp_path / "missing.toml")
    binary = tmp_path / "bin.toml"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(HostConfigError, match="not UTF-8"):
        load_host_config(binary)


def test_relative_paths_resolve_against_the_file(tmp_path: Path) -> None:
    path = tmp_path / "h.toml"
    path.write_text(GOOD + '[host]\ndata_dir = "data"\n')
    config = load_host_config(path)
    assert config.data_dir() == tmp_path.resolve() / "data"
    assert config.source == str(path)


def test_example_host_toml_loads_offline() -> None:
    config = load_host_config(REPO / "examples" / "host.toml")
    assert config.profiles["default"].subagents == ["research", "summarize"]
    assert all(p.model_id.startswith("test:") for p in config.profiles.values())
