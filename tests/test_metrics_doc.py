"""docs/metrics.md lists exactly the metrics the registries export, with their types."""

from __future__ import annotations

import re

import pytest

from eddy_contract.histograms import DURATION_BUCKETS_S
from tests.exported_metrics import exported
from tests.operator.manifests import REPO

pytestmark = pytest.mark.unit

DOC = REPO / "docs" / "metrics.md"
ROW = re.compile(r"^\| `(eddy_[a-z0-9_]+)` \| (counter|gauge|histogram) \|([^|]*)\|", re.M)


def test_the_metrics_reference_lists_exactly_the_exported_metrics_with_their_types():
    documented = {name: kind for name, kind, _ in ROW.findall(DOC.read_text())}
    found = exported()
    types = {name: kind for per in found.types.values() for name, kind in per.items()}
    assert sorted(set(types) - set(documented)) == [], "exported but not in docs/metrics.md"
    assert sorted(set(documented) - set(types)) == [], "in docs/metrics.md but exported by no registry"
    assert {n: k for n, k in documented.items() if types[n] != k} == {}, "documented with the wrong type"


def test_the_metrics_reference_names_each_metrics_labels():
    from prometheus_client import REGISTRY

    from eddy_runtime.driver.metrics import DriverMetrics
    from eddy_runtime.executor.metrics import ExecutorMetrics

    documented = {name: {x.strip(" `") for x in re.findall(r"`([a-z_]+)`", labels)}
                  for name, _, labels in ROW.findall(DOC.read_text())}
    labels: dict[str, set[str]] = {}
    for registry in (REGISTRY, DriverMetrics("x").registry, ExecutorMetrics().registry):
        for collector in list(registry._collector_to_names):  # noqa: SLF001 - the declared label names
            names = getattr(collector, "_labelnames", None)
            metric = getattr(collector, "_name", None)
            if metric and metric.startswith("eddy_") and names is not None:
                suffix = "_total" if getattr(collector, "_type", "") == "counter" else ""
                labels[metric + suffix] = set(names)
    assert labels, "no labelled metric found"
    wrong = {n: (sorted(documented.get(n, set())), sorted(ls)) for n, ls in labels.items()
             if not ls <= documented.get(n, set())}
    assert wrong == {}, "metrics whose labels docs/metrics.md does not name: {documented, declared}"


def test_every_histogram_has_the_fine_duration_buckets_the_reference_states():
    # Coarse buckets made a p99 of 150 ms read as "<= 250 ms" and a few slow records as "<= 5000 ms".
    stated = re.search(r"^Every histogram's buckets \(seconds\): ([0-9., ]+), \+Inf", DOC.read_text(), re.M)
    assert stated, "docs/metrics.md does not state the histograms' buckets"
    assert tuple(float(x) for x in stated.group(1).split(", ")) == DURATION_BUCKETS_S
    found = exported().buckets
    assert found, "no histogram scraped"
    assert {name: b for name, b in found.items() if b != (*DURATION_BUCKETS_S, float("inf"))} == {}
