"""A sub-topology's sinks: its result rows as records for an output topic or a repartition topic.

`to_topic` encodes the key and value columns with the sink's serdes (a windowed table's key
gets its window appended, as Kafka Streams' windowed serializers write it); `repartition`
re-keys rows into the topic that feeds the next sub-topology, pre-aggregated per key when the
downstream aggregation allows it. The records go to `BatchOutput.outputs`, which the task commits.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from eddy_runtime.dsl.errors import PipelineRuntimeError
from eddy_runtime.dsl.record_steps import GROUP_KEY_COLUMN
from eddy_runtime.dsl.subtopology import METADATA_COLUMNS, RepartitionSink, TopicSink
from eddy_runtime.kafka.records import (
    _INT64,
    arrow_type,
    encode_column,
    encode_rows,
    output_records,
    raw_values,
    timestamps_ms,
)
from eddy_runtime.processing.batch import BatchOutput

__all__ = ["repartition", "to_topic"]


def _column(rows: pa.Table, name: str, sink: str) -> pa.ChunkedArray:
    if name not in rows.column_names:
        shown = [c for c in rows.column_names if not c.startswith("__")]
        raise PipelineRuntimeError(f"{sink}: column {name!r} is not among the rows' columns {shown}")
    return rows.column(name)


def to_topic(sink: TopicSink, rows: pa.Table, out: BatchOutput) -> None:
    if rows.num_rows == 0:
        return
    keys = encode_column(_column(rows, sink.key_column, f"to({sink.topic})"), sink.key_serde)
    if sink.windowed:
        starts = _column(rows, "window_start", f"to({sink.topic})").to_pylist()
        pack = _INT64.pack
        if sink.session_windowed:  # Kafka Streams' SessionWindowedSerializer: key, end, start
            ends = _column(rows, "window_end", f"to({sink.topic})").to_pylist()
            keys = [None if k is None else k + pack(e) + pack(s) for k, s, e in zip(keys, starts, ends, strict=True)]
        else:
            keys = [None if k is None else k + pack(s) for k, s in zip(keys, starts, strict=True)]
    if isinstance(sink.value_columns, str):
        values = encode_column(_column(rows, sink.value_columns, f"to({sink.topic})"), sink.value_serde)
    else:
        for c in sink.value_columns:
            _column(rows, c, f"to({sink.topic})")
        values = encode_rows(rows, sink.value_columns)
    stamps = timestamps_ms(rows)
    out.outputs.extend(output_records(sink.topic, keys, values, stamps))
    if stamps is not None:
        out.output_timestamps.append(stamps)


def repartition(sink: RepartitionSink, rows: pa.Table, out: BatchOutput) -> None:
    if rows.num_rows == 0:
        return
    keys = _column(rows, sink.key_column, "group_by")
    valid = pc.is_valid(keys)
    if not pc.all(valid).as_py():
        # Kafka Streams drops records whose new key is null on a repartition.
        out.dropped += int(rows.num_rows - pc.sum(valid).as_py())
        rows = rows.filter(valid)
        keys = rows.column(sink.key_column)
    stamps = timestamps_ms(rows)
    if sink.combine is not None:
        # Pre-aggregate per key: the downstream aggregation adds partial results.
        k = pc.cast(keys, arrow_type(sink.key_serde)) if sink.key_serde != "json" else keys
        cols: dict[str, Any] = {"k": k, "ts": pa.array(stamps if stamps is not None
                                                          else np.zeros(rows.num_rows, dtype=np.int64))}
        if sink.combine == "count":
            cols["n"] = pa.array(np.ones(rows.num_rows, dtype=np.int64))
            grouped = pa.table(cols).group_by("k", use_threads=False).aggregate([("n", "sum"), ("ts", "max")])
            values = encode_column(grouped.column("n_sum"), "int64")
        else:
            column = sink.combine_column or "value"
            cols["v"] = _column(rows, column, "reduce")
            grouped = pa.table(cols).group_by("k", use_threads=False).aggregate([("v", sink.combine), ("ts", "max")])
            values = encode_rows(grouped.rename_columns(["k", column, "ts"]), [column])
        key_bytes = encode_column(grouped.column("k"), sink.key_serde)
        group_stamps = grouped.column("ts_max").to_numpy()
        out.outputs.extend(output_records(sink.topic, key_bytes, values,
                                          group_stamps if stamps is not None else None))
        return
    key_bytes = encode_column(keys, sink.key_serde)
    # The record's old key goes no further: the reading side's `key` is the record's (new) key.
    skip = {sink.key_column, "key", GROUP_KEY_COLUMN, *METADATA_COLUMNS}
    value_cols = [c for c in rows.column_names if c not in skip]
    raw = raw_values(rows.column("value")) if value_cols == ["value"] else None
    values = raw if raw is not None else encode_rows(rows, value_cols)
    out.outputs.extend(output_records(sink.topic, key_bytes, values, stamps))
