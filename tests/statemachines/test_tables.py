"""The lifecycle tables as data: validation, lookups and the derived phase.

The expected values here are written from DESIGN §3, not read back from the
tables, so a change to a table that contradicts the design fails a test.
"""

from __future__ import annotations

import itertools

import pytest

from actors._machines import ATTEMPT
from statemachines import (
    DELIVERY,
    EXECUTION,
    MACHINES,
    PHASE,
    RETENTION,
    RUN,
    SESSION,
    AttemptPhase,
    InvalidTransition,
    MachineSpec,
    Transition,
    derive_phase,
    is_active_execution,
)

ACTIVE = ("accepted", "starting", "running", "waiting")
TERMINAL = ("completed", "failed", "cancelled")

# DESIGN §3, written out independently of the tables.
EXECUTION_EDGES = {
    ("accepted", "starting"),
    ("accepted", "failed"),
    ("accepted", "cancelled"),
    ("starting", "running"),
    ("starting", "failed"),
    ("starting", "cancelled"),
    ("running", "waiting"),
    ("running", "completed"),
    ("running", "failed"),
    ("running", "cancelled"),
    ("waiting", "running"),
    ("waiting", "completed"),
    ("waiting", "failed"),
    ("waiting", "cancelled"),
}
DELIVERY_EDGES = {
    ("undelivered", "claimed"),
    ("claimed", "undelivered"),
    ("claimed", "delivered"),
    ("undelivered", "delivered"),
}
RETENTION_EDGES = {("inline", "expired"), ("artifact", "expired")}
PHASE_EDGES = {
    ("accepted", "running"),
    ("accepted", "terminal"),
    ("running", "terminal"),
    ("terminal", "delivered"),
    ("terminal", "expired"),
    ("delivered", "expired"),
}


def _edges(spec: MachineSpec) -> set[tuple[str, str]]:
    return {(t.source, t.dest) for t in spec.transitions}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (EXECUTION, EXECUTION_EDGES),
        (DELIVERY, DELIVERY_EDGES),
        (RETENTION, RETENTION_EDGES),
        (PHASE, PHASE_EDGES),
    ],
    ids=lambda v: v.name if isinstance(v, MachineSpec) else "",
)
def test_attempt_tables_allow_exactly_the_designed_moves(
    spec: MachineSpec, expected: set[tuple[str, str]]
) -> None:
    assert _edges(spec) == expected
    for source, dest in itertools.product(spec.states, repeat=2):
        assert spec.allows(source, dest) == ((source, dest) in expected)


def test_execution_states_split_into_four_active_and_three_terminal() -> None:
    assert set(EXECUTION.states) == set(ACTIVE) | set(TERMINAL)
    assert EXECUTION.initial == "accepted"
    assert EXECUTION.terminal == frozenset(TERMINAL)
    for state in ACTIVE:
        assert is_active_execution(state)
        assert not EXECUTION.is_terminal(state)
    for state in TERMINAL:
        assert not is_active_execution(state)
        assert EXECUTION.is_terminal(state)


def test_terminal_states_of_every_machine_have_no_outgoing_transition() -> None:
    for spec in MACHINES:
        sources = {t.source for t in spec.transitions}
        assert not (sources & spec.terminal), spec.name


def test_every_machine_names_unique_trigger_source_pairs() -> None:
    for spec in MACHINES:
        pairs = [(t.trigger, t.source) for t in spec.transitions]
        assert len(pairs) == len(set(pairs)), spec.name


def test_run_and_session_tables_follow_the_design() -> None:
    assert _edges(RUN) == {
        ("admitted", "running"),
        ("running", "completed"),
        ("admitted", "failed"),
        ("running", "failed"),
        ("admitted", "cancelled"),
        ("running", "cancelled"),
    }
    assert _edges(SESSION) == {
        ("active", "inactive"),
        ("inactive", "active"),
        ("active", "deleting"),
        ("inactive", "deleting"),
    }
    assert SESSION.terminal == frozenset({"deleting"})


def test_check_raises_invalid_transition_with_structured_fields() -> None:
    EXECUTION.check("running", "completed")
    with pytest.raises(InvalidTransition) as info:
        EXECUTION.check("completed", "running", attempt_id="subattempt_1")
    err = info.value
    assert err.fields == {
        "machine": "execution",
        "source": "completed",
        "dest": "running",
        "attempt_id": "subattempt_1",
    }
    assert getattr(err, "attempt_id") == "subattempt_1"  # noqa: B009 - fields are attributes too


def test_check_refuses_a_move_to_the_same_state() -> None:
    for spec in MACHINES:
        for state in spec.states:
            with pytest.raises(InvalidTransition):
                spec.check(state, state)


def test_target_follows_triggers_and_refuses_unknown_ones() -> None:
    assert EXECUTION.target("start", "accepted") == "starting"
    assert EXECUTION.target("run", "waiting") == "running"
    assert DELIVERY.target("release", "claimed") == "undelivered"
    with pytest.raises(InvalidTransition) as info:
        EXECUTION.target("complete", "accepted")
    assert info.value.fields["trigger"] == "complete"
    with pytest.raises(InvalidTransition):
        EXECUTION.target("no-such-trigger", "accepted")


def test_triggers_are_listed_once_in_first_seen_order() -> None:
    assert EXECUTION.triggers() == ("start", "run", "wait", "complete", "fail", "cancel")


def test_a_spec_naming_an_unknown_state_is_refused() -> None:
    with pytest.raises(ValueError, match="initial"):
        MachineSpec(name="x", states=("a",), initial="b", terminal=frozenset(), transitions=())
    with pytest.raises(ValueError, match="unknown state"):
        MachineSpec(
            name="x",
            states=("a",),
            initial="a",
            terminal=frozenset(),
            transitions=(Transition("go", "a", "b"),),
        )


# -- derived phase ---------------------------------------------------------------------------


def _expected_phase(execution: str, delivery: str, retention: str) -> str:
    # DESIGN §3, restated: accepted; running while starting/running/waiting;
    # once terminal: expired if retention expired, delivered if delivered, else terminal.
    if execution == "accepted":
        return "accepted"
    if execution in ("starting", "running", "waiting"):
        return "running"
    if retention == "expired":
        return "expired"
    if delivery == "delivered":
        return "delivered"
    return "terminal"


@pytest.mark.parametrize(
    ("execution", "delivery", "retention"),
    list(itertools.product(EXECUTION.states, DELIVERY.states, RETENTION.states)),
)
def test_derive_phase_matches_the_design_for_every_combination(
    execution: str, delivery: str, retention: str
) -> None:
    phase = derive_phase(execution, delivery, retention)
    assert isinstance(phase, AttemptPhase)
    assert phase.value == _expected_phase(execution, delivery, retention)


def test_derive_phase_refuses_an_unknown_execution_status() -> None:
    with pytest.raises(InvalidTransition):
        derive_phase("exploded", "undelivered", "inline")


def _reachable() -> set[tuple[str, str, str]]:
    # Delivery and retention only move once execution is terminal; before that
    # they sit at their initial states. A terminal commit picks inline or artifact.
    states = {(e, "undelivered", "inline") for e in ACTIVE}
    states |= set(itertools.product(TERMINAL, DELIVERY.states, RETENTION.states))
    return states


def _dimension_moves() -> list[tuple[tuple[str, str, str], tuple[str, str, str]]]:
    moves = []
    for state in sorted(_reachable()):
        e, d, r = state
        if is_active_execution(e):
            for t in EXECUTION.transitions:
                if t.source != e:
                    continue
                if EXECUTION.is_terminal(t.dest):
                    # The terminal commit sets the initial retention projection.
                    for initial in ("inline", "artifact"):
                        moves.append((state, (t.dest, d, initial)))
                else:
                    moves.append((state, (t.dest, d, r)))
        else:
            moves.extend((state, (e, t.dest, r)) for t in DELIVERY.transitions if t.source == d)
            moves.extend((state, (e, d, t.dest)) for t in RETENTION.transitions if t.source == r)
    return moves


def test_every_dimension_move_follows_a_phase_transition_or_keeps_the_phase() -> None:
    seen: set[tuple[str, str]] = set()
    moves = _dimension_moves()
    assert moves
    for before, after in moves:
        assert after in _reachable()
        p0, p1 = derive_phase(*before), derive_phase(*after)
        if p0 != p1:
            assert PHASE.allows(p0, p1), f"{before} -> {after} moves phase {p0} -> {p1}"
            seen.add((p0.value, p1.value))
    # And every phase transition of the card is realised by some dimension move.
    assert seen == PHASE_EDGES


@pytest.mark.parametrize(
    ("source", "dest", "between"),
    [
        ("accepted", "completed", ("starting", "running")),
        ("accepted", "running", ("starting",)),
        ("accepted", "waiting", ("starting", "running")),
        ("starting", "completed", ("running",)),
        ("accepted", "failed", ()),
        ("waiting", "running", ()),
        ("running", "running", ()),
    ],
)
def test_path_is_a_shortest_walk_along_the_table(
    source: str, dest: str, between: tuple[str, ...]
) -> None:
    assert EXECUTION.path(source, dest) == between
    walk = (source, *between, dest)
    assert all(EXECUTION.allows(a, b) for a, b in itertools.pairwise(walk) if a != b)


@pytest.mark.parametrize(("source", "dest"), [("completed", "running"), ("running", "accepted")])
def test_path_to_an_unreachable_state_is_invalid(source: str, dest: str) -> None:
    with pytest.raises(InvalidTransition):
        EXECUTION.path(source, dest)


def _distances(spec: MachineSpec) -> dict[tuple[str, str], int]:
    """Shortest walk lengths (in transitions) between states, by Floyd-Warshall over
    the edge set: an oracle that shares nothing with ``path``'s breadth-first walk."""
    far = len(spec.states) + 1
    d = {(a, b): 0 if a == b else far for a in spec.states for b in spec.states}
    for row in spec.transitions:
        if row.source != row.dest:
            d[(row.source, row.dest)] = 1
    for k, a, b in itertools.product(spec.states, repeat=3):
        d[(a, b)] = min(d[(a, b)], d[(a, k)] + d[(k, b)])
    return {pair: n for pair, n in d.items() if n < far}


@pytest.mark.parametrize("spec", [*MACHINES, ATTEMPT], ids=lambda spec: spec.name)
def test_path_between_every_pair_of_states_is_a_shortest_walk_or_refused(
    spec: MachineSpec,
) -> None:
    distance = _distances(spec)
    for source, dest in itertools.product(spec.states, repeat=2):
        if source == dest:
            assert spec.path(source, dest) == ()  # a move to the same state is no walk
            continue
        if (source, dest) not in distance:
            with pytest.raises(InvalidTransition):
                spec.path(source, dest)
            continue
        between = spec.path(source, dest)
        walk = (source, *between, dest)
        assert all(spec.allows(a, b) for a, b in itertools.pairwise(walk)), walk
        assert len(walk) - 1 == distance[(source, dest)]
