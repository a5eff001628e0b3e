"""The command line's own errors are ``SubagentsError``s that carry the fix they print."""

from __future__ import annotations

import pytest

from statemachines import SubagentsError
from subagents._cli import main
from subagents._cli._common import EXIT_USAGE, CliError
from subagents._cli._demo import DemoError


def test_a_demo_error_is_a_cli_error_under_the_root_with_a_default_fix() -> None:
    error = DemoError("host demo-host-1 is gone")
    assert isinstance(error, CliError)
    assert isinstance(error, SubagentsError)
    assert (error.message, error.fix) == (
        "host demo-host-1 is gone",
        "rerun with a fresh --data-dir",
    )
    assert error.fields == {"fix": "rerun with a fresh --data-dir"}


def test_a_fixable_error_prints_the_message_and_the_fix_and_exits_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["verify", "--profile", "nope"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "error: unknown profile 'nope'" in err
    assert "fix: use one of:" in err
    assert "Traceback" not in err
