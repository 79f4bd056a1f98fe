"""Vectorized stateful steps and sinks over real RocksDB stores (no Kafka: stores opened directly)."""

from __future__ import annotations

import struct

import pyarrow as pa
import pytest

from eddy_runtime.dsl.compiler import compile_topology
from eddy_runtime.dsl.pipeline import Topology, hopping, tumbling
from eddy_runtime.kafka.records import TS_TYPE, RawRecords
from eddy_runtime.processing.batch import TaskState
from eddy_runtime.processing.joins import apply_table_updates
from eddy_runtime.processing.operators import process_batch
from eddy_runtime.state import open_store

pytestmark = pytest.mark.unit


class StoreTransactions:
    """The per-batch store transactions a task's `TaskTransaction` would hand out, on real stores."""

    def __init__(self, path, specs):
        self.stores = {s.name: open_store(s, path / s.name) for s in specs}
        self.begin()

    def begin(self):
        self.txs = {name: store.begin() for name, store in self.stores.items()}

    def key_value(self, name):
        return self.txs[name]

    window = key_value

    def commit(self):
        for tx in self.txs.values():
            tx.apply(None)
        self.begin()

    def close(self):
        for s in self.stores.values():
            s.close()


@pytest.fixture
def stores(tmp_path):
    made = []

    def make(sub):
        s = StoreTransactions(tmp_path, sub.stores)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


def rows(keys, stamps_ms=None, **cols):
    stamps = stamps_ms if stamps_ms is not None else [1_000] * len(keys)
    data = {"key": pa.array(keys, pa.string()), **{k: pa.array(v) for k, v in cols.items()},
            "timestamp": pa.array([t * 1000 for t in stamps], pa.int64()).cast(TS_TYPE)}
    return pa.table(data)


def updates(out):
    return {(r.key, r.value) for r in out.outputs}


def sub_of(build, partitions=1):
    t = Topology()
    build(t)
    return compile_topology(t, "app", {"in": partitions, "table": partitions}).subtopologies[-1]


def int64(v):
    return struct.pack(">q", v)


def test_count_reads_and_writes_each_distinct_key_once_per_batch(stores):
    sub = sub_of(lambda t: t.stream("in").group_by_key().count(name="c").to("out"))
    tx = stores(sub)
    out = process_batch(sub, rows(["a", "b", "a", None, "a"]), tx, TaskState())
    assert updates(out) == {(b"a", int64(3)), (b"b", int64(1))}
    assert out.dropped == 1  # a null key, as Kafka Streams drops it
    tx.commit()
    out = process_batch(sub, rows(["b", "b"]), tx, TaskState())
    assert updates(out) == {(b"b", int64(3))}
    tx.commit()
    assert tx.stores["c"].get("a") == 3


def test_count_after_a_combined_repartition_adds_the_partial_counts(stores):
    sub = sub_of(lambda t: t.stream("in").group_by("word").count(name="c").to("out"))
    assert sub.source.combined == "count"
    tx = stores(sub)
    partial = rows(["x", "y", "x"], __partial=pa.array([5, 1, 2], pa.int64()))
    out = process_batch(sub, partial, tx, TaskState())
    assert updates(out) == {(b"x", int64(7)), (b"y", int64(1))}


def test_reduce_sum_keeps_a_running_total(stores):
    sub = sub_of(lambda t: t.stream("in").group_by_key().reduce("sum", column="n", name="s", value_serde="int64")
                 .to("out"))
    tx = stores(sub)
    process_batch(sub, rows(["a", "a"], n=[2, 3]), tx, TaskState())
    tx.commit()
    out = process_batch(sub, rows(["a"], n=[10]), tx, TaskState())
    assert updates(out) == {(b"a", int64(15))}


def test_aggregate_calls_the_adder_once_per_key_with_the_batchs_values_in_order(stores):
    calls = []

    def adder(key, values, agg):
        calls.append((key, values["v"]))
        return agg + values["v"]

    sub = sub_of(lambda t: t.stream("in").group_by_key().aggregate(list, adder, name="agg").to("out"))
    tx = stores(sub)
    out = process_batch(sub, rows(["a", "b", "a"], v=["1", "2", "3"]), tx, TaskState())
    assert sorted(calls) == [("a", ["1", "3"]), ("b", ["2"])]
    assert updates(out) == {(b"a", b'["1","3"]'), (b"b", b'["2"]')}


def test_a_failing_adder_marks_only_its_keys_rows_as_bad(stores):
    def adder(key, values, agg):
        if key == "bad":
            raise ValueError("no thanks")
        return agg + len(values["v"])

    sub = sub_of(lambda t: t.stream("in").group_by_key().aggregate(lambda: 0, adder, name="agg").to("out"))
    tx = stores(sub)
    out = process_batch(sub, rows(["ok", "bad", "ok", "bad"], v=[1, 2, 3, 4]), tx, TaskState())
    assert set(out.failed_rows) == {1, 3}
    assert "no thanks" in out.failed_rows[1]
    assert updates(out) == {(b"ok", b"2")}


def test_tumbling_window_counts_drop_records_later_than_the_grace_period(stores):
    sub = sub_of(lambda t: t.stream("in").group_by_key().windowed_by(tumbling("60s", grace="5s"))
                 .count(name="w").to("out"))
    tx = stores(sub)
    state = TaskState()
    # 70 s moves stream time past the first window's end + grace (65 s): the 3 s record is late.
    out = process_batch(sub, rows(["a", "a", "a", "a"], [1_000, 59_000, 70_000, 3_000]), tx, state)
    assert out.dropped == 1
    assert updates(out) == {(b"a" + int64(0), int64(2)), (b"a" + int64(60_000), int64(1))}
    assert state.stream_time == 70_000


def test_a_record_within_grace_still_counts_in_its_window(stores):
    sub = sub_of(lambda t: t.stream("in").group_by_key().windowed_by(tumbling("60s", grace="5s"))
                 .count(name="w").to("out"))
    tx = stores(sub)
    state = TaskState()
    process_batch(sub, rows(["a", "a"], [1_000, 64_000]), tx, state)
    # Within grace (window end 60 s + 5 s > stream time 64 s), a record of the first window counts.
    out = process_batch(sub, rows(["a"], [59_000]), tx, state)
    assert out.dropped == 0 and updates(out) == {(b"a" + int64(0), int64(2))}


def test_windows_of_one_batch_are_kept_when_a_newer_window_of_the_batch_would_expire_them(stores):
    sub = sub_of(lambda t: t.stream("in").group_by_key().windowed_by(tumbling("10s", grace="5s"))
                 .count(name="w").to("out"))
    tx = stores(sub)
    # u1's 1 s and 2 s records arrive while stream time is 14 s (on time); its 25 s record then
    # moves the store past window 0's retention.
    out = process_batch(sub, rows(["u2", "u2", "u1", "u1", "u1"], [5_000, 14_000, 1_000, 2_000, 25_000]), tx,
                        TaskState())
    assert (b"u1" + int64(0), int64(2)) in updates(out)


def test_hopping_windows_count_a_record_in_every_window_that_holds_it(stores):
    sub = sub_of(lambda t: t.stream("in").group_by_key().windowed_by(hopping("10s", "5s")).count(name="h")
                 .to("out"))
    tx = stores(sub)
    out = process_batch(sub, rows(["k"], [12_000]), tx, TaskState())
    assert updates(out) == {(b"k" + int64(5_000), int64(1)), (b"k" + int64(10_000), int64(1))}


def test_stream_table_join_sees_the_tables_updates_of_the_same_batch(stores):
    def build(t):
        t.stream("in").join(t.table("table", name="users"), how="left").to("out", value=["value", "table_value"],
                                                                              value_serde="json")

    sub = sub_of(build)
    tx = stores(sub)
    table = RawRecords("table", 0, keys=[b"u1", b"u2", b"u2"], values=[b"paris", b"rome", None],
                       offsets=[0, 1, 2], timestamps=[0, 0, 0])
    assert apply_table_updates(sub.table, table, tx) == []
    out = process_batch(sub, rows(["u1", "u2"], value=["click", "view"]), tx, TaskState())
    # Columns in the order to() names them; u2's tombstone deleted it before the join.
    assert updates(out) == {(b"u1", b'{"value":"click","table_value":"paris"}'),
                            (b"u2", b'{"value":"view","table_value":null}')}


def test_an_inner_join_drops_records_without_a_table_value(stores):
    sub = sub_of(lambda t: t.stream("in").join(t.table("table", name="users")).to("out", value="table_value"))
    tx = stores(sub)
    apply_table_updates(sub.table, RawRecords("table", 0, [b"u1"], [b"paris"], [0], [0]), tx)
    out = process_batch(sub, rows(["u1", "u9"], value=["a", "b"]), tx, TaskState())
    assert updates(out) == {(b"u1", b"paris")}
    assert out.dropped == 1


def joined_value(click, user):
    if click == "boom":
        raise ValueError("boom")
    return None if user == "nobody" else f"{click}@{user}"


def test_a_stream_table_joiner_makes_each_records_value_as_kafka_streams_value_joiner(stores):
    # left: joiner(value, None) for a key the table lacks; the raising joiner drops its record;
    # a None result is a record with a null value; the table's value is no column of its own.
    sub = sub_of(lambda t: t.stream("in").join(t.table("table", name="users"), joined_value, how="left").to("out"))
    tx = stores(sub)
    apply_table_updates(sub.table, RawRecords("table", 0, [b"u1", b"u3"], [b"paris", b"nobody"], [0, 1], [0, 0]), tx)
    out = process_batch(sub, rows(["u1", "u2", "u1", "u3"], value=["click", "view", "boom", "x"]), tx, TaskState())
    assert [(r.key, r.value) for r in out.outputs] == [(b"u1", b"click@paris"), (b"u2", b"view@None"), (b"u3", None)]
    assert out.dropped == 1 and not out.failed_rows


def test_an_inner_stream_table_joiner_sees_only_keys_the_table_has(stores):
    sub = sub_of(lambda t: t.stream("in").join(t.table("table", name="users"), joined_value).to("out"))
    tx = stores(sub)
    apply_table_updates(sub.table, RawRecords("table", 0, [b"u1"], [b"paris"], [0], [0]), tx)
    out = process_batch(sub, rows(["u1", "u9"], value=["a", "b"]), tx, TaskState())
    assert updates(out) == {(b"u1", b"a@paris")}
    assert out.dropped == 1


def test_a_combined_repartition_sends_one_partial_count_per_key_with_its_newest_timestamp():
    t = Topology()
    t.stream("in").group_by("word").count().to("out")
    first = compile_topology(t, "app", {"in": 1}).subtopologies[0]
    words = pa.table({"word": ["x", "y", "x"],
                      "timestamp": pa.array([1_000_000, 2_000_000, 3_000_000], pa.int64()).cast(TS_TYPE)})
    out = process_batch(first, words, None, TaskState())
    assert {(r.key, r.value, r.timestamp) for r in out.outputs} == {
        (b"x", int64(2), 3_000), (b"y", int64(1), 2_000)}


def test_record_steps_after_a_count_run_on_its_results_and_a_failing_one_drops_only_that_result(stores):
    sub = sub_of(lambda t: t.stream("in").group_by_key().count(name="c").to_stream()
                 .map_values(lambda n: f"{10 // (n - 2)}").filter(lambda k, v: k != "skip").to("out"))
    tx = stores(sub)
    out = process_batch(sub, rows(["a", "b", "b", "skip", "c", "c", "c"]), tx, TaskState())
    # a: 10 // -1, b: 10 // 0 raises (dropped, counted), skip: filtered out, c: 10 // 1
    assert updates(out) == {(b"a", b"-10"), (b"c", b"10")}
    assert out.dropped == 1
    tx.commit()
    assert tx.stores["c"].get("b") == 2, "the state holds the count whose result was dropped"


def test_split_sends_each_record_to_the_first_branch_that_takes_it(stores):
    def build(t):
        branches = t.stream("in").split()
        branches.branch(lambda k, v: v.startswith("a")).to("a")
        branches.branch(lambda k, v: len(v) > 3).map_values(str.upper).to("long")
        branches.default_branch().to("rest")

    sub = sub_of(build)
    out = process_batch(sub, rows(["1", "2", "3", "4"], value=["apple", "banana", "fig", "avocado"]), None, TaskState())
    by_topic = {}
    for r in out.outputs:
        by_topic.setdefault(r.topic, []).append(r.value)
    # "avocado" is long too, but the first branch took it (Kafka Streams' BranchedKStream)
    assert by_topic == {"a": [b"apple", b"avocado"], "long": [b"BANANA"], "rest": [b"fig"]}


def test_a_sink_written_before_a_count_sees_the_records_not_the_counts(stores):
    def build(t):
        s = t.stream("in")
        s.to("raw")
        s.group_by_key().count(name="c").to("counts")

    sub = sub_of(build)
    out = process_batch(sub, rows(["a", "a"], value=["x", "y"]), stores(sub), TaskState())
    assert sorted((r.topic, r.value) for r in out.outputs) == [("counts", int64(2)), ("raw", b"x"), ("raw", b"y")]


def test_a_windowed_count_resumes_with_its_stream_time_after_the_stores_reopen(tmp_path):
    sub = sub_of(lambda t: t.stream("in").group_by_key().windowed_by(tumbling("10s")).count(name="w").to("out"))
    tx = StoreTransactions(tmp_path / "s", sub.stores)
    process_batch(sub, rows(["a", "b"], [5_000, 25_000]), tx, TaskState())
    tx.commit()
    tx.close()
    tx = StoreTransactions(tmp_path / "s", sub.stores)  # the task reopens: stream time from the store
    state = TaskState(stream_time=tx.stores["w"].stream_time)
    assert state.stream_time == 25_000
    out = process_batch(sub, rows(["a"], [9_000]), tx, state)  # window [0, 10s) closed at 25 s: late
    assert updates(out) == set() and out.dropped == 1
    tx.close()


def test_table_filter_turns_the_keys_it_leaves_out_into_deletes_and_map_values_keeps_deletes(stores):
    """Kafka Streams' KTable.filter / mapValues: a key that does not (or no longer does) pass is
    written as a tombstone; a tombstone stays one through mapValues."""
    sub = sub_of(lambda t: t.stream("in").group_by_key().count(name="c").filter(lambda k, n: n > 1)
                 .map_values(lambda n: f"{n} clicks").to("out", value_serde="string"))
    tx = stores(sub)
    out = process_batch(sub, rows(["a", "b", "b"]), tx, TaskState())
    assert updates(out) == {(b"a", None), (b"b", b"2 clicks")}
