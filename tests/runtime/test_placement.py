"""Pinned placement on a real local-cluster: partitions run where they are pinned, dead
executors are noticed and their jobs cancelled, and a task can tell which executor it is on."""

from __future__ import annotations

import pytest

from eddy_runtime.protocol.placement import PinnedSlots, current_executor_id, live_executors

pytestmark = pytest.mark.integration


def test_partitions_run_on_the_executors_they_are_pinned_to(spark):
    def where(slot: int):  # nested: pickled by value, executors cannot import tests/
        yield slot, current_executor_id()

    executors = live_executors(spark.sparkContext)
    assert len(executors) >= 2, executors
    a, b = executors[:2]
    # Both orders, so that a scheduler that merely spreads partitions round-robin would fail one.
    for pins in ([a, b], [b, a], [a, a, b, b, a, b, b, a]):
        slots = PinnedSlots(spark.sparkContext, pins)
        ran = dict(slots.run(where))
        assert ran == {i: e.id for i, e in enumerate(pins)}


def test_a_dataframe_over_pinned_slots_stays_on_its_executors(spark):
    import pyarrow as pa

    executors = live_executors(spark.sparkContext)
    pins = [executors[i % 2] for i in range(6)]
    df = PinnedSlots(spark.sparkContext, pins).dataframe(spark)

    def tag(batches):
        for batch in batches:
            yield pa.RecordBatch.from_pydict(
                {"slot": batch.column(0), "executor": [current_executor_id()] * batch.num_rows}
            )

    rows = df.mapInArrow(tag, "slot int, executor string").where("slot >= 0").collect()
    assert {r.slot: r.executor for r in rows} == {i: e.id for i, e in enumerate(pins)}


def test_a_batch_pinned_to_an_executor_that_dies_is_cancelled_at_once(spark):
    import os
    import signal
    import threading
    import time

    from eddy_runtime.protocol.placement import BatchWatch, executor_jvm_pid, wait_for_executors

    sc = spark.sparkContext
    executors = live_executors(sc)[:2]

    def jvm(slot: int):
        yield slot, executor_jvm_pid()

    victim_pid = dict(PinnedSlots(sc, executors).run(jvm))[0]
    victim = executors[0]

    def sleep_long(slot: int):
        time.sleep(60)
        yield slot

    slots = PinnedSlots(sc, executors)
    threading.Timer(2.0, os.kill, (victim_pid, signal.SIGKILL)).start()
    started = time.monotonic()
    with pytest.raises(Exception, match="cancel"), BatchWatch(sc, "test-watch", [e.id for e in executors]) as watch:
        slots.run(sleep_long)
    assert watch.lost == victim.id
    assert time.monotonic() - started < 20
    # A batch planned just before the driver noticed the death submits its job after the
    # watch saw it: the job is still cancelled, instead of waiting for the locality timeout.
    started = time.monotonic()
    with pytest.raises(Exception, match="cancel"), BatchWatch(sc, "test-watch-2", [victim.id]) as watch:
        time.sleep(0.5)
        PinnedSlots(sc, [victim]).run(sleep_long)
    assert watch.lost == victim.id
    assert time.monotonic() - started < 20
    # Spark brings a replacement executor with a new id; later tests get two executors again.
    replacement = wait_for_executors(sc, 2, timeout=120)
    assert victim.id not in {e.id for e in replacement}
