"""A session-windowed count (examples/clickstream) under exactly-once while an executor JVM is
killed: page views keep coming; the session stores fail over to their standbys on the surviving
executor and every user's session counts every view exactly once (issue 14: "a crash/failover
test with a session-windowed app staying exact under exactly-once").
"""

from __future__ import annotations

import json
import os
import signal
import struct
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml

from eddy_contract.spec import StreamAppSpec
from eddy_runtime.placement import live_executors
from tests.runtime.apps import driver_for, produce, read_all
from tests.runtime.test_failover import Run, executor_jvm_pid

pytestmark = pytest.mark.integration

MANIFEST = Path(__file__).parents[2] / "examples" / "clickstream" / "streamapp.yaml"
USERS = [f"user-{i:03d}" for i in range(200)]


def test_session_counts_stay_exact_across_an_executor_kill(kafka, spark, tmp_path):
    sc = spark.sparkContext
    body = yaml.safe_load(MANIFEST.read_text())
    app = kafka.unique_name("sessions-fo")
    views = kafka.create_topic(f"{app}-views", partitions=4)
    out = f"{app}-sessions"
    body["metadata"]["name"] = app
    body["spec"]["kafka"]["bootstrapServers"] = kafka.bootstrap
    body["spec"]["pipeline"]["args"].update(views_topic=views, output_topic=out)
    body["spec"].update(triggerInterval="300ms", processingGuarantee="exactly_once")
    body["spec"]["state"]["standbyReplicas"] = 1
    spec = StreamAppSpec.from_manifest(body)
    # Every user's views a second apart (the gap is 30 minutes): one session per user in the end,
    # merged from whichever sessions the batches saw first.
    t0 = int(time.time() * 1000) - 3_600_000
    fed: Counter[str] = Counter()
    clock = [0]

    def feed(n: int) -> None:
        batch = []
        for _ in range(n):
            user = USERS[clock[0] % len(USERS)]
            batch.append((user, t0 + clock[0] * 1000))
            clock[0] += 1
        produce(kafka.bootstrap, views, [(u.encode(), json.dumps({"page": "/"}).encode()) for u, _ in batch],
                timestamps=[ts for _, ts in batch])
        fed.update(u for u, _ in batch)

    feed(2000)
    driver = driver_for(spark, spec, str(tmp_path / "state"))
    run = Run(driver)
    feeding = threading.Event()

    def feeder_loop() -> None:
        while feeding.is_set():
            feed(40)
            time.sleep(0.2)

    feeder = threading.Thread(target=feeder_loop, daemon=True)
    try:
        def caught_up() -> bool:
            lags = driver.standby_lags()
            return (bool(run.reports) and sum(driver.last_lag.values()) < 500 and bool(lags)
                    and all(lag <= 1000 for per in lags.values() for lag in per.values()))

        run.wait("the preloaded views to be counted and the standbys to catch up", caught_up, 300)
        feeding.set()
        feeder.start()
        stateful = set(driver.compiled.stateful_tasks())
        victim = Counter(driver.assignment.tasks[t].active for t in stateful).most_common(1)[0][0]
        survivor = ({e.id for e in live_executors(sc)} - {victim}).pop()
        time.sleep(1.0)
        os.kill(executor_jvm_pid(sc, victim), signal.SIGKILL)
        run.wait(f"executor {victim}'s session tasks to run on executor {survivor}",
                 lambda: all(driver.assignment.tasks[t].active != victim for t in stateful), 120)
        time.sleep(3.0)  # keep feeding on the promoted copies
        run.drain(feeding, feeder, "the last views to be counted")
    finally:
        feeding.clear()
        run.stop()
    assert run.error is None, run.error
    latest: dict[bytes, bytes | None] = {}
    for m in read_all(kafka.bootstrap, out):
        latest[m.key()] = m.value()
    live = {k: v for k, v in latest.items() if v is not None}
    sessions = Counter(k[:-16].decode() for k in live)
    assert sessions == Counter(dict.fromkeys(fed, 1)), "one live session per user"
    counts = {k[:-16].decode(): struct.unpack(">q", v)[0] for k, v in live.items()}
    assert counts == dict(fed), {u: (counts.get(u), n) for u, n in fed.items() if counts.get(u) != n}
