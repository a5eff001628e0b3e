"""Subagent execution hooks: application policy around one delegated child run."""

from __future__ import annotations

from typing import Any, ClassVar, Self

import msgspec

from .._agent._context import AgentContext
from .._agent._ids import RunId, TaskId, dec_hook
from .._agent._records import Record
from .._agent._usage import Usage
from .._errors import PayloadError


class SubagentExecutionMetadata(Record, frozen=True, kw_only=True):
    """What an execution hook knows about one delegation.

    ``child_run_id`` is assigned before the hooks run, so ``before`` and
    ``after`` see the same id the child run will report.
    """

    name: str
    task_id: TaskId
    prompt: str
    task_metadata: dict[str, Any] = msgspec.field(default_factory=dict)
    child_agent_id: str
    child_run_id: RunId
    parent_agent_id: str
    parent_run_id: RunId | None = None


class SubagentExecutionOutcome(Record, frozen=True, kw_only=True, tag_field="outcome"):
    """How a delegated child run ended: ``.Completed`` or ``.Failed``.

    Match with ``isinstance(outcome, SubagentExecutionOutcome.Completed)``.
    """

    Completed: ClassVar[type[_Completed]]
    Failed: ClassVar[type[_Failed]]

    @classmethod
    def from_value(cls, value: Any) -> Self:
        """Decode either variant (by its ``outcome`` tag) when called on the base class."""
        if cls is not SubagentExecutionOutcome:
            return super().from_value(value)
        try:
            decoded = msgspec.convert(value, _Completed | _Failed, dec_hook=dec_hook)
        except msgspec.ValidationError as error:
            raise PayloadError(
                f"value does not decode into SubagentExecutionOutcome: {error}",
                type=cls.__name__,
                detail=str(error),
            ) from error
        return decoded  # type: ignore[return-value]


class _Completed(SubagentExecutionOutcome, frozen=True, kw_only=True, tag="completed"):
    """The child run finished with ``output``; ``usage`` is the child's own usage."""

    output: str
    usage: Usage
    run_id: RunId | None = None


class _Failed(SubagentExecutionOutcome, frozen=True, kw_only=True, tag="failed"):
    """The child run raised; ``error`` is its message."""

    error: str
    run_id: RunId | None = None


for _cls, _name in ((_Completed, "Completed"), (_Failed, "Failed")):
    _cls.__name__ = _name
    _cls.__qualname__ = f"SubagentExecutionOutcome.{_name}"
SubagentExecutionOutcome.Completed = _Completed
SubagentExecutionOutcome.Failed = _Failed


class SubagentExecutionHook:
    """Application policy around one delegated child run. Subclass and override.

    Both methods are awaited in order of registration, on the event loop that
    runs the delegation, inline (the child waits for ``before``; the
    delegation result waits for ``after``).

    - ``before_subagent_run`` may mutate ``child_context`` (metadata,
      dependencies) before the child starts. If it raises, the child never
      runs: the delegation fails with :class:`SubagentHookError` (``hook =
      "before_subagent_run"``) and a ``subagent_failed`` event naming the hook.
    - ``after_subagent_run`` observes the outcome; it cannot change the result.
      If it raises after a completed child, the delegation fails the same way
      (``hook = "after_subagent_run"``). After a failed child its error is
      recorded in the failed event (``hook_error``) and the child's error wins.

    ``BaseException`` signals (cancellation) are never caught.
    """

    async def before_subagent_run(
        self, metadata: SubagentExecutionMetadata, child_context: AgentContext
    ) -> None:
        return None

    async def after_subagent_run(
        self,
        metadata: SubagentExecutionMetadata,
        child_context: AgentContext,
        outcome: SubagentExecutionOutcome,
    ) -> None:
        return None
