"""Eddy's own record steps (flat_map_values, map_values, filter, ...): their semantics on Arrow rows,
how the compiler places them, and how process_batch runs them before real RocksDB stores (no Kafka)."""

from __future__ import annotations

import struct

import pyarrow as pa
import pytest

from eddy_runtime.dsl.compiler import compile_topology
from eddy_runtime.dsl.pipeline import PipelineError, Topology
from eddy_runtime.dsl.record_steps import GROUP_KEY_COLUMN, RecordStep, apply_record_steps
from eddy_runtime.dsl.subtopology import RepartitionSink
from eddy_runtime.kafka.records import RawRecords, decode_source
from eddy_runtime.processing.batch import TaskState
from eddy_runtime.processing.operators import process_batch
from examples.wordcount.app import build_own_steps, words_of
from tests.runtime.test_operators import StoreTransactions

pytestmark = pytest.mark.unit


def source_rows(*records: tuple[str | None, str | None]):
    """A source topic's rows as the runner decodes them: offsets 100, 101, ...; timestamps 1 s, 2 s, ..."""
    n = len(records)
    raw = RawRecords("in", 0, keys=[None if k is None else k.encode() for k, _ in records],
                     values=[None if v is None else v.encode() for _, v in records],
                     offsets=list(range(100, 100 + n)), timestamps=[1000 * (i + 1) for i in range(n)])
    rows, bad = decode_source(raw, "string", "string")
    assert not bad
    return rows


def run(rows, *steps):
    return apply_record_steps(tuple(RecordStep(kind, fn) for kind, fn in steps), rows)


def records(result):
    """(key, value, offset, timestamp ms) of each row after the steps."""
    return [(r["key"], r["value"], r["offset"], int(r["timestamp"].timestamp() * 1000))
            for r in result.rows.to_pylist()]


def test_flat_map_values_makes_one_record_per_value_with_the_key_offset_and_timestamp_of_its_record():
    result = run(source_rows(("k1", "a b"), ("k2", ""), ("k3", "c")), ("flat_map_values", str.split))
    assert records(result) == [("k1", "a", 100, 1000), ("k1", "b", 100, 1000), ("k3", "c", 102, 3000)]
    assert result.origin.tolist() == [0, 0, 2] and result.failed == {}


def test_map_values_keeps_key_and_timestamp_and_none_is_a_null_value():
    result = run(source_rows(("k1", "a"), ("k2", "drop me")), ("map_values", lambda v: None if " " in v else v * 2))
    assert records(result) == [("k1", "aa", 100, 1000), ("k2", None, 101, 2000)]
    assert result.rows.schema.field("value").type == pa.string()
    assert result.origin is None  # the same rows: nothing is copied but the value column


def test_map_values_may_change_the_values_type():
    result = run(source_rows(("k", "abc"), ("k", "de")), ("map_values", len))
    assert result.rows.column("value").to_pylist() == [3, 2]
    assert result.rows.schema.field("value").type == pa.int64()


def test_filter_keeps_and_filter_not_drops_the_records_the_predicate_holds_for():
    rows = source_rows(("a", "1"), ("b", "2"), ("a", "3"))
    assert [r[2] for r in records(run(rows, ("filter", lambda k, v: k == "a")))] == [100, 102]
    assert [r[2] for r in records(run(rows, ("filter_not", lambda k, v: k == "a")))] == [101]


def test_map_and_flat_map_change_key_and_value_and_keep_the_timestamp():
    rows = source_rows(("k1", "a b"), ("k2", "c"))
    assert records(run(rows, ("map", lambda k, v: (v, k)))) == [("a b", "k1", 100, 1000), ("c", "k2", 101, 2000)]
    swapped = run(rows, ("flat_map", lambda k, v: [(w, k) for w in v.split()]))
    assert records(swapped) == [("a", "k1", 100, 1000), ("b", "k1", 100, 1000), ("c", "k2", 101, 2000)]


def test_steps_run_in_the_order_written():
    rows = source_rows(("k", "Hello world"), ("k", "bye"))
    words = run(rows, ("flat_map_values", str.split), ("map_values", str.lower),
                ("filter", lambda k, v: v.startswith(("h", "w"))), ("map", lambda k, v: (v, len(v))))
    assert records(words) == [("hello", 5, 100, 1000), ("world", 5, 100, 1000)]


def test_a_key_selector_computes_the_group_key_column_and_keeps_key_and_value():
    result = run(source_rows(("k", "a b")), ("flat_map_values", str.split), ("select_key", lambda k, w: w.upper()))
    assert result.rows.select(["key", "value", GROUP_KEY_COLUMN]).to_pylist() == [
        {"key": "k", "value": "a", GROUP_KEY_COLUMN: "A"}, {"key": "k", "value": "b", GROUP_KEY_COLUMN: "B"}]


def test_a_function_that_raises_makes_its_input_record_a_bad_record_that_produces_nothing():
    def shout(word):
        if word == "boom":
            raise ValueError("cannot shout boom")
        return word.upper()

    rows = source_rows(("k1", "a b"), ("k2", "c boom d"), ("k3", "e"))
    result = run(rows, ("flat_map_values", str.split), ("map_values", shout))
    # Line 1's "c" passed map_values, but its record failed: none of its words go on.
    assert records(result) == [("k1", "A", 100, 1000), ("k1", "B", 100, 1000), ("k3", "E", 102, 3000)]
    assert result.failed == {1: "map_values(shout) failed: ValueError: cannot shout boom"}


def test_every_record_a_function_raises_on_is_found_first_last_and_in_a_row():
    rows = source_rows(*[("k", v) for v in ["x", "1", "x", "x", "2", "3", "x"]])
    result = run(rows, ("map_values", int))
    assert result.rows.column("value").to_pylist() == [1, 2, 3]
    assert result.rows.column("offset").to_pylist() == [101, 104, 105]
    assert sorted(result.failed) == [0, 2, 3, 6]
    kept = run(rows, ("filter", lambda k, v: int(v) > 1), ("select_key", lambda k, v: v + "!"))
    assert kept.rows.column(GROUP_KEY_COLUMN).to_pylist() == ["2!", "3!"] and sorted(kept.failed) == [0, 2, 3, 6]


def test_a_function_raising_stop_iteration_fails_its_record_and_the_rest_go_on():
    def first_digit(v):
        return next(c for c in v if c.isdigit())  # StopIteration when there is none

    result = run(source_rows(("k", "a1"), ("k", "bc"), ("k", "2")), ("map_values", first_digit))
    assert result.rows.column("value").to_pylist() == ["1", "2"]
    assert result.failed == {1: "map_values(first_digit) failed: RuntimeError: the function raised StopIteration"}


def test_flat_map_values_takes_any_iterable_and_a_generator_that_raises_fails_its_record():
    def digits(v):
        for c in v:
            yield int(c)

    result = run(source_rows(("k", "12"), ("k", "3x"), ("k", ""), ("k", "4")), ("flat_map_values", digits))
    assert records(result) == [("k", 1, 100, 1000), ("k", 2, 100, 1000), ("k", 4, 103, 4000)]
    assert list(result.failed) == [1]
    assert records(run(source_rows(("k", "a b")), ("flat_map_values", lambda v: tuple(v.split())))) == [
        ("k", "a", 100, 1000), ("k", "b", 100, 1000)]


def test_flat_map_values_returning_a_string_is_a_bad_record_not_its_characters():
    result = run(source_rows(("k", "ab"), ("k", "c d")),
                 ("flat_map_values", lambda v: v if " " not in v else v.split()))
    assert [r[1] for r in records(result)] == ["c", "d"]
    assert "must return an iterable of values, got str" in result.failed[0]


def test_map_returning_something_else_than_a_pair_is_a_bad_record():
    result = run(source_rows(("k", "a"), ("k", "b")), ("map", lambda k, v: (k, v) if v == "a" else v))
    assert records(result) == [("k", "a", 100, 1000)] and list(result.failed) == [1]


def test_values_of_mixed_types_stop_the_batch_with_the_step_named():
    from eddy_runtime.dsl.errors import PipelineRuntimeError

    with pytest.raises(PipelineRuntimeError, match=r"map_values\(<lambda>\)"):
        run(source_rows(("k", "1"), ("k", "x")), ("map_values", lambda v: int(v) if v.isdigit() else v))


def test_null_values_reach_the_functions_as_none():
    result = run(source_rows(("k", None), ("k", "a")), ("map_values", lambda v: "none" if v is None else v))
    assert result.rows.column("value").to_pylist() == ["none", "a"]


def test_the_wordcount_split_matches_split_words_rules():
    assert words_of("It's the Eddy's_turn -- 42 times, Ünïcode!") == [
        "it's", "the", "eddy's", "turn", "42", "times", "ünïcode"]
    assert words_of(None) == [] and words_of("  ") == []


# -- compiling ------------------------------------------------------------------------------------


def compiled(build, partitions=2):
    t = Topology()
    build(t)
    return compile_topology(t, "app", {"in": partitions, "table": partitions})


def test_a_word_count_of_record_steps_uses_no_dataframe_and_re_keys_by_the_selector():
    app = compiled(lambda t: build_own_steps(t, "in", "out"))
    first, second = app.subtopologies
    assert not first.uses_dataframe and first.steps == () and not second.uses_dataframe
    assert [s.kind for s in first.record_steps] == ["flat_map_values", "select_key"]
    assert first.sinks == (RepartitionSink("app-words-repartition", GROUP_KEY_COLUMN, "string", 1, "count", None),)
    assert first.for_executor().record_steps == first.record_steps  # they run in the task runner
    assert second.stateful is not None and second.stateful.kind == "count"


def test_group_by_a_column_name_after_record_steps_re_keys_by_that_column():
    app = compiled(lambda t: t.stream("in").flat_map_values(str.split).group_by("value").count().to("out"))
    assert app.subtopologies[0].sinks[0].key_column == "value" and not app.subtopologies[0].uses_dataframe


def test_record_steps_and_transform_in_one_sub_topology_are_rejected_either_way():
    with pytest.raises(PipelineError, match=r"map_values\(upper\) and transform in one sub-topology.*not both"):
        compiled(lambda t: t.stream("in").transform(lambda df: df).map_values(str.upper).to("out"))
    with pytest.raises(PipelineError, match=r"filter\(<lambda>\) and transform in one sub-topology"):
        compiled(lambda t: t.stream("in").filter(lambda k, v: True).transform(lambda df: df).to("out"))
    with pytest.raises(PipelineError, match=r"group_by\(<lambda>\) and transform"):
        compiled(lambda t: t.stream("in").transform(lambda df: df).group_by(lambda k, v: v).count().to("out"))


def test_record_steps_and_dataframe_steps_in_separate_sub_topologies_are_fine():
    def build(t):
        t.stream("in").map_values(str.lower).to("lower")
        t.stream("table").transform(lambda df: df).to("same")

    assert [s.uses_dataframe for s in compiled(build).subtopologies] == [False, True]


def test_group_by_key_or_join_after_a_key_change_is_rejected_with_the_way_to_re_key():
    with pytest.raises(PipelineError, match=r"group_by_key\(\) after map\(<lambda>\).*group_by\(lambda key, value"):
        compiled(lambda t: t.stream("in").map(lambda k, v: (v, k)).group_by_key().count().to("out"))

    def joined(t):
        users = t.table("table", name="users")
        t.stream("in").flat_map(lambda k, v: [(v, k)]).join(users).to("out")

    with pytest.raises(PipelineError, match=r"join\(\) after flat_map\(<lambda>\): the key changed"):
        compiled(joined)
    # Value steps keep the key: group_by_key and join stay co-partitioned.
    app = compiled(lambda t: t.stream("in").map_values(str.lower).group_by_key().count().to("out"))
    assert len(app.subtopologies) == 1


def test_record_steps_after_a_stateful_step_run_on_its_results():
    app = compiled(lambda t: t.stream("in").group_by_key().count().to_stream()
                   .map_values(lambda n: f"{n} times").filter(lambda k, v: k != "x").to("out"))
    (sub,) = app.subtopologies
    assert [s.kind for s in sub.record_steps] == []
    assert [s.kind for s in sub.post_steps] == ["map_values", "filter"]
    # a re-key after the aggregation goes through a repartition topic, as in Kafka Streams
    app = compiled(lambda t: t.stream("in").group_by_key().count().to_stream()
                   .group_by(lambda k, v: v).count().to("out"))
    assert [s.kind for s in app.subtopologies[0].post_steps] == ["select_key"]
    assert len(app.subtopologies) == 2
    with pytest.raises(PipelineError, match="after a stateful step, group_by takes a column name or a function"):
        Topology().stream("in").group_by_key().count().to_stream().group_by(object())


def test_a_stream_written_and_then_changed_becomes_two_branches_of_one_sub_topology():
    def branches(t):
        s = t.stream("in").map_values(str.lower)
        s.to("all")
        s.filter(lambda k, v: v).to("some")

    (sub,) = compiled(branches).subtopologies
    assert [s.kind for s in sub.record_steps] == ["map_values"]
    assert [(k.topic, [s.kind for s in k.steps]) for k in sub.sinks] == [("all", []), ("some", ["filter"])]
    with pytest.raises(PipelineError, match=r"several chains .* has a group_by_key\(\) step"):
        def stateful_branch(t):
            s = t.stream("in")
            s.to("all")
            s.filter(lambda k, v: v).group_by_key().count().to("counts")

        compiled(stateful_branch)

def test_a_record_step_needs_a_function():
    with pytest.raises(PipelineError, match="flat_map_values needs a function"):
        Topology().stream("in").flat_map_values("split")


# -- process_batch: record steps before the stateful step and sinks --------------------------------


@pytest.fixture
def stores(tmp_path):
    made = []

    def make(sub):
        made.append(StoreTransactions(tmp_path, sub.stores))
        return made[-1]

    yield make
    for s in made:
        s.close()


def int64(v: int) -> bytes:
    return struct.pack(">q", v)


def test_the_repartition_of_a_word_count_carries_partial_counts_per_word_with_the_newest_timestamp():
    first = compiled(lambda t: build_own_steps(t, "in", "out")).subtopologies[0]
    out = process_batch(first, source_rows((None, "The eddy, the river"), (None, "the end")), None, TaskState())
    assert {r.topic for r in out.outputs} == {"app-words-repartition"}
    got = {(r.key, r.value, r.timestamp) for r in out.outputs}
    assert got == {(b"the", int64(3), 2000), (b"eddy", int64(1), 1000), (b"river", int64(1), 1000),
                   (b"end", int64(1), 2000)}
    assert out.failed_rows == {}


def test_a_failure_in_the_stateful_step_after_record_steps_names_the_input_row(stores):
    def add(key, values, total):
        return total + sum(int(v) for v in values["value"])  # int("boom") raises

    def build(t):
        words = t.stream("in").flat_map_values(str.split).filter(lambda k, v: v != "skip")
        words.group_by_key().aggregate(lambda: 0, add, name="sum", value_serde="int64").to("out")

    (sub,) = compiled(build).subtopologies
    tx = stores(sub)
    out = process_batch(sub, source_rows(("x", "1 2"), ("y", "skip"), ("w", "5"), ("z", "3 boom")), tx, TaskState())
    assert {(r.key, r.value) for r in out.outputs} == {(b"x", int64(3)), (b"w", int64(5))}
    # Key z's rows are rows 3 and 4 after the steps; they came from input row 3.
    assert list(out.failed_rows) == [3]
    assert "invalid literal for int()" in out.failed_rows[3]


def test_a_step_failure_and_a_stateful_failure_in_one_batch_are_both_reported_by_input_row(stores):
    def add(key, values, total):
        if key == "bad":
            raise KeyError(key)
        return total + len(values["value"])

    (sub,) = compiled(lambda t: t.stream("in").map_values(lambda v: 1 // int(v)).group_by_key()
                      .aggregate(lambda: 0, add, name="n", value_serde="int64").to("out")).subtopologies
    tx = stores(sub)
    out = process_batch(sub, source_rows(("ok", "1"), ("ok", "0"), ("bad", "1")), tx, TaskState())
    assert {(r.key, r.value) for r in out.outputs} == {(b"ok", int64(1))}
    assert out.failed_rows.keys() == {1, 2}
    assert "ZeroDivisionError" in out.failed_rows[1] and "KeyError" in out.failed_rows[2]


def test_every_record_filtered_out_leaves_an_empty_batch(stores):
    (sub,) = compiled(lambda t: t.stream("in").filter(lambda k, v: False).group_by_key().count(name="c")
                      .to("out")).subtopologies
    out = process_batch(sub, source_rows(("a", "1")), stores(sub), TaskState())
    assert out.outputs == [] and out.failed_rows == {}


def test_peek_sees_every_record_and_passes_it_on_and_a_raising_peek_is_a_bad_record():
    seen = []

    def look(k, v):
        if v == "boom":
            raise ValueError("cannot look at boom")
        seen.append((k, v))

    result = run(source_rows(("a", "1"), ("b", "boom"), ("c", "3")), ("peek", look))
    assert seen == [("a", "1"), ("c", "3")]
    assert records(result) == [("a", "1", 100, 1000), ("c", "3", 102, 3000)]
    assert list(result.failed) == [1] and "peek(look) failed: ValueError" in result.failed[1]


def test_select_key_changes_the_key_and_counts_as_a_key_change():
    t = Topology()
    s = t.stream("in").select_key(lambda k, v: v.upper())
    (step,) = [s.node.step]
    assert step.changes_key and step.label == "map(select_key <lambda>)"
    assert records(run(source_rows(("k", "a")), (step.kind, step.fn))) == [("A", "a", 100, 1000)]
    with pytest.raises(PipelineError, match=r"group_by_key\(\) after map\(select_key <lambda>\): the key changed"):
        compiled(lambda t: t.stream("in").select_key(lambda k, v: v).group_by_key().count().to("out"))
