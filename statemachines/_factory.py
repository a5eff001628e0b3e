"""Runtime machines built from the tables, and their diagrams."""

from __future__ import annotations

from typing import Any

from transitions import Machine, MachineError

from ._errors import InvalidTransition
from ._tables import MACHINES, MachineSpec


def build_machine(spec: MachineSpec, model: object, *, initial: str | None = None) -> Machine:
    """Bind one plain ``transitions.Machine`` for ``spec`` to ``model``.

    ``initial`` restores a persisted state without running any ``on_enter``
    callback. The machine has ``auto_transitions=False`` (only the table's
    triggers exist) and is not queued: it belongs to one thread at a time.
    ``model`` must be a plain object, never a pykka actor (its ``start`` and
    ``stop`` methods would shadow the triggers of the same names).

    Triggers raise :class:`InvalidTransition` (not ``MachineError``) when the
    table does not allow them from the current state.
    """
    state = spec.initial if initial is None else initial
    if state not in spec.states:
        raise InvalidTransition(
            f"{spec.name}: cannot restore unknown state {state!r}", machine=spec.name, dest=state
        )
    machine = Machine(
        model=model,
        states=list(spec.states),
        transitions=[
            {"trigger": t.trigger, "source": t.source, "dest": t.dest} for t in spec.transitions
        ],
        initial=state,
        auto_transitions=False,
        send_event=False,
        ignore_invalid_triggers=False,
        model_attribute="state",
    )
    for trigger in spec.triggers():
        _wrap_trigger(spec, model, trigger)
    return machine


def _wrap_trigger(spec: MachineSpec, model: Any, trigger: str) -> None:
    bound = getattr(model, trigger)

    def fire(*args: Any, **kwargs: Any) -> bool:
        source = model.state
        try:
            return bool(bound(*args, **kwargs))
        except MachineError as exc:
            raise InvalidTransition(
                f"{spec.name}: trigger {trigger!r} is not allowed from {source}",
                machine=spec.name,
                source=source,
                trigger=trigger,
            ) from exc

    fire.__name__ = trigger
    setattr(model, trigger, fire)


def to_mermaid(spec: MachineSpec) -> str:
    """Render ``spec`` as a mermaid ``stateDiagram-v2``, deterministically.

    Terminal states get an edge to ``[*]``; the initial state and each of
    ``spec.entries`` an edge from it.
    """
    lines = ["stateDiagram-v2", f"  %% {spec.name}: {spec.description}".rstrip(": ")]
    lines.extend(f"  [*] --> {entry}" for entry in (spec.initial, *spec.entries))
    for t in spec.transitions:
        lines.append(f"  {t.source} --> {t.dest}: {t.trigger}")
    for state in spec.states:
        if state in spec.terminal:
            lines.append(f"  {state} --> [*]")
    return "\n".join(lines) + "\n"


def all_mermaid() -> str:
    """Every lifecycle, one fenced mermaid block each, for docs and the CLI."""
    blocks = [f"## {spec.name}\n\n```mermaid\n{to_mermaid(spec)}```\n" for spec in MACHINES]
    return "\n".join(blocks)
