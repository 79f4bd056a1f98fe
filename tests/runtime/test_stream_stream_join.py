"""Windowed stream-stream joins on real RocksDB window stores (no Kafka: the task runner hands
`process_batch` this stream's records as rows and the other stream's as its second input).

The cases are Kafka Streams' ``KStreamKStreamJoinTest.testWindowing`` (keys 0-3, a symmetric
100 ms window, the joiner ``left+right``), from "B0..B3 at 1000..1003" and from "l0..l3 at
2000..2003" on, each "push four items" one batch here, as the TopologyTestDriver processes each
record as it is piped. That test's grace is 24 h, as here.
"""

from __future__ import annotations

import pytest

from eddy_runtime.dsl.pipeline import PipelineError, Topology, join_windows
from eddy_runtime.processing.joins import TableUpdates
from tests.runtime.test_operators import StoreTransactions, rows, sub_of

pytestmark = pytest.mark.unit


def joiner(left, right):
    return f"{left}+{right}"


def _sub(windows):
    def build(t):
        t.stream("in").join(t.stream("table"), joiner, windows=windows).to("out")
    return sub_of(build)


KEYS = range(4)


def test_windowing_as_kafka_streams_test_from_b(joined):
    s = joined(_sub(join_windows(100, "24h")))
    assert s.this(*[(k, f"B{k}", 1000 + k) for k in KEYS]) == []
    assert s.other(*[(k, f"g{k}", 899) for k in KEYS]) == []
    assert s.other(*[(k, f"h{k}", 900) for k in KEYS]) == [(0, "B0+h0", 1000)]
    assert s.other(*[(k, f"i{k}", 901) for k in KEYS]) == [(0, "B0+i0", 1000), (1, "B1+i1", 1001)]
    assert s.other(*[(k, f"j{k}", 902) for k in KEYS]) == [(0, "B0+j0", 1000), (1, "B1+j1", 1001),
                                                          (2, "B2+j2", 1002)]
    assert s.other(*[(k, f"k{k}", 903) for k in KEYS]) == [(0, "B0+k0", 1000), (1, "B1+k1", 1001),
                                                          (2, "B2+k2", 1002), (3, "B3+k3", 1003)]


def test_windowing_as_kafka_streams_test_from_l(joined):
    s = joined(_sub(join_windows(100, "24h")))
    assert s.other(*[(k, f"l{k}", 2000 + k) for k in KEYS]) == []
    assert s.this(*[(k, f"C{k}", 2100) for k in KEYS]) == [(k, f"C{k}+l{k}", 2100) for k in KEYS]
    assert s.this(*[(k, f"D{k}", 2101) for k in KEYS]) == [(k, f"D{k}+l{k}", 2101) for k in (1, 2, 3)]
    assert s.this(*[(k, f"E{k}", 2102) for k in KEYS]) == [(k, f"E{k}+l{k}", 2102) for k in (2, 3)]
    assert s.this(*[(k, f"F{k}", 2103) for k in KEYS]) == [(3, "F3+l3", 2103)]
    assert s.this(*[(k, f"G{k}", 2104) for k in KEYS]) == []


def test_a_record_later_than_its_window_and_grace_is_dropped(joined):
    s = joined(_sub(join_windows(100, 50)))
    assert s.this((0, "A", 1000)) == []
    assert s.other((0, "x", 1200)) == []  # stream time 1200
    # "a" at 1040: its window ends at 1140, + grace 50 = 1190 < 1200: too late, even though A fits
    assert s.other((0, "a", 1040)) == [] and s.dropped == 1
    assert s.other((0, "b", 1060)) == [(0, "A+b", 1060)]  # closes at 1210: in time


def test_both_sides_in_one_batch_join_in_timestamp_order_and_survive_a_restart_of_the_stores(joined, tmp_path):
    s = joined(_sub(join_windows(100, "1h")))
    out = s.batch(rows(["0", "0"], [1000, 1300], value=["A", "B"]),
                   TableUpdates([b"0", b"0"], [b"a", b"b"], [1050, 1250]))
    assert out == [(0, "A+a", 1050), (0, "B+b", 1300)]
    s.tx.close()
    s.tx = StoreTransactions(tmp_path / "stores-0", s.sub.stores)  # the same stores, opened again
    assert s.other((0, "c", 1280)) == [(0, "B+c", 1300)]


def test_a_windowed_join_is_checked_when_it_is_written():
    t = Topology()
    with pytest.raises(PipelineError, match="needs windows"):
        t.stream("a").join(t.stream("b"), joiner)
    with pytest.raises(PipelineError, match="read with topology.stream"):
        t.stream("c").join(t.stream("d").map_values(str), joiner, windows=join_windows(10))
    with pytest.raises(PipelineError, match="inner, left or outer"):
        t.stream("e").join(t.stream("f"), joiner, windows=join_windows(10), how="right")


# Left and outer joins, with Kafka Streams' current semantics (its "spurious results" fix,
# KIP-633 windows with an explicit grace): a record without a partner is emitted with null only
# once its window closed (end + grace passed by stream time), before the record that closed it is
# joined; a record that found a partner never is. Modelled on KStreamKStreamLeftJoinTest's
# upper-window-bound steps, with grace 0.

def _how(how, windows):
    def build(t):
        t.stream("in").join(t.stream("table"), joiner, windows=windows, how=how).to("out")
    return sub_of(build)


def test_a_left_join_emits_unmatched_left_records_when_their_window_closes(joined):
    s = joined(_how("left", join_windows(100, 0)))
    assert s.this((0, "A0", 0), (1, "A1", 0)) == []  # waiting: a partner may still come
    assert s.other(*[(k, f"a{k}", 0) for k in KEYS]) == [(0, "A0+a0", 0), (1, "A1+a1", 0)]
    assert s.other(*[(k, f"b{k}", 1000 + k) for k in KEYS]) == []  # A0, A1 found partners: no nulls
    assert s.this(*[(k, f"B{k}", 1100) for k in KEYS]) == [(k, f"B{k}+b{k}", 1100) for k in KEYS]
    assert s.this(*[(k, f"C{k}", 1101) for k in KEYS]) == [(k, f"C{k}+b{k}", 1101) for k in (1, 2, 3)]
    assert s.this(*[(k, f"D{k}", 1102) for k in KEYS]) == [(k, f"D{k}+b{k}", 1102) for k in (2, 3)]
    # Stream time 1202: C0's window (1101 + 100, grace 0) closed; D0's (1202) not yet.
    assert s.this((0, "X0", 1202)) == [(0, "C0+None", 1101)]
    assert s.this((1, "Y1", 1300)) == [(0, "D0+None", 1102), (1, "D1+None", 1102)]
    # Right records never come out alone in a left join.
    assert s.other((3, "z3", 5000)) == [(0, "X0+None", 1202), (1, "Y1+None", 1300)]


def test_an_outer_join_emits_unmatched_records_of_both_sides(joined):
    s = joined(_how("outer", join_windows(100, 0)))
    assert s.this((0, "A0", 0)) == []
    assert s.other((1, "a1", 0)) == []
    assert s.other((0, "x0", 50)) == [(0, "A0+x0", 50)]
    assert s.this((2, "B2", 200)) == [(1, "None+a1", 0)]  # a1 (window to 0 + 100) closed at 200
    assert s.other((2, "y2", 250)) == [(2, "B2+y2", 250)]
    assert s.this((3, "C3", 400)) == []  # B2 and y2 joined: nothing unmatched closed


def test_unmatched_records_survive_a_restart_of_the_stores(joined, tmp_path):
    s = joined(_how("left", join_windows(100, 50)))
    assert s.this((0, "A", 1000)) == []
    s.tx.close()
    s.tx = StoreTransactions(tmp_path / "stores-0", s.sub.stores)  # the same stores, opened again
    assert s.other((1, "x", 1150)) == []  # 1000 + 100 + 50 = 1150: not closed yet
    assert s.other((1, "y", 1151)) == [(0, "A+None", 1000)]
