"""Hypothesis profiles for the conformance suite.

``ci`` is bounded and derandomized (the same examples every run, so CI is
reproducible and the whole suite stays within a couple of minutes on two
cores); ``deep`` explores far longer sequences with durable LMDB commits;
``dev`` is a quick randomized run for local iteration.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import HealthCheck, settings


@dataclass(frozen=True)
class Profile:
    """A named Hypothesis budget plus the store options that go with it."""

    name: str
    max_examples: int
    stateful_step_count: int
    derandomize: bool
    lmdb_sync: bool
    """Whether the LMDB factories commit durably (fsync). Off in ``ci`` for speed:
    fsync changes latency, not the contract logic under test."""


PROFILES: dict[str, Profile] = {
    "ci": Profile(
        "ci", max_examples=200, stateful_step_count=40, derandomize=True, lmdb_sync=False
    ),
    "dev": Profile(
        "dev", max_examples=50, stateful_step_count=40, derandomize=False, lmdb_sync=False
    ),
    "deep": Profile(
        "deep", max_examples=400, stateful_step_count=80, derandomize=False, lmdb_sync=True
    ),
}

_SUPPRESSED = [HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large]

for _p in PROFILES.values():
    # Derandomized runs replay the same examples every time, so they keep no database.
    _extra: dict[str, object] = {"database": None} if _p.derandomize else {}
    settings.register_profile(
        _p.name,
        max_examples=_p.max_examples,
        stateful_step_count=_p.stateful_step_count,
        derandomize=_p.derandomize,
        deadline=None,
        suppress_health_check=_SUPPRESSED,
        print_blob=not _p.derandomize,
        **_extra,  # type: ignore[arg-type]
    )

_current = "ci"


def load_profile(name: str) -> Profile:
    """Make ``name`` the active Hypothesis profile; :class:`KeyError` if unknown."""
    global _current  # noqa: PLW0603 - one process-wide active profile, as in Hypothesis
    if name not in PROFILES:
        raise KeyError(f"unknown Hypothesis profile {name!r}; known: {sorted(PROFILES)}")
    settings.load_profile(name)
    _current = name
    return PROFILES[name]


def current_profile() -> Profile:
    """The profile most recently loaded with :func:`load_profile` (``ci`` by default)."""
    return PROFILES[_current]


def profile_settings(name: str | None = None) -> settings:
    """The Hypothesis settings of ``name`` (default: the current profile)."""
    return settings.get_profile(name or _current)
