"""KTable-KTable joins on real RocksDB stores (no Kafka: the task runner hands `process_batch` the
left table's records as rows and the right table's as table records, in the same batch or not).

The cases are Kafka Streams' own, ``KTableKTableInnerJoinTest.doTestJoin`` (keys 0-3, values X/Y,
the timestamps of each step, the joiner ``left+right``): each step of that test is one batch
here, as the TopologyTestDriver processes each record as it is piped. The left and outer joins'
expectations follow Kafka Streams' ``KTableKTableLeftJoin`` and ``KTableKTableOuterJoin`` rules
on the same input.
"""

from __future__ import annotations

import pytest

from eddy_runtime.dsl.pipeline import PipelineError, Topology
from eddy_runtime.processing.joins import TableUpdates
from tests.runtime.test_operators import rows, sub_of

pytestmark = pytest.mark.unit


def joiner(left, right):
    return f"{left}+{right}"


def _sub(how):
    def build(t):
        t.table("in", name="left").join(t.table("table", name="right"), joiner, how=how).to("out")
    return sub_of(build)


def test_inner_join_as_kafka_streams_test(joined):
    """KTableKTableInnerJoinTest.doTestJoin, step by step."""
    t = joined(_sub("inner"))
    assert t.this((0, "X0", 5), (1, "X1", 6)) == []
    assert t.other((0, "Y0", 0), (1, "Y1", 10)) == [(0, "X0+Y0", 5), (1, "X1+Y1", 10)]
    assert t.this(*[(k, f"XX{k}", 7) for k in range(4)]) == [(0, "XX0+Y0", 7), (1, "XX1+Y1", 10)]
    assert t.other(*[(k, f"YY{k}", k * 5) for k in range(4)]) == [
        (0, "XX0+YY0", 7), (1, "XX1+YY1", 7), (2, "XX2+YY2", 10), (3, "XX3+YY3", 15)]
    assert t.this(*[(k, f"XXX{k}", 6) for k in range(4)]) == [
        (0, "XXX0+YY0", 6), (1, "XXX1+YY1", 6), (2, "XXX2+YY2", 10), (3, "XXX3+YY3", 15)]
    assert t.other((0, None, 5), (1, None, 7)) == [(0, None, 6), (1, None, 7)]
    assert t.this(*[(k, f"XXXX{k}", 13) for k in range(4)]) == [(2, "XXXX2+YY2", 13), (3, "XXXX3+YY3", 15)]
    assert t.this((0, None, 0), (1, None, 42), (2, None, 5), (3, None, 20)) == [(2, None, 10), (3, None, 20)]


def test_left_join_emits_every_left_update_and_right_updates_of_keys_with_a_left_value(joined):
    t = joined(_sub("left"))
    assert t.this((0, "X0", 5), (1, "X1", 6)) == [(0, "X0+None", 5), (1, "X1+None", 6)]
    assert t.other((0, "Y0", 0), (2, "Y2", 10)) == [(0, "X0+Y0", 5)]  # key 2 has no left value
    assert t.other((0, None, 8)) == [(0, "X0+None", 8)]
    assert t.this((1, None, 9), (3, None, 9)) == [(1, None, 9)]  # key 3 had no left value: nothing


def test_outer_join_emits_while_either_side_has_a_value(joined):
    t = joined(_sub("outer"))
    assert t.this((0, "X0", 5)) == [(0, "X0+None", 5)]
    assert t.other((0, "Y0", 7), (1, "Y1", 3)) == [(0, "X0+Y0", 7), (1, "None+Y1", 3)]
    assert t.this((0, None, 8)) == [(0, "None+Y0", 8)]
    assert t.other((0, None, 9)) == [(0, None, 9)]
    assert t.other((0, None, 10)) == []  # both were empty already


def test_one_batch_takes_both_tables_records_in_timestamp_order(joined):
    t = joined(_sub("inner"))
    out = t.batch(rows(["0", "0"], [5, 20], value=["X0", "X0b"]),
                   TableUpdates([b"0", b"0"], [b"Y0", b"Y0b"], [10, 30]))
    # X0@5 (no right yet), Y0@10 -> X0+Y0, X0b@20 -> X0b+Y0, Y0b@30 -> X0b+Y0b
    assert out == [(0, "X0+Y0", 10), (0, "X0b+Y0", 20), (0, "X0b+Y0b", 30)]


def test_a_table_table_join_is_checked_when_it_is_written():
    t = Topology()
    with pytest.raises(PipelineError, match="needs a joiner"):
        t.table("a", name="a").join(t.table("b", name="b"), "concat")
    with pytest.raises(PipelineError, match="takes tables read with topology.table"):
        t.stream("s").group_by_key().count().join(t.table("c", name="c"), joiner)
