"""`stream.process` on the real broker and Spark executors, on both execution paths, across a
restart, exactly-once: the processor's store and its stream-time schedule carry over (no user
forwarded twice, no punctuation fired twice or missed), and wall-clock punctuation runs."""

from __future__ import annotations

import time

import pytest

from tests.runtime.apps import driver_for, produce, read_all, run_until_idle, streamapp
from tests.runtime.test_pipelines import _with_function

pytestmark = pytest.mark.integration

MINUTE = 60_000


def expected(visits: list[tuple[str, int]]) -> list[tuple[str, str, int]]:
    """Kafka Streams' outputs for `FirstSeen`: each first visit, and a tick when stream time
    reaches the schedule (at 0, then at the next whole minute after each firing)."""
    out, seen, next_at, stream_time = [], set(), 0, -1
    for user, ts in visits:
        stream_time = max(stream_time, ts)
        if user not in seen:
            seen.add(user)
            out.append((user, f"visit-{user}", ts))
        if stream_time >= next_at:
            out.append(("tick", str(len(seen)), stream_time))
            next_at += ((stream_time - next_at) // MINUTE + 1) * MINUTE
    return out


@pytest.mark.parametrize("execution", ["continuous", "microBatch"])
def test_a_processor_keeps_its_store_and_schedule_across_a_restart(kafka, spark, tmp_path, execution):
    app = kafka.unique_name(f"proc-{execution.lower()}")
    source = kafka.create_topic(f"{app}-visits", partitions=1)
    out = f"{app}-first"
    spec = _with_function(streamapp(app, kafka.bootstrap, "tests.runtime.pipelines",
                                    {"input_topic": source, "output_topic": out}, processingGuarantee="exactly_once",
                                    execution=execution), "first_seen")
    t0 = (int(time.time() * 1000) - 3_600_000) // MINUTE * MINUTE + 7_000
    visits = [(f"u{i % 40}", t0 + i * 5_000) for i in range(120)]  # 10 minutes, each user three times

    def feed(part):
        produce(kafka.bootstrap, source, [(u.encode(), f"visit-{u}".encode()) for u, _ in part],
                timestamps=[ts for _, ts in part])

    feed(visits[:70])
    run_until_idle(driver_for(spark, spec, str(tmp_path / "state")))
    feed(visits[70:])
    run_until_idle(driver_for(spark, spec, str(tmp_path / "state")))
    written = [(m.key().decode(), m.value().decode(), m.timestamp()[1]) for m in read_all(kafka.bootstrap, out)]
    assert [w for w in written if w[0] != "beat"] == expected(visits)
    assert any(w[0] == "beat" for w in written)  # wall-clock punctuation ran (200 ms, several batches)
