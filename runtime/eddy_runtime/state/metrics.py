"""State figures of a task, and the Prometheus metrics made from them.

Executors cannot serve metrics to Prometheus themselves (their Python workers come and go), so
`ProcessorStateManager.figures()` (manager.py) returns plain, picklable `TaskFigures` that a work
item hands back to the Spark driver, and the driver feeds them to `StateMetrics.observe`. In a
single process (tests, benchmarks) the same call works directly.

Metrics (labels ``app``, ``task``, ``store``; commit latency only ``app``, ``task``):

- ``eddy_state_restored_records_total``            records restored from changelogs
- ``eddy_state_restore_rate_records_per_second``   current restore's rate
- ``eddy_state_restore_remaining_records``         offsets left to restore (0 when restored)
- ``eddy_state_restore_eta_seconds``               estimated time left (absent while unknown)
- ``eddy_state_standby_lag_records``               standby's distance to its changelog's end
- ``eddy_state_commit_latency_seconds``            histogram: Kafka commit + store write
- ``eddy_state_store_size_bytes``                  RocksDB's live-data + memtable estimate
- ``eddy_state_store_keys``                        RocksDB's key-count estimate
- ``eddy_state_changelog_offset``                  last changelog offset held by the store
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["StateMetrics", "StoreFigures", "TaskFigures"]


@dataclass(frozen=True)
class StoreFigures:
    store: str
    changelog_topic: str | None
    changelog_partition: int
    changelog_offset: int | None
    #: records restored by this manager since it opened (all restores and standby tailing)
    restored_records: int
    restore_rate: float
    restore_remaining: int
    restore_eta_s: float | None
    #: standby only: changelog end minus the standby's position
    standby_lag: int | None
    size_bytes: int
    keys: int


@dataclass(frozen=True)
class TaskFigures:
    app: str
    task_id: str
    role: str  # "active" or "standby"
    restoring: bool
    stores: tuple[StoreFigures, ...]
    #: latencies of the commits since the previous figures() call, in seconds
    commit_latencies_s: tuple[float, ...] = ()
    commits: int = 0


class StateMetrics:
    """Prometheus metrics for the state of many tasks (one instance per process)."""

    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        labels = ["app", "task", "store"]
        self.restored = Counter(
            "eddy_state_restored_records", "Records restored from changelogs into stores", labels,
            registry=registry,
        )
        self.restore_rate = Gauge(
            "eddy_state_restore_rate_records_per_second", "Rate of the current restore", labels,
            registry=registry,
        )
        self.restore_remaining = Gauge(
            "eddy_state_restore_remaining_records", "Changelog offsets left to restore", labels,
            registry=registry,
        )
        self.restore_eta = Gauge(
            "eddy_state_restore_eta_seconds", "Estimated seconds until the restore is done", labels,
            registry=registry,
        )
        self.standby_lag = Gauge(
            "eddy_state_standby_lag_records", "Standby's distance to its changelog's end", labels,
            registry=registry,
        )
        self.commit_latency = Histogram(
            "eddy_state_commit_latency_seconds", "Task commit latency (Kafka commit + store write)",
            ["app", "task"],
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
            registry=registry,
        )
        self.size = Gauge("eddy_state_store_size_bytes", "Estimated store size", labels, registry=registry)
        self.keys = Gauge("eddy_state_store_keys", "Estimated number of keys in a store", labels,
                          registry=registry)
        self.changelog_offset = Gauge(
            "eddy_state_changelog_offset", "Last changelog offset held by the store", labels,
            registry=registry,
        )
        # Figures carry cumulative counts per manager; the counter gets the increase.
        self._last_restored: dict[tuple[str, str, str], int] = {}

    def observe(self, figures: TaskFigures) -> None:
        for s in figures.stores:
            key = (figures.app, figures.task_id, s.store)
            before = self._last_restored.get(key, 0)
            # A smaller figure means a new manager (reopened task): its count starts from 0.
            delta = s.restored_records - before if s.restored_records >= before else s.restored_records
            self._last_restored[key] = s.restored_records
            if delta > 0:
                self.restored.labels(*key).inc(delta)
            self.restore_rate.labels(*key).set(s.restore_rate)
            self.restore_remaining.labels(*key).set(s.restore_remaining)
            if s.restore_eta_s is not None:
                self.restore_eta.labels(*key).set(s.restore_eta_s)
            if s.standby_lag is not None:
                self.standby_lag.labels(*key).set(s.standby_lag)
            else:
                self.standby_lag.labels(*key).set(0)
            self.size.labels(*key).set(s.size_bytes)
            self.keys.labels(*key).set(s.keys)
            if s.changelog_offset is not None:
                self.changelog_offset.labels(*key).set(s.changelog_offset)
        hist = self.commit_latency.labels(figures.app, figures.task_id)
        for latency in figures.commit_latencies_s:
            hist.observe(latency)

    def forget(self, app: str, task_id: str, stores: list[str]) -> None:
        """Drop a task's series (when it moved away from this process's view)."""
        for store in stores:
            key = (app, task_id, store)
            self._last_restored.pop(key, None)
            for metric in (self.restored, self.restore_rate, self.restore_remaining, self.restore_eta,
                           self.standby_lag, self.size, self.keys, self.changelog_offset):
                with contextlib.suppress(KeyError):
                    metric.remove(*key)
        with contextlib.suppress(KeyError):
            self.commit_latency.remove(app, task_id)
