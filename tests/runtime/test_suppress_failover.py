"""Final results under exactly-once while an executor JVM is killed: the clickstream example's
`build_final` (session counts through ``suppress(until_window_closes())``) keeps getting visits;
the tasks' session stores and suppression buffers fail over to their standbys on the surviving
executor, and every session comes out exactly once, with its final count."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml

from eddy_contract.spec import StreamAppSpec
from eddy_runtime.placement import live_executors
from tests.runtime.apps import driver_for, produce
from tests.runtime.test_failover import Run, executor_jvm_pid
from tests.runtime.test_suppress_on_kafka import written

pytestmark = pytest.mark.integration

MANIFEST = Path(__file__).parents[2] / "examples" / "clickstream" / "streamapp.yaml"
USERS = [f"u{i}".encode() for i in range(30)]
VISIT_MS = 10_000  # a visit every 10 s of event time: 3 views a second apart, one session each


def test_each_final_session_count_comes_out_once_across_an_executor_kill(kafka, spark, tmp_path):
    sc = spark.sparkContext
    body = yaml.safe_load(MANIFEST.read_text())
    app = kafka.unique_name("final-fo")
    views = kafka.create_topic(f"{app}-views", partitions=4)
    out = f"{app}-final-sessions"
    body["metadata"]["name"] = app
    body["spec"]["kafka"]["bootstrapServers"] = kafka.bootstrap
    body["spec"]["pipeline"]["function"] = "build_final"
    # grace: a partition's users come one after the other, each visit's views up to 2 s behind
    # stream time; a session closes 3 s (gap) + 5 s after its last view, when the next visit starts
    body["spec"]["pipeline"]["args"].update(views_topic=views, output_topic=out, gap="3s", grace="5s")
    body["spec"]["triggerInterval"] = "300ms"
    spec = StreamAppSpec.from_manifest(body)
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
    feeding = threading.Event()

    def feeder_loop() -> None:
        while feeding.is_set():
            visit()
            time.sleep(0.2)

    feeder = threading.Thread(target=feeder_loop, daemon=True)
    try:
        def caught_up() -> bool:
            lags = driver.standby_lags()
            return (bool(run.reports) and sum(driver.last_lag.values()) < 200 and bool(lags)
                    and all(lag <= 1000 for per in lags.values() for lag in per.values()))

        run.wait("the first visits to be counted and the standbys to catch up", caught_up, 300)
        feeding.set()
        feeder.start()
        stateful = set(driver.compiled.stateful_tasks())
        victim = Counter(driver.assignment.tasks[t].active for t in stateful).most_common(1)[0][0]
        survivor = ({e.id for e in live_executors(sc)} - {victim}).pop()
        time.sleep(1.0)
        os.kill(executor_jvm_pid(sc, victim), signal.SIGKILL)
        run.wait(f"executor {victim}'s tasks to run on executor {survivor}",
                 lambda: all(driver.assignment.tasks[t].active != victim for t in stateful), 120)
        time.sleep(3.0)  # keep visiting on the promoted copies
        run.drain(feeding, feeder, "the last visits to be counted")
        # A view of many other users far later moves every partition's stream time past the last
        # visit's sessions (those flushing sessions stay in the buffers: still open).
        flush = t0 + (len(visits) + 10) * VISIT_MS
        produce(kafka.bootstrap, views, [(f"flush{i}".encode(), view) for i in range(200)], timestamps=[flush] * 200)
        seen = len(run.reports)
        run.wait("the flushing views", lambda: len(run.reports) > seen + 3 and sum(driver.last_lag.values()) == 0
                 and run.reports[-1].records_in == 0, 240)
    finally:
        feeding.clear()
        run.stop()
    assert run.error is None, run.error
    got = Counter(written(kafka.bootstrap, out))
    expected = Counter({((u.decode(), v, v + 2000), 3, v + 2000): 1 for u in USERS for v in visits})
    assert len(visits) > 20
    assert got == expected, (sorted((got - expected).items())[:10], sorted((expected - got).items())[:10])
