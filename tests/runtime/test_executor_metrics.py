"""The metrics an executor's task runner serves on its pod (pure: a registry, no server)."""

from __future__ import annotations

import pytest

from eddy_runtime.metrics import ExecutorMetrics
from eddy_runtime.state import StoreFigures, TaskFigures
from eddy_runtime.work import ItemResult

pytestmark = pytest.mark.unit


def _standby_figures(restored: int, lag: int) -> TaskFigures:
    store = StoreFigures("counts", "wc-counts-changelog", 1, 99, restored, 0.0, 0, None, lag, 0, 0)
    return TaskFigures("wc", "1_1", "standby", False, (store,))


def test_executor_counts_records_per_task_and_role_and_keeps_its_standbys_state():
    metrics = ExecutorMetrics()
    metrics.observe("wc", [
        ItemResult("1_0", "3", "active", "processed", records_in=40, records_out=12),
        ItemResult("1_1", "3", "standby", "processed", figures=_standby_figures(restored=500, lag=7)),
    ])
    metrics.observe("wc", [
        ItemResult("1_0", "3", "active", "processed", records_in=2, records_out=1),
        ItemResult("1_1", "3", "standby", "processed", figures=_standby_figures(restored=650, lag=0)),
    ])
    value = metrics.registry.get_sample_value
    assert value("eddy_executor_records_in_total", {"app": "wc", "task": "1_0", "role": "active"}) == 42
    assert value("eddy_executor_records_out_total", {"app": "wc", "task": "1_0", "role": "active"}) == 13
    assert value("eddy_executor_work_items_total", {"app": "wc", "role": "standby", "status": "processed"}) == 2
    store = {"app": "wc", "task": "1_1", "store": "counts"}
    assert value("eddy_state_restored_records_total", store) == 650
    assert value("eddy_state_standby_lag_records", store) == 0
