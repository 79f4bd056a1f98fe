"""The metrics an executor's task runner serves (pure: a registry, no server)."""

from __future__ import annotations

import pytest

from eddy_runtime.executor.metrics import ExecutorMetrics
from eddy_runtime.protocol.work import ItemResult
from eddy_runtime.state import StoreFigures, TaskFigures

pytestmark = pytest.mark.unit


def _standby_figures(restored: int, lag: int, rate: float = 0.0) -> TaskFigures:
    eta = lag / rate if rate else (0.0 if lag == 0 else None)
    store = StoreFigures("counts", "wc-counts-changelog", 1, 99, restored, rate, lag, eta, lag, 2048, 17)
    return TaskFigures("wc", "1_1", "standby", False, (store,))


def _active_figures(latencies: tuple[float, ...]) -> TaskFigures:
    store = StoreFigures("counts", "wc-counts-changelog", 0, 120, 0, 0.0, 0, None, None, 4096, 30)
    return TaskFigures("wc", "1_0", "active", False, (store,), commit_latencies_s=latencies, commits=len(latencies))


def test_executor_counts_records_latencies_and_keeps_its_standbys_progress():
    metrics = ExecutorMetrics()
    metrics.observe("wc", [
        ItemResult("1_0", "3", "active", "processed", records_in=40, records_out=12, duration_s=0.03,
                   figures=_active_figures((0.004,))),
        ItemResult("1_1", "3", "standby", "standby", figures=_standby_figures(restored=500, lag=300, rate=100.0)),
    ])
    value = metrics.registry.get_sample_value
    copy = {"app": "wc", "task": "1_1", "role": "standby", "store": "counts"}
    assert value("eddy_executor_restore_remaining_records", copy) == 300
    assert value("eddy_executor_restore_rate_records_per_second", copy) == 100.0
    assert value("eddy_executor_restore_eta_seconds", copy) == 3.0
    metrics.observe("wc", [
        ItemResult("1_0", "3", "active", "processed", records_in=2, records_out=1, duration_s=0.2,
                   figures=_active_figures((0.02,))),
        ItemResult("1_0", "3", "active", "processed", figures=_active_figures(())),  # nothing to read
        ItemResult("1_1", "3", "standby", "standby", figures=_standby_figures(restored=650, lag=0)),
    ])
    task = {"app": "wc", "task": "1_0"}
    assert value("eddy_executor_records_in_total", task) == 42
    assert value("eddy_executor_records_out_total", task) == 13
    assert value("eddy_executor_process_latency_seconds_count", task) == 2
    assert value("eddy_executor_process_latency_seconds_sum", task) == pytest.approx(0.23)
    assert value("eddy_executor_commit_latency_seconds_count", task) == 2
    assert value("eddy_executor_commit_latency_seconds_bucket", {**task, "le": "0.005"}) == 1
    assert value("eddy_executor_work_items_total", {"app": "wc", "role": "standby", "status": "standby"}) == 2
    assert value("eddy_executor_restored_records_total", copy) == 650
    assert value("eddy_executor_standby_lag_records", copy) == 0
    assert value("eddy_executor_restore_eta_seconds", copy) == 0
    assert value("eddy_executor_store_entries", copy) == 17
    assert value("eddy_executor_store_size_bytes", {**task, "role": "active", "store": "counts"}) == 4096

    # The active copy closes here (moved away, or failed) and comes back: its store series go,
    # its per-task series keep counting, so commits and items stay comparable.
    metrics.forget("wc", "1_0", ["counts"])
    assert value("eddy_executor_store_size_bytes", {**task, "role": "active", "store": "counts"}) is None
    metrics.observe("wc", [
        ItemResult("1_0", "3", "active", "processed", records_in=1, records_out=1, duration_s=0.01,
                   figures=_active_figures((0.003,))),
    ])
    assert value("eddy_executor_process_latency_seconds_count", task) == 3
    assert value("eddy_executor_commit_latency_seconds_count", task) == 3
