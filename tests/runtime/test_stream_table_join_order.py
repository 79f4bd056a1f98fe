"""A stream-table join processes a task's stream and table records in timestamp order, on real
RocksDB stores (no Kafka: the task runner hands `process_batch` the same rows and table records).

Record at a time, the cases are Kafka Streams' own: ``StreamTableJoinIntegrationTest.testInner``
and ``testLeft`` (the input of ``AbstractJoinIntegrationTest``: key 0, values and timestamps in
that order, out-of-order records included; the TopologyTestDriver processes each record as it is
piped). Kafka's expected outputs are the values ``left-right``; Eddy's join writes the two columns,
compared here as pairs.

In one batch, all of that input is there at once: Kafka Streams' runtime then processes the
partition whose next record is oldest (``PartitionGroup``; ``max.task.idle.ms`` waits for data
already on the broker), so each stream record sees the table as of its own timestamp. The
expected outputs of that case follow from that rule, worked out in the test.
"""

from __future__ import annotations

import json

import pytest

from eddy_runtime.processing.batch import TaskState
from eddy_runtime.processing.joins import TableUpdates, write_table_updates
from eddy_runtime.processing.operators import process_batch
from tests.runtime.test_operators import StoreTransactions, rows, sub_of

pytestmark = pytest.mark.unit

LEFT, RIGHT = "left", "right"
#: AbstractJoinIntegrationTest.input: (topic, value, timestamp ms), key 0 throughout
KAFKA_INPUT = [
    (LEFT, None, 1), (RIGHT, None, 2), (LEFT, "A", 3), (RIGHT, "a", 4), (LEFT, "B", 5), (RIGHT, "b", 6),
    (LEFT, None, 7), (RIGHT, None, 8), (LEFT, "C", 9), (RIGHT, "c", 10), (RIGHT, None, 11), (LEFT, None, 12),
    (RIGHT, None, 13), (RIGHT, "d", 7), (LEFT, "D", 6), (LEFT, None, 2), (RIGHT, None, 3), (RIGHT, "e", 14),
    (LEFT, "E", 15), (LEFT, None, 10), (RIGHT, None, 9), (LEFT, "F", 4), (RIGHT, "f", 3),
]


def _join(how):
    def build(t):
        t.stream("in").join(t.table("table", name="users"), how=how).to(
            "out", value=["value", "table_value"], value_serde="json")
    return sub_of(build)


def _pairs(out):
    return [tuple(json.loads(r.value).values()) for r in out.outputs]


def _table_records(records):
    return TableUpdates([b"0"] * len(records), [None if v is None else v.encode() for v, _ in records],
                        [ts for _, ts in records])


@pytest.fixture
def transactions(tmp_path):
    made = []

    def make(sub):
        made.append(StoreTransactions(tmp_path / f"s{len(made)}", sub.stores))
        return made[-1]

    yield make
    for s in made:
        s.close()


@pytest.mark.parametrize(("how", "expected"), [
    # StreamTableJoinIntegrationTest.testInner: B-a, D-d, E-e
    ("inner", [("B", "a"), ("D", "d"), ("E", "e")]),
    # StreamTableJoinIntegrationTest.testLeft: A-null, B-a, C-null, D-d, E-e, F-null
    ("left", [("A", None), ("B", "a"), ("C", None), ("D", "d"), ("E", "e"), ("F", None)]),
])
def test_record_at_a_time_as_kafka_streams_test_driver(transactions, how, expected):
    sub = _join(how)
    tx = transactions(sub)
    seen = []
    for topic, value, ts in KAFKA_INPUT:
        if topic == LEFT:
            out = process_batch(sub, rows(["0"], [ts], value=[value]), tx, TaskState())
            seen += _pairs(out)
            # a null stream value is dropped, as Kafka Streams drops it
            assert out.dropped == (1 if value is None or (how == "inner" and not _pairs(out)) else 0)
        else:
            write_table_updates(sub.table, _table_records([(value, ts)]), tx)
        tx.commit()
    assert seen == expected


@pytest.mark.parametrize(("how", "expected"), [
    # Merging left 1,3,5,7,9,12,6,2,15,10,4 with right 2,4,6,8,10,11,13,7,3,14,9,3 by the oldest
    # next record (the table's first when equal): A@3 after null@2; B@5 after a@4; C@9 after
    # null@8; D@6 comes after null@12 in its partition, by then null@11 is in; E@15 after every
    # table record (f@3 last); F@4 too.
    ("left", [("A", None), ("B", "a"), ("C", None), ("D", None), ("E", "f"), ("F", "f")]),
    ("inner", [("B", "a"), ("E", "f"), ("F", "f")]),
])
def test_one_batch_is_processed_in_timestamp_order_across_the_two_partitions(transactions, how, expected):
    sub = _join(how)
    tx = transactions(sub)
    left = [(v, ts) for topic, v, ts in KAFKA_INPUT if topic == LEFT]
    right = [(v, ts) for topic, v, ts in KAFKA_INPUT if topic == RIGHT]
    out = process_batch(sub, rows(["0"] * len(left), [ts for _, ts in left], value=[v for v, _ in left]), tx,
                        TaskState(), _table_records(right))
    assert _pairs(out) == expected
    tx.commit()
    # the table holds its last record afterwards
    assert tx.stores["users"].get(b"0") == b"f"


def test_a_batch_without_table_records_joins_with_the_store_as_before(transactions):
    sub = _join("left")
    tx = transactions(sub)
    write_table_updates(sub.table, _table_records([("paris", 5)]), tx)
    tx.commit()
    out = process_batch(sub, rows(["0", "1"], [1, 2], value=["x", "y"]), tx, TaskState(), None)
    assert _pairs(out) == [("x", "paris"), ("y", None)]
