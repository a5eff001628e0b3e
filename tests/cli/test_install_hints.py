"""The install hints are exact: the command printed for a missing extra (the
PostgreSQL driver, a provider SDK) names that extra's declared requirements and
runs as printed (checked with pip itself, offline), from a clone or an install."""

from __future__ import annotations

import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from storage._postgres import DriverMissing
from subagents._cli._common import fix_for
from subagents._errors import ProviderNotInstalled
from subagents._host._datadir import store_url_error
from subagents._providers import _common
from subagents._providers._common import extra_requirements, import_sdk, install_command

ROOT = Path(__file__).resolve().parents[2]
DECLARED = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
EXTRAS = ("postgres", "openai", "anthropic")


@pytest.mark.parametrize("extra", EXTRAS)
def test_the_command_installs_exactly_the_declared_requirements(extra: str) -> None:
    command = install_command(extra)
    assert shlex.split(command) == ["pip", "install", *DECLARED[extra]]


@pytest.mark.parametrize("extra", EXTRAS)
def test_an_installed_copy_reads_the_same_requirements_from_its_metadata(
    extra: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(_common, "_SOURCE_ROOT", tmp_path)  # no pyproject.toml here
    assert sorted(extra_requirements(extra)) == sorted(DECLARED[extra])


def test_pip_accepts_each_printed_command_as_it_is() -> None:
    # The dev environment has every extra installed: pip must find each one satisfied.
    for extra in EXTRAS:
        args = shlex.split(install_command(extra))[2:]
        done = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--dry-run", "--no-index", "--no-deps", *args],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.count("Requirement already satisfied") == len(args), done.stdout


def test_a_missing_postgres_driver_prints_the_command() -> None:
    error = store_url_error(DriverMissing("no driver", extra="postgres"), "postgresql://u@h/db")
    assert error.fix == install_command("postgres")
    assert "subagents[" not in error.fix


def test_a_missing_provider_sdk_names_the_command_in_message_and_fix() -> None:
    with pytest.raises(ProviderNotInstalled) as info:
        import_sdk("no_such_sdk_module_xyz", provider="openai-chat", extra="openai")
    assert info.value.message.endswith(install_command("openai"))
    assert fix_for(info.value) == f"pip install '{DECLARED['openai'][0]}'"
