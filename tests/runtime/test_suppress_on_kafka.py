"""Suppression on real Kafka and Spark executors, on both paths: the clickstream example's
`build_final` (session counts through ``suppress(until_window_closes())``) writes each session
once, when it is over, across a restart that happens while a session waits in the buffer: the
buffered session is neither lost nor written twice, and the sessions written before the restart
are not written again."""

from __future__ import annotations

import dataclasses
import json
import struct
import time

import pytest

from eddy_runtime.driver.outcomes import DriverError
from tests.runtime.apps import driver_for, produce, read_all, run_until_idle, streamapp
from tests.runtime.test_clickstream import clickstream_app

pytestmark = pytest.mark.integration

SECOND = 1_000
MINUTE = 60_000


def written(bootstrap: str, topic: str) -> list[tuple[tuple[str, int, int], int | None, int]]:
    """((user, start, end), count or None, timestamp) of each output record, in order."""
    out = []
    for m in read_all(bootstrap, topic):
        end, start = struct.unpack(">qq", m.key()[-16:])
        count = None if m.value() is None else struct.unpack(">q", m.value())[0]
        out.append(((m.key()[:-16].decode(), start, end), count, m.timestamp()[1]))
    return out


@pytest.mark.parametrize("execution", ["continuous", "microBatch"])
def test_final_session_counts_come_out_once_each_across_a_restart(kafka, spark, tmp_path, execution):
    spec, views, out = clickstream_app(kafka, f"final-{execution.lower()}", function="build_final",
                                       args={"gap": "1m", "grace": "30s"}, execution=execution)
    t0 = int(time.time() * 1000) - 3_600_000  # recent: the broker deletes records past its retention
    view = json.dumps({"page": "/"}).encode()

    # One partition holds every user, so one task's stream time closes the sessions. A session
    # closes once stream time reaches its end + gap (1 min) + grace (30 s).
    produce(kafka.bootstrap, views, [(b"alice", view), (b"bob", view), (b"alice", view), (b"alice", view),
                                     (b"carol", view)], partition=0,
            timestamps=[t0, t0 + 10 * SECOND, t0 + 20 * SECOND, t0 + 50 * SECOND, t0 + 3 * MINUTE])
    run_until_idle(driver_for(spark, spec, str(tmp_path / "state")))
    # stream time t0 + 3 min: alice's [0, 50 s] and bob's [10 s] are over; carol's waits in the
    # buffer (the output topic's partitions are read in no particular order: sorted)
    first = sorted(written(kafka.bootstrap, out))
    assert first == [(("alice", t0, t0 + 50 * SECOND), 3, t0 + 50 * SECOND),
                     (("bob", t0 + 10 * SECOND, t0 + 10 * SECOND), 1, t0 + 10 * SECOND)]

    # A restart (tasks may come back on other executors, their stores restored from the
    # changelogs): carol's view at 3 min 40 s joins her buffered session; dave's at 10 min closes it.
    produce(kafka.bootstrap, views, [(b"carol", view), (b"dave", view)], partition=0,
            timestamps=[t0 + 3 * MINUTE + 40 * SECOND, t0 + 10 * MINUTE])
    run_until_idle(driver_for(spark, spec, str(tmp_path / "state")))

    assert sorted(written(kafka.bootstrap, out)) == first + [
        (("carol", t0 + 3 * MINUTE, t0 + 3 * MINUTE + 40 * SECOND), 2, t0 + 3 * MINUTE + 40 * SECOND)
    ], "every session once, when it is over: none lost, none repeated, dave's still open"


def test_a_full_final_results_buffer_stops_the_app_and_commits_nothing_of_its_batch(kafka, spark, tmp_path):
    app = kafka.unique_name("final-full")
    clicks = kafka.create_topic(f"{app}-clicks", partitions=1)
    out = f"{app}-final-clicks"
    spec = streamapp(app, kafka.bootstrap, "tests.runtime.pipelines", {"input_topic": clicks, "output_topic": out},
                     state={"standbyReplicas": 0})
    spec = dataclasses.replace(spec, pipeline=dataclasses.replace(spec.pipeline,
                                                                  function="final_clicks_one_window_buffered"))
    t0 = int(time.time() * 1000) - 3_600_000
    t0 -= t0 % MINUTE
    produce(kafka.bootstrap, clicks, [(b"alice", b"/")], timestamps=[t0])
    run_until_idle(driver_for(spark, spec, str(tmp_path / "state")))  # one window waits: within the limit
    produce(kafka.bootstrap, clicks, [(b"bob", b"/")], timestamps=[t0 + SECOND])
    with pytest.raises(DriverError, match=r"suppress buffer 'clicks-suppress' exceeded its max capacity: 2/1 records"):
        run_until_idle(driver_for(spark, spec, str(tmp_path / "state")))
    # Nothing of the failed batch was committed: a later run (with a larger buffer, say) starts
    # again from bob's click
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": app})
    try:
        assert c.committed([TopicPartition(clicks, 0)], timeout=10)[0].offset == 1
    finally:
        c.close()
    assert written(kafka.bootstrap, out) == []
