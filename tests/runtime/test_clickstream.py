"""The clickstream example (examples/clickstream): its StreamApp manifest run by the driver on real
Kafka and Spark executors. Page views make sessions per user; a view between two sessions of an
earlier run merges them (the old ones become tombstones); a view later than the grace is dropped."""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path

import pytest
import yaml

from eddy_contract.spec import StreamAppSpec
from tests.runtime.apps import driver_for, produce, read_all, run_until_idle

pytestmark = pytest.mark.integration

MANIFEST = Path(__file__).parents[2] / "examples" / "clickstream" / "streamapp.yaml"
SECOND = 1_000
MINUTE = 60_000


def clickstream_app(kafka, name: str, partitions: int = 2, function: str = "build", args: dict | None = None,
                    **spec: object) -> tuple[StreamAppSpec, str, str]:
    """The example's manifest on this broker with topics of its own: (spec, views topic, output topic)."""
    body = yaml.safe_load(MANIFEST.read_text())
    app = kafka.unique_name(name)
    views = kafka.create_topic(f"{app}-views", partitions=partitions)
    out = f"{app}-sessions"
    body["metadata"]["name"] = app
    body["spec"]["kafka"]["bootstrapServers"] = kafka.bootstrap
    body["spec"]["pipeline"]["function"] = function
    body["spec"]["pipeline"]["args"].update(views_topic=views, output_topic=out, **(args or {}))
    body["spec"].update(spec)
    return StreamAppSpec.from_manifest(body), views, out


def session_of(key: bytes) -> tuple[str, int, int]:
    """(user, start, end) of an output key: user, then end and start (SessionWindowedSerializer)."""
    end, start = struct.unpack(">qq", key[-16:])
    return key[:-16].decode(), start, end


@pytest.mark.parametrize("execution", ["continuous", "microBatch"])
def test_the_clickstream_example_counts_page_views_per_user_session(kafka, spark, tmp_path, execution):
    spec, views, out = clickstream_app(kafka, f"clicks-{execution.lower()}", args={"gap": "1m", "grace": "5m"},
                                       execution=execution)
    t0 = int(time.time() * 1000) - 3_600_000  # recent: the broker deletes records past its retention

    def view(page: str) -> bytes:
        return json.dumps({"page": page}).encode()

    # One partition holds every user, so one task's stream time decides what is late.
    produce(kafka.bootstrap, views,
            [(b"alice", view("/")), (b"alice", view("/shoes")), (b"alice", view("/cart")),  # one session
             (b"bob", view("/")),                                                             # bob's first
             (b"bob", view("/hats")),                                                         # bob's second
             (b"alice", view("/"))],                                                          # alice's second
            partition=0,
            timestamps=[t0, t0 + 20 * SECOND, t0 + 50 * SECOND, t0 + 10 * SECOND, t0 + 2 * MINUTE, t0 + 5 * MINUTE])
    driver = driver_for(spark, spec, str(tmp_path / "state"))
    run_until_idle(driver)
    # After a restart: bob's view at 70 s is within a minute of both his sessions and merges them;
    # dave's view moves stream time to 20 min; carol's view at 0 closed at 0 + 5 min grace: dropped.
    produce(kafka.bootstrap, views, [(b"bob", view("/hats?color=red")), (b"dave", view("/")), (b"carol", view("/"))],
            partition=0, timestamps=[t0 + 70 * SECOND, t0 + 20 * MINUTE, t0])
    run_until_idle(driver_for(spark, spec, str(tmp_path / "state")))

    written = [(session_of(m.key()), None if m.value() is None else struct.unpack(">q", m.value())[0],
                m.timestamp()[1]) for m in read_all(kafka.bootstrap, out)]
    live: dict[tuple[str, int, int], int | None] = {}
    for session, count, stamp in written:
        assert stamp == session[2], "an update is stamped with its session's end, as in Kafka Streams"
        live[session] = count
    assert {s: n for s, n in live.items() if n is not None} == {
        ("alice", t0, t0 + 50 * SECOND): 3,
        ("alice", t0 + 5 * MINUTE, t0 + 5 * MINUTE): 1,
        ("bob", t0 + 10 * SECOND, t0 + 2 * MINUTE): 3,
        ("dave", t0 + 20 * MINUTE, t0 + 20 * MINUTE): 1,
    }
    # bob's sessions of the first run were merged away; within a run, how the views fell into
    # batches decides which intermediate sessions were written (and then deleted) too
    tombstones = {s for s, n, _ in written if n is None}
    assert {("bob", t0 + 10 * SECOND, t0 + 10 * SECOND), ("bob", t0 + 2 * MINUTE, t0 + 2 * MINUTE)} <= tombstones
    assert all(live[s] is None for s in tombstones), "a deleted session stays deleted"
