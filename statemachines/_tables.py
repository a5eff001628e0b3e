"""The formal lifecycles as data.

Each lifecycle is a :class:`MachineSpec`: its states, its initial state, its
terminal states and a tuple of :class:`Transition` rows. The same rows build
the runtime ``transitions.Machine`` (see :mod:`statemachines._factory`), are
checked by every store before a persisted state changes, drive the Hypothesis
reference models and draw the mermaid diagrams. Nothing here performs I/O,
reads a clock or starts a thread.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from ._errors import InvalidTransition


@dataclass(frozen=True, slots=True)
class Transition:
    """One allowed move: ``trigger`` takes the machine from ``source`` to ``dest``."""

    trigger: str
    source: str
    dest: str


@dataclass(frozen=True, slots=True)
class MachineSpec:
    """A lifecycle: states, initial state, terminal states and transitions.

    ``entries`` are the other states a record may be created in (besides
    ``initial``): retention starts in ``artifact`` when the result is committed
    straight to an artifact. The diagram draws an entry edge into each.
    """

    name: str
    states: tuple[str, ...]
    initial: str
    terminal: frozenset[str]
    transitions: tuple[Transition, ...]
    description: str = ""
    entries: tuple[str, ...] = ()
    _edges: frozenset[tuple[str, str]] = field(init=False, repr=False, compare=False)
    _triggers: dict[tuple[str, str], str] = field(init=False, repr=False, compare=False)
    _paths: dict[tuple[str, str], tuple[str, ...]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        known = set(self.states)
        for entry in (self.initial, *self.entries):
            if entry not in known:
                raise ValueError(f"{self.name}: initial state {entry!r} is not a state")
        for row in self.transitions:
            if row.source not in known or row.dest not in known:
                raise ValueError(f"{self.name}: transition {row} names an unknown state")
        edges = frozenset((t.source, t.dest) for t in self.transitions)
        triggers = {(t.trigger, t.source): t.dest for t in self.transitions}
        object.__setattr__(self, "_edges", edges)
        object.__setattr__(self, "_triggers", triggers)
        paths: dict[tuple[str, str], tuple[str, ...]] = {}
        for state in self.states:
            paths.update(self._shortest_walks(state))
        object.__setattr__(self, "_paths", paths)

    def allows(self, source: str, dest: str) -> bool:
        """Whether some transition moves ``source`` to ``dest``."""
        return (source, dest) in self._edges

    def check(self, source: str, dest: str, **fields: object) -> None:
        """Raise :class:`InvalidTransition` unless ``source -> dest`` is allowed.

        A move to the same state is not a transition and is refused too; callers
        that want idempotence compare states before calling.
        """
        if not self.allows(source, dest):
            raise InvalidTransition(
                f"{self.name}: {source} -> {dest} is not an allowed transition",
                machine=self.name,
                source=source,
                dest=dest,
                **fields,
            )

    def target(self, trigger: str, source: str) -> str:
        """The state ``trigger`` leads to from ``source``, or :class:`InvalidTransition`."""
        try:
            return self._triggers[(trigger, source)]
        except KeyError:
            raise InvalidTransition(
                f"{self.name}: trigger {trigger!r} is not allowed from {source}",
                machine=self.name,
                source=source,
                trigger=trigger,
            ) from None

    def path(self, source: str, dest: str) -> tuple[str, ...]:
        """The states strictly between ``source`` and ``dest`` on a shortest walk along
        the table's transitions (``()`` when ``source -> dest`` is one transition or
        ``source == dest``), or :class:`InvalidTransition` when ``dest`` is not reachable.

        Terminal states have no outgoing transitions, so they never appear in between.
        A store that validates a walk checks each of its edges with :meth:`check`.
        Walks are found once, when the spec is built (every commit asks for one).
        """
        if source == dest:
            return ()
        try:
            return self._paths[(source, dest)]
        except KeyError:
            raise InvalidTransition(
                f"{self.name}: {dest} is not reachable from {source}",
                machine=self.name,
                source=source,
                dest=dest,
            ) from None

    def _shortest_walks(self, source: str) -> dict[tuple[str, str], tuple[str, ...]]:
        """Breadth first from ``source`` in row order: the states between it and each
        state it reaches (the first shortest walk found)."""
        came: dict[str, str] = {source: source}
        frontier = [source]
        while frontier:
            step: list[str] = []
            for state in frontier:
                for row in self.transitions:
                    if row.source == state and row.dest not in came:
                        came[row.dest] = state
                        step.append(row.dest)
            frontier = step
        walks: dict[tuple[str, str], tuple[str, ...]] = {}
        for dest, before in came.items():
            between: list[str] = []
            state = before
            while state != source:
                between.append(state)
                state = came[state]
            walks[(source, dest)] = tuple(reversed(between))
        return walks

    def is_terminal(self, state: str) -> bool:
        return state in self.terminal

    def triggers(self) -> tuple[str, ...]:
        """Trigger names in first-seen order."""
        return tuple(dict.fromkeys(t.trigger for t in self.transitions))


def _rows(*rows: tuple[str, str | tuple[str, ...], str]) -> tuple[Transition, ...]:
    out: list[Transition] = []
    for trigger, sources, dest in rows:
        for source in (sources,) if isinstance(sources, str) else sources:
            out.append(Transition(trigger, source, dest))
    return tuple(out)


class ExecutionStatus(enum.StrEnum):
    """Where the child's execution is. The first four are active."""

    ACCEPTED = "accepted"
    STARTING = "starting"
    RUNNING = "running"
    WAITING = "waiting"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


class DeliveryStatus(enum.StrEnum):
    """Whether a terminal result has reached the parent."""

    UNDELIVERED = "undelivered"
    CLAIMED = "claimed"
    DELIVERED = "delivered"


class RetentionStatus(enum.StrEnum):
    """Where a terminal result's content lives, or that it is gone."""

    INLINE = "inline"
    ARTIFACT = "artifact"
    EXPIRED = "expired"


class AttemptPhase(enum.StrEnum):
    """The card's lifecycle, derived from the three persisted dimensions."""

    ACCEPTED = "accepted"
    RUNNING = "running"
    TERMINAL = "terminal"
    DELIVERED = "delivered"
    EXPIRED = "expired"


class RunStatus(enum.StrEnum):
    """A parent session's run: admitted, running, then one terminal status."""

    ADMITTED = "admitted"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


class SessionStatus(enum.StrEnum):
    """A session: active, inactive (no new work) or fenced for deletion."""

    ACTIVE = "active"
    INACTIVE = "inactive"
    DELETING = "deleting"


_ACTIVE_EXEC = ("accepted", "starting", "running", "waiting")

EXECUTION = MachineSpec(
    name="execution",
    description="The child's execution, owned under a fenced lease.",
    states=tuple(s.value for s in ExecutionStatus),
    initial="accepted",
    terminal=frozenset({"completed", "failed", "cancelled"}),
    transitions=_rows(
        ("start", "accepted", "starting"),
        ("run", ("starting", "waiting"), "running"),
        ("wait", "running", "waiting"),
        ("complete", ("running", "waiting"), "completed"),
        ("fail", _ACTIVE_EXEC, "failed"),
        ("cancel", _ACTIVE_EXEC, "cancelled"),
    ),
)

DELIVERY = MachineSpec(
    name="delivery",
    description="Delivery of a terminal result to the parent, exactly once.",
    states=tuple(s.value for s in DeliveryStatus),
    initial="undelivered",
    terminal=frozenset({"delivered"}),
    transitions=_rows(
        ("claim", "undelivered", "claimed"),
        ("release", "claimed", "undelivered"),
        ("acknowledge", "claimed", "delivered"),
        ("deliver", "undelivered", "delivered"),
    ),
)

RETENTION = MachineSpec(
    name="retention",
    description="Where a terminal result's content lives until it expires.",
    states=tuple(s.value for s in RetentionStatus),
    initial="inline",
    entries=("artifact",),  # a result over the inline limit is committed as an artifact
    terminal=frozenset({"expired"}),
    transitions=_rows(("expire", ("inline", "artifact"), "expired")),
)

PHASE = MachineSpec(
    name="phase",
    description="The attempt lifecycle of the design card, derived from the dimensions.",
    states=tuple(s.value for s in AttemptPhase),
    initial="accepted",
    terminal=frozenset({"expired"}),
    transitions=_rows(
        ("start", "accepted", "running"),
        ("finish", ("accepted", "running"), "terminal"),
        ("deliver", "terminal", "delivered"),
        ("expire", ("terminal", "delivered"), "expired"),
    ),
)

RUN = MachineSpec(
    name="run",
    description="A run of a parent session, admitted under an admission lease.",
    states=tuple(s.value for s in RunStatus),
    initial="admitted",
    terminal=frozenset({"completed", "failed", "cancelled"}),
    transitions=_rows(
        ("start", "admitted", "running"),
        ("complete", "running", "completed"),
        ("fail", ("admitted", "running"), "failed"),
        ("cancel", ("admitted", "running"), "cancelled"),
    ),
)

SESSION = MachineSpec(
    name="session",
    description="A durable parent session; deletion is fenced before it happens.",
    states=tuple(s.value for s in SessionStatus),
    initial="active",
    terminal=frozenset({"deleting"}),
    transitions=_rows(
        ("deactivate", "active", "inactive"),
        ("activate", "inactive", "active"),
        ("fence", ("active", "inactive"), "deleting"),
    ),
)

MACHINES: tuple[MachineSpec, ...] = (PHASE, EXECUTION, DELIVERY, RETENTION, RUN, SESSION)


def derive_phase(execution: str, delivery: str, retention: str) -> AttemptPhase:
    """The card's phase for one attempt, from its three persisted dimensions.

    ``accepted`` while execution is accepted; ``running`` while starting,
    running or waiting; once terminal: ``expired`` if retention expired,
    ``delivered`` if delivered, else ``terminal``.
    """
    if execution not in EXECUTION.states:
        raise InvalidTransition(f"unknown execution status {execution!r}", machine="execution")
    if execution == "accepted":
        return AttemptPhase.ACCEPTED
    if execution in _ACTIVE_EXEC:
        return AttemptPhase.RUNNING
    if retention == "expired":
        return AttemptPhase.EXPIRED
    if delivery == "delivered":
        return AttemptPhase.DELIVERED
    return AttemptPhase.TERMINAL


def is_active_execution(execution: str) -> bool:
    """Whether ``execution`` is one of the non-terminal statuses."""
    return execution in _ACTIVE_EXEC
