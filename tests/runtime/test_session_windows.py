"""Session windows, Kafka Streams' way: the cases of KStreamSessionWindowAggregateProcessorTest and
SessionWindowedKStreamImplTest (same keys, timestamps and expected results) run through
`process_batch` over real session stores (no Kafka), plus the pipeline's checks.

Eddy writes a session once per batch (Kafka Streams with its record cache): the processor
test's cached expectations are one batch; its uncached ones are one record per batch.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from eddy_runtime.dsl.pipeline import PipelineError, Topology, session_windows, tumbling
from eddy_runtime.processing.batch import TaskState
from eddy_runtime.processing.operators import process_batch
from eddy_runtime.processing.sessions import merged_window
from eddy_runtime.state.serde import INT64
from tests.runtime.test_operators import StoreTransactions, rows, sub_of

pytestmark = pytest.mark.unit

GAP_MS = 5 * 60 * 1000


class SessionTransactions(StoreTransactions):
    session = StoreTransactions.key_value


@pytest.fixture
def stores(tmp_path):
    made: list[SessionTransactions] = []

    def make(sub):
        s = SessionTransactions(tmp_path / str(len(made)), sub.stores)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


def ms_rows(keys, stamps_ms, **cols):
    """Rows with millisecond timestamps (`rows` takes seconds)."""
    t = rows(keys, [0] * len(keys), **cols)
    return t.set_column(t.column_names.index("timestamp"), "timestamp",
                        pa.array(stamps_ms, pa.int64()).cast(pa.timestamp("ms")).cast(t.schema.field("timestamp").type))


def decoded(out, value=lambda v: None if v is None else INT64.unpack(v)[0]):
    """((key, start, end), value, timestamp) of each output record, in order; keys are written as
    Kafka Streams' SessionWindowedSerializer writes them: key, end, start."""
    got = []
    for r in out.outputs:
        key, end, start = r.key[:-16].decode(), INT64.unpack(r.key[-16:-8])[0], INT64.unpack(r.key[-8:])[0]
        got.append(((key, start, end), value(r.value), r.timestamp))
    return got


def session_count(gap=GAP_MS, grace=0):
    # the processor test's store keeps sessions for 3 gaps (persistentSessionStore(GAP_MS * 3))
    return sub_of(lambda t: t.stream("in").group_by_key().windowed_by(session_windows(gap, grace, retention=3 * gap))
                  .count(name="session-store").to("out"))


def run(sub, tx, keys, stamps, one_batch=True, **cols):
    """Process the records in one batch, or one batch each (committing in between); all outputs."""
    if one_batch:
        out = process_batch(sub, ms_rows(keys, stamps, **cols), tx, TaskState())
        tx.commit()
        return out
    total = None
    for i in range(len(keys)):
        out = process_batch(sub, ms_rows(keys[i:i + 1], stamps[i:i + 1], **{c: v[i:i + 1] for c, v in cols.items()}),
                            tx, TaskState())
        tx.commit()
        if total is None:
            total = out
        else:
            total.outputs += out.outputs
            total.dropped += out.dropped
    return total


# -- the merge, alone ---------------------------------------------------------------------------


def test_a_record_alone_is_a_session_of_its_own_timestamp():
    assert merged_window(7, []) == (7, 7)


def test_a_record_merges_the_sessions_within_its_gap_into_one_from_the_oldest_start_to_the_newest_end():
    assert merged_window(GAP_MS // 2, [(0, 0), (GAP_MS + 1, GAP_MS + 1)]) == (0, GAP_MS + 1)
    assert merged_window(5, [(0, 10)]) == (0, 10)
    assert merged_window(20, [(0, 10)]) == (0, 20)


# -- KStreamSessionWindowAggregateProcessorTest ---------------------------------------------------


def test_should_create_single_session_when_within_gap(stores):
    sub = session_count()
    tx = stores(sub)
    run(sub, tx, ["john", "john"], [0, 500])
    assert list(tx.stores["session-store"].find_sessions("john", 0, 2000)) == [((0, 500), 2)]


def test_should_merge_sessions(stores):
    sub = session_count()
    tx = stores(sub)
    run(sub, tx, ["mel"], [0])
    store = tx.stores["session-store"]
    assert list(store.find_sessions("mel", 0, 0))
    run(sub, tx, ["mel"], [GAP_MS + 1])  # beyond the gap: a session of its own
    assert list(store.find_sessions("mel", GAP_MS + 1, GAP_MS + 1))
    assert list(store.find_sessions("mel", 0, 0)), "the first session still exists: not within the gap"
    run(sub, tx, ["mel"], [GAP_MS // 2])  # back in time, within the gap of both
    assert list(store.find_sessions("mel", 0, GAP_MS + 1)) == [((0, GAP_MS + 1), 3)]


def test_should_update_session_if_the_same_time(stores):
    sub = session_count()
    tx = stores(sub)
    run(sub, tx, ["mel", "mel"], [0, 0])
    assert list(tx.stores["session-store"].find_sessions("mel", 0, 0)) == [((0, 0), 2)]


def test_should_have_multiple_sessions_for_same_id_when_timestamp_apart_by_session_gap(stores):
    sub = session_count()
    tx = stores(sub)
    t1, t2 = GAP_MS + 1, 2 * (GAP_MS + 1)
    out = run(sub, tx, ["mel"] * 6, [0, t1, t1, t2, t2, t2])
    assert decoded(out) == [(("mel", 0, 0), 1, 0), (("mel", t1, t1), 2, t1), (("mel", t2, t2), 3, t2)]


def test_should_remove_merged_sessions_from_state_store(stores):
    sub = session_count()
    tx = stores(sub)
    run(sub, tx, ["a"], [0])
    store = tx.stores["session-store"]
    assert list(store.find_sessions("a", 0, 0)) == [((0, 0), 1)]
    run(sub, tx, ["a"], [100])
    assert list(store.find_sessions("a", 0, 100)) == [((0, 100), 2)]


def test_should_handle_multiple_sessions_and_merging(stores):
    sub = session_count()
    tx = stores(sub)
    half, t1 = GAP_MS // 2, GAP_MS + 1
    out = run(sub, tx, ["a", "b", "c", "d", "d", "a", "b", "a", "c"], [0, 0, 0, 0, half, t1, t1, t1 + half, t1 + half])
    assert decoded(out) == [
        (("a", 0, 0), 1, 0),
        (("b", 0, 0), 1, 0),
        (("c", 0, 0), 1, 0),
        (("d", 0, half), 2, half),
        (("b", t1, t1), 1, t1),
        (("a", t1, t1 + half), 2, t1 + half),
        (("c", t1 + half, t1 + half), 1, t1 + half),
    ]


def test_should_immediately_forward_new_session_when_non_cached_store(stores):
    sub = session_count()
    tx = stores(sub)
    out = run(sub, tx, ["a", "b", "c"], [0, 0, 0], one_batch=False)
    assert decoded(out) == [(("a", 0, 0), 1, 0), (("b", 0, 0), 1, 0), (("c", 0, 0), 1, 0)]


def test_should_immediately_forward_removed_sessions_when_merging(stores):
    sub = session_count()
    tx = stores(sub)
    out = run(sub, tx, ["a", "a"], [0, 5], one_batch=False)
    assert decoded(out) == [(("a", 0, 0), 1, 0), (("a", 0, 0), None, 0), (("a", 0, 5), 2, 5)]


def test_a_session_made_and_merged_away_within_one_batch_is_never_written(stores):
    """The cached case of the test above: Kafka Streams' cache drops the session before it flushes."""
    sub = session_count()
    tx = stores(sub)
    out = run(sub, tx, ["a", "a"], [0, 5])
    assert decoded(out) == [(("a", 0, 5), 2, 5)]


def test_should_log_and_meter_when_skipping_null_key(stores):
    sub = session_count()
    tx = stores(sub)
    out = run(sub, tx, [None], [0])
    assert out.outputs == [] and out.dropped == 1


def test_should_log_and_meter_when_skipping_late_record_with_zero_grace(stores):
    sub = session_count(gap=10, grace=0)
    tx = stores(sub)
    out = run(sub, tx, ["dummy", "OnTime1", "dummy", "Late1"], [0, 0, 1, 0], one_batch=False)
    assert out.dropped == 1
    assert {k for (k, _, _), _, _ in decoded(out)} == {"dummy", "OnTime1"}


def test_should_log_and_meter_when_skipping_late_record_with_nonzero_grace(stores):
    sub = session_count(gap=10, grace=1)
    tx = stores(sub)
    out = run(sub, tx, ["dummy", "OnTime1", "dummy", "OnTime2", "dummy", "Late1"], [0, 0, 1, 0, 2, 0])
    assert out.dropped == 1
    assert {k for (k, _, _), _, _ in decoded(out)} == {"dummy", "OnTime1", "OnTime2"}
    assert tx.stores["session-store"].stream_time == 2


# -- SessionWindowedKStreamImplTest ---------------------------------------------------------------

# processData: (key, value, timestamp)
DATA = [("1", "1", 10), ("1", "2", 15), ("1", "3", 600), ("2", "1", 600), ("2", "2", 599)]


def _process_data(sub, tx, one_batch):
    keys, values, stamps = (list(c) for c in zip(*DATA, strict=True))
    return run(sub, tx, keys, stamps, one_batch, value=values)


def _last_per_session(out, value):
    return {k: (v, ts) for k, v, ts in decoded(out, value)}


def _session_table(build):
    # Kafka Streams' store drops whole segments of at least a minute, so the test's materialized
    # expectations still see sessions past gap + grace: a day's retention here
    return sub_of(lambda t: build(t.stream("in").group_by_key().windowed_by(session_windows(500, retention="1d")))
                  .to("out"))


@pytest.mark.parametrize("one_batch", [True, False], ids=["one-batch", "batch-per-record"])
def test_should_count_session_windowed(stores, one_batch):
    sub = _session_table(lambda s: s.count(name="count-store"))
    tx = stores(sub)
    result = _last_per_session(_process_data(sub, tx, one_batch), lambda v: None if v is None else INT64.unpack(v)[0])
    live = {k: v for k, v in result.items() if v[0] is not None}
    assert live == {("1", 10, 15): (2, 15), ("2", 599, 600): (2, 600), ("1", 600, 600): (1, 600)}
    # shouldMaterializeCount
    assert tx.stores["count-store"].all_sessions() == [(("1", 10, 15), 2), (("1", 600, 600), 1),
                                                       (("2", 599, 600), 2)]


@pytest.mark.parametrize("one_batch", [True, False], ids=["one-batch", "batch-per-record"])
def test_should_reduce_windowed(stores, one_batch):
    sub = _session_table(lambda s: s.reduce(lambda a, b: a + "+" + b, name="reduced", value_serde="string"))
    tx = stores(sub)
    result = _last_per_session(_process_data(sub, tx, one_batch), lambda v: None if v is None else v.decode())
    live = {k: v for k, v in result.items() if v[0] is not None}
    assert live == {("1", 10, 15): ("1+2", 15), ("2", 599, 600): ("1+2", 600), ("1", 600, 600): ("3", 600)}
    # shouldMaterializeReduced
    assert tx.stores["reduced"].all_sessions() == [(("1", 10, 15), "1+2"), (("1", 600, 600), "3"),
                                                   (("2", 599, 600), "1+2")]


@pytest.mark.parametrize("one_batch", [True, False], ids=["one-batch", "batch-per-record"])
def test_should_aggregate_session_windowed(stores, one_batch):
    sub = _session_table(lambda s: s.aggregate(lambda: "0", lambda key, values, agg: agg + "+" + values["value"][0],
                                                lambda key, one, two: one + "+" + two, name="aggregated",
                                                value_serde="string"))
    tx = stores(sub)
    result = _last_per_session(_process_data(sub, tx, one_batch), lambda v: None if v is None else v.decode())
    live = {k: v for k, v in result.items() if v[0] is not None}
    assert live == {("1", 10, 15): ("0+0+1+2", 15), ("2", 599, 600): ("0+0+1+2", 600),
                    ("1", 600, 600): ("0+3", 600)}
    # shouldMaterializeAggregated
    assert tx.stores["aggregated"].all_sessions() == [(("1", 10, 15), "0+0+1+2"), (("1", 600, 600), "0+3"),
                                                      (("2", 599, 600), "0+0+1+2")]


def test_merged_away_sessions_of_earlier_batches_are_written_as_tombstones(stores):
    sub = _session_table(lambda s: s.count(name="c"))
    tx = stores(sub)
    out = _process_data(sub, tx, one_batch=False)
    tombstones = [k for k, v, _ in decoded(out) if v is None]
    assert tombstones == [("1", 10, 10), ("2", 600, 600)]


# -- the pipeline ---------------------------------------------------------------------------------


def test_session_aggregate_without_a_merger_is_rejected_when_the_pipeline_is_built():
    stream = Topology().stream("in").group_by_key().windowed_by(session_windows("30m"))
    with pytest.raises(PipelineError, match="needs a merger"):
        stream.aggregate(lambda: 0, lambda key, values, agg: agg + 1)


def test_session_windows_take_durations_and_keep_at_least_gap_plus_grace():
    w = session_windows("30m", grace="1m")
    assert (w.gap_ms, w.grace_ms, w.retention_ms) == (1_800_000, 60_000, 1_860_000)
    with pytest.raises(PipelineError, match="must be positive"):
        session_windows(0)
    with pytest.raises(PipelineError, match="at least inactivity gap"):
        session_windows("10s", retention="5s")


def test_windowed_by_rejects_what_is_not_a_window():
    with pytest.raises(PipelineError, match="session_windows"):
        Topology().stream("in").group_by_key().windowed_by("30m")  # type: ignore[arg-type]


def test_a_session_count_compiles_to_a_session_store_with_a_windowed_changelog_and_rows_not_partial_counts():
    from eddy_runtime.dsl.compiler import compile_topology
    t = Topology()
    t.stream("in").group_by("value").windowed_by(session_windows("1s", "2s")).count(name="s").to("out")
    app = compile_topology(t, "app", {"in": 2})
    sub = app.subtopologies[1]
    assert sub.source.combined is None, "sessions need each record's timestamp"
    assert sub.stores[0].kind == "session" and sub.stores[0].retention_ms == 3_000
    (changelog,) = app.changelog_topics()
    assert changelog.cleanup_policy == "compact,delete"
    assert sub.sinks[0].session_windowed


def test_a_failing_adder_makes_only_its_record_bad_and_leaves_its_session_unchanged(stores):
    def adder(key, values, agg):
        if values["value"][0] == "bad":
            raise ValueError("no thanks")
        return agg + 1

    sub = _session_table(lambda s: s.aggregate(lambda: 0, adder, lambda k, a, b: a + b, name="agg"))
    tx = stores(sub)
    out = run(sub, tx, ["k", "k", "k"], [0, 100, 200], value=["ok", "bad", "ok"])
    assert set(out.failed_rows) == {1} and "no thanks" in out.failed_rows[1]
    assert tx.stores["agg"].all_sessions() == [(("k", 0, 200), 2)]


def test_a_session_count_resumes_with_its_stream_time_after_the_stores_reopen(tmp_path):
    sub = session_count(gap=1_000, grace=0)
    tx = SessionTransactions(tmp_path / "s", sub.stores)
    run(sub, tx, ["a", "b"], [5_000, 25_000])
    tx.close()
    tx = SessionTransactions(tmp_path / "s", sub.stores)  # the task reopens: stream time from the store
    out = run(sub, tx, ["a"], [5_500])  # would merge into [5000, 5000], closed at 25 s: late
    assert out.outputs == [] and out.dropped == 1
    tx.close()


def test_tumbling_windows_still_count_as_before(stores):
    sub = sub_of(lambda t: t.stream("in").group_by_key().windowed_by(tumbling("10s")).count(name="w").to("out"))
    tx = stores(sub)
    out = process_batch(sub, rows(["a", "a"], [1, 2]), tx, TaskState())
    assert [(r.key, r.value) for r in out.outputs] == [(b"a" + INT64.pack(0), INT64.pack(2))]


def test_a_record_inside_a_written_session_writes_its_new_value_without_a_tombstone_first(stores):
    """Kafka Streams' uncached path removes and re-puts the same session (a tombstone, then the
    value); Eddy writes the session once per batch, so only its new value."""
    sub = session_count(gap=10)
    tx = stores(sub)
    out = run(sub, tx, ["a", "a", "a"], [0, 10, 5], one_batch=False)
    assert decoded(out) == [(("a", 0, 0), 1, 0), (("a", 0, 0), None, 0), (("a", 0, 10), 2, 10),
                            (("a", 0, 10), 3, 10)]


def test_record_steps_after_a_session_count_see_tombstones_as_null_values(stores):
    sub = sub_of(lambda t: t.stream("in").group_by_key().windowed_by(session_windows(10)).count(name="c")
                 .to_stream().map_values(lambda n: "closed" if n is None else f"{n} views")
                 .to("out", key="key", value=["value", "window_start", "window_end"], value_serde="json"))
    tx = stores(sub)
    run(sub, tx, ["a"], [0])
    out = run(sub, tx, ["a"], [5])
    assert [(r.key, r.value) for r in out.outputs] == [  # still Windowed<K> keys: key, end, start
        (b"a" + INT64.pack(0) + INT64.pack(0), b'{"value":"closed","window_start":0,"window_end":0}'),
        (b"a" + INT64.pack(5) + INT64.pack(0), b'{"value":"2 views","window_start":0,"window_end":5}')]
