"""Messages exchanged by the supervisor actor, the attempt actors and the child task.

Requests that need an answer carry a ``concurrent.futures.Future`` as ``reply``:
the receiving actor resolves it and never blocks on the sender, so no ask
cycle can form and an asyncio caller can await it through
``asyncio.wrap_future`` instead of blocking its loop on a pykka future.
Every message is a frozen, keyword-only msgspec Struct, and each actor
dispatches on the message's type (``match``), never on a name.
"""

from __future__ import annotations

import concurrent.futures
import enum
from typing import Any

import msgspec

from storage import AttemptRecord

from ._child import ChildOutcome, ChildRunner

Reply = concurrent.futures.Future[Any]


def resolve(reply: Reply | None, value: Any = None, error: BaseException | None = None) -> None:
    """Resolve ``reply`` once; a reply its waiter already cancelled is ignored."""
    if reply is None or reply.done():
        return
    try:
        if error is not None:
            reply.set_exception(error)
        else:
            reply.set_result(value)
    except concurrent.futures.InvalidStateError:
        # The waiter gave up (timeout/cancel) between the check and the set.
        pass


# -- to an attempt actor -------------------------------------------------------------------


class Start(msgspec.Struct, frozen=True, kw_only=True):
    """Begin the attempt: persist ``starting``, then launch the child."""


class Steer(msgspec.Struct, frozen=True, kw_only=True):
    """Queue a steering message for the child (answered with a ``SteerReceipt``)."""

    message: str
    steering_id: str | None
    reply: Reply


class Cancel(msgspec.Struct, frozen=True, kw_only=True):
    """Request cancellation (answered with a ``CancelResult``; shutdown's own has no reply)."""

    reason: str | None
    cancellation_id: str | None
    reply: Reply | None
    shutdown: bool = False


class Abort(msgspec.Struct, frozen=True, kw_only=True):
    """Shutdown's second phase: cancel the child task now (no more grace)."""


class Timer(enum.Enum):
    """What a ``Tick`` is due for."""

    HEARTBEAT = "heartbeat"
    """Renew the lease, then arm the next heartbeat."""
    HEARTBEAT_RETRY = "heartbeat-retry"
    """Renew the lease again after a failed renewal (no new chain)."""
    RETRY = "retry"
    """Retry the pending store writes."""
    ABORT = "abort"
    """The cancellation grace is over: cancel the child's task."""
    FORCE = "force"
    """The child ignored its task's cancellation: end the attempt without it."""


class Tick(msgspec.Struct, frozen=True, kw_only=True):
    """A timer of the attempt fired (on the loop, told to the actor)."""

    timer: Timer


class HeartbeatDone(msgspec.Struct, frozen=True, kw_only=True):
    """A lease renewal ended: the renewed record, or the error it raised."""

    record: AttemptRecord | None
    error: BaseException | None


class ChildFinished(msgspec.Struct, frozen=True, kw_only=True):
    """The child's task ended (sent once it really ended)."""

    outcome: ChildOutcome | None
    error: BaseException | None
    cancelled: bool


class Describe(msgspec.Struct, frozen=True, kw_only=True):
    """Answered with the attempt's last persisted record."""

    reply: Reply


# -- to the supervisor actor ---------------------------------------------------------------


class DelegateRequest(msgspec.Struct, frozen=True, kw_only=True):
    """Admit one background attempt (answered with a ``DelegateResult``)."""

    subagent_name: str
    prompt: str
    agent_id: str | None
    linked_task_id: str | None
    runner: ChildRunner | None
    parent_run_id: str
    metadata: dict[str, Any]
    profile: str | None = None


class SteerRequest(msgspec.Struct, frozen=True, kw_only=True):
    """Queue a steering message for an attempt (answered with a ``SteerReceipt``)."""

    attempt_id: str
    message: str
    steering_id: str | None = None


class CancelRequest(msgspec.Struct, frozen=True, kw_only=True):
    """Request an attempt's cancellation (answered with a ``CancelResult``)."""

    attempt_id: str
    reason: str | None = None
    cancellation_id: str | None = None


class WatchRequest(msgspec.Struct, frozen=True, kw_only=True):
    """Answered with ``(entry_state, record_or_known_ids, ended_future)``; ``attempt_id``
    ``None`` watches for the next end of any attempt."""

    attempt_id: str | None


class DescribeRequest(msgspec.Struct, frozen=True, kw_only=True):
    """Answered with the last persisted ``AttemptRecord`` the supervisor saw."""

    attempt_id: str


class SnapshotRequest(msgspec.Struct, frozen=True, kw_only=True):
    """Answered with ``[(entry_state, record, actor_ref_or_None), ...]`` of the table."""


class BeginShutdownRequest(msgspec.Struct, frozen=True, kw_only=True):
    """Close admission and stop every attempt (``abort``: cancel its task now);
    answered with a future that resolves once no attempt is active."""

    abort: bool


class UnfinishedRequest(msgspec.Struct, frozen=True, kw_only=True):
    """Answered with the sorted ids of the attempts still active."""


class HibernateRequest(msgspec.Struct, frozen=True, kw_only=True):
    """Answered with whether the supervisor actor is idle (no active attempt, no
    waiter, no callback, not closing) and so may be stopped until it is needed again."""


SupervisorRequest = (
    DelegateRequest
    | SteerRequest
    | CancelRequest
    | WatchRequest
    | DescribeRequest
    | SnapshotRequest
    | BeginShutdownRequest
    | UnfinishedRequest
    | HibernateRequest
)
"""Every request the facade sends the supervisor actor."""


class Ask(msgspec.Struct, frozen=True, kw_only=True):
    """A request to the supervisor actor and the future it answers on. The actor
    resolves ``reply`` itself, or hands it to the attempt actor the request is for."""

    request: SupervisorRequest
    reply: Reply


class AttemptTerminal(msgspec.Struct, frozen=True, kw_only=True):
    """An attempt's terminal commit is persisted (sent by its actor, once)."""

    attempt_id: str
    record: AttemptRecord
    context_delta: Any
    usage: dict[str, Any]
    cancellation_receipts: dict[str, str | None]


class Accepted(msgspec.Struct, frozen=True, kw_only=True):
    """The store answered an acceptance the supervisor handed to a pool thread (sent
    by that thread, once): ``stored`` is the accepted record, else ``error`` is what
    the store call raised (the supervisor maps it to its own errors and answers
    ``reply``). The supervisor builds it with neither set, before the hand-off."""

    request: DelegateRequest
    reply: Reply
    runner: ChildRunner
    record: AttemptRecord
    stored: AttemptRecord | None = None
    error: BaseException | None = None


class NewsReady(msgspec.Struct, frozen=True, kw_only=True):
    """An attempt appended ``AttemptTerminal`` news to ``Runtime.news`` while the
    supervisor wants to hear at once: a wake-up, the news itself is in the deque."""


class AttemptUpdated(msgspec.Struct, frozen=True, kw_only=True):
    """A non-terminal change of the attempt was persisted (the supervisor's cached view)."""

    record: AttemptRecord


class AttemptLost(msgspec.Struct, frozen=True, kw_only=True):
    """Owner loss was confirmed; the attempt actor abandoned its local state."""

    attempt_id: str
    reason: str
    cancellation_receipts: dict[str, str | None]


class Rerouted(msgspec.Struct, frozen=True, kw_only=True):
    """A request (``Steer``, ``Cancel`` or ``Describe``) that reached an attempt actor
    after it stopped; the supervisor answers it from its table. The attempt's end
    (``AttemptTerminal`` / ``AttemptLost``) is always ahead of it in the mailbox."""

    attempt_id: str
    message: Any
