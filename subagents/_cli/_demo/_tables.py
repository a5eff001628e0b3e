"""The demo's printed tables: the timeline of every attempt, the attempts and the runs."""

from __future__ import annotations

from collections.abc import Sequence

from rich.markup import escape
from rich.table import Table

from storage import ASYNC_SUBAGENT_RESULT, AttemptRecord

from ._common import SESSION
from ._store import Snapshot, continuation_runs

Note = tuple[float, str, str, str]
"""``(at, subagent, transition, detail)``: a row the story adds to the timeline."""


def delivery(snap: Snapshot, record: AttemptRecord) -> str:
    """One line: how an attempt ended and how its result reached the parent."""
    why = record.failure_category or record.cancellation_reason
    if why == str(record.execution_status):
        why = None
    head = f"{record.subagent_name}: {record.execution_status}" + (f" ({why})" if why else "")
    run = next((r for r in snap.runs if r.run_id == record.continuation_run_id), None)
    if run is None:
        return f"{head} -> delivered inside a live parent run (no continuation run needed)"
    return (
        f"{head} -> one continuation run {short(run.run_id)}, which answered: "
        f"[italic]{escape(run.output_preview or '')}[/]"
    )


def short(identifier: str) -> str:
    """``subattempt_1277b998-...`` -> ``subattempt_1277b998`` (tables stay narrow)."""
    prefix, _, rest = identifier.partition("_")
    return f"{prefix}_{rest[:8]}" if rest else identifier[:12]


def _at(t0: float, at: float | None) -> str:
    return "-" if at is None else f"+{max(at - t0, 0.0):6.2f}s"


def timeline(snap: Snapshot, notes: Sequence[Note], t0: float) -> Table:
    """Every attempt's transitions: store records, event log and the story's own ``notes``;
    times are seconds after ``t0``."""
    rows: list[Note] = []
    by_attempt = {r.attempt_id: r for r in snap.attempts}
    for record in snap.attempts:
        name = record.subagent_name
        rows.append(
            (
                record.accepted_at,
                name,
                "accepted",
                f"{short(record.attempt_id)} by {record.owner_lease.host_instance_id}"
                if record.owner_lease.host_instance_id == "demo-host-1"
                else short(record.attempt_id),
            )
        )
        if record.terminal_at is not None:
            why = record.failure_category or record.cancellation_reason or ""
            rows.append(
                (record.terminal_at, name, str(record.execution_status), why or "result stored")
            )
    for event in snap.events:
        attempt_id = event.data.get("attempt_id")
        if event.kind == "run.admitted" and attempt_id in by_attempt:
            name = by_attempt[str(attempt_id)].subagent_name
            rows.append((event.at, name, "continuation admitted", short(event.run_id or "")))
    cont_runs = {
        r.run_id: r.metadata.get("async_subagent.attempt_id", "")
        for r in snap.runs
        if r.trigger_type == ASYNC_SUBAGENT_RESULT
    }
    for event in snap.events:
        if event.kind in {"run.completed", "run.failed"} and event.run_id in cont_runs:
            consumed = by_attempt.get(cont_runs[event.run_id])
            if consumed is not None:
                rows.append(
                    (
                        event.at,
                        consumed.subagent_name,
                        "delivered (" + event.kind.split(".")[1] + ")",
                        short(event.run_id or ""),
                    )
                )
    rows.extend(notes)
    table = Table(title="timeline of every attempt")
    table.add_column("at", justify="right", no_wrap=True)
    table.add_column("subagent", no_wrap=True)
    table.add_column("transition", no_wrap=True)
    table.add_column("detail", overflow="fold")
    for at, name, transition, detail in sorted(rows, key=lambda row: row[0]):
        style = {"failed": "red", "cancelled": "yellow", "completed": "green"}.get(transition, "")
        table.add_row(
            _at(t0, at),
            name,
            f"[{style}]{transition}[/]" if style else transition,
            escape(detail),
        )
    return table


def attempts_table(snap: Snapshot) -> Table:
    conts = continuation_runs(snap)
    table = Table(title="attempts (final store records)")
    for column in ("subagent", "attempt", "execution", "why", "delivery", "continuation runs"):
        table.add_column(column, overflow="fold")
    for record in snap.attempts:
        table.add_row(
            record.subagent_name,
            short(record.attempt_id),
            str(record.execution_status),
            record.failure_category or record.cancellation_reason or "-",
            str(record.delivery_status),
            str(len(conts.get(record.attempt_id, []))),
        )
    return table


def runs_table(snap: Snapshot) -> Table:
    table = Table(title=f"runs of session {SESSION!r}")
    for column in ("#", "run", "trigger", "status", "answer"):
        table.add_column(column, overflow="fold")
    for run in snap.runs:
        table.add_row(
            str(run.sequence_no),
            short(run.run_id),
            run.trigger_type or "-",
            str(run.status),
            escape(run.output_preview or ""),
        )
    return table
