"""Turn delivery: background results handed to the parent at its turn boundary.

:class:`_AsyncDelegation` binds one agent's registry to a supervisor; the
delegating agent calls :meth:`_AsyncDelegation.deliver_pending` at the start
of every turn, and ``wait_subagent`` applies the deltas it delivers with
:meth:`_AsyncDelegation.apply`.
"""

from __future__ import annotations

import logging

import msgspec

from actors import BackgroundSubagentError, BackgroundSubagentSupervisor, WaitResult

from .._agent._context import AgentContext
from .._agent._models import ModelMessage, UserPromptPart
from ._background import (
    BackgroundSubagentRunner,
    SubagentContextDelta,
    _append_parts,
    _shared_state,
)
from ._registry import SubagentRegistry

log = logging.getLogger("subagents.delegation")

#: Prefix of a background result injected into the parent's next turn.
BACKGROUND_RESULT_PREFIX = "[background subagent result] "
#: ``AgentContext.metadata`` key naming the durable run an agent run is (set by
#: the host): results this run takes are claimed for it, acknowledged when it completes.
DURABLE_RUN_KEY = "subagents.durable_run_id"
_TURN_CLAIM_WAIT = 1.0


def durable_run_id(context: AgentContext | None) -> str | None:
    """The durable run ``context`` belongs to (:data:`DURABLE_RUN_KEY`), if any."""
    if context is None:
        return None
    found = context.metadata.get(DURABLE_RUN_KEY)
    return found if isinstance(found, str) and found else None


class _AsyncDelegation:
    """One agent's async delegation: its registry, the supervisor, the runner adapter.

    Built by :func:`subagents.delegation_tools` and held by the agent, which
    calls :meth:`deliver_pending` at the start of every turn.
    """

    def __init__(
        self, registry: SubagentRegistry, supervisor: BackgroundSubagentSupervisor
    ) -> None:
        self.registry = registry
        self.supervisor = supervisor
        self.runner = BackgroundSubagentRunner(registry, supervisor)
        self.state = _shared_state(supervisor)

    @staticmethod
    def apply(context: AgentContext | None, waited: WaitResult) -> bool:
        """Apply the delta a delivering wait handed out into ``context`` (the
        supervisor hands each delta out once, with the delivery); whether one was."""
        delta = waited.context_delta
        if not isinstance(delta, SubagentContextDelta) or context is None:
            return False
        delta.apply(context)
        return True

    async def deliver_pending(
        self, messages: list[ModelMessage], context: AgentContext
    ) -> list[WaitResult]:
        """The parent's turn boundary: deliver the pending results of attempts the
        SDK's background tools launched on this supervisor (and nobody else claimed),
        apply each delta to ``context`` once, and append each result to the latest
        request as a user message. Nothing to do (and no store call) when every
        launched attempt was delivered already.

        Attempts a host accepted directly through the supervisor are the host's
        to deliver (RPC links each late result to its own continuation run), so
        they are left alone. Store trouble leaves results pending (logged). In a
        host's durable run (:data:`DURABLE_RUN_KEY`) each result is claimed for
        that run and acknowledged only when it completes.
        """
        launched = self.state.launched_ids()
        if not launched:
            return []
        try:
            info = await self.supervisor.info()
        except BackgroundSubagentError.Closing:
            # Shut down: the results stay in the store (take_pending still reads them).
            return []
        except BackgroundSubagentError as error:
            log.warning("pending background results stay pending: %s", error)
            return []
        active = {a.attempt_id for a in info.active}
        ready = [r.attempt_id for r in info.retained if r.attempt_id in launched]
        # Neither running nor pending: delivered elsewhere (a callback) or lost.
        self.state.forget(launched - active - set(ready))
        delivered: list[WaitResult] = []
        for attempt_id in ready:
            try:
                # Terminal already: this returns at once (the bound only covers the
                # moment between the terminal commit and the supervisor seeing it).
                waited = await self.supervisor.wait(
                    attempt_id, _TURN_CLAIM_WAIT, durable_run_id(context)
                )
            except BackgroundSubagentError as error:
                log.warning("background result %s stays pending: %s", attempt_id, error)
                continue
            if _delivered_elsewhere(waited):
                self.state.forget({attempt_id})
            if not _delivered_by(waited):
                continue
            self.state.forget({attempt_id})
            self.apply(context, waited)
            delivered.append(waited)
        _append_parts(
            messages,
            [
                UserPromptPart(
                    content=BACKGROUND_RESULT_PREFIX
                    + msgspec.json.encode(waited.to_value()).decode()
                )
                for waited in delivered
            ],
        )
        return delivered


def _delivered_by(waited: WaitResult) -> bool:
    """Whether this wait itself delivered a terminal result."""
    return (
        waited.attempt_id is not None
        and not waited.timed_out
        and not waited.owned_elsewhere
        and waited.status not in ("not_found", "summary")
        and waited.delivery_status == "delivered"
    )


def _delivered_elsewhere(waited: WaitResult) -> bool:
    return waited.owned_elsewhere and waited.delivery_status == "delivered"
