"""Prometheus metrics of the driver, served beside /healthz on ``spec.metricsPort``
(docs/metrics.md lists them).

Executors report figures inside each work item's result (`ItemResult`) and the driver exports them
(`DriverMetrics`): batch counts and durations, records in/out (totals and the last batch's rate),
end-to-end latency, per-task input lag, restoring and standby task counts, bad records; plus the
state figures of each task's active copy (`eddy_runtime.state.StateMetrics`, ``eddy_state_*``) on
the same registry.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import HistogramMetricFamily

from eddy_contract.histograms import DURATION_BUCKETS_S
from eddy_runtime.protocol.work import LATENCY_BUCKETS_S, ItemResult
from eddy_runtime.state import StateMetrics

__all__ = ["DriverMetrics", "quantile_upper_bound"]

log = logging.getLogger("eddy.driver")


def quantile_upper_bound(counts: Sequence[int], q: float) -> float | None:
    """The upper bound (seconds) of the `LATENCY_BUCKETS_S` bucket the `q` quantile of a histogram
    falls in (`counts`: per bucket, plus the overflow, which reads as inf); None when empty."""
    n = sum(counts)
    if n == 0:
        return None
    seen = 0
    for i, c in enumerate(counts):
        seen += c
        if seen >= q * n:
            return LATENCY_BUCKETS_S[i] if i < len(LATENCY_BUCKETS_S) else float("inf")
    return float("inf")


class _LatencyCollector:
    """End-to-end latency as a histogram merged from the executors' per-item bucket counts."""

    def __init__(self, app: str) -> None:
        self.app = app
        self.counts = [0] * (len(LATENCY_BUCKETS_S) + 1)
        self.sum = 0.0
        self._lock = threading.Lock()

    def add(self, counts: Sequence[int], total: float) -> None:
        if not counts:
            return
        if len(counts) != len(self.counts):
            # a runner of another version, with other buckets (during an upgrade): its counts
            # would land in the wrong buckets
            log.warning("end-to-end latency counts over %d buckets, not %d: not counted", len(counts),
                        len(self.counts))
            return
        with self._lock:
            for i, c in enumerate(counts):
                self.counts[i] += c
            self.sum += total

    def snapshot(self) -> tuple[int, ...]:
        """The counts per bucket so far (the histogram is cumulative: subtract an earlier snapshot
        for the latencies of a span of time)."""
        with self._lock:
            return tuple(self.counts)

    def quantile(self, q: float) -> float | None:
        """An upper bound of the `q` quantile since the driver started (the bucket it falls in), None when empty."""
        return quantile_upper_bound(self.snapshot(), q)

    def collect(self) -> Iterable[Any]:
        with self._lock:
            buckets = []
            acc = 0
            for bound, c in zip([*LATENCY_BUCKETS_S, float("inf")], self.counts, strict=True):
                acc += c
                buckets.append(("+Inf" if bound == float("inf") else repr(bound), acc))
            family = HistogramMetricFamily(
                "eddy_driver_end_to_end_latency_seconds",
                "Time from a record's timestamp to the commit of the output it updated",
                labels=["app"],
            )
            family.add_metric([self.app], buckets, self.sum)
        yield family


class DriverMetrics:
    """All metrics of one driver, on their own registry (several drivers may share a process)."""

    def __init__(self, app: str, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.app = app
        r = self.registry
        self.state = StateMetrics(registry=r)
        self.batches = Counter("eddy_driver_batches", "Micro-batches run, by outcome", ["app", "outcome"], registry=r)
        self.batch_duration = Histogram(
            "eddy_driver_batch_duration_seconds", "Wall time of a micro-batch's Spark job", ["app"],
            buckets=DURATION_BUCKETS_S, registry=r,
        )
        self.records_in = Counter("eddy_driver_records_in", "Input records processed (committed)", ["app"],
                                  registry=r)
        self.records_out = Counter("eddy_driver_records_out", "Records written to output and repartition topics",
                                   ["app"], registry=r)
        self.in_rate = Gauge("eddy_driver_records_in_per_second", "Input records per second over the last batch",
                             ["app"], registry=r)
        self.out_rate = Gauge("eddy_driver_records_out_per_second", "Output records per second over the last batch",
                              ["app"], registry=r)
        self.lag = Gauge("eddy_driver_task_lag_records", "Input records not processed yet, per task",
                         ["app", "task"], registry=r)
        self.restoring = Gauge("eddy_driver_restoring_tasks", "Active tasks restoring their stores", ["app"],
                               registry=r)
        self.standbys = Gauge("eddy_driver_standby_tasks", "Standby (and warmup) task copies", ["app"], registry=r)
        self.executors = Gauge("eddy_driver_executors", "Live executors", ["app"], registry=r)
        self.generation = Gauge("eddy_driver_assignment_generation", "Generation of the assignment in use", ["app"],
                                registry=r)
        self.skipped = Counter("eddy_driver_skipped_records", "Bad records skipped (policy skip)", ["app"],
                               registry=r)
        self.dead_lettered = Counter("eddy_driver_dead_lettered_records",
                                     "Bad records sent to the dead-letter topic", ["app"], registry=r)
        self.dropped = Counter("eddy_driver_dropped_records",
                               "Records an aggregation ignores (null key, late for its window)", ["app"], registry=r)
        self.failovers = Counter("eddy_driver_executor_losses", "Executors that died while the app ran",
                                 ["app"], registry=r)
        self.latency = _LatencyCollector(app)
        r.register(self.latency)

    def observe_batch(self, outcome: str, seconds: float, results: Iterable[ItemResult], wall_s: float) -> None:
        app = self.app
        self.batches.labels(app, outcome).inc()
        self.batch_duration.labels(app).observe(seconds)
        n_in = n_out = 0
        for r in results:
            n_in += r.records_in
            n_out += r.records_out
            if r.skipped:
                self.skipped.labels(app).inc(r.skipped)
            if r.dead_lettered:
                self.dead_lettered.labels(app).inc(r.dead_lettered)
            if r.dropped:
                self.dropped.labels(app).inc(r.dropped)
            if r.latency_counts:
                self.latency.add(r.latency_counts, r.latency_sum_s)
            if r.figures is not None:
                self.state.observe(r.figures)
        self.records_in.labels(app).inc(n_in)
        self.records_out.labels(app).inc(n_out)
        if wall_s > 0:
            self.in_rate.labels(app).set(n_in / wall_s)
            self.out_rate.labels(app).set(n_out / wall_s)

    def observe_tasks(self, lag: Mapping[str, int], restoring: int, standbys: int, executors: int,
                      generation: int) -> None:
        for task, value in lag.items():
            self.lag.labels(self.app, task).set(value)
        self.restoring.labels(self.app).set(restoring)
        self.standbys.labels(self.app).set(standbys)
        self.executors.labels(self.app).set(executors)
        self.generation.labels(self.app).set(generation)
