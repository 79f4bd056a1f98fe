"""End-to-end latency as the runners count it and the driver shows it: buckets fine enough to
tell the latencies Eddy reaches apart (pure: no servers)."""

from __future__ import annotations

import numpy as np
import pytest
from prometheus_client import generate_latest

from eddy_runtime.driver.metrics import DriverMetrics
from eddy_runtime.executor.active_batch import latency_histogram
from eddy_runtime.local.run import recent_latency

pytestmark = pytest.mark.unit


def driver_with(*latencies_ms: list[float]) -> DriverMetrics:
    metrics = DriverMetrics("wc")
    for batch in latencies_ms:
        counts, total = latency_histogram(np.asarray(batch) / 1000)
        metrics.latency.add(counts, total)
    return metrics


def test_a_p99_of_150_ms_reads_as_150_ms_not_the_next_coarse_bucket():
    metrics = driver_with([80.0] * 50 + [95.0] * 40 + [140.0] * 10)
    assert metrics.latency.quantile(0.5) == 0.1
    assert metrics.latency.quantile(0.99) == 0.15
    exposed = generate_latest(metrics.registry).decode()
    assert 'eddy_driver_end_to_end_latency_seconds_bucket{app="wc",le="0.1"} 90.0' in exposed
    assert 'eddy_driver_end_to_end_latency_seconds_bucket{app="wc",le="0.15"} 100.0' in exposed


def test_milliseconds_and_tens_of_seconds_have_buckets_of_their_own():
    metrics = driver_with([1.5] * 99 + [25_000.0])
    assert metrics.latency.quantile(0.5) == 0.002
    assert metrics.latency.quantile(1.0) == 30.0


def test_a_progress_line_shows_the_latency_of_the_records_since_the_line_before():
    metrics = driver_with([4_000.0] * 100)  # records that waited for the app to start
    first = metrics.latency.snapshot()
    assert recent_latency((), first) == ", end-to-end latency since the last line p50 <= 5000 ms, p99 <= 5000 ms"
    counts, total = latency_histogram(np.asarray([0.04] * 95 + [0.14] * 5))
    metrics.latency.add(counts, total)
    assert recent_latency(first, metrics.latency.snapshot()) == (
        ", end-to-end latency since the last line p50 <= 50 ms, p99 <= 150 ms")
    assert recent_latency(metrics.latency.snapshot(), metrics.latency.snapshot()) == ""


def test_counts_over_other_buckets_are_left_out_rather_than_misplaced():
    metrics = driver_with([100.0])
    metrics.latency.add((5, 0, 0), 1.0)  # a runner of another version during an upgrade
    assert sum(metrics.latency.snapshot()) == 1
