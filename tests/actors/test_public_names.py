"""The actors stay private: callers hold the supervisor facade, which talks to them in
typed messages. (``actors``' exported names are pinned with every package's in
``tests/test_public_api.py``.)"""

from __future__ import annotations

import pytest

import actors


@pytest.mark.parametrize("name", ["AttemptActor", "SupervisorActor", "clamp_wait"])
def test_the_actor_classes_and_runtime_helpers_are_not_exported(name: str) -> None:
    assert name not in actors.__all__
    assert not hasattr(actors, name)
