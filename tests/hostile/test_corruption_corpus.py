"""The corruption corpus (:mod:`properties.reliability._corruption`), each case in a new process.

Each case damages a copy of one pristine data directory; a new process opens
it as a host does (:func:`subagents._host._datadir.open_store`: lock, store,
event log) and reads every value. It must refuse with a typed error, or serve
every undamaged value unchanged and raise ``CorruptRecord`` for the damaged
ones. It must never die from a signal, print a traceback, or serve a store
with values missing or changed as if it were whole.
"""

from __future__ import annotations

import os
from pathlib import Path

from properties.reliability._corruption import (
    ACCEPTABLE,
    HOST_PROBE,
    Outcome,
    cases,
    run_corpus,
    summary,
)

REPO = Path(__file__).resolve().parents[2]


def _report(outcomes: list[Outcome]) -> str:
    lines = [f"{o.verdict:12} {o.category:14} {o.case}: {o.detail}" for o in outcomes]
    return "\n".join([*lines, str(summary(outcomes))])


def test_the_corpus_has_at_least_40_distinct_cases_in_every_category() -> None:
    every = cases()
    assert len(every) >= 40
    assert len({c.name for c in every}) == len(every)
    assert {c.category for c in every} >= {
        "zero-length",
        "truncated",
        "zeroed range",
        "meta bit flip",
        "data bit flip",
        "marker",
        "lock file",
        "database",
        "full disk",
    }


def test_no_damaged_store_kills_the_host_prints_a_traceback_or_lies(tmp_path: Path) -> None:
    outcomes = run_corpus(tmp_path, probe=HOST_PROBE, env={**os.environ, "PYTHONPATH": str(REPO)})
    report = _report(outcomes)
    print(report)
    figures = summary(outcomes)
    assert figures["signal"] == figures["traceback"] == figures["silent loss"] == 0, report
    assert all(o.verdict in ACCEPTABLE for o in outcomes), report
    by_case = {o.case: o.verdict for o in outcomes}
    # The cases of the issue are refused, not served empty or killed.
    for case in (
        "zero-length data.mdb",
        "truncated to half",
        "truncated to 8191 bytes",
        "zeroed 64 KiB mid-file",
        "host.lock is a directory",
        "database missing",
        "marker of another store",
    ):
        assert by_case[case] == "refused", report
    assert by_case["marker missing"] == "whole"
    assert by_case["full disk"] == "whole"  # the write was storage_full, nothing lost
