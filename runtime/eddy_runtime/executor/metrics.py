"""Prometheus metrics of one executor's task runner (``eddy_executor_*``; docs/metrics.md lists them).

The runner lives as long as its executor and serves these: per task records, process and commit
latency, and per copy it holds (active, standby or warmup) store size, entries, restore and
standby progress. On a Kubernetes pod it listens on the pod's metrics port; elsewhere on 127.0.0.1
with a port the kernel picks (several executors share one host), which it writes to its state
directory.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Histogram

from eddy_contract.histograms import DURATION_BUCKETS_S
from eddy_runtime.protocol.work import ItemResult, ItemStatus
from eddy_runtime.state import StateMetrics

__all__ = ["PROCESS_LATENCY_BUCKETS_S", "ExecutorMetrics"]

#: seconds per work item (a micro-batch's share of one task)
PROCESS_LATENCY_BUCKETS_S = DURATION_BUCKETS_S


class ExecutorMetrics:
    """What one executor's task runner did, for its pod's metrics port (names ``eddy_executor_*``).

    Per task (labels ``app``, ``task``): records in and out, process latency (seconds per work
    item that processed input: read, user steps, stores, commit) and commit latency; per copy this
    executor holds (labels ``app``, ``task``, ``role``, ``store``): the state figures of
    `StateMetrics` -- store size and entries, restore and standby progress, standby lag.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.state = StateMetrics(registry=r, prefix="eddy_executor", per_copy=True)
        labels = ["app", "task"]
        self.records_in = Counter("eddy_executor_records_in", "Input records processed (committed) on this executor",
                                  labels, registry=r)
        self.records_out = Counter("eddy_executor_records_out",
                                   "Records this executor wrote to output and repartition topics", labels, registry=r)
        self.process_latency = Histogram(
            "eddy_executor_process_latency_seconds",
            "Wall time of one active work item that processed input (read, steps, stores, commit)", labels,
            buckets=PROCESS_LATENCY_BUCKETS_S, registry=r,
        )
        self.items = Counter("eddy_executor_work_items", "Work items run on this executor, by outcome",
                             ["app", "role", "status"], registry=r)

    def observe(self, app: str, results: Iterable[ItemResult]) -> None:
        for result in results:
            self.items.labels(app, result.role, result.status).inc()
            if result.status == ItemStatus.PROCESSED and result.records_in:
                self.records_in.labels(app, result.task).inc(result.records_in)
                self.records_out.labels(app, result.task).inc(result.records_out)
                self.process_latency.labels(app, result.task).observe(result.duration_s)
            if result.figures is not None:
                self.state.observe(result.figures)

    def forget(self, app: str, task: str, stores: list[str]) -> None:
        """Drop the series of a task copy this executor no longer holds."""
        self.state.forget(app, task, stores)
