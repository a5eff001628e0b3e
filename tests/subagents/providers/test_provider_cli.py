"""``subagents run`` with a host profile pointed at an OpenAI-compatible or Anthropic server."""

from __future__ import annotations

from pathlib import Path

import pytest
from fake_provider_server import FakeProviderServer
from provider_cases import API_KEY, ProviderCase

from subagents._cli import main


def _host_toml(tmp_path: Path, model_id: str, settings: str) -> Path:
    path = tmp_path / "host.toml"
    path.write_text(
        "[profiles.default]\n"
        f'model_id = "{model_id}"\n'
        'instructions = "Be brief."\n'
        f"model_settings = {{ {settings} }}\n"
    )
    return path


def test_a_one_shot_run_uses_the_profiles_provider_and_base_url(
    case: ProviderCase,
    server: FakeProviderServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    server.script(case.reply("text"))
    config = _host_toml(
        tmp_path,
        f"{case.provider}:test-model",
        f'base_url = "{case.base_url(server)}", api_key = "{API_KEY}", temperature = 0.0',
    )

    code = main(["run", "--config", str(config), "What is the capital of France?"])

    assert code == 0
    assert capsys.readouterr().out == "Paris is the capital of France.\n"
    assert server.requests[0].path == case.path
    assert server.bodies()[0]["temperature"] == 0.0


def test_a_one_shot_run_without_a_key_says_which_variable_to_set(
    case: ProviderCase,
    server: FakeProviderServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = _host_toml(
        tmp_path, f"{case.provider}:test-model", f'base_url = "{case.base_url(server)}"'
    )

    code = main(["run", "--config", str(config), "hi"])

    assert code != 0
    assert case.env_var in capsys.readouterr().err
    assert server.requests == []
