"""Windowed stream-stream joins on real RocksDB window stores (no Kafka: the task runner hands
`process_batch` this stream's records as rows and the other stream's as its second input).

The cases are Kafka Streams' ``KStreamKStreamJoinTest.testWindowing`` (keys 0-3, a symmetric
100 ms window, the joiner ``left+right``), from "B0..B3 at 1000..1003" and from "l0..l3 at
2000..2003" on, each "push four items" one batch here, as the TopologyTestDriver processes each
record as it is piped. That test's grace is 24 h, as here.
"""

from __future__ import annotations

import pytest

from eddy_runtime.joins import TableUpdates
from eddy_runtime.pipeline import PipelineError, Topology, join_windows
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
    with pytest.raises(PipelineError, match="inner for now"):
        t.stream("e").join(t.stream("f"), joiner, windows=join_windows(10), how="left")
