"""Suppression, Kafka Streams' way: the cases of KTableSuppressProcessorTest (through the buffer,
`suppress_results`, with the stream time the processor test sets) and of SuppressScenarioTest
(through `process_batch`, one input record per batch, as the scenario's TopologyTestDriver
processes them), on real RocksDB stores without Kafka; plus the buffer across a reopen of its
store and the pipeline's checks.

Kafka Streams' processor tests suppress plain KTable keys too; Eddy suppresses windowed tables
only, so those cases run with a windowed key of the same name, timestamps and values. The
scenario tests' time- and record-limit cases count a KTable re-grouped by value (a count goes
down when a key moves away), which Eddy has not (no KGroupedTable): they run here as a count of
a stream grouped by value in one large window, with the same records and timestamps; where the
counts differ for that reason, the test says so.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from eddy_runtime.dsl.compiler import compile_topology
from eddy_runtime.dsl.pipeline import (
    PipelineError,
    Topology,
    session_windows,
    tumbling,
    until_time_limit,
    until_window_closes,
)
from eddy_runtime.kafka.records import TS_TYPE
from eddy_runtime.processing.batch import TaskState
from eddy_runtime.processing.operators import process_batch
from eddy_runtime.processing.suppress import SuppressionBufferFull, suppress_results
from eddy_runtime.state.serde import INT64
from tests.runtime.test_operators import StoreTransactions, sub_of

pytestmark = pytest.mark.unit

DAYS_100 = 100 * 86_400_000


class Transactions(StoreTransactions):
    session = StoreTransactions.key_value


def windowed_count(suppressed, windows=None, sessions=None, raw=False):
    """Sub-topology: in -> windowed count "counts" (tumbling(100) by default) -> suppress -> out;
    with `raw`, the table as it is to "raw" too (as the scenario tests write it)."""
    def build(t):
        grouped = t.stream("in").group_by_key()
        table = grouped.windowed_by(sessions or windows or tumbling(100)).count(name="counts")
        if raw:
            table.to("raw")
        table.suppress(suppressed).to("out")
    return sub_of(build)


@pytest.fixture
def stores(tmp_path):
    made: list[Transactions] = []

    def make(sub, path=None):
        s = Transactions(path or tmp_path / f"stores-{len(made)}", sub.stores)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


# -- KTableSuppressProcessorTest: the buffer alone ------------------------------------------------


class Processor:
    """KTableSuppressProcessorTest's harness: one windowed update at a time, stream time the
    newest timestamp processed; each `process` returns what was forwarded as
    (key, window start, window end, value, timestamp)."""

    def __init__(self, sub, tx):
        self.spec, self.tx, self.stream_time = sub.stateful, tx, None

    def process(self, key, window, value, timestamp):
        self.stream_time = timestamp if self.stream_time is None else max(self.stream_time, timestamp)
        row = pa.table({"key": pa.array([key], pa.string()), "value": pa.array([value], pa.int64()),
                        "window_start": pa.array([window[0]], pa.int64()),
                        "window_end": pa.array([window[1]], pa.int64()),
                        "timestamp": pa.array([timestamp * 1000], pa.int64()).cast(TS_TYPE)})
        out = suppress_results(self.spec, row, self.tx, self.stream_time)
        self.tx.commit()
        return forwarded(out)


def forwarded(out):
    stamps = out.column("timestamp").cast(pa.int64()).to_pylist()
    return [(k, s, e, v, t // 1000) for k, s, e, v, t in zip(
        out.column("key").to_pylist(), out.column("window_start").to_pylist(), out.column("window_end").to_pylist(),
        out.column("value").to_pylist(), stamps, strict=True)]


@pytest.fixture
def processor(stores):
    def make(suppressed, windows=None, sessions=None):
        sub = windowed_count(suppressed, windows, sessions)
        return Processor(sub, stores(sub))
    return make


def test_zero_time_limit_should_immediately_emit(processor):
    p = processor(until_time_limit(0))
    assert p.process("hey", (0, 100), 14, 5) == [("hey", 0, 100, 14, 5)]


def test_intermediate_suppression_should_buffer_and_emit_later(processor):
    p = processor(until_time_limit(1))
    assert p.process("hey", (0, 100), 1, 0) == []
    assert p.process("tick", (0, 100), None, 1) == [("hey", 0, 100, 1, 0)]


def test_final_results_suppression_should_buffer_and_emit_at_grace_expiration(processor):
    p = processor(until_window_closes(), windows=tumbling(1, grace=1))
    assert p.process("hey", (99, 100), 14, 99) == []
    # stream time is 100, but "hey" waits 1 ms of grace after its window's end
    assert p.process("dummyKey1", (100, 101), 14, 100) == []
    assert p.process("dummyKey2", (101, 102), 14, 101) == [("hey", 99, 100, 14, 99)]


def test_final_results_with_zero_grace_should_still_buffer_until_the_window_end(processor):
    p = processor(until_window_closes())
    assert p.process("hey", (0, 100), 14, 5) == [], "the record is old, but its window is still open"
    assert p.process("dummyKey", (100, 200), 14, 100) == [("hey", 0, 100, 14, 5)]


def test_final_results_with_zero_grace_at_window_end_should_immediately_emit(processor):
    p = processor(until_window_closes())
    assert p.process("hey", (0, 100), 14, 100) == [("hey", 0, 100, 14, 100)]


def test_final_results_should_drop_tombstones_for_time_windows(processor):
    p = processor(until_window_closes())
    assert p.process("hey", (0, 100), None, 100) == []


def test_final_results_should_drop_tombstones_for_session_windows(processor):
    p = processor(until_window_closes(), sessions=session_windows(1))
    assert p.process("hey", (0, 0), None, 100) == []


def test_suppress_should_not_drop_tombstones_for_time_windows(processor):
    p = processor(until_time_limit(0, max_records=0))
    assert p.process("hey", (0, 100), None, 100) == [("hey", 0, 100, None, 100)]


def test_suppress_should_not_drop_tombstones_for_session_windows(processor):
    p = processor(until_time_limit(0, max_records=0), sessions=session_windows(1))
    assert p.process("hey", (0, 0), None, 100) == [("hey", 0, 0, None, 100)]


def test_suppress_should_emit_when_over_record_capacity(processor):
    p = processor(until_time_limit(DAYS_100, max_records=1))
    assert p.process("hey", (0, 100), None, 100) == []
    assert p.process("dummyKey", (0, 100), None, 101) == [("hey", 0, 100, None, 100)]


def test_suppress_should_emit_when_over_byte_capacity(processor):
    p = processor(until_time_limit(DAYS_100, max_bytes=60))
    assert p.process("hey", (0, 100), None, 100) == []
    assert p.process("dummyKey", (0, 100), None, 101) == [("hey", 0, 100, None, 100)]


@pytest.mark.parametrize("limit", [{"max_records": 1}, {"max_bytes": 60}])
def test_suppress_should_shut_down_when_over_capacity(processor, limit):
    p = processor(until_time_limit(DAYS_100, when_full="shut_down", **limit))
    p.process("hey", (0, 100), None, 100)
    with pytest.raises(SuppressionBufferFull, match="exceeded its max capacity"):
        p.process("dummyKey", (0, 100), None, 100)


def test_final_results_shut_down_when_the_buffer_is_full(processor):
    p = processor(until_window_closes(max_records=1))
    p.process("a", (0, 100), 1, 10)
    with pytest.raises(SuppressionBufferFull, match=r"'counts-suppress' exceeded its max capacity: 2/1 records"):
        p.process("b", (0, 100), 1, 11)


def test_a_buffered_key_keeps_its_place_and_takes_the_newest_value(processor):
    """Kafka Streams' non-resetting buffer: "tick" was first buffered at 3, so at stream time 4
    it is still waiting (SuppressScenarioTest.shouldSuppressIntermediateEventsWithTimeLimit)."""
    p = processor(until_time_limit(2))
    assert p.process("tick", (0, 100), 1, 3) == []
    assert p.process("tick", (0, 100), 0, 4) == []
    assert p.process("tock", (0, 100), 1, 5) == [("tick", 0, 100, 0, 4)]


# -- SuppressScenarioTest: windowed counts, one record per batch ----------------------------------


def run(sub, tx, stamps, keys=None, topic="out"):
    """Each record in a batch of its own (committed in between); every output to `topic` as
    (key, window start, window end, count, timestamp)."""
    return run_all(sub, tx, stamps, keys).get(topic, [])


def run_all(sub, tx, stamps, keys=None):
    """As `run`, the outputs of every topic."""
    got: dict[str, list] = {}
    for i, ts in enumerate(stamps):
        key = "k1" if keys is None else keys[i]
        batch = pa.table({"key": pa.array([key], pa.string()), "value": pa.array(["v1"]),
                          "timestamp": pa.array([ts * 1000], pa.int64()).cast(TS_TYPE)})
        out = process_batch(sub, batch, tx, TaskState())
        tx.commit()
        for r in out.outputs:
            k, outputs = r.key, got.setdefault(r.topic, [])
            if sub.stateful.session_windows is not None:  # key, end, start
                outputs.append((k[:-16].decode(), INT64.unpack(k[-8:])[0], INT64.unpack(k[-16:-8])[0],
                                INT64.unpack(r.value)[0], r.timestamp))
            else:  # key, start; the window's end is start + size
                start = INT64.unpack(k[-8:])[0]
                outputs.append((k[:-8].decode(), start, start + sub.stateful.windows.size_ms,
                                INT64.unpack(r.value)[0], r.timestamp))
    return got


def test_should_support_final_results_for_time_windows(stores):
    sub = windowed_count(until_window_closes(), tumbling(2, grace=1), raw=True)
    got = run_all(sub, stores(sub), [0, 1, 2, 1, 0, 5, 0])  # the last record is dropped: out of the grace period
    assert got["out"] == [("k1", 0, 2, 4, 1), ("k1", 2, 4, 1, 2)]
    # the raw table, written beside the suppressed one, has every update (Kafka Streams stamps
    # [0/2]'s fourth with 1, the window's newest record; Eddy's raw updates with their batch's)
    assert [(s, e, n) for _, s, e, n, _ in got["raw"]] == [(0, 2, 1), (0, 2, 2), (2, 4, 1), (0, 2, 3), (0, 2, 4),
                                                          (4, 6, 1)]


def test_should_support_final_results_for_time_windows_with_large_jump(stores):
    sub = windowed_count(until_window_closes(), tumbling(2, grace=2))
    tx = stores(sub)
    assert run(sub, tx, [0, 1, 2, 0, 3, 0, 4, 0, 30]) == [
        ("k1", 0, 2, 4, 1), ("k1", 2, 4, 2, 3), ("k1", 4, 6, 1, 4)]


def test_should_support_final_results_for_session_windows(stores):
    sub = windowed_count(until_window_closes(), sessions=session_windows(5))
    tx = stores(sub)
    # k1@1 is admitted (the session is not closed until stream time passes its end + gap + grace);
    # k1@5 after k2@11 is late; k1@30 only pushes stream time
    assert run(sub, tx, [0, 5, 1, 11, 5, 30], ["k1", "k1", "k1", "k2", "k1", "k1"]) == [
        ("k1", 0, 5, 3, 5), ("k2", 11, 11, 1, 11)]


def test_final_results_come_out_once_in_a_batch_that_closes_several_windows(stores):
    sub = windowed_count(until_window_closes(), tumbling(2, grace=1))
    tx = stores(sub)
    batch = pa.table({"key": pa.array(["a", "b", "a", "b", "c"], pa.string()), "value": pa.array(["v"] * 5),
                      "timestamp": pa.array([t * 1000 for t in [0, 1, 3, 2, 10]], pa.int64()).cast(TS_TYPE)})
    out = process_batch(sub, batch, tx, TaskState())
    tx.commit()
    got = sorted((r.key[:-8].decode(), INT64.unpack(r.key[-8:])[0], INT64.unpack(r.value)[0]) for r in out.outputs)
    assert got == [("a", 0, 1), ("a", 2, 1), ("b", 0, 1), ("b", 2, 1)]
    assert run(sub, tx, [12], ["c"]) == []
    assert run(sub, tx, [13], ["c"]) == [("c", 10, 12, 1, 10)]


def test_post_steps_and_sinks_see_only_what_the_buffer_lets_out(stores):
    sub = sub_of(lambda t: t.stream("in").group_by_key().windowed_by(tumbling(2)).count(name="counts")
                 .suppress(until_window_closes()).map_values(lambda n: n * 10).to("out"))
    tx = stores(sub)
    assert run(sub, tx, [0, 1]) == []
    assert run(sub, tx, [2]) == [("k1", 0, 2, 20, 1)]


def regrouped_counts(suppressed):
    """The sub-topology after the re-keying: its input rows are keyed by value already."""
    return sub_of(lambda t: t.stream("in").group_by(lambda k, v: v, name="by-value")
                  .windowed_by(tumbling(DAYS_100)).count(name="counts").suppress(suppressed).to("out"))


def test_should_suppress_intermediate_events_with_time_limit(stores):
    sub = regrouped_counts(until_time_limit(2))
    tx = stores(sub)
    window = (0, DAYS_100)
    # k1->v1 at 0, k1->v2 at 1, k2->v1 at 2: v1 first went into the buffer at 0, so at stream time 2
    # it comes out with its newest count (2 here: Kafka Streams' KTable count says 1, k1 having moved)
    assert run(sub, tx, [0, 1, 2], ["v1", "v2", "v1"]) == [("v1", *window, 2, 2)]
    assert run(sub, tx, [3], ["tick"]) == [("v2", *window, 1, 1)], "stream time 3: v2's time has come"
    assert run(sub, tx, [4], ["tock"]) == [], "tick is still buffered: it went in at 3, and it is only 4"


def test_should_suppress_intermediate_events_with_record_limit(stores):
    sub = regrouped_counts(until_time_limit(DAYS_100, max_records=1))
    tx = stores(sub)
    window = (0, DAYS_100)
    # one key fits: each new key pushes the oldest out (emitEarlyWhenFull)
    assert run(sub, tx, [0, 1, 2], ["v1", "v2", "v1"]) == [("v1", *window, 1, 0), ("v2", *window, 1, 1)]
    # now the last update of v1 (2 here, Kafka Streams' KTable count says 1); x waits
    assert run(sub, tx, [3], ["x"]) == [("v1", *window, 2, 2)]


# -- the buffer is state: it survives its store's reopen ------------------------------------------


def test_a_buffered_result_survives_a_reopen_and_comes_out_once(stores, tmp_path):
    sub = windowed_count(until_window_closes(), tumbling(2, grace=1))
    tx = stores(sub, tmp_path / "task")
    assert run(sub, tx, [0, 1]) == []
    tx.close()
    tx = stores(sub, tmp_path / "task")  # the same RocksDB stores, as after a restart
    assert run(sub, tx, [4]) == [("k1", 0, 2, 2, 1)]
    assert run(sub, tx, [5, 9]) == [("k1", 4, 6, 2, 5)]
    tx.close()
    tx = stores(sub, tmp_path / "task")
    assert run(sub, tx, [20]) == [("k1", 8, 10, 1, 9)], "nothing emitted before comes out again"


def test_the_buffer_counts_its_records_across_batches(stores):
    sub = windowed_count(until_time_limit(DAYS_100, max_records=2))
    tx = stores(sub)
    run(sub, tx, [0, 1], ["a", "b"])
    run(sub, tx, [1], ["b"])  # an update of a buffered key: still two records
    assert run(sub, tx, [2], ["c"]) == [("a", 0, 100, 1, 0)]


# -- the pipeline's checks ------------------------------------------------------------------------


def test_suppress_needs_a_windowed_aggregation():
    t = Topology()
    with pytest.raises(PipelineError, match="windowed aggregation"):
        t.stream("in").group_by_key().count().suppress(until_window_closes())
    table = t.stream("in2").group_by_key().windowed_by(tumbling(5)).count()
    with pytest.raises(PipelineError, match="suppress first"):
        table.filter(lambda k, v: v > 1).suppress(until_window_closes())
    with pytest.raises(PipelineError, match="until_window_closes"):
        table.suppress(tumbling(5))


def test_buffer_limits_are_checked():
    with pytest.raises(PipelineError, match="max_records"):
        until_time_limit("1s", max_records=-1)
    with pytest.raises(PipelineError, match="when_full"):
        until_time_limit("1s", max_bytes=10, when_full="drop")


def test_the_buffer_is_a_store_with_a_changelog_and_waits_gap_plus_grace_for_sessions():
    t = Topology()
    t.stream("in").group_by_key().windowed_by(session_windows("1m", "10s")).count(name="s") \
        .suppress(until_window_closes(), name="final-s").to("out")
    app = compile_topology(t, "app", {"in": 2})
    sub = app.subtopologies[0]
    assert [s.name for s in sub.stores] == ["s", "final-s"]
    assert sub.stateful.suppress.wait_ms == 70_000
    changelogs = {c.name: c for c in app.changelog_topics()}
    assert changelogs["app-final-s-changelog"].cleanup_policy == "compact"  # emitted updates are deleted


def test_a_table_written_both_suppressed_and_as_it_is_has_one_buffer_for_its_suppressed_sinks():
    t = Topology()
    counts = t.stream("in").group_by_key().windowed_by(tumbling(5)).count(name="c")
    counts.to("raw")
    final = counts.suppress(until_window_closes())
    final.to("final")
    final.map_values(lambda n: n * 2).to("doubled")
    sub = compile_topology(t, "app", {"in": 1}).subtopologies[0]
    assert [s.name for s in sub.stores] == ["c", "c-suppress"]
    assert {s.topic: s.suppressed for s in sub.sinks} == {"raw": False, "final": True, "doubled": True}


def test_a_table_suppressed_twice_is_refused():
    t = Topology()
    counts = t.stream("in").group_by_key().windowed_by(tumbling(5)).count()
    counts.suppress(until_window_closes()).to("final")
    counts.suppress(until_time_limit("1s"), name="other").to("limited")
    with pytest.raises(PipelineError, match="suppressed twice"):
        compile_topology(t, "app", {"in": 1})
