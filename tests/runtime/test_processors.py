"""The Processor API (`stream.process`) on real RocksDB stores, batch by batch as the task runner
runs it: stores that commit with the batch, forwarding, stream-time punctuation as Kafka Streams'
``PunctuationSchedule`` (start at 0, fire once per advance, skip missed intervals), schedules
that survive a restart of the task, wall-clock punctuation without input, and a raising
`process` as a bad record."""

from __future__ import annotations

import pytest

from eddy_runtime.dsl.compiler import compile_topology
from eddy_runtime.dsl.pipeline import PipelineError, Topology
from eddy_runtime.dsl.processors import STREAM_TIME, WALL_CLOCK_TIME, Processor
from eddy_runtime.processing.batch import TaskState
from eddy_runtime.processing.operators import process_batch
from tests.runtime.test_operators import StoreTransactions, rows, sub_of

pytestmark = pytest.mark.unit


class Dedup(Processor):
    """Forwards a key's first value only; every 10 ms of stream time forwards a tick."""

    def init(self, context):
        self.context = context
        self.seen = context.store("seen")
        context.schedule(10, STREAM_TIME, self.tick)

    def process(self, record):
        if record.value == "boom":
            raise ValueError("boom")
        if self.seen.get(record.key) is None:
            self.seen.put(record.key, record.timestamp)
            self.context.forward(record.key, record.value.upper())

    def tick(self, timestamp):
        self.context.forward("tick", str(timestamp))


def dedup_sub():
    return sub_of(lambda t: t.stream("in").process(Dedup, stores=["seen"], name="dedup").to("out"))


def run(sub, tx, state, keys, stamps, values):
    out = process_batch(sub, rows(keys, stamps, value=values), tx, state)
    tx.commit()
    return [(r.key.decode(), r.value.decode(), r.timestamp) for r in out.outputs], out


def test_a_processor_forwards_with_its_store_and_punctuates_on_stream_time(tmp_path):
    sub = dedup_sub()
    assert [s.name for s in sub.stores] == ["seen", "dedup-time"]
    tx, state = StoreTransactions(tmp_path, sub.stores), TaskState()
    got, _ = run(sub, tx, state, ["a", "b", "a"], [0, 5, 12], ["x", "y", "z"])
    # stream time 0 reaches the first schedule (at 0): tick; then 12 passes 10: tick; next at 20
    assert got == [("a", "X", 0), ("tick", "0", 0), ("b", "Y", 5), ("tick", "12", 12)]
    got, _ = run(sub, tx, state, ["c", "b"], [35, 36], ["w", "v"])
    assert got == [("c", "W", 35), ("tick", "35", 35)]  # 20 and 30 were missed: one tick, next at 40
    # A restart: a new processor on the same stores keeps stream time and the schedule (next at 40).
    tx.close()
    tx, state = StoreTransactions(tmp_path, sub.stores), TaskState()
    got, _ = run(sub, tx, state, ["a", "d"], [38, 40], ["again", "u"])
    assert got == [("d", "U", 40), ("tick", "40", 40)]
    tx.close()


def test_a_raising_process_makes_a_bad_record_and_the_others_go_on(tmp_path):
    sub = dedup_sub()
    tx = StoreTransactions(tmp_path, sub.stores)
    got, out = run(sub, tx, TaskState(), ["a", "b", "c"], [0, 1, 2], ["x", "boom", "z"])
    assert out.failed_rows == {1: "process() raised ValueError: boom"}
    assert [k for k, _, _ in got] == ["a", "tick", "c"]
    tx.close()


class Count(Processor):
    """Counts per key in a store it holds from `init`, forwarding each new count."""

    made: list[Count] = []

    def init(self, context):
        self.context = context
        self.counts = context.store("counts")
        assert context.store("counts") is self.counts
        Count.made.append(self)

    def process(self, record):
        n = (self.counts.get(record.key) or 0) + 1
        self.counts.put(record.key, n)
        self.context.forward(record.key, str(n))


def test_a_store_held_from_init_reads_and_writes_each_batch_in_that_batch_and_only_then(tmp_path):
    sub = sub_of(lambda t: t.stream("in").process(Count, stores=["counts"]).to("out"))
    tx, state = StoreTransactions(tmp_path, sub.stores), TaskState()
    keys = [["a"], ["a", "b"], ["a", "b"]]
    got = [run(sub, tx, state, k, [i] * len(k), ["v"] * len(k))[0] for i, k in enumerate(keys)]
    assert got == [[("a", "1", 0)], [("a", "2", 1), ("b", "1", 1)], [("a", "3", 2), ("b", "2", 2)]]
    with pytest.raises(RuntimeError, match="reachable from init, process and punctuators only"):
        Count.made[-1].counts.get("a")  # between batches
    tx.close()


#: the wall clock the heartbeat's context reads (seconds), moved by the test
NOW = [1_000.0]


class Heartbeat(Processor):
    def init(self, context):
        self.context = context
        context.clock = lambda: NOW[0]
        context.schedule(5_000, WALL_CLOCK_TIME, lambda now: context.forward("beat", str(now), 7))

    def process(self, record):
        pass


def test_wall_clock_punctuation_fires_in_a_batch_without_input(tmp_path):
    sub = sub_of(lambda t: t.stream("in").process(Heartbeat).to("out"))
    tx, state = StoreTransactions(tmp_path, sub.stores), TaskState()
    assert run(sub, tx, state, [], [], [])[0] == []  # scheduled at 1,000,000 ms: due at 1,005,000
    NOW[0] += 4.9
    assert run(sub, tx, state, [], [], [])[0] == []
    NOW[0] += 12.0  # two intervals and more passed: one punctuation, the next aligned after it
    assert run(sub, tx, state, [], [], [])[0] == [("beat", "1016900", 7)]
    NOW[0] += 3.0
    assert run(sub, tx, state, [], [], [])[0] == []  # next at 1,020,000
    NOW[0] += 0.1
    assert run(sub, tx, state, [], [], [])[0] == [("beat", "1020000", 7)]
    tx.close()


def test_process_is_checked_when_it_is_written():
    t = Topology()
    with pytest.raises(PipelineError, match="processor factory"):
        t.stream("a").process(42)
    with pytest.raises(PipelineError, match="distinct names"):
        t.stream("b").process(Dedup, stores=["s", ("s", "string", "json")])
    with pytest.raises(PipelineError, match="one stateful step"):
        t.stream("c").group_by_key().count().to_stream().process(Dedup)
    with pytest.raises(PipelineError, match="store key serde"):
        t.stream("d").process(Dedup, stores=[("s", "avro", "json")])


def test_what_a_processor_forwards_may_be_grouped_again(tmp_path):
    # Kafka Streams: process() returns a KStream, and groupBy on it repartitions by the new key.
    t = Topology()
    t.stream("in").process(Dedup, stores=["seen"], name="dedup").group_by(
        lambda key, value: value, name="by-value").count(name="per-value").to("out")
    app = compile_topology(t, "app", {"in": 1})
    first, counts = app.subtopologies
    assert [type(s).__name__ for s in first.sinks] == ["RepartitionSink"]
    assert first.sinks[0].topic == counts.source.topic == (REPARTITION := "app-by-value-repartition")
    assert counts.stateful is not None and counts.stateful.kind == "count"
    tx = StoreTransactions(tmp_path, first.stores)
    out = process_batch(first, rows(["a", "b", "a"], [0, 5, 12], value=["x", "y", "z"]), tx, TaskState())
    tx.commit()
    tx.close()
    # the forwarded records (ticks included), each keyed by its value, counted ahead per key (one each)
    assert sorted((r.topic, r.key.decode(), r.value, r.timestamp) for r in out.outputs) == sorted(
        (REPARTITION, key, (1).to_bytes(8, "big"), ts) for key, ts in (("X", 0), ("0", 0), ("Y", 5), ("12", 12)))


class Punctuations(Processor):
    def init(self, context):
        self.context = context
        context.schedule(10, STREAM_TIME, lambda ts: context.forward("punctuated", str(ts)))

    def process(self, record):
        pass


def test_stream_time_punctuates_once_after_a_gap_as_kafka_streams_task_test(tmp_path):
    # StreamTaskTest.shouldPunctuateOnceStreamTimeAfterGap: a 10 ms schedule, records at 20, 25,
    # 142, 145, 155, 159, 160, 161 (its two partitions' records in timestamp order): punctuations
    # at 20, 142, 155 and 160 only.
    sub = sub_of(lambda t: t.stream("in").process(Punctuations).to("out"))
    tx = StoreTransactions(tmp_path, sub.stores)
    state = TaskState()
    fired = []
    for ts in (20, 25, 142, 145, 155, 159, 160, 161):  # one batch per record, as the test processes them
        fired += [int(v) for _, v, _ in run(sub, tx, state, ["k"], [ts], ["v"])[0]]
    assert fired == [20, 142, 155, 160]
    tx.close()
