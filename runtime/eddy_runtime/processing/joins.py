"""Stream-table and table-table joins: the table's records of a batch, and each stream record's
table value; what every join shares (the order a task takes two inputs in, the user's joiner, the
rows of results). Windowed stream-stream joins are in stream_joins.py.

A task of a stream-table join reads the stream's partition and the table topic's partition of
the same number; its batch (or continuous step) holds records of both. They are processed as
Kafka Streams processes a task's partitions: by timestamp, the partition whose next record is
oldest first (`_as_of`), so a stream record joins with the table as of its own time, not with
updates that came later in the same batch. The table's records are then written to its store
(state/), whose changelog is the table topic's copy for restores and standbys.
"""

from __future__ import annotations

import bisect
import logging
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from eddy_runtime.dsl.errors import PipelineRuntimeError
from eddy_runtime.dsl.subtopology import StatefulSpec, TableSpec
from eddy_runtime.kafka.records import TS_TYPE, RawRecords, decode_column, decode_value, encode_column, timestamps_ms
from eddy_runtime.state import KeyValueTransaction, TaskTransaction

__all__ = [
    "JoinedRows",
    "TableUpdates",
    "apply_table_updates",
    "joined_value",
    "merge_order",
    "result_rows",
    "stream_table_join",
    "table_table_join",
    "table_updates",
    "write_table_updates",
]

log = logging.getLogger("eddy.runner")


class JoinedRows(NamedTuple):
    """A join's results over one batch, and how many records it dropped (null keys or values,
    no partner in an inner join, late for their window, a joiner that raised)."""

    rows: pa.Table
    dropped: int


@dataclass(frozen=True)
class TableUpdates:
    """A batch's table records that fit the table's serdes, in offset order (a None value deletes)."""

    keys: list[bytes]
    values: list[bytes | None]
    timestamps: list[int]


def table_updates(table: TableSpec, raw: RawRecords) -> tuple[TableUpdates, list[tuple[int, str]]]:
    """A table topic's new records, and those whose key or value does not fit the table's serdes
    (offset, reason: left out)."""
    _, bad_k = decode_column(raw.keys, table.key_serde)
    _, bad_v = decode_column([v for v in raw.values], table.value_serde)
    bad = {**bad_v, **bad_k}
    good = [(i, k) for i, k in enumerate(raw.keys) if i not in bad and k is not None]
    updates = TableUpdates([k for _, k in good], [raw.values[i] for i, _ in good], [raw.timestamps[i] for i, _ in good])
    return updates, [(raw.offsets[i], err) for i, err in sorted(bad.items())]


def write_table_updates(table: TableSpec, updates: TableUpdates, tx: TaskTransaction) -> None:
    """Write table records into the table's store, in order (tombstones delete)."""
    store = tx.key_value(table.store.name)
    for k, v in zip(updates.keys, updates.values, strict=True):
        if v is None:
            store.delete(k)
        else:
            store.put(k, v)


def apply_table_updates(table: TableSpec, raw: RawRecords, tx: TaskTransaction) -> list[tuple[int, str]]:
    """Write a table topic's new records into the table's store (tombstones delete).

    Returns the records whose key or value does not fit the table's serdes (not applied)."""
    updates, bad = table_updates(table, raw)
    write_table_updates(table, updates, tx)
    return bad


def merge_order(this_ts: Sequence[int], other_ts: Sequence[int]) -> Iterator[tuple[bool, int]]:
    """(from this input, index) of two inputs' records (each in offset order) in the order a task
    takes them: the one whose next record is oldest, the other input's first on a tie."""
    i = j = 0
    while i < len(this_ts) or j < len(other_ts):
        if j < len(other_ts) and (i >= len(this_ts) or other_ts[j] <= this_ts[i]):
            yield False, j
            j += 1
        else:
            yield True, i
            i += 1


def joined_value(spec: StatefulSpec, pair: tuple[Any, Any], key: Any, what: str) -> tuple[bool, Any]:
    """(True, joiner(*pair)), or (False, None) when the user's joiner raised: logged (the caller
    counts it dropped)."""
    assert spec.joiner is not None
    try:
        return True, spec.joiner(*pair)
    except Exception as e:  # noqa: BLE001 - a user function: log, count, go on
        log.warning("%s: joiner failed for key %r: %s: %s", what, key, type(e).__name__, e)
        return False, None


def _as_of(updates: TableUpdates, raw_keys: Sequence[bytes | None], stamps: np.ndarray | None,
           before: dict[bytes, bytes | None]) -> list[bytes | None]:
    """Each stream record's table value when the records of its task are processed in timestamp
    order, as Kafka Streams picks the partition whose next record is oldest: the merge of the
    stream records and the table records (each in offset order) takes the table record first
    when it is not newer. A record sees the last update of its key taken before it, else the
    value the store had before the batch (`before`). No timestamp column: after every update."""
    taken: list[int] = []
    j, m = 0, len(updates.keys)
    for i in range(len(raw_keys)):
        if stamps is None:
            j = m
        else:
            while j < m and updates.timestamps[j] <= stamps[i]:
                j += 1
        taken.append(j)
    positions: dict[bytes, list[int]] = {}
    for n, updated in enumerate(updates.keys):
        positions.setdefault(updated, []).append(n)
    values: list[bytes | None] = []
    for k, upto in zip(raw_keys, taken, strict=True):
        if k is None:
            values.append(None)
            continue
        at = positions.get(k)
        n = bisect.bisect_left(at, upto) - 1 if at else -1
        values.append(updates.values[at[n]] if at and n >= 0 else before.get(k))
    return values


def stream_table_join(spec: StatefulSpec, table: TableSpec, rows: pa.Table, keys: pa.ChunkedArray, tx: TaskTransaction,
                      updates: TableUpdates | None = None) -> JoinedRows:
    """`rows` (whose join keys are `keys`) with the table's value as a new column. Dropped: rows
    whose value is null, as Kafka Streams drops them, and in an inner join the rows without a
    table value. `updates` (the table's records of the same
    batch) are merged with `rows` by timestamp (`_as_of`) and written to the table's store."""
    dropped = 0
    if "value" in rows.column_names and rows.column("value").null_count:  # as Kafka Streams drops them
        valid = pc.is_valid(rows.column("value"))
        dropped = rows.num_rows - int(pc.sum(valid).as_py() or 0)
        rows, keys = rows.filter(valid), keys.filter(valid)
    raw_keys = encode_column(keys, table.key_serde)
    store = tx.key_value(table.store.name)
    present = [k for k in raw_keys if k is not None]
    found = dict(zip(present, store.get_many(present), strict=True)) if present else {}
    if updates is not None and updates.keys:
        right_raw = _as_of(updates, raw_keys, timestamps_ms(rows), found)
        write_table_updates(table, updates, tx)
    else:
        right_raw = [None if k is None else found.get(k) for k in raw_keys]
    right, _ = decode_column(right_raw, table.value_serde)
    joined = rows.append_column(spec.right_name, right)
    if spec.how == "inner":
        mask = pc.is_valid(right)
        dropped += int(rows.num_rows - pc.sum(mask).as_py() if rows.num_rows else 0)
        joined = joined.filter(mask)
    if spec.joiner is None:
        return JoinedRows(joined, dropped)
    return _values_joined(spec, joined, dropped)


def _values_joined(spec: StatefulSpec, joined: pa.Table, dropped: int) -> JoinedRows:
    """A stream-table join's rows with ``value`` = ``joiner(value, table value)`` and no table
    value column; the rows whose joiner raised dropped (logged, counted)."""
    keys = joined.column("key").to_pylist()
    results = [joined_value(spec, pair, key, "stream-table join")
               for pair, key in zip(zip(joined.column("value").to_pylist(),
                                        joined.column(spec.right_name).to_pylist(), strict=True), keys, strict=True)]
    out = joined.drop_columns([spec.right_name])
    if not all(ok for ok, _ in results):
        kept = [i for i, (ok, _) in enumerate(results) if ok]
        dropped += len(results) - len(kept)
        out = out.take(pa.array(kept, pa.int64()))
        results = [results[i] for i in kept]
    try:
        values = pa.array([v for _, v in results])
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        raise PipelineRuntimeError(f"the joiner's values do not fit one column ({e}): return one type (or None)") from e
    return JoinedRows(out.set_column(out.schema.get_field_index("value"), "value", values), dropped)




# -- table-table joins ------------------------------------------------------------------------------

_TS = struct.Struct(">q")


class _Side:
    """One table of a table-table join: its store (values stored as 8-byte timestamp + value),
    read through and written back once per batch."""

    def __init__(self, store: KeyValueTransaction, serde: str) -> None:
        self.store = store
        self.serde = serde
        self.current: dict[bytes, tuple[int, bytes, Any] | None] = {}
        self.changed: set[bytes] = set()

    def get(self, key: bytes) -> tuple[int, bytes, Any] | None:
        """(timestamp, raw value, decoded value), or None."""
        if key not in self.current:
            raw = self.store.get(key)
            if raw is None:
                self.current[key] = None
            else:
                value = raw[_TS.size:]
                self.current[key] = (_TS.unpack_from(raw)[0], value, decode_value(value, self.serde))
        return self.current[key]

    def set(self, key: bytes, entry: tuple[int, bytes, Any] | None) -> tuple[int, bytes, Any] | None:
        before = self.get(key)
        self.current[key] = entry
        self.changed.add(key)
        return before

    def write(self) -> None:
        for key in self.changed:
            entry = self.current[key]
            if entry is None:
                self.store.delete(key)
            else:
                self.store.put(key, _TS.pack(entry[0]) + entry[1])


def table_table_join(spec: StatefulSpec, table: TableSpec, rows: pa.Table, keys: pa.ChunkedArray, tx: TaskTransaction,
                     updates: TableUpdates | None) -> JoinedRows:
    """Kafka Streams' KTable-KTable join (``KTableKTableInnerJoin``, ``LeftJoin``, ``OuterJoin``):
    `rows` are the left table's records, `updates` the right table's, taken in timestamp order as
    `_as_of` takes them. Each record updates its side and emits, for its key, ``joiner(left,
    right)`` or a tombstone (None) when the result goes away: inner, when the other side has a
    value; left, for a left record, or a right record whose key has a left value; outer, unless
    both sides are and were empty. The result's timestamp is the newer of the two sides'. Null
    keys are dropped; a joiner that raises drops that result (logged, counted)."""
    assert spec.store is not None and spec.joiner is not None
    left = _Side(tx.key_value(spec.store.name), spec.left_value_serde)
    right = _Side(tx.key_value(table.store.name), table.value_serde)
    left_keys = encode_column(keys, spec.key_serde)
    left_raw = encode_column(rows.column("value"), spec.left_value_serde)
    left_values = rows.column("value").to_pylist()
    stamps = timestamps_ms(rows)
    left_ts = [0] * rows.num_rows if stamps is None else [int(t) for t in stamps]
    upd = updates or TableUpdates([], [], [])
    right_values = decode_column(upd.values, table.value_serde)[0].to_pylist() if upd.keys else []
    out_keys: list[bytes] = []
    out_values: list[Any] = []
    out_ts: list[int] = []
    dropped = 0
    key: bytes | None
    raw: bytes | None
    for is_left, n in merge_order(left_ts, upd.timestamps):
        if is_left:
            key, raw, value, ts, mine, theirs = left_keys[n], left_raw[n], left_values[n], left_ts[n], left, right
        else:
            key, raw, value, ts = upd.keys[n], upd.values[n], right_values[n], upd.timestamps[n]
            mine, theirs = right, left
        if key is None:
            dropped += 1
            continue
        before = mine.set(key, None if raw is None else (ts, raw, value))
        other = theirs.get(key)
        if not _emits(spec.how, is_left, raw is not None, before is not None, other is not None):
            continue
        ts_out = max(ts, other[0]) if other is not None else ts
        if raw is None and (spec.how == "inner" or other is None or (spec.how == "left" and is_left)):
            result = None  # the join result goes away
        else:
            mine_value = value if raw is not None else None
            other_value = other[2] if other is not None else None
            pair = (mine_value, other_value) if is_left else (other_value, mine_value)
            ok, result = joined_value(spec, pair, key, "table join")
            if not ok:
                dropped += 1
                continue
        out_keys.append(key)
        out_values.append(result)
        out_ts.append(ts_out)
    left.write()
    right.write()
    return JoinedRows(result_rows(out_keys, out_values, out_ts, spec.key_serde), dropped)


def result_rows(keys: list[bytes], values: list[Any], stamps: list[int], key_serde: str) -> pa.Table:
    """A two-sided join's results as rows: ``key`` (decoded), ``value``, ``timestamp``."""
    decoded_keys, _ = decode_column(keys, key_serde)
    return pa.table({"key": decoded_keys, "value": pa.array(values),
                     "timestamp": pa.array(np.asarray(stamps, dtype=np.int64) * 1000, pa.int64()).cast(TS_TYPE)})


def _emits(how: str, is_left: bool, has_value: bool, had_value: bool, other: bool) -> bool:
    """Whether a record of one side produces a join result (or a tombstone) for its key."""
    if how == "inner":
        return other
    if how == "left":
        return (has_value or had_value) if is_left else other
    return has_value or had_value or other  # outer
