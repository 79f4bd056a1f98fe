"""Stream-table joins: the table's records of a batch, and each stream record's table value.

A task of a stream-table join reads the stream's partition and the table topic's partition of
the same number; its batch (or continuous step) holds records of both. They are processed as
Kafka Streams processes a task's partitions: by timestamp, the partition whose next record is
oldest first (`_as_of`), so a stream record joins with the table as of its own time, not with
updates that came later in the same batch. The table's records are then written to its store
(state/), whose changelog is the table topic's copy for restores and standbys.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from eddy_runtime.compiler import StatefulSpec, TableSpec
from eddy_runtime.records import RawRecords, decode_column, encode_column, timestamps_ms

__all__ = ["TableUpdates", "apply_table_updates", "stream_table_join", "table_updates", "write_table_updates"]
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


def write_table_updates(table: TableSpec, updates: TableUpdates, tx: Any) -> None:
    """Write table records into the table's store, in order (tombstones delete)."""
    store = tx.key_value(table.store.name)
    for k, v in zip(updates.keys, updates.values, strict=True):
        if v is None:
            store.delete(k)
        else:
            store.put(k, v)


def apply_table_updates(table: TableSpec, raw: RawRecords, tx: Any) -> list[tuple[int, str]]:
    """Write a table topic's new records into the table's store (tombstones delete).

    Returns the records whose key or value does not fit the table's serdes (not applied)."""
    updates, bad = table_updates(table, raw)
    write_table_updates(table, updates, tx)
    return bad


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


def stream_table_join(spec: StatefulSpec, table: TableSpec, rows: pa.Table, keys: pa.ChunkedArray, tx: Any,
                      updates: TableUpdates | None = None) -> tuple[pa.Table, int]:
    """`rows` (whose join keys are `keys`) with the table's value as a new column. Dropped (how
    many: returned second): rows whose value is null, as Kafka Streams drops them, and in an
    inner join the rows without a table value. `updates` (the table's records of the same
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
    if spec.how != "inner":
        return joined, dropped
    mask = pc.is_valid(right)
    dropped += int(rows.num_rows - pc.sum(mask).as_py() if rows.num_rows else 0)
    return joined.filter(mask), dropped


