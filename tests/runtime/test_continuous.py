"""The continuous path on real Kafka and a local-cluster: an app of Eddy's own steps runs in the
executors' task runners without micro-batches, and keeps exactly-once through an executor
SIGKILL and the assignment generations that follow (tasks fail over to the standbys, then move
back onto the replacement executor, which the survivor lets them go to)."""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections import Counter

import pytest

from eddy_runtime.protocol.placement import live_executors
from tests.runtime.apps import driver_for, produce, read_all, streamapp
from tests.runtime.test_failover import Run, executor_jvm_pid
from tests.runtime.test_pipelines import _with_function

pytestmark = pytest.mark.integration

WORDS = [f"w{i:04d}" for i in range(2000)]


def test_an_executor_kill_and_the_generations_after_it_lose_and_duplicate_no_update(kafka, spark, tmp_path):
    sc = spark.sparkContext
    app = kafka.unique_name("cont")
    source = kafka.create_topic(f"{app}-words", partitions=4)
    out = f"{app}-counts"
    rnd = random.Random(3)
    fed = [rnd.choice(WORDS) for _ in range(5000)]
    produce(kafka.bootstrap, source, ((None, w.encode()) for w in fed))
    spec = _with_function(streamapp(app, kafka.bootstrap, "tests.runtime.pipelines",
                                    {"input_topic": source, "output_topic": out}, triggerInterval="100ms",
                                    state={"standbyReplicas": 1, "acceptableRecoveryLag": 100}), "word_counts")
    assert spec.execution == "continuous"
    driver = driver_for(spark, spec, str(tmp_path / "state"), sync_interval_s=0.5)
    feeding = threading.Event()

    def feed() -> None:
        r = random.Random(4)
        while feeding.is_set():
            words = [r.choice(WORDS) for _ in range(50)]
            produce(kafka.bootstrap, source, ((None, w.encode()) for w in words))
            fed.extend(words)
            time.sleep(0.1)

    run = Run(driver)
    feeder = threading.Thread(target=feed, daemon=True)
    try:
        run.wait("the preloaded words to be counted",
                 lambda: driver.assignment is not None and sum(driver.last_lag.values()) == 0
                 and sum(x.records_in for r in run.reports for x in r.results if x.task.startswith("0_")) >= 5000,
                 180)
        # No micro-batch item ever ran: every task reported from its runner's loop.
        assert driver.continuous_subtopologies == {0, 1}
        stateful = set(driver.compiled.stateful_tasks())
        feeding.set()
        feeder.start()
        before = driver.assignment
        victim = Counter(before.tasks[t].active for t in stateful).most_common(1)[0][0]
        seen = {e.id for e in live_executors(sc)}
        os.kill(executor_jvm_pid(sc, victim), signal.SIGKILL)
        run.wait("the victim's tasks to run elsewhere",
                 lambda: all(p.active != victim for p in driver.assignment.tasks.values()), 120)
        run.wait("a replacement executor", lambda: bool({e.id for e in live_executors(sc)} - seen), 180)
        new = ({e.id for e in live_executors(sc)} - seen).pop()
        run.wait("stateful tasks to move back onto the replacement",
                 lambda: any(driver.assignment.tasks[t].active == new for t in stateful), 240)
        assert driver.assignment.generation >= before.generation + 2
        run.drain(feeding, feeder, "the last words to be counted")
    finally:
        feeding.clear()
        run.stop()
    assert run.error is None, run.error
    # The loss is reported once, in the batch reports and the driver's metric, though the driver
    # learned of it during a sync over HTTP or between batches, with no Spark job cancelled.
    assert [e for r in run.reports for e in r.lost_executors] == [victim]
    assert driver.metrics.registry.get_sample_value("eddy_driver_executor_losses_total", {"app": app}) == 1
    # Between the Spark jobs that brought each generation, the driver synced the runners over HTTP,
    # and what they reported there is counted like the rest (the exact counts below cover it).
    assert sum(r.records_in for r in run.reports if r.over_http) > 0
    assert any(not r.over_http for r in run.reports if r.generation > before.generation)
    # The survivors took the new generations from the driver's push, ahead of the syncs.
    logs = [log.read_text(errors="replace") for log in (tmp_path / "state").glob("executor-*/eddy-runner.log")]
    assert any("pushed:" in log for log in logs), "no runner took a pushed generation"
    # The survivor let the tasks that moved onto the replacement go, instead of being fenced.
    assert any("released [" in log for log in logs), "no runner let its tasks go"
    # Exactly once: each word's updates go up one commit at a time and end at its true count.
    updates: dict[str, list[int]] = {}
    for m in read_all(kafka.bootstrap, out):
        updates.setdefault(m.key().decode(), []).append(int.from_bytes(m.value(), "big"))
    for word, counts in updates.items():
        assert counts == sorted(set(counts)), (word, counts)
    assert {w: c[-1] for w, c in updates.items()} == Counter(fed)
