"""Host TOML: good configs, defaults and path resolution (bad ones: tests/hostile/)."""

from __future__ import annotations

from pathlib import Path

import pytest
from host_helpers import REPO

from subagents._host import HostConfigError, load_host_config, parse_host_config

GOOD = '[profiles.default]\nmodel_id = "test:echo"\n'

# Every rejected configuration is a case of the hostile corpus:
# properties/reliability/_hostile/ TOML_CASES, run by tests/hostile/.


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
