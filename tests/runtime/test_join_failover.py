"""A windowed stream-stream join (examples/orders) under exactly-once while an executor JVM is
killed: orders and payments keep coming; the join's window stores fail over to their standbys on
the surviving executor and every order is matched with its payment exactly once (issue 14: "a
crash/failover test with a joined app staying exact under exactly-once").
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections import Counter

import pytest

from eddy_runtime.placement import live_executors
from tests.runtime.apps import driver_for, produce, read_all
from tests.runtime.test_failover import Run, executor_jvm_pid
from tests.runtime.test_orders import orders_app

pytestmark = pytest.mark.integration

MINUTE = 60_000


def test_a_windowed_join_matches_each_order_once_across_an_executor_kill(kafka, spark, tmp_path):
    sc = spark.sparkContext
    spec, orders, payments, out = orders_app(kafka, "orders-fo", partitions=4, processingGuarantee="exactly_once",
                                             triggerInterval="300ms",
                                             state={"size": "1Gi", "standbyReplicas": 1})
    t0 = int(time.time() * 1000) - 3_600_000  # recent: the broker deletes records past its retention
    fed: list[int] = []

    def feed(first: int, n: int) -> None:
        ids = range(first, first + n)
        # Each order's payment a minute later (inside the 10-minute window).
        produce(kafka.bootstrap, orders, [(f"o{i}".encode(), json.dumps({"id": i}).encode()) for i in ids],
                timestamps=[t0 + i for i in ids])
        produce(kafka.bootstrap, payments, [(f"o{i}".encode(), json.dumps({"paid": i}).encode()) for i in ids],
                timestamps=[t0 + i + MINUTE for i in ids])
        fed.extend(ids)

    feed(0, 3000)
    driver = driver_for(spark, spec, str(tmp_path / "state"))
    run = Run(driver)
    feeding = threading.Event()

    def feeder_loop() -> None:
        while feeding.is_set():
            feed(len(fed), 40)
            time.sleep(0.2)

    feeder = threading.Thread(target=feeder_loop, daemon=True)
    try:
        def caught_up() -> bool:
            lags = driver.standby_lags()
            return (bool(run.reports) and sum(driver.last_lag.values()) < 500 and bool(lags)
                    and all(lag <= 1000 for per in lags.values() for lag in per.values()))

        run.wait("the preloaded orders to be joined and the standbys to catch up", caught_up, 300)
        feeding.set()
        feeder.start()
        stateful = set(driver.compiled.stateful_tasks())
        victim = Counter(driver.assignment.tasks[t].active for t in stateful).most_common(1)[0][0]
        survivor = ({e.id for e in live_executors(sc)} - {victim}).pop()
        time.sleep(1.0)
        os.kill(executor_jvm_pid(sc, victim), signal.SIGKILL)
        run.wait(f"executor {victim}'s join tasks to run on executor {survivor}",
                 lambda: all(driver.assignment.tasks[t].active != victim for t in stateful), 120)
        time.sleep(3.0)  # keep feeding on the promoted copies
        run.drain(feeding, feeder, "the last orders to be joined")
    finally:
        feeding.clear()
        run.stop()
    assert run.error is None, run.error
    matched = Counter(m.key().decode() for m in read_all(kafka.bootstrap, out))
    assert len(fed) > 3000
    duplicates = {k: n for k, n in matched.items() if n != 1}
    missing = [i for i in fed if f"o{i}" not in matched]
    assert not duplicates and not missing, (list(duplicates.items())[:10], missing[:10])
    assert set(matched) == {f"o{i}" for i in fed}
    sample = next(m for m in read_all(kafka.bootstrap, out) if m.key() == b"o7")
    assert json.loads(sample.value()) == {"order": {"id": 7}, "payment": {"paid": 7}}
