"""Helpers for the runtime's integration tests: StreamApp specs, producing, reading outputs, running a
driver until its input is processed."""

from __future__ import annotations

import struct
import time
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from eddy_contract.spec import BadRecordPolicy, ProcessingGuarantee, StreamAppSpec
from eddy_runtime.driver.loop import Driver
from eddy_runtime.driver.options import DriverOptions
from eddy_runtime.driver.outcomes import BatchReport
from eddy_runtime.dsl.compiler import compile_topology
from eddy_runtime.dsl.pipeline import Topology
from eddy_runtime.kafka import client as kafka_client
from eddy_runtime.kafka.client import KafkaClientConfig
from eddy_runtime.protocol.fences import fence_topic
from eddy_runtime.protocol.work import BatchSettings


def streamapp(name: str, bootstrap: str, module: str, args: dict[str, str] | None = None, **spec: Any) -> StreamAppSpec:
    """A StreamApp as a user would write it, with short triggers for tests."""
    body: dict[str, Any] = {
        "image": "eddy:test",
        "pipeline": {"module": module, "args": args or {}},
        "kafka": {"bootstrapServers": bootstrap},
        "triggerInterval": "200ms",
        "executors": {"replicas": 2},
        **spec,
    }
    return StreamAppSpec.from_manifest({"apiVersion": "eddy.dev/v1alpha1", "kind": "StreamApp",
                                        "metadata": {"name": name}, "spec": body})


def driver_for(spark: Any, spec: StreamAppSpec, state_dir: str, **options: Any) -> Driver:
    return Driver(spark, spec, DriverOptions(state_dir=state_dir, per_executor_state_dirs=True, **options))


def produce(bootstrap: str, topic: str, records: Iterable[tuple[bytes | None, bytes | None]],
            partition: int | None = None, timestamps: Iterable[int] | None = None) -> int:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    n = 0
    stamps = iter(timestamps) if timestamps is not None else None
    for key, value in records:
        kw: dict[str, Any] = {}
        if partition is not None:
            kw["partition"] = partition
        if stamps is not None:
            kw["timestamp"] = next(stamps)
        p.produce(topic, value, key, **kw)
        n += 1
        if n % 10_000 == 0:
            p.poll(0)
    assert p.flush(30) == 0
    return n


def read_all(bootstrap: str, topic: str, idle_s: float = 2.0) -> list[Any]:
    """Every committed record of `topic` (read_committed) up to each partition's end as it stands
    when called: done once the reader's position passes every partition's high watermark (the
    commit markers included), or once nothing new came for `idle_s` (a transaction still open
    holds a read_committed reader back; a topic that does not exist yet has no end to reach)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{time.monotonic_ns()}",
                  "auto.offset.reset": "earliest", "isolation.level": "read_committed", "enable.auto.commit": False})
    out = []
    try:
        topics = c.list_topics(topic, timeout=10).topics
        found = topics.get(topic)
        partitions = sorted(found.partitions) if found is not None and found.error is None else []
        ends: dict[int, int] = {}
        for p in partitions:
            low, high = kafka_client.retrying(  # a topic just made may not have its leader yet
                lambda p=p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10), f"the end of {topic}[{p}]")
            if high > low:
                ends[p] = high
        if partitions:
            c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        else:
            c.subscribe([topic])
        last = time.monotonic()
        while time.monotonic() - last < idle_s:
            for m in c.consume(10_000, timeout=0.1):
                if m.error() is None:
                    out.append(m)
                    last = time.monotonic()
            if partitions and all(tp.offset >= ends[tp.partition]
                                  for tp in c.position([TopicPartition(topic, p) for p in ends])):
                break
    finally:
        c.close()
    return out


def latest_counts(bootstrap: str, topic: str, idle_s: float = 2.0) -> dict[str, int]:
    return {m.key().decode(): struct.unpack(">q", m.value())[0] for m in read_all(bootstrap, topic, idle_s)}


def run_until_idle(driver: Driver, timeout_s: float = 240.0, on_batch: Callable[[BatchReport], None] | None = None,
                   min_batches: int = 2) -> list[BatchReport]:
    """Run batches until two in a row find no input left to process (or fail the test)."""
    reports: list[BatchReport] = []
    deadline = time.monotonic() + timeout_s
    idle = [0]

    def until(r: BatchReport) -> bool:
        reports.append(r)
        if on_batch is not None:
            on_batch(r)
        busy = r.records_in or sum(driver.last_lag.values()) or r.outcome != "ok" or r.by_status("restoring")
        idle[0] = 0 if busy else idle[0] + 1
        if time.monotonic() > deadline:
            items = [(x.task, x.status, x.message) for x in r.results]
            raise AssertionError(f"input not processed after {timeout_s}s; lag {driver.last_lag}; "
                                 f"last batch {r.outcome} {r.error} {items}")
        return len(reports) >= min_batches and idle[0] >= 2

    driver.run(until=until)
    return reports


def values_of(bootstrap: str, topic: str) -> list[bytes]:
    """Every record value of `topic` (read_committed), once it has been idle half a second."""
    return [m.value() for m in read_all(bootstrap, topic, idle_s=0.5)]


def wait_for_values(bootstrap: str, topic: str, n: int, what: str, timeout_s: float = 60.0) -> list[bytes]:
    """`values_of(topic)` once it holds at least `n` records; fails after `timeout_s` saying `what`."""
    deadline = time.monotonic() + timeout_s
    while True:
        values = values_of(bootstrap, topic)
        if len(values) >= n:
            return values
        assert time.monotonic() < deadline, f"{what}: {len(values)} of {n} records out after {timeout_s:.0f} s"
        time.sleep(0.3)


def feed_numbered(bootstrap: str, topic: str, first: int, n: int) -> None:
    """Values `v<first>` .. `v<first + n - 1>`, without keys."""
    produce(bootstrap, topic, ((None, f"v{i}".encode()) for i in range(first, first + n)))


def pass_through_app(kafka: Any, name: str, state_dir: str,
                     push_token: str = "") -> tuple[str, str, str, dict[int, Any], BatchSettings]:
    """A one-partition pass-through app under exactly-once, with its fence topic: (app, input,
    output, its sub-topologies as the runners get them, the settings of its work)."""
    app = kafka.unique_name(name)
    source = kafka.create_topic(f"{app}-in", partitions=1)
    out = kafka.create_topic(f"{app}-out", partitions=1)
    kafka.create_topic(fence_topic(app), partitions=1, config={"cleanup.policy": "compact"})
    topology = Topology()
    topology.stream(source).to(out)
    subs = {s.id: s.for_executor() for s in compile_topology(topology, app, {source: 1}).subtopologies}
    settings = BatchSettings(app, 0, 1, KafkaClientConfig.of(kafka.bootstrap), ProcessingGuarantee.EXACTLY_ONCE,
                             BadRecordPolicy.FAIL, None, state_dir, True, push_token=push_token)
    return app, source, out, subs, settings


def assert_each_once(bootstrap: str, topic: str, n: int, what: str) -> None:
    """`topic` holds `v0` .. `v<n - 1>`, each once (after 2 s: anything processed twice is out by then)."""
    time.sleep(2)
    values = values_of(bootstrap, topic)
    twice = sorted(v.decode() for v, count in Counter(values).items() if count > 1)
    assert not twice, f"processed twice {what}: {twice}"
    assert sorted(values) == sorted(f"v{i}".encode() for i in range(n))
