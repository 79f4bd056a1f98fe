"""A windowed stream-stream join (examples/orders) under exactly-once while an executor JVM is
killed: orders and payments keep coming; the join's window stores fail over to their standbys on
the surviving executor and every order is matched with its payment exactly once (issue 14: "a
crash/failover test with a joined app staying exact under exactly-once").
"""

from __future__ import annotations

import json
import time
from collections import Counter

import pytest

from tests.runtime.apps import driver_for, produce, read_all
from tests.runtime.test_failover import Run
from tests.runtime.test_orders import orders_app

pytestmark = pytest.mark.integration

MINUTE = 60_000


def test_a_windowed_join_matches_each_order_once_across_an_executor_kill(kafka, spark, tmp_path):
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
    try:
        run.kill_under_load(lambda: feed(len(fed), 40), "the orders")
    finally:
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
