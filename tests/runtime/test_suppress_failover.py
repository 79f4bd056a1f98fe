"""Final results under exactly-once while an executor JVM is killed: the clickstream example's
`build_final` (session counts through ``suppress(until_window_closes())``) keeps getting visits;
the tasks' session stores and suppression buffers fail over to their standbys on the surviving
executor, and every session comes out exactly once, with its final count."""

from __future__ import annotations

import json
import time
from collections import Counter

import pytest

from tests.runtime.apps import driver_for, produce
from tests.runtime.test_clickstream import clickstream_app
from tests.runtime.test_failover import Run
from tests.runtime.test_suppress_on_kafka import written

pytestmark = pytest.mark.integration

USERS = [f"u{i}".encode() for i in range(30)]
VISIT_MS = 10_000  # a visit every 10 s of event time: 3 views a second apart, one session each


def test_each_final_session_count_comes_out_once_across_an_executor_kill(kafka, spark, tmp_path):
    # grace: a partition's users come one after the other, each visit's views up to 2 s behind
    # stream time; a session closes 3 s (gap) + 5 s after its last view, when the next visit starts
    spec, views, out = clickstream_app(kafka, "final-fo", partitions=4, function="build_final",
                                       args={"gap": "3s", "grace": "5s"}, triggerInterval="300ms")
    t0 = int(time.time() * 1000) - 3_600_000  # recent: the broker deletes records past its retention
    view = json.dumps({"page": "/"}).encode()
    visits: list[int] = []

    def visit() -> None:
        start = t0 + len(visits) * VISIT_MS
        produce(kafka.bootstrap, views, [(u, view) for u in USERS for _ in range(3)],
                timestamps=[start + i * 1000 for _ in USERS for i in range(3)])
        visits.append(start)

    for _ in range(20):
        visit()
    driver = driver_for(spark, spec, str(tmp_path / "state"))
    run = Run(driver)
    try:
        run.kill_under_load(visit, "the visits", settled_lag=200)
        # A view of many other users far later moves every partition's stream time past the last
        # visit's sessions (those flushing sessions stay in the buffers: still open).
        flush = t0 + (len(visits) + 10) * VISIT_MS
        produce(kafka.bootstrap, views, [(f"flush{i}".encode(), view) for i in range(200)], timestamps=[flush] * 200)
        seen = len(run.reports)
        run.wait("the flushing views", lambda: len(run.reports) > seen + 3 and sum(driver.last_lag.values()) == 0
                 and run.reports[-1].records_in == 0, 240)
    finally:
        run.stop()
    assert run.error is None, run.error
    got = Counter(written(kafka.bootstrap, out))
    expected = Counter({((u.decode(), v, v + 2000), 3, v + 2000): 1 for u in USERS for v in visits})
    assert len(visits) > 20
    assert got == expected, (sorted((got - expected).items())[:10], sorted((expected - got).items())[:10])
