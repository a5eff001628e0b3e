"""Supervisor limits and owner identity: DESIGN §5 defaults, validation, derived intervals."""

from __future__ import annotations

import pytest

from actors import OwnerIdentity, SupervisorLimits


def test_the_defaults_are_the_design_defaults() -> None:
    limits = SupervisorLimits()
    assert (limits.lease_ttl, limits.claim_deadline, limits.retention) == (30.0, 60.0, 86400.0)
    assert (limits.max_active_attempts, limits.max_undelivered_results) == (8, 128)
    assert (limits.max_prompt_bytes, limits.max_steering_bytes) == (64 * 1024, 16 * 1024)
    assert limits.max_queued_steering == 32
    assert limits.inline_preview_bytes == 64 * 1024
    assert (limits.max_artifact_bytes, limits.max_namespace_artifact_bytes) == (
        8 * 1024 * 1024,
        64 * 1024 * 1024,
    )
    assert (limits.cancellation_grace, limits.shutdown_grace) == (5.0, 5.0)
    assert limits.heartbeat_interval_for(30.0) == 10.0
    assert limits.retry_interval_for(30.0) == 10.0


def test_retries_are_never_slower_than_heartbeats() -> None:
    limits = SupervisorLimits(heartbeat_interval=4.0, retry_interval=9.0)
    assert limits.heartbeat_interval_for(30.0) == 4.0
    assert limits.retry_interval_for(30.0) == 4.0
    # A shorter owner lease pulls the heartbeat in so the lease is renewed in time.
    assert limits.heartbeat_interval_for(6.0) == 3.0
    assert SupervisorLimits(retry_interval=0.5).retry_interval_for(30.0) == 0.5


@pytest.mark.parametrize(
    "bad",
    [
        {"lease_ttl": 0},
        {"lease_ttl": float("inf")},
        {"max_active_attempts": 0},
        {"max_prompt_bytes": -1},
        {"claim_deadline": float("nan")},
        {"heartbeat_interval": 30.0},
        {"retry_interval": 0},
        {"cancellation_grace": -1},
        {"max_artifact_bytes": 10, "max_namespace_artifact_bytes": 5},
    ],
)
def test_invalid_limits_are_refused(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        SupervisorLimits(**bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "bad",
    [
        {"host_instance_id": ""},
        {"host_instance_id": "h", "fencing_generation": 0},
        {"host_instance_id": "h", "lease_ttl": -1.0},
    ],
)
def test_an_invalid_owner_identity_is_refused(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        OwnerIdentity(**bad)  # type: ignore[arg-type]


def test_limits_round_trip_through_plain_values() -> None:
    import msgspec

    limits = SupervisorLimits(max_active_attempts=3)
    assert msgspec.convert(msgspec.to_builtins(limits), SupervisorLimits) == limits
