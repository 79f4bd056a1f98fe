"""Every metric Eddy exports, from the real registries of the operator, a driver and an executor,
with figures run through them (so that labelled counters and histograms have samples), scraped
over HTTP on 127.0.0.1. Used by the tests of the metrics reference and of the Grafana dashboard."""

from __future__ import annotations

import urllib.request
from dataclasses import dataclass

from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from eddy_runtime.driver.metrics import DriverMetrics
from eddy_runtime.executor.metrics import ExecutorMetrics
from eddy_runtime.protocol.work import LATENCY_BUCKETS_S, ItemResult
from eddy_runtime.state import StoreFigures, TaskFigures

APP = "wc"
NAMESPACE = "team-a"


@dataclass(frozen=True)
class Exported:
    #: component ("operator", "driver", "executor") -> metric names as documented (a counter with `_total`)
    metrics: dict[str, set[str]]
    #: component -> sample names a scrape returned (`_bucket`, `_sum`, `_count`, `_total`, ...)
    samples: dict[str, set[str]]
    #: component -> metric name -> Prometheus type
    types: dict[str, dict[str, str]]
    #: histogram name -> the upper bounds of its buckets (+Inf included), as scraped
    buckets: dict[str, tuple[float, ...]]

    def all_samples(self) -> set[str]:
        return set().union(*self.samples.values())


def _figures(role: str, task: str) -> TaskFigures:
    lag = 12 if role == "standby" else None
    store = StoreFigures("counts", f"{APP}-counts-changelog", 1, 99, 500, 250.0, 12, 0.05, lag, 4096, 30)
    latencies = (0.004, 0.03) if role == "active" else ()
    return TaskFigures(APP, task, role, False, (store,), commit_latencies_s=latencies, commits=len(latencies))


def _results() -> list[ItemResult]:
    counts = tuple([1] * (len(LATENCY_BUCKETS_S) + 1))
    return [
        ItemResult("1_0", "1", "active", "processed", records_in=40, records_out=12, skipped=1, dead_lettered=1,
                   dropped=1, latency_counts=counts, latency_sum_s=3.5, duration_s=0.05,
                   figures=_figures("active", "1_0")),
        ItemResult("1_1", "1", "standby", "standby", restored=500, restore_remaining=12,
                   figures=_figures("standby", "1_1")),
    ]


def _operator() -> CollectorRegistry:
    from eddy_operator import metrics as m

    m.RECONCILES.labels("success").inc()
    m.RECONCILE_ERRORS.inc()
    m.RECONCILE_DURATION.observe(0.05)
    m.ASSIGNMENTS_PUBLISHED.labels(NAMESPACE, APP).inc()
    m.FAILOVERS.labels(NAMESPACE, APP).inc()
    m.EXECUTOR_LOSSES.labels(NAMESPACE, APP, "exited").inc()
    m.FAILOVER_DURATION.labels(NAMESPACE, APP).observe(0.02)
    m.set_app_gauges(NAMESPACE, APP, {"tasks": {"running": 4}, "executors": {"desired": 2, "ready": 2},
                                      "assignmentGeneration": 3})
    return REGISTRY


def _scrape(registry: CollectorRegistry) -> tuple[set[str], set[str], dict[str, str], dict[str, tuple[float, ...]]]:
    from prometheus_client import start_http_server

    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/metrics", timeout=10).read().decode()
    finally:
        server.shutdown()
        thread.join(10)
    metrics, samples, types = set(), set(), {}
    buckets: dict[str, tuple[float, ...]] = {}
    for family in text_string_to_metric_families(text):
        if not family.name.startswith("eddy_") or family.name.endswith("_created"):
            continue  # the process and Python collectors of the default registry; creation times
        name = family.name + "_total" if family.type == "counter" else family.name
        metrics.add(name)
        types[name] = family.type
        samples.update(s.name for s in family.samples if not s.name.endswith("_created"))
        if family.type == "histogram":
            first = next(s.labels for s in family.samples if s.name.endswith("_bucket"))
            others = {k: v for k, v in first.items() if k != "le"}
            buckets[name] = tuple(float(s.labels["le"]) for s in family.samples if s.name.endswith("_bucket")
                                  and {k: v for k, v in s.labels.items() if k != "le"} == others)
    return metrics, samples, types, buckets


def exported() -> Exported:
    driver = DriverMetrics(APP)
    driver.observe_batch("ok", 0.4, _results(), wall_s=1.0)
    driver.observe_tasks({"1_0": 5}, restoring=1, standbys=4, executors=2, generation=3)
    driver.failovers.labels(APP).inc()
    executor = ExecutorMetrics()
    executor.observe(APP, _results())
    out: dict[str, tuple[set[str], set[str], dict[str, str], dict[str, tuple[float, ...]]]] = {
        "operator": _scrape(_operator()),
        "driver": _scrape(driver.registry),
        "executor": _scrape(executor.registry),
    }
    return Exported({k: v[0] for k, v in out.items()}, {k: v[1] for k, v in out.items()},
                    {k: v[2] for k, v in out.items()}, {n: b for v in out.values() for n, b in v[3].items()})
