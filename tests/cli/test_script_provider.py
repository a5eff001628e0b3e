"""The ``script:`` provider and ``examples/delegating.toml``: offline delegation
from ``run`` (blocking), ``worker`` (none), ``chat`` and ``serve`` (background,
with the result coming back as a continuation run), and its model grammar."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from host_helpers import REPO, StdioHost, gated_config, run_cli

from subagents import AgentBuilder, SubagentConfig
from subagents._errors import ModelResolutionError
from subagents._providers._script import make_script_model

EXAMPLE = str(REPO / "examples" / "delegating.toml")


def test_run_delegates_blocking_and_prints_the_childs_answer() -> None:
    done = run_cli("run", "--config", EXAMPLE, "collect facts on the release")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "Done: researcher answered \"researcher looked into 'collect facts on the release':"
        ' 2 sources agree".'
    )


def test_worker_has_no_subagents_to_delegate_to() -> None:
    done = run_cli("worker", "--config", EXAMPLE, "anything")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "no subagents to delegate to: anything"


def test_chat_delegates_in_the_background_and_shows_the_late_result() -> None:
    done = run_cli("chat", "--config", EXAMPLE, stdin="look into leases\n")
    assert done.returncode == 0, done.stderr
    flat = " ".join(done.stdout.split())
    assert "parent> Done: delegate accepted." in flat
    assert "background result from researcher" in flat
    assert "researcher looked into 'look into leases': 2 sources agree" in flat


def test_serve_delegates_in_the_background_and_continues_once(tmp_path: Path) -> None:
    # The researcher answers once released, after its parent's run completed: ended
    # while that run was live, its result would be handed over in-band instead.
    gates = tmp_path / "gates"
    gates.mkdir()
    host = StdioHost(
        "--config",
        str(gated_config(tmp_path)),
        "--data-dir",
        str(tmp_path / "data"),
        env={"SUBAGENTS_SCRIPT_GATES": str(gates)},
    )
    try:
        host.result("session.create", {"session_id": "s1"})
        host.result("events.subscribe", {"session_id": "s1"})
        parent = host.result("run.start", {"session_id": "s1", "input": "collect facts"})

        def completed(frame: dict[str, object]) -> bool:
            event = frame["params"]["event"]  # type: ignore[index]
            return bool(event["kind"] == "run.completed")  # type: ignore[index]

        first = host.wait_notification(completed)["params"]["event"]
        assert first["run_id"] == parent["run_id"]
        assert first["data"]["output"] == "Done: delegate accepted."
        (gates / "researcher.release").touch()
        later = host.wait_notification(completed)["params"]["event"]
        assert later["data"]["output"] == (
            "continued after researcher: researcher: findings ready (3 sources, 1 open question)"
        )
        runs = host.result("run.list", {"session_id": "s1"})["runs"]
        assert [r["trigger_type"] for r in runs] == ["rpc", "async_subagent_result"]
    finally:
        (gates / "researcher.release").touch()
        host.close()


def test_the_parent_waits_steers_and_cancels_on_cue_in_process() -> None:
    child = AgentBuilder(make_script_model("worker=researcher", {"seconds": 0})).build()
    parent = (
        AgentBuilder(make_script_model("parent", {}))
        .subagent(SubagentConfig("researcher", child))
        .build()
    )
    # Blocking delegation: no background tools, so the cues add nothing.
    result = asyncio.run(parent.run("wait, steer and cancel this"))
    assert result.output.startswith("Done: researcher answered")


@pytest.mark.parametrize(
    ("name", "settings"),
    [("nope", {}), ("worker", {}), ("gated=a,b", {}), ("worker=x", {"seconds": -1})],
)
def test_a_bad_script_model_is_a_typed_error(name: str, settings: dict[str, object]) -> None:
    with pytest.raises(ModelResolutionError) as info:
        make_script_model(name, settings)
    assert info.value.fields["provider"] == "script"
    assert "script:parent" in info.value.fields["known"]
