"""State figures of a task, and the Prometheus metrics made from them.

`ProcessorStateManager.figures()` (manager.py) returns plain, picklable `TaskFigures` that a work
item hands back; `StateMetrics.observe` turns them into metrics in two places: on each executor
(executor/metrics.py, prefix ``eddy_executor``, one series per copy it holds, with a ``role``
label; standbys report their tail progress and lag there), and in the driver (driver/metrics.py,
prefix ``eddy_state``) for each task's active copy only, since one label set cannot tell copies
apart. Every metric: docs/metrics.md; where the figures travel: docs/DESIGN.md, "One micro-batch".
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

from eddy_contract.histograms import DURATION_BUCKETS_S
from eddy_contract.tasks import Role

__all__ = ["COMMIT_LATENCY_BUCKETS_S", "StateMetrics", "StoreFigures", "TaskFigures"]

COMMIT_LATENCY_BUCKETS_S = DURATION_BUCKETS_S


@dataclass(frozen=True)
class StoreFigures:
    store: str
    changelog_topic: str | None
    changelog_partition: int
    changelog_offset: int | None
    #: records restored by this manager since it opened (all restores and standby tailing)
    restored_records: int
    #: an active's restore, or a standby's tail: average records/s since it began
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
    role: Role
    restoring: bool
    stores: tuple[StoreFigures, ...]
    #: latencies of the commits since the previous figures() call, in seconds
    commit_latencies_s: tuple[float, ...] = ()
    commits: int = 0


class StateMetrics:
    """Prometheus metrics for the state of many tasks (one instance per registry).

    `per_copy`: the executor's view (a ``role`` label, standby figures and standby lag kept);
    otherwise the driver's view (figures of active copies only).
    """

    def __init__(self, registry: CollectorRegistry = REGISTRY, prefix: str = "eddy_state",
                 per_copy: bool = False) -> None:
        self.per_copy = per_copy
        labels = ["app", "task", "role", "store"] if per_copy else ["app", "task", "store"]
        p = prefix
        self.restored = Counter(f"{p}_restored_records", "Records restored from changelogs into stores", labels,
                                registry=registry)
        self.restore_rate = Gauge(f"{p}_restore_rate_records_per_second",
                                  "Average rate of the current restore (or standby tail)", labels, registry=registry)
        self.restore_remaining = Gauge(f"{p}_restore_remaining_records", "Changelog offsets left to restore",
                                       labels, registry=registry)
        self.restore_eta = Gauge(f"{p}_restore_eta_seconds", "Estimated seconds until the restore is done",
                                 labels, registry=registry)
        self.standby_lag = (
            Gauge(f"{p}_standby_lag_records", "Standby's distance to its changelog's end", labels, registry=registry)
            if per_copy else None
        )
        self.commit_latency = Histogram(
            f"{p}_commit_latency_seconds", "Task commit latency (Kafka commit + store write)", ["app", "task"],
            buckets=COMMIT_LATENCY_BUCKETS_S, registry=registry,
        )
        self.size = Gauge(f"{p}_store_size_bytes", "Estimated store size (RocksDB live data)", labels,
                          registry=registry)
        self.entries = Gauge(f"{p}_store_entries", "Estimated number of entries in a store", labels,
                             registry=registry)
        self.changelog_offset = Gauge(f"{p}_changelog_offset", "Last changelog offset held by the store", labels,
                                      registry=registry)
        # Figures carry cumulative counts per manager; the counter gets the increase.
        self._last_restored: dict[tuple[str, ...], int] = {}
        #: per copy (app, task, store): the role its series carry now
        self._roles: dict[tuple[str, str, str], Role] = {}

    def _gauges(self) -> list[Any]:
        gauges = [self.restore_rate, self.restore_remaining, self.restore_eta, self.size, self.entries,
                  self.changelog_offset]
        return gauges + ([self.standby_lag] if self.standby_lag is not None else [])

    def _key(self, app: str, task: str, role: Role, store: str) -> tuple[str, ...]:
        if not self.per_copy:
            return (app, task, store)
        before = self._roles.get((app, task, store))
        if before is not None and before != role:  # promoted (or demoted): drop the old role's series
            self._remove((app, task, before, store))
        self._roles[(app, task, store)] = role
        return (app, task, role, store)

    def observe(self, figures: TaskFigures) -> None:
        if not self.per_copy and figures.role != Role.ACTIVE:
            return
        for s in figures.stores:
            key = self._key(figures.app, figures.task_id, figures.role, s.store)
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
            elif s.restore_remaining == 0:
                self.restore_eta.labels(*key).set(0)
            else:  # unknown (no rate yet)
                with contextlib.suppress(KeyError):
                    self.restore_eta.remove(*key)
            if self.standby_lag is not None and s.standby_lag is not None:
                self.standby_lag.labels(*key).set(s.standby_lag)
            self.size.labels(*key).set(s.size_bytes)
            self.entries.labels(*key).set(s.keys)
            if s.changelog_offset is not None:
                self.changelog_offset.labels(*key).set(s.changelog_offset)
        hist = self.commit_latency.labels(figures.app, figures.task_id)
        for latency in figures.commit_latencies_s:
            hist.observe(latency)

    def _remove(self, key: tuple[str, ...]) -> None:
        self._last_restored.pop(key, None)
        for metric in (self.restored, *self._gauges()):
            with contextlib.suppress(KeyError):
                metric.remove(*key)

    def forget(self, app: str, task_id: str, stores: list[str]) -> None:
        """Drop a task's series (when it moved away from this process's view).

        Per copy (an executor's view) only the copy's store series go: its commit latency is a
        per-task series like the executor's records and process latency, and a task that comes
        back to the executor goes on counting in it."""
        for store in stores:
            if self.per_copy:
                role = self._roles.pop((app, task_id, store), None)
                if role is not None:
                    self._remove((app, task_id, role, store))
            else:
                self._remove((app, task_id, store))
        if not self.per_copy:
            with contextlib.suppress(KeyError):
                self.commit_latency.remove(app, task_id)
