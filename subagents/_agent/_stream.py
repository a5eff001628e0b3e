"""Stream records, their subagent attribution, and the sink that sequences them.

A run started with ``Agent.run_stream`` emits :class:`AgentStreamRecord`\\ s
with strictly increasing ``sequence`` numbers. When the ``delegate`` tool runs
inside that stream, the child's records are pushed into the same
:class:`AgentStreamSink`: they get the parent's next sequence numbers and a
:class:`AgentStreamSource` naming the child (its original sequence is
``source.source_sequence``). Because that delegation is blocking, every child
record is emitted before the parent's ``tool_return`` for that call. A
background child (async delegation) keeps the same attribution, but its
records go to the accepting parent context's event bus as
``subagent_stream_record`` events, since the parent's stream may have ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

from ._ids import RunId, TaskId
from ._records import Record

# Record kinds emitted by the run loop.
RUN_STARTED = "run_started"
TEXT_DELTA = "text_delta"
TOOL_CALL_DELTA = "tool_call_delta"
MODEL_RESPONSE = "model_response"
TOOL_CALL = "tool_call"
TOOL_RETURN = "tool_return"
TOOL_RETRY = "tool_retry"
RUN_COMPLETED = "run_completed"


class AgentStreamSourceKind(enum.Enum):
    """Where a stream record came from, when not from the agent itself."""

    SUBAGENT = "subagent"


class AgentStreamSource(Record, frozen=True, kw_only=True):
    """Attribution of a record that a delegated child produced.

    ``source_sequence`` is the record's sequence number in the child's own
    stream, before it was rebased into the parent's.
    """

    kind: AgentStreamSourceKind = AgentStreamSourceKind.SUBAGENT
    agent_id: str
    agent_name: str
    task_id: TaskId
    run_id: RunId | None = None
    parent_run_id: RunId | None = None
    source_sequence: int


class AgentStreamRecord(Record, frozen=True, kw_only=True):
    """One stream record: ``sequence``, ``kind``, JSON ``payload``, optional ``source``."""

    sequence: int
    kind: str
    payload: Any = None
    source: AgentStreamSource | None = None


class AgentStreamSink:
    """Assigns sequence numbers and hands each record to ``on_record``.

    ``on_record`` runs synchronously, on the loop running the agent, inside
    ``push``; if it raises, the error propagates into the run that pushed.
    A sink with ``live=False`` only collects (for republishing after the
    run): the run loop then asks the model without streaming and emits no
    ``text_delta`` records.
    """

    __slots__ = ("_next", "_on_record", "live")

    def __init__(
        self, on_record: Callable[[AgentStreamRecord], None], *, live: bool = True
    ) -> None:
        self._on_record = on_record
        self._next = 0
        self.live = live

    def push(self, kind: str, payload: Any, source: AgentStreamSource | None = None) -> None:
        record = AgentStreamRecord(sequence=self._next, kind=kind, payload=payload, source=source)
        self._next += 1
        self._on_record(record)


T = TypeVar("T")
_DONE = object()


class AgentStream(Generic[T]):
    """The async iterator returned by ``Agent.run_stream``.

    The run starts, as a task on the current loop, at the first iteration;
    records are yielded as they are pushed. After the last record,
    ``result`` holds the run's result, or iterating raises the run's error.
    ``aclose()`` (or leaving an ``async with`` block) cancels an unfinished
    run; a consumer that stops iterating without closing leaves the run
    going to completion.
    """

    def __init__(self, start: Callable[[AgentStreamSink], Awaitable[T]]) -> None:
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._start = start
        self._task: asyncio.Task[T] | None = None
        self._result: T | None = None

    @property
    def result(self) -> T:
        """The run's result; raises ``RuntimeError`` until the stream is exhausted."""
        if self._task is None or not self._task.done() or self._result is None:
            raise RuntimeError("the stream has not finished yet")
        return self._result

    def _ensure_started(self) -> asyncio.Task[T]:
        if self._task is None:
            sink = AgentStreamSink(self._queue.put_nowait)
            self._task = asyncio.ensure_future(self._start(sink))
            self._task.add_done_callback(lambda _: self._queue.put_nowait(_DONE))
        return self._task

    def __aiter__(self) -> AgentStream[T]:
        return self

    async def __anext__(self) -> AgentStreamRecord:
        task = self._ensure_started()
        item = await self._queue.get()
        if item is _DONE:
            # Re-arm so further calls also stop instead of waiting forever.
            self._queue.put_nowait(_DONE)
            self._result = task.result()
            raise StopAsyncIteration
        record: AgentStreamRecord = item
        return record

    async def aclose(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def __aenter__(self) -> AgentStream[T]:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
