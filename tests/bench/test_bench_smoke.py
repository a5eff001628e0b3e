"""bench/store.py runs end to end (quick mode) and reports every figure with its target.

A smoke test only: it never asserts timing.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from bench_helpers import run_bench

BENCH = "store.py"
UUID_ID = r"subattempt_[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}"
OPERATIONS = {"accept", "update", "heartbeat", "terminal_commit", "claim", "acknowledge"}


def test_the_store_bench_prints_every_operation_and_the_reconcile_ratio_as_json() -> None:
    done = run_bench(BENCH, "--quick", "--json")
    result = json.loads(done.stdout)

    assert set(result["operations"]) == OPERATIONS
    for figure in result["operations"].values():
        assert figure["ops_per_s"] > 0
        assert figure["raw_commits_per_s"] > 0
        assert figure["target_ratio_min"] == 0.75
        assert figure["ratio_min"] <= figure["ratio_to_raw"] <= figure["ratio_max"]
        assert figure["commits_per_op"] == 1.0  # one durable commit per operation
        assert isinstance(figure["meets_target"], bool)
        if sys.platform == "linux":  # counted from /proc/self/io
            assert figure["pages_per_op"] >= 1
            assert figure["raw_pages_per_commit"] >= 1
            assert figure["rewrite_pages_per_commit"] >= 1  # the op's puts, written again
            assert figure["colocated_pages_per_commit"] >= 1
        # The ratio split in two: the layout's cost (a rewrite of the op's own puts)
        # and the store code's cost on top of it; and the bound of a co-located layout.
        for split in ("layout_ratio", "code_ratio", "colocated_ratio"):
            assert 0 < figure[f"{split}_min"] <= figure[split] <= figure[f"{split}_max"]
    reconcile = result["reconcile"]
    assert reconcile["target_ratio_max"] == 2.0
    assert reconcile["large_history_terminal"] > reconcile["small_history_terminal"]
    assert reconcile["ratio"] > 0
    # The history is spread over sessions of 8 attempts, not piled into one.
    assert reconcile["attempts_per_session"] == 8
    per = reconcile["attempts_per_session"]
    for size in ("small", "large"):
        attempts = reconcile[f"{size}_history_terminal"] + reconcile["active"]
        assert reconcile[f"{size}_sessions"] == -(-attempts // per)
    # One session's lookup on the same two histories (the bench checks its answers).
    lookup = result["lookup"]
    assert lookup["target_ratio_max"] == 2.0
    assert lookup["small_seconds"] > 0 and lookup["large_seconds"] > 0
    assert lookup["ratio_min"] <= lookup["ratio"] <= lookup["ratio_max"]


def test_the_store_bench_measures_the_journaled_store_without_a_rewrite_side() -> None:
    done = run_bench(BENCH, "--quick", "--json", "--journal")
    result = json.loads(done.stdout)
    assert result["journal"] is True
    assert set(result["operations"]) == OPERATIONS
    for figure in result["operations"].values():
        assert figure["ops_per_s"] > 0 and figure["raw_commits_per_s"] > 0
        assert figure["commits_per_op"] == 1.0  # a checkpoint flushes; it commits nothing
        assert "layout_ratio" not in figure and "colocated_ratio" not in figure


def test_the_store_bench_prints_a_table_for_people() -> None:
    done = run_bench(BENCH, "--quick", "--ids", "supervisor")
    for name in OPERATIONS:
        assert name in done.stdout
    assert "reconcile ratio" in done.stdout
    assert "session lookup ratio" in done.stdout
    assert "(supervisor ids)" in done.stdout
    assert "8 attempts per session" in done.stdout
    assert "pages/commit" in done.stdout
    assert "layout x raw" in done.stdout and "ours x layout" in done.stdout
    assert "co-located x raw" in done.stdout


def test_supervisor_shaped_ids_look_like_the_supervisors_and_repeat_from_run_to_run() -> None:
    from bench.store import Records
    from storage import ManualClock

    records = Records(ManualClock(start=0.0), "supervisor")
    first = [records.acceptance(n) for n in range(50)]
    again = [records.acceptance(n) for n in range(50)]
    assert [r.attempt_id for r in first] == [r.attempt_id for r in again]
    assert len({r.attempt_id for r in first}) == 50
    for record in first:
        assert re.fullmatch(UUID_ID, record.attempt_id)
        assert re.fullmatch(r"bench-bg-[0-9a-f]{8}", record.agent_id)
    # Not in acceptance order: that is what makes them land on random leaves.
    assert [r.attempt_id for r in first] != sorted(r.attempt_id for r in first)

    sequential = Records(ManualClock(start=0.0))
    assert sequential.acceptance(7).attempt_id == "subattempt_00000007"
    with pytest.raises(ValueError, match="ids must be one of"):
        Records(ManualClock(start=0.0), "uuid")


def test_the_rewrite_side_puts_an_operation_s_own_bytes_again_and_leaves_the_store_intact(
    tmp_path: Path,
) -> None:
    from bench.store import MAP_SIZE, Records, Rewrite, _setup_session
    from storage import LmdbSessionStore, ManualClock, _lmdb
    from storage.admin import check

    original_put = _lmdb._LmdbTxn.put
    clock = ManualClock(start=1_700_000_000.0)
    records = Records(clock)
    store = LmdbSessionStore(tmp_path / "store", clock=clock, sync=True, map_size=MAP_SIZE)
    rewrite = Rewrite(store)
    try:
        _setup_session(store, clock, records.session_id)
        accepted = records.acceptance(1)
        rewrite.record(lambda: store.accept_attempt(accepted))
        env = store.lmdb_backend._live().env
        txn_before = env.info()["last_txnid"]
        assert rewrite.commit() > 0
        assert env.info()["last_txnid"] == txn_before + 1  # one durable transaction
        assert rewrite.commits == 1
        rewrite.record(lambda: store.load_attempt(accepted.attempt_id))  # a read: no puts
        rewrite.commit()
        assert rewrite.commits == 1 and env.info()["last_txnid"] == txn_before + 1
        assert store.load_attempt(accepted.attempt_id).attempt_id == accepted.attempt_id
        assert check(store).ok  # the same sealed bytes: every record and index still checks
    finally:
        rewrite.close()
        store.close()
    assert _lmdb._LmdbTxn.put is original_put  # the store's backend is itself again


def test_the_co_located_side_puts_an_operation_s_values_under_adjacent_keys_in_one_tree(
    tmp_path: Path,
) -> None:
    import lmdb

    from bench.store import MAP_SIZE, Colocated, Records, Rewrite, _setup_session
    from storage import LmdbSessionStore, ManualClock

    clock = ManualClock(start=1_700_000_000.0)
    records = Records(clock)
    store = LmdbSessionStore(tmp_path / "store", clock=clock, sync=True, map_size=MAP_SIZE)
    rewrite = Rewrite(store)
    colocated = Colocated(tmp_path / "colocated")
    try:
        _setup_session(store, clock, records.session_id)
        for n in (1, 2):
            accepted = records.acceptance(n)
            rewrite.record(lambda accepted=accepted: store.accept_attempt(accepted))
            assert colocated.put_together(rewrite.values()) > 0
        noted = rewrite.values()
        assert len(noted) >= 3  # the record, its index entry and its event at least
        assert colocated.put_together([]) == 0.0  # nothing noted: no transaction
    finally:
        rewrite.close()
        colocated.close()
        store.close()
    env = lmdb.Environment(str(tmp_path / "colocated"), max_dbs=2, readonly=True, lock=False)
    try:
        with env.begin() as txn:
            assert env.info()["last_txnid"] == 3  # the tree's creation, then one per operation
            cursor = txn.cursor(db=env.open_db(b"raw", txn=txn, create=False))
            stored = list(cursor)
    finally:
        env.close()
    # The second operation's values, in order, right after the first's: adjacent keys.
    assert [value for _, value in stored[-len(noted) :]] == noted
    assert [key for key, _ in stored] == sorted(key for key, _ in stored)
    assert all(key.startswith(b"op-00000001-") for key, _ in stored[-len(noted) :])
