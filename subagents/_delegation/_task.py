"""The delegation envelope: :class:`SubagentTask` in, :class:`SubagentResult` out."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self

import msgspec

from .._agent._ids import RunId, TaskId
from .._agent._result import AgentResult
from .._agent._usage import Usage
from .._errors import PayloadError


class SubagentTask:
    """One prompt for a subagent, with a task id and application metadata.

    Immutable: ``with_id`` / ``with_metadata`` return new tasks. The id
    defaults to a fresh random ``TaskId``. ``metadata`` is copied into the
    task's lifecycle events (so keep it JSON).
    """

    __slots__ = ("id", "metadata", "prompt")

    id: TaskId
    prompt: str
    metadata: dict[str, Any]

    def __init__(
        self, prompt: str, *, id: TaskId | None = None, metadata: Mapping[str, Any] | None = None
    ) -> None:
        if not isinstance(prompt, str):
            raise TypeError(f"SubagentTask prompt must be str, got {type(prompt).__name__}")
        object.__setattr__(self, "prompt", prompt)
        object.__setattr__(self, "id", TaskId() if id is None else id)
        object.__setattr__(self, "metadata", dict(metadata) if metadata else {})

    def with_id(self, task_id: TaskId) -> SubagentTask:
        return SubagentTask(self.prompt, id=task_id, metadata=self.metadata)

    def with_metadata(self, metadata: Mapping[str, Any]) -> SubagentTask:
        """A copy whose metadata is ``metadata`` (a JSON object)."""
        if not isinstance(metadata, Mapping):
            raise TypeError(
                f"SubagentTask metadata must be a JSON object, got {type(metadata).__name__}"
            )
        return SubagentTask(self.prompt, id=self.id, metadata=metadata)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("SubagentTask is immutable; use with_id/with_metadata")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SubagentTask):
            return NotImplemented
        return (self.id, self.prompt, self.metadata) == (other.id, other.prompt, other.metadata)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"SubagentTask({self.prompt!r}, id={self.id!r}, metadata={self.metadata!r})"

    def to_value(self) -> dict[str, Any]:
        return {"id": self.id.as_str(), "prompt": self.prompt, "metadata": dict(self.metadata)}

    @classmethod
    def from_value(cls, value: Any) -> Self:
        try:
            raw = msgspec.convert(value, _TaskValue)
        except msgspec.ValidationError as error:
            raise PayloadError(
                f"value does not decode into SubagentTask: {error}",
                type="SubagentTask",
                detail=str(error),
            ) from error
        return cls(raw.prompt, id=TaskId(raw.id), metadata=raw.metadata)


class _TaskValue(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    prompt: str
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)


class SubagentResult:
    """The envelope a delegation returns: subagent ``name``, the ``task``, the child ``result``."""

    __slots__ = ("name", "result", "task")

    def __init__(self, name: str, task: SubagentTask, result: AgentResult) -> None:
        self.name = name
        self.task = task
        self.result = result

    def output(self) -> str:
        return self.result.output

    @property
    def usage(self) -> Usage:
        return self.result.usage

    @property
    def run_id(self) -> RunId:
        return self.result.run_id

    def into_result(self) -> AgentResult:
        return self.result

    def __repr__(self) -> str:
        return f"SubagentResult(name={self.name!r}, task={self.task!r}, output={self.output()!r})"
