"""Prometheus metrics made from a task's state figures."""

from __future__ import annotations

import pickle

import pytest
from prometheus_client import CollectorRegistry

from eddy_runtime.state.metrics import StateMetrics, StoreFigures, TaskFigures

pytestmark = pytest.mark.unit


def figures(restored: int, remaining: int, lag: int | None = None, latencies=()) -> TaskFigures:
    store = StoreFigures(store="counts", changelog_topic="wc-counts-changelog", changelog_partition=3,
                         changelog_offset=99, restored_records=restored, restore_rate=1000.0,
                         restore_remaining=remaining, restore_eta_s=remaining / 1000.0, standby_lag=lag,
                         size_bytes=4096, keys=12)
    return TaskFigures(app="wc", task_id="0_3", role="active" if lag is None else "standby", restoring=remaining > 0,
                       stores=(store,), commit_latencies_s=tuple(latencies), commits=len(latencies))


def value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, {"app": "wc", "task": "0_3", **labels})


def test_figures_become_eddy_state_metrics_per_task_and_store() -> None:
    registry = CollectorRegistry()
    metrics = StateMetrics(registry)
    metrics.observe(figures(restored=500, remaining=1500, latencies=[0.004, 0.02]))
    metrics.observe(figures(restored=2000, remaining=0))
    store = {"store": "counts"}
    assert value(registry, "eddy_state_restored_records_total", **store) == 2000
    assert value(registry, "eddy_state_restore_remaining_records", **store) == 0
    assert value(registry, "eddy_state_restore_rate_records_per_second", **store) == 1000.0
    assert value(registry, "eddy_state_store_size_bytes", **store) == 4096
    assert value(registry, "eddy_state_store_entries", **store) == 12
    assert value(registry, "eddy_state_changelog_offset", **store) == 99
    assert value(registry, "eddy_state_commit_latency_seconds_count") == 2
    assert value(registry, "eddy_state_commit_latency_seconds_bucket", le="0.005") == 1


def test_a_reopened_task_keeps_the_restored_counter_growing() -> None:
    registry = CollectorRegistry()
    metrics = StateMetrics(registry)
    metrics.observe(figures(restored=800, remaining=0))
    metrics.observe(figures(restored=300, remaining=0))  # a new manager counts from 0 again
    assert value(registry, "eddy_state_restored_records_total", store="counts") == 1100


def test_the_driver_view_keeps_the_active_copy_and_the_executor_view_every_copy() -> None:
    driver, executor = CollectorRegistry(), CollectorRegistry()
    on_driver, on_executor = StateMetrics(driver), StateMetrics(executor, prefix="eddy_executor", per_copy=True)
    for metrics in (on_driver, on_executor):
        metrics.observe(figures(restored=10, remaining=0))
        metrics.observe(figures(restored=10, remaining=42, lag=42))  # a standby of the same task
    # The driver cannot tell copies apart: the standby's figures would overwrite the active's.
    assert value(driver, "eddy_state_restore_remaining_records", store="counts") == 0
    assert driver.get_sample_value("eddy_state_standby_lag_records", {"app": "wc", "task": "0_3",
                                                                      "store": "counts"}) is None
    standby = {"store": "counts", "role": "standby"}
    assert value(executor, "eddy_executor_standby_lag_records", **standby) == 42
    assert value(executor, "eddy_executor_restore_remaining_records", **standby) == 42
    # One copy per task on an executor: the standby's series replaced the active's.
    assert value(executor, "eddy_executor_store_entries", store="counts", role="active") is None
    on_executor.forget("wc", "0_3", ["counts"])
    assert value(executor, "eddy_executor_standby_lag_records", **standby) is None


def test_figures_are_picklable_for_the_trip_from_executor_to_driver() -> None:
    f = figures(restored=1, remaining=2, latencies=[0.1])
    assert pickle.loads(pickle.dumps(f)) == f
