"""What a runner's continuous loop reports at a sync: one result per task, added up (pure)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from eddy_runtime.executor.results import merge_results, share_busy
from eddy_runtime.protocol.work import BadRecordInfo, ItemResult

pytestmark = pytest.mark.unit


def test_commits_between_two_syncs_add_up_and_the_last_one_says_where_the_task_is():
    a = ItemResult("1_0", "2", "active", "processed", records_in=10, records_out=4, committed={("t", 0): 10},
                   latency_counts=(1, 2, 0), latency_sum_s=0.5, skipped=1,
                   bad_records=(BadRecordInfo("t", 0, 3, "bad"),))
    b = ItemResult("1_0", "2", "active", "processed", records_in=5, records_out=5, committed={("t", 0): 15},
                   latency_counts=(0, 1, 1), latency_sum_s=0.25, dead_lettered=2, busy_s=0.25)
    m = merge_results(merge_results(None, replace(a, busy_s=0.125)), b)
    assert (m.records_in, m.records_out, m.skipped, m.dead_lettered) == (15, 9, 1, 2)
    assert m.busy_s == 0.375
    assert m.committed == {("t", 0): 15}
    assert (m.latency_counts, m.latency_sum_s) == ((1, 3, 1), 0.75)
    assert m.bad_records == a.bad_records


def test_a_failure_after_commits_is_reported_with_what_was_committed_before_it():
    ok = ItemResult("1_0", "2", "active", "processed", records_in=7, committed={("t", 0): 7}, latency_counts=(1,))
    failed = ItemResult("1_0", "2", "active", "bad-record", message="bad record at t[0] offset 7")
    m = merge_results(ok, failed)
    assert (m.status, m.message, m.records_in, m.committed, m.latency_counts) == (
        "bad-record", "bad record at t[0] offset 7", 7, {("t", 0): 7}, (1,))


def test_a_copy_s_restore_progress_is_its_latest_not_the_sum_of_its_rounds():
    # a standby that tailed 2.5M records over three rounds between two syncs reported 13M restored
    rounds = [ItemResult("1_0", "3", "standby", "standby", restored=n, restore_remaining=2_500_000 - n)
              for n in (1_000_000, 2_000_000, 2_499_900)]
    m = None
    for r in rounds:
        m = merge_results(m, r)
    assert m is not None and (m.restored, m.restore_remaining) == (2_499_900, 100)


def test_a_round_s_busy_time_is_shared_by_its_tasks_records_and_adds_up_to_the_round():
    round_ = [ItemResult("0_0", "1", "active", "processed", records_in=300),
              ItemResult("1_0", "1", "active", "processed", records_in=100),
              ItemResult("0_1", "1", "active", "aborted")]
    assert [r.busy_s for r in share_busy(round_, 0.8)] == pytest.approx([0.6, 0.2, 0.0])
    # no task processed a record (all aborted before theirs): the time is shared evenly
    assert [r.busy_s for r in share_busy(round_[2:] * 2, 0.8)] == pytest.approx([0.4, 0.4])
    assert share_busy([], 0.8) == []
    # the round's per-round cost is shared the same way
    shared = share_busy(round_, 0.8, per_round_s=0.4)
    assert [r.busy_per_round_s for r in shared] == pytest.approx([0.3, 0.1, 0.0])
    assert merge_results(shared[0], shared[0]).busy_per_round_s == pytest.approx(0.6)
