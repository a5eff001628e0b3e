"""``actors`` exports exactly these names: removing or adding one fails here first.

The actor classes (``AttemptActor``, ``SupervisorActor``) and ``clamp_wait`` are
private: callers hold the supervisor facade, which talks to them in typed messages.
"""

from __future__ import annotations

import actors

EXPECTED = [
    "AttemptSummary",
    "BackgroundResult",
    "BackgroundSubagentError",
    "BackgroundSubagentSupervisor",
    "CancelResult",
    "ChildControl",
    "ChildOutcome",
    "ChildRequest",
    "ChildRunner",
    "CompletionCallback",
    "DelegateResult",
    "Deliverer",
    "InfoResult",
    "LeaseLost",
    "OwnerIdentity",
    "SteerReceipt",
    "SupervisorLimits",
    "WaitResult",
]


def test_actors_exports_exactly_its_pinned_names() -> None:
    assert sorted(actors.__all__) == EXPECTED


def test_every_pinned_name_resolves_and_nothing_else_public_is_bound() -> None:
    for name in EXPECTED:
        assert getattr(actors, name) is not None
    bound = {n for n in vars(actors) if not n.startswith("_")}
    # Submodules imported by the package are bound as attributes too; they are private.
    assert {n for n in bound if not isinstance(getattr(actors, n), type(actors))} == set(EXPECTED)
