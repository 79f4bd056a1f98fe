"""A session-windowed count (examples/clickstream) under exactly-once while an executor JVM is
killed: page views keep coming; the session stores fail over to their standbys on the surviving
executor and every user's session counts every view exactly once (issue 14: "a crash/failover
test with a session-windowed app staying exact under exactly-once").
"""

from __future__ import annotations

import json
import struct
import time
from collections import Counter

import pytest

from tests.runtime.apps import driver_for, produce, read_all
from tests.runtime.test_clickstream import clickstream_app
from tests.runtime.test_failover import Run

pytestmark = pytest.mark.integration

USERS = [f"user-{i:03d}" for i in range(200)]


def test_session_counts_stay_exact_across_an_executor_kill(kafka, spark, tmp_path):
    spec, views, out = clickstream_app(kafka, "sessions-fo", partitions=4, triggerInterval="300ms")
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
    try:
        run.kill_under_load(lambda: feed(40), "the views")
    finally:
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
