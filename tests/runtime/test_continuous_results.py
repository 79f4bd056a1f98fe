"""What a runner's continuous loop reports at a sync: one result per task, added up (pure)."""

from __future__ import annotations

import pytest

from eddy_runtime.executor.results import merge_results
from eddy_runtime.protocol.work import BadRecordInfo, ItemResult

pytestmark = pytest.mark.unit


def test_commits_between_two_syncs_add_up_and_the_last_one_says_where_the_task_is():
    a = ItemResult("1_0", "2", "active", "processed", records_in=10, records_out=4, committed={("t", 0): 10},
                   latency_counts=(1, 2, 0), latency_sum_s=0.5, skipped=1,
                   bad_records=(BadRecordInfo("t", 0, 3, "bad"),))
    b = ItemResult("1_0", "2", "active", "processed", records_in=5, records_out=5, committed={("t", 0): 15},
                   latency_counts=(0, 1, 1), latency_sum_s=0.25, dead_lettered=2)
    m = merge_results(merge_results(None, a), b)
    assert (m.records_in, m.records_out, m.skipped, m.dead_lettered) == (15, 9, 1, 2)
    assert m.committed == {("t", 0): 15}
    assert (m.latency_counts, m.latency_sum_s) == ((1, 3, 1), 0.75)
    assert m.bad_records == a.bad_records


def test_a_failure_after_commits_is_reported_with_what_was_committed_before_it():
    ok = ItemResult("1_0", "2", "active", "processed", records_in=7, committed={("t", 0): 7}, latency_counts=(1,))
    failed = ItemResult("1_0", "2", "active", "bad-record", message="bad record at t[0] offset 7")
    m = merge_results(ok, failed)
    assert (m.status, m.message, m.records_in, m.committed, m.latency_counts) == (
        "bad-record", "bad record at t[0] offset 7", 7, {("t", 0): 7}, (1,))
