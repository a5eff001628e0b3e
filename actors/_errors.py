"""Typed errors of the background-subagent runtime.

A data-carrying enum of the spec is one base class with one subclass per
variant, reachable as attributes of the base (DESIGN §2):
``isinstance(err, BackgroundSubagentError.Closing)``. :class:`LeaseLost` is a
:class:`~statemachines.SubagentsSignal`. The variants, with the rest of the
project's errors, are drawn once in :mod:`statemachines._errors`.

Every error carries structured keyword fields (``attempt_id``, ``agent_id``,
``limit``, ``size_bytes`` ...) readable as attributes and as ``fields``.
"""

from __future__ import annotations

from typing import ClassVar

from statemachines import SubagentsError, SubagentsSignal


class BackgroundSubagentError(SubagentsError):
    """A background-subagent operation was refused; nothing changed unless stated.

    Match a variant with ``isinstance(err, BackgroundSubagentError.Closing)``.
    """

    Closing: ClassVar[type[BackgroundSubagentError]]
    QuotaExceeded: ClassVar[type[BackgroundSubagentError]]
    ActiveConversation: ClassVar[type[BackgroundSubagentError]]
    NotFound: ClassVar[type[BackgroundSubagentError]]
    Terminal: ClassVar[type[BackgroundSubagentError]]
    PromptTooLarge: ClassVar[type[BackgroundSubagentError]]
    SteeringTooLarge: ClassVar[type[BackgroundSubagentError]]
    SteeringQueueFull: ClassVar[type[BackgroundSubagentError]]
    CancellationReasonTooLarge: ClassVar[type[BackgroundSubagentError]]
    IdempotencyConflict: ClassVar[type[BackgroundSubagentError]]
    DeliveryClaimed: ClassVar[type[BackgroundSubagentError]]
    Delivered: ClassVar[type[BackgroundSubagentError]]
    Durability: ClassVar[type[BackgroundSubagentError]]
    ShutdownDeadline: ClassVar[type[BackgroundSubagentError]]
    HostBusy: ClassVar[type[BackgroundSubagentError]]


def _variant(name: str, doc: str) -> type[BackgroundSubagentError]:
    cls = type(name, (BackgroundSubagentError,), {"__doc__": doc, "__module__": __name__})
    cls.__qualname__ = f"BackgroundSubagentError.{name}"
    setattr(BackgroundSubagentError, name, cls)
    return cls


_variant("Closing", "Admission is closed: shutdown began or completed.")
_variant(
    "QuotaExceeded",
    "Too many active attempts, or too many undelivered results retained (backpressure).",
)
_variant("ActiveConversation", "The agent_id already has an active attempt.")
_variant(
    "NotFound",
    "Unknown attempt_id, an agent_id the supervisor does not know (or one bound to "
    "another subagent), or no child runner for the subagent.",
)
_variant("Terminal", "The attempt already ended; steering is refused.")
_variant("PromptTooLarge", "The prompt exceeds the configured byte limit.")
_variant("SteeringTooLarge", "A steering message exceeds the configured byte limit.")
_variant("SteeringQueueFull", "The attempt already holds the maximum of queued steering.")
_variant("CancellationReasonTooLarge", "A cancellation reason exceeds the byte limit.")
_variant("IdempotencyConflict", "The same steering or cancellation id with another request.")
_variant("DeliveryClaimed", "Another consumer holds a live claim on the result.")
_variant("Delivered", "The result was already delivered to the parent.")
_variant(
    "Durability",
    "The store did not confirm a write; the operation did not take effect "
    "(``__cause__`` is the store error).",
)
_variant(
    "ShutdownDeadline",
    "Checked shutdown hit its deadline. Every unfinished attempt stays owned "
    "(field ``unfinished``); keep the supervisor alive and retry.",
)


_variant(
    "HostBusy",
    "A host-wide bound was reached (field ``bound``, e.g. ``max_live_attempts``, and "
    "``limit``); nothing was accepted. Retry after ``retry_after_seconds``.",
)


class LeaseLost(SubagentsSignal):
    """Confirmed loss of an attempt's owner lease (stale fence, missing record,
    changed owner or expired lease, checked against a fresh load).

    Internal control flow of the attempt actor: it abandons local state. It is
    a ``BaseException`` so ``except Exception`` around child code never
    swallows it; the actor catches it before it can reach pykka (where a
    ``BaseException`` would stop every actor in the process).
    """
