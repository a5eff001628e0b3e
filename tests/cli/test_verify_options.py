"""``subagents verify`` takes the options of ``python -m properties`` and honours
``$HYPOTHESIS_PROFILE`` when ``--profile`` is not given."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "host"))

from host_helpers import REPO, cli_env

from properties import DECISIONS

pytestmark = pytest.mark.timeout(180)

OPTION = re.compile(r"(?<![\w-])(--[a-z][a-z-]*)")


def run(*args: str, profile: str | None = None) -> subprocess.CompletedProcess[str]:
    env = cli_env()
    env.pop("HYPOTHESIS_PROFILE", None)
    if profile is not None:
        env["HYPOTHESIS_PROFILE"] = profile
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=170,
        check=False,
    )


def test_verify_lists_every_option_of_python_m_properties() -> None:
    suite = run("-m", "properties", "--help")
    verify = run("-m", "subagents._cli", "verify", "--help")
    assert suite.returncode == 0 and verify.returncode == 0, suite.stderr + verify.stderr
    suite_options = set(OPTION.findall(suite.stdout)) - {"--help"}
    assert {"--store", "--machine", "--profile", "--planted", "--decisions"} <= suite_options
    assert suite_options <= set(OPTION.findall(verify.stdout))


def test_verify_prints_the_decisions() -> None:
    proc = run("-m", "subagents._cli", "verify", "--decisions")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [f"- {decision}" for decision in DECISIONS]


def test_verify_runs_the_supervisor_machine_at_the_environment_profile() -> None:
    proc = run("-m", "subagents._cli", "verify", "--machine", "supervisor", profile="dev")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert "properties: profile dev" in proc.stdout
    assert "supervisor x memory: ok" in proc.stdout  # progress, one line per run when piped
    assert "1 runs, 0 failures" in proc.stdout


def test_the_profile_flag_wins_over_the_environment() -> None:
    proc = run(
        "-m", "subagents._cli", "verify", "--machine", "fencing", "--profile", "dev", profile="x"
    )
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert "properties: profile dev" in proc.stdout
    unknown = run("-m", "subagents._cli", "verify", "--machine", "fencing", profile="nope")
    assert unknown.returncode == 2
    assert unknown.stderr.startswith("error: unknown profile 'nope'")
    assert "HYPOTHESIS_PROFILE" in unknown.stderr


def test_verify_planted_catches_the_planted_bug() -> None:
    proc = run(
        "-m", "subagents._cli", "verify", "--planted", "--machine", "fencing", "--store", "memory"
    )
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert proc.stdout.startswith("caught: fencing x ")


def test_verify_json_is_one_document_on_stdout() -> None:
    import json

    proc = run(
        "-m", "subagents._cli", "verify", "--json", "--machine", "fencing", "--profile", "dev"
    )
    assert proc.returncode == 0, proc.stderr + proc.stdout
    document = json.loads(proc.stdout)
    assert document["profile"] == "dev"
    assert document["failures"] == 0
    [only] = document["runs"]
    assert (only["machine"], only["store"], only["ok"]) == ("fencing", "memory", True)
    assert only["examples"] > 0
