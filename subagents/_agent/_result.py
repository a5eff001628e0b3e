"""The result of one agent run."""

from __future__ import annotations

from ._ids import RunId
from ._models import ModelMessage
from ._records import Record
from ._usage import Usage


class AgentResult(Record, frozen=True, kw_only=True):
    """A finished run: text ``output``, ``usage`` (this run plus its delegations),
    ``run_id`` and every ``messages`` exchanged with the model, in order."""

    output: str
    usage: Usage
    run_id: RunId
    messages: tuple[ModelMessage, ...] = ()
