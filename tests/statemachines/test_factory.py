"""Runtime machines built from the tables, and their mermaid diagrams."""

from __future__ import annotations

import re
from typing import Any

import pytest

from statemachines import (
    EXECUTION,
    MACHINES,
    InvalidTransition,
    MachineSpec,
    all_mermaid,
    build_machine,
    to_mermaid,
)


class Recorder:
    """A plain model that records every ``on_enter_<state>`` callback.

    ``transitions`` only binds bound methods named ``on_enter_<state>``, so
    one such method per state of every machine is defined on the class below.
    """

    state: str

    def __init__(self, spec: MachineSpec) -> None:
        self.spec = spec
        self.entered: list[str] = []

    def _record(self, state: str) -> None:
        self.entered.append(state)


def _enter_method(state: str) -> Any:
    def on_enter(self: Recorder) -> None:
        self._record(state)

    return on_enter


for _state in sorted({s for spec in MACHINES for s in spec.states}):
    setattr(Recorder, f"on_enter_{_state}", _enter_method(_state))


def _ids(spec: MachineSpec) -> str:
    return spec.name


@pytest.mark.parametrize("spec", MACHINES, ids=_ids)
def test_a_machine_starts_in_the_initial_state(spec: MachineSpec) -> None:
    model = Recorder(spec)
    build_machine(spec, model)
    assert model.state == spec.initial


@pytest.mark.parametrize("spec", MACHINES, ids=_ids)
def test_every_table_row_moves_a_built_machine_from_source_to_dest(spec: MachineSpec) -> None:
    for row in spec.transitions:
        model = Recorder(spec)
        build_machine(spec, model, initial=row.source)
        assert getattr(model, row.trigger)() is True
        assert model.state == row.dest
        assert model.entered == [row.dest]


@pytest.mark.parametrize("spec", MACHINES, ids=_ids)
def test_a_trigger_the_table_does_not_allow_raises_invalid_transition(spec: MachineSpec) -> None:
    allowed = {(t.trigger, t.source) for t in spec.transitions}
    refused = 0
    for trigger in spec.triggers():
        for state in spec.states:
            if (trigger, state) in allowed:
                continue
            model = Recorder(spec)
            build_machine(spec, model, initial=state)
            with pytest.raises(InvalidTransition) as info:
                getattr(model, trigger)()
            fields = info.value.fields
            assert (fields["machine"], fields["source"]) == (spec.name, state)
            assert fields["trigger"] == trigger
            assert model.state == state
            assert model.entered == []
            refused += 1
    assert refused > 0


@pytest.mark.parametrize("spec", MACHINES, ids=_ids)
def test_machines_have_no_auto_transitions(spec: MachineSpec) -> None:
    model = Recorder(spec)
    build_machine(spec, model)
    for state in spec.states:
        assert not hasattr(model, f"to_{state}")


@pytest.mark.parametrize("spec", MACHINES, ids=_ids)
def test_restoring_a_persisted_state_runs_no_on_enter_callback(spec: MachineSpec) -> None:
    for state in spec.states:
        model = Recorder(spec)
        build_machine(spec, model, initial=state)
        assert model.state == state
        assert model.entered == []


def test_restoring_an_unknown_state_is_refused() -> None:
    with pytest.raises(InvalidTransition):
        build_machine(EXECUTION, Recorder(EXECUTION), initial="exploded")


def test_a_full_execution_path_drives_one_model() -> None:
    model = Recorder(EXECUTION)
    build_machine(EXECUTION, model)
    for trigger in ("start", "run", "wait", "run", "complete"):
        getattr(model, trigger)()
    assert model.state == "completed"
    assert model.entered == ["starting", "running", "waiting", "running", "completed"]
    with pytest.raises(InvalidTransition):
        model.cancel()  # type: ignore[attr-defined]


# -- mermaid ------------------------------------------------------------------------------

_STATE = r"[A-Za-z_][A-Za-z0-9_]*"
_EDGE = re.compile(
    rf"^  (?P<src>{_STATE}|\[\*\]) --> (?P<dst>{_STATE}|\[\*\])(?:: (?P<label>\S.*))?$"
)
_COMMENT = re.compile(r"^  %%.*$")


def _parse_mermaid(text: str) -> tuple[set[tuple[str, str, str | None]], set[str]]:
    """A small stateDiagram-v2 reader: header, comments and edges only."""
    assert text.endswith("\n")
    lines = text.splitlines()
    assert lines[0] == "stateDiagram-v2"
    edges: set[tuple[str, str, str | None]] = set()
    states: set[str] = set()
    for line in lines[1:]:
        if _COMMENT.match(line):
            continue
        match = _EDGE.match(line)
        assert match, f"not a stateDiagram-v2 statement: {line!r}"
        edges.add((match["src"], match["dst"], match["label"]))
        states |= {match["src"], match["dst"]} - {"[*]"}
    return edges, states


@pytest.mark.parametrize("spec", MACHINES, ids=_ids)
def test_to_mermaid_is_a_state_diagram_with_every_transition(spec: MachineSpec) -> None:
    text = to_mermaid(spec)
    edges, states = _parse_mermaid(text)
    expected: set[tuple[str, str, str | None]] = {
        (t.source, t.dest, t.trigger) for t in spec.transitions
    }
    expected |= {("[*]", entry, None) for entry in (spec.initial, *spec.entries)}
    expected |= {(s, "[*]", None) for s in spec.terminal}
    assert edges == expected
    assert states == set(spec.states)
    assert to_mermaid(spec) == text


@pytest.mark.parametrize("spec", MACHINES, ids=_ids)
def test_every_state_of_a_diagram_is_entered_from_the_start(spec: MachineSpec) -> None:
    edges, states = _parse_mermaid(to_mermaid(spec))
    reached, frontier = set(), ["[*]"]
    while frontier:
        source = frontier.pop()
        for src, dst, _ in edges:
            if src == source and dst not in reached:
                reached.add(dst)
                frontier.append(dst)
    assert states <= reached, f"no way into {sorted(states - reached)}"


def test_retention_is_entered_in_artifact_too() -> None:
    from statemachines import RETENTION

    assert "  [*] --> artifact" in to_mermaid(RETENTION).splitlines()


def test_all_mermaid_holds_one_fenced_block_per_machine() -> None:
    text = all_mermaid()
    blocks = re.findall(r"```mermaid\n(.*?)```", text, flags=re.S)
    assert blocks == [to_mermaid(spec) for spec in MACHINES]
    for spec in MACHINES:
        assert f"## {spec.name}\n" in text
