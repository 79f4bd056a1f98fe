"""Interactive queries on the real path: word count on Spark `local-cluster` (two executor JVMs),
exactly-once against the real broker, one standby per task; the counts read back over HTTP from
the driver's and the executors' endpoints, then while an executor JVM is killed.

What must hold (issue 14): a key asked at any endpoint is answered by the executor holding its
task (Kafka's murmur2 routing matches where the counts really are); scans gather every partition;
while the executor holding a key's active is gone, a query that allows lag is served by the
standby, then by the promoted active; a count read is never anything but the committed count.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest

from eddy_runtime.queries.client import QueryClient, QueryFailed
from tests.runtime.apps import driver_for, produce, streamapp
from tests.runtime.test_failover import Run, executor_jvm_pid
from tests.servers import free_port

pytestmark = pytest.mark.integration

VOCABULARY = [f"w{i:03d}" for i in range(200)]


def test_counts_are_queryable_at_any_endpoint_and_through_an_executor_failover(kafka, spark, tmp_path):
    app = kafka.unique_name("iq")
    source = kafka.create_topic(f"{app}-lines", partitions=4)
    rnd = random.Random(11)
    fed = [" ".join(rnd.sample(VOCABULARY, 4)) for _ in range(3000)]
    produce(kafka.bootstrap, source, ((str(i).encode(), line.encode()) for i, line in enumerate(fed)))
    expected = Counter(w for line in fed for w in line.split())
    spec = streamapp(app, kafka.bootstrap, "examples.wordcount.app",
                     {"input_topic": source, "output_topic": f"{app}-counts"}, triggerInterval="300ms",
                     processingGuarantee="exactly_once", state={"standbyReplicas": 1})
    port = free_port()
    driver = driver_for(spark, spec, str(tmp_path / "state"), metrics_port=port, metrics_addr="127.0.0.1")
    at_driver = QueryClient([f"127.0.0.1:{port}"])
    run = Run(driver)
    try:
        def counted() -> bool:
            try:
                return dict(at_driver.all("counts")) == expected
            except QueryFailed:
                return False

        run.wait("every count queryable at the driver's endpoint", counted, 240)
        routing = driver.routing
        assert routing is not None and len(routing.addresses) == 2, routing
        victim, survivor = sorted(routing.addresses)

        # Any endpoint answers any key, from the executor holding the key's task (once the runners
        # got a batch's routing with both endpoints in it).
        at_executors = {e: QueryClient([a]) for e, a in routing.addresses.items()}
        run.wait("every runner knows both endpoints",
                 lambda: all(len(c.metadata()["executors"]) == 2 for c in at_executors.values()), 60)
        served: Counter[tuple[str, str]] = Counter()
        for word in VOCABULARY[:60]:
            for client in (at_driver, *at_executors.values()):
                reply = client.get("counts", word)
                assert (reply.found, reply.value, reply.role, reply.lag) == (True, expected[word], "active", 0)
                assert reply.served_by == routing.tasks[reply.task][0]
                served[(reply.task, reply.served_by)] += 1
        assert {e for _, e in served} == {victim, survivor}
        assert at_driver.get("counts", "not-a-word").found is False
        assert dict(at_executors[survivor].prefix("counts", "w01")) == {w: n for w, n in expected.items()
                                                                   if w.startswith("w01")}
        with pytest.raises(QueryFailed, match="no queryable store 'nope'"):
            at_driver.get("nope", "w001")
        meta = at_driver.metadata()
        assert meta["app"] == app and meta["stores"]["counts"]["kind"] == "key_value"
        # The command line: `eddy query APP STORE KEY`.
        eddy = [sys.executable, "-m", "eddy_runtime.cli", "query"]
        done = subprocess.run([*eddy, app, "counts", "w007", "--at", f"127.0.0.1:{port}"], capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["value"] == expected["w007"]
        done = subprocess.run([*eddy, "other-app", "counts", "w007", "--at", f"127.0.0.1:{port}"],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and f"serves app '{app}', not 'other-app'" in done.stderr

        # Fail over: kill the JVM holding the actives of some words; keep asking with lag allowed.
        words = [w for w in VOCABULARY if routing.tasks[routing.stores["counts"].task_for(w)][0] == victim][:5]
        assert words and all(survivor in routing.tasks[routing.stores["counts"].task_for(w)][1] for w in words)
        client = QueryClient([f"127.0.0.1:{port}", routing.addresses[survivor]], timeout_s=2.0)
        os.kill(executor_jvm_pid(spark.sparkContext, victim), signal.SIGKILL)
        killed_at = time.monotonic()
        seen: list[tuple[float, str, str, str, int]] = []
        failed = 0
        while time.monotonic() - killed_at < 120:
            for w in words:
                try:
                    r = client.get("counts", w, max_lag=10)
                except QueryFailed:
                    failed += 1
                    continue
                # Never a wrong value: the counts were all committed before the kill.
                assert (r.found, r.value) == (True, expected[w]), (w, r)
                seen.append((time.monotonic() - killed_at, w, r.served_by, r.role, r.lag))
            if any(role == "active" and by != victim for _, _, by, role, _ in seen):
                break
            time.sleep(0.02)
        roles = [(by, role) for _, _, by, role, _ in seen]
        assert (survivor, "standby") in roles, f"no reply from the standby: {roles[:20]} (failed {failed})"
        first_standby = roles.index((survivor, "standby"))
        assert any(role == "active" and by != victim for by, role in roles[first_standby:]), roles[-20:]
        assert all(lag <= 10 for *_, lag in seen)
        standby_s = [t for t, _, by, role, _ in seen if role == "standby"]
        active_s = [t for t, _, by, role, _ in seen if role == "active" and by != victim]
        print(f"\nafter the kill: {len(seen)} answers, {failed} not answerable; standby served from "
              f"{standby_s[0]:.2f}s, the new active from {active_s[0]:.2f}s")
    finally:
        run.stop()
