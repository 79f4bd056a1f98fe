"""Reading Prometheus' text exposition in tests: one scrape's samples, and sums over them."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample


def samples_at(url: str, timeout_s: float = 10.0) -> list[Sample]:
    """Every sample a `/metrics` URL serves."""
    text = urllib.request.urlopen(url, timeout=timeout_s).read().decode()
    return [sample for family in text_string_to_metric_families(text) for sample in family.samples]


def metric_sum(samples: list[Sample], name: str, **labels: str) -> float:
    """The sum of the samples called `name` whose labels include `labels`."""
    return sum(s.value for s in samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))
