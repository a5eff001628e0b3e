"""Limits and owner identity of a background supervisor."""

from __future__ import annotations

import math

import msgspec

KIB = 1024
MIB = 1024 * KIB


class SupervisorLimits(msgspec.Struct, frozen=True, kw_only=True):
    """Every limit of a supervisor, with the defaults of DESIGN §5 (seconds and bytes).

    ``heartbeat_interval`` defaults to ``lease_ttl / 3``; transient store
    failures are retried every ``retry_interval`` (default: the heartbeat
    interval, never more). ``cancellation_grace`` is how long a cancelled
    child may take to stop cooperatively before its task is aborted.
    """

    lease_ttl: float = 30.0
    heartbeat_interval: float | None = None
    retry_interval: float | None = None
    claim_deadline: float = 60.0
    max_active_attempts: int = 8
    max_undelivered_results: int = 128
    max_prompt_bytes: int = 64 * KIB
    max_steering_bytes: int = 16 * KIB
    max_queued_steering: int = 32
    max_cancellation_reason_bytes: int = 4 * KIB
    inline_preview_bytes: int = 64 * KIB
    max_artifact_bytes: int = 8 * MIB
    max_namespace_artifact_bytes: int = 64 * MIB
    retention: float = 24 * 3600.0
    cancellation_grace: float = 5.0
    shutdown_grace: float = 5.0
    max_retained_attempts: int = 1024
    """Ended attempts the supervisor keeps in its in-memory table (answers to
    ``wait``, ``cancel``, ``steer`` and ``info`` without a store read). Beyond it,
    the oldest ended attempts whose result was delivered are forgotten (checked
    every ``max_retained_attempts // 4`` endings); undelivered results are never
    forgotten (admission bounds them by ``max_undelivered_results``). A forgotten
    attempt is still answered from the store: ``wait`` reports it delivered
    elsewhere, ``cancel`` its terminal status (its cancellation receipts are
    gone), ``steer`` ``Terminal``."""
    max_known_agents: int = 4096
    """Background ``agent_id`` s kept in memory for continuation checks (and, in the
    SDK, child conversations for continuations), least recently used forgotten
    first; an agent with an active attempt is never forgotten. A forgotten
    ``agent_id`` is looked up in the store when a continuation names it."""

    def __post_init__(self) -> None:
        positive = {
            "lease_ttl": self.lease_ttl,
            "claim_deadline": self.claim_deadline,
            "retention": self.retention,
            "max_active_attempts": self.max_active_attempts,
            "max_undelivered_results": self.max_undelivered_results,
            "max_prompt_bytes": self.max_prompt_bytes,
            "max_steering_bytes": self.max_steering_bytes,
            "max_queued_steering": self.max_queued_steering,
            "inline_preview_bytes": self.inline_preview_bytes,
            "max_artifact_bytes": self.max_artifact_bytes,
            "max_namespace_artifact_bytes": self.max_namespace_artifact_bytes,
            "max_retained_attempts": self.max_retained_attempts,
            "max_known_agents": self.max_known_agents,
        }
        for name, value in positive.items():
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"SupervisorLimits.{name} must be positive, got {value!r}")
        if self.max_artifact_bytes > self.max_namespace_artifact_bytes:
            raise ValueError("max_artifact_bytes must not exceed max_namespace_artifact_bytes")
        for name in ("cancellation_grace", "shutdown_grace"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"SupervisorLimits.{name} must be >= 0, got {value!r}")
        if self.heartbeat_interval is not None and not (
            0 < self.heartbeat_interval < self.lease_ttl
        ):
            raise ValueError("heartbeat_interval must be in (0, lease_ttl)")
        if self.retry_interval is not None and not (self.retry_interval > 0):
            raise ValueError("retry_interval must be positive")

    def heartbeat_interval_for(self, lease_ttl: float) -> float:
        """Seconds between heartbeats for a lease of ``lease_ttl``: ``lease_ttl / 3``
        unless configured; a configured interval never exceeds half the TTL, so a
        shorter owner lease still gets renewed in time."""
        if self.heartbeat_interval is None:
            return lease_ttl / 3
        return min(self.heartbeat_interval, lease_ttl / 2)

    def retry_interval_for(self, lease_ttl: float) -> float:
        """Seconds between retries of a transient store failure: at most the heartbeat interval."""
        beat = self.heartbeat_interval_for(lease_ttl)
        return beat if self.retry_interval is None else min(self.retry_interval, beat)


class OwnerIdentity(msgspec.Struct, frozen=True, kw_only=True):
    """Who owns this supervisor's attempts in the store: the fenced lease identity.

    ``lease_ttl`` (seconds) overrides ``SupervisorLimits.lease_ttl`` when set.
    """

    host_instance_id: str
    fencing_generation: int = 1
    lease_ttl: float | None = None

    def __post_init__(self) -> None:
        if not self.host_instance_id:
            raise ValueError("OwnerIdentity.host_instance_id must not be empty")
        if self.fencing_generation <= 0:
            raise ValueError("OwnerIdentity.fencing_generation must be positive")
        if self.lease_ttl is not None and not (
            math.isfinite(self.lease_ttl) and self.lease_ttl > 0
        ):
            raise ValueError("OwnerIdentity.lease_ttl must be positive")


class PoolLimits(msgspec.Struct, frozen=True, kw_only=True):
    """The host-wide bounds every supervisor of one process shares (``SupervisorPools``).

    The thread count of a host is ``actor_threads + heartbeat_threads +
    delivery_threads + 1`` (the children's event loop), whatever the number
    of sessions or live attempts: supervisor and attempt actors run on the
    ``actor_threads`` pool while they have messages and hold no thread when
    idle. ``max_live_attempts`` bounds the attempts running at once across
    every session; one more is refused with ``BackgroundSubagentError.HostBusy``
    (nothing accepted, retry after ``retry_after_seconds``).

    The heartbeat threads do store work only: lease renewals, and the
    acceptances a supervisor with more requests waiting hands off so that it
    admits them meanwhile (concurrent acceptances then share durable commits).
    A heartbeat queued behind those waits for the acceptances ahead of it (at
    most ``max_live_attempts`` of them), each one store write.
    """

    actor_threads: int = 4
    heartbeat_threads: int = 2
    delivery_threads: int = 2
    max_live_attempts: int = 1024
    retry_after_seconds: float = 1.0

    def __post_init__(self) -> None:
        for name in ("actor_threads", "heartbeat_threads", "delivery_threads", "max_live_attempts"):
            value = getattr(self, name)
            if not (isinstance(value, int) and value > 0):
                raise ValueError(f"PoolLimits.{name} must be a positive integer, got {value!r}")
        if not (math.isfinite(self.retry_after_seconds) and self.retry_after_seconds > 0):
            raise ValueError("PoolLimits.retry_after_seconds must be positive")
