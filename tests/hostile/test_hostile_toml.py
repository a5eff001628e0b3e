"""Hostile host configurations: each one a HostConfigError naming the file, the key
and a fix; never another exception (deep nesting and huge integers included)."""

from __future__ import annotations

from pathlib import Path

import pytest

from properties.reliability._hostile import TOML_CASES, TomlCase, check_toml


@pytest.mark.parametrize("case", TOML_CASES, ids=[case.name for case in TOML_CASES])
def test_a_hostile_host_config_is_a_host_config_error_naming_key_and_fix(
    case: TomlCase, tmp_path: Path
) -> None:
    assert check_toml(case, tmp_path) == []


def test_an_accepted_config_is_a_violation(tmp_path: Path) -> None:
    good = TomlCase("valid", '[profiles.default]\nmodel_id = "test:echo"\n', None, "x")

    assert check_toml(good, tmp_path) == ["toml[valid]: accepted, expected 'x'"]
