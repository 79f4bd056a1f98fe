"""Aggregations of a sub-topology: count, reduce and aggregate, per key or per key and time window.

Vectorized over one batch of one task: Arrow's group-by pre-aggregates the batch per key (or
per key and window), then one read-modify-write per distinct key goes through the task's store
transaction. count and the named reduces ("sum", "min", "max") fold in Arrow; a reduce function
or an aggregate's adder runs once per key and batch, and if it raises, that key's rows become bad
records (the app's policy decides). Session windows are processing/sessions.py's.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from eddy_runtime.dsl.errors import PipelineRuntimeError
from eddy_runtime.dsl.subtopology import METADATA_COLUMNS, StatefulSpec
from eddy_runtime.kafka.records import TS_TYPE, arrow_type, timestamps_ms
from eddy_runtime.processing.batch import BatchOutput, TaskState, key_column
from eddy_runtime.state import TaskTransaction

__all__ = ["aggregate"]


def aggregate(spec: StatefulSpec, rows: pa.Table, tx: TaskTransaction, state: TaskState, out: BatchOutput) -> pa.Table:
    assert spec.store is not None
    n = rows.num_rows
    keys = key_column(rows, spec.key_serde)
    stamps = timestamps_ms(rows)
    if stamps is None:  # no timestamp column left after the user's steps: the time of processing
        stamps = np.full(n, int(time.time() * 1000), dtype=np.int64)
    index = np.arange(n, dtype=np.int64)
    valid = pc.is_valid(keys).to_numpy(zero_copy_only=False)
    out.dropped += int(n - valid.sum())
    cols: dict[str, Any] = {"__k": keys, "__ts": pa.array(stamps), "__i": pa.array(index)}
    group_cols = ["__k"]
    windows = spec.windows
    if windows is not None:
        # Every (record, window) pair; a record is late for a window whose end + grace is at or
        # before the stream time when the record arrives (stream time includes the record).
        base = state.stream_time if state.stream_time is not None else np.iinfo(np.int64).min
        stream_time = np.maximum.accumulate(np.concatenate([[base], stamps]))[1:] if n else stamps
        if n:
            state.stream_time = int(stream_time[-1])
        first = stamps - stamps % windows.advance_ms
        hops = -(-windows.size_ms // windows.advance_ms)
        starts = np.concatenate([first - j * windows.advance_ms for j in range(hops)])
        rec = np.tile(index, hops)
        inside = (starts > stamps[rec] - windows.size_ms) & (starts >= 0)
        on_time = starts + windows.size_ms + windows.grace_ms > stream_time[rec]
        keep = inside & on_time & valid[rec]
        late_records = np.setdiff1d(index[valid], rec[inside & on_time & valid[rec]])
        out.dropped += int(len(late_records))
        rec, starts = rec[keep], starts[keep]
        table = pa.table(cols).take(pa.array(rec)).append_column("__w", pa.array(starts))
        group_cols.append("__w")
        for name in rows.column_names:
            if name not in ("key", *METADATA_COLUMNS):
                table = table.append_column(name, rows.column(name).take(pa.array(rec)))
    else:
        table = pa.table(cols)
        for name in rows.column_names:
            if name not in ("key", *METADATA_COLUMNS):
                table = table.append_column(name, rows.column(name))
        if not valid.all():
            table = table.filter(pa.array(valid))
    if table.num_rows == 0:
        result = _result_schema_empty(spec)
    elif spec.kind == "count" or (spec.kind == "reduce" and isinstance(spec.reducer, str)):
        result = _fold_vectorized(spec, table, group_cols, tx, out)
    else:
        result = _fold_per_key(spec, table, group_cols, tx, out, rows)
    if windows is not None and state.stream_time is not None:
        # after the batch's windows are written: kept with them (store and changelog)
        tx.window(spec.store.name).observe(state.stream_time)
    return result


def _result_schema_empty(spec: StatefulSpec) -> pa.Table:
    cols = {"key": pa.array([], arrow_type(spec.key_serde)), "value": pa.array([], pa.null())}
    if spec.windows is not None:
        cols["window_start"] = pa.array([], pa.int64())
        cols["window_end"] = pa.array([], pa.int64())
    cols["timestamp"] = pa.array([], TS_TYPE)
    return pa.table(cols)


def _store_ops(spec: StatefulSpec, tx: TaskTransaction) -> tuple[Callable[[list[Any], list[Any]], list[Any]],
                                                       Callable[[list[Any], list[Any], list[Any]], list[bool]]]:
    """get(keys, windows) and put(keys, windows, values) over the task's store transaction."""
    assert spec.store is not None
    if spec.windows is None:
        kv = tx.key_value(spec.store.name)

        def get(keys: list[Any], _w: list[Any]) -> list[Any]:
            return list(kv.get_many(keys))

        def put(keys: list[Any], _w: list[Any], values: list[Any]) -> list[bool]:
            kv.put_many(keys, values)
            return [True] * len(keys)

        return get, put
    win = tx.window(spec.store.name)

    def wget(keys: list[Any], starts: list[Any]) -> list[Any]:
        return [win.fetch(k, s) for k, s in zip(keys, starts, strict=True)]

    def wput(keys: list[Any], starts: list[Any], values: list[Any]) -> list[bool]:
        return [win.put(k, s, v) for k, s, v in zip(keys, starts, values, strict=True)]

    return wget, wput


def _result(spec: StatefulSpec, keys: pa.Array, starts: Sequence[int | None] | None, values: list[Any],
            stamps: np.ndarray, written: list[bool]) -> pa.Table:
    mask = np.asarray(written, dtype=bool)
    cols: dict[str, Any] = {"key": keys, "value": pa.array(values)}
    if starts is not None and spec.windows is not None:
        s = np.asarray(starts, dtype=np.int64)
        cols["window_start"] = pa.array(s)
        cols["window_end"] = pa.array(s + spec.windows.size_ms)
    cols["timestamp"] = _ts_array(stamps)
    table = pa.table(cols)
    return table if mask.all() else table.filter(pa.array(mask))


def _oldest_windows_first(grouped: pa.Table) -> pa.Table:
    """Windows in start order: the window store expires by the newest start it has seen, so a
    window accepted by the grace check must be written before newer windows of the same batch."""
    if "__w" not in grouped.column_names:
        return grouped
    return grouped.take(pc.sort_indices(grouped.column("__w")))


def _fold_vectorized(spec: StatefulSpec, table: pa.Table, group_cols: list[str], tx: TaskTransaction,
                     out: BatchOutput) -> pa.Table:
    """count / sum / min / max: Arrow pre-aggregates, one store read and write per distinct key."""
    if spec.kind == "count":
        if "__partial" in table.column_names:  # combined upstream: partial counts per key
            table = table.append_column("__n", pc.cast(table.column("__partial"), pa.int64()))
        else:
            table = table.append_column("__n", pa.array(np.ones(table.num_rows, dtype=np.int64)))
        column, op = "__n", "sum"
    else:
        op = str(spec.reducer)
        column = "__partial" if "__partial" in table.column_names else (spec.column or "value")
        if column not in table.column_names:
            raise PipelineRuntimeError(f"reduce column {column!r} is not among the rows' columns "
                                       f"{[c for c in table.column_names if not c.startswith('__')]}")
    grouped = _oldest_windows_first(
        table.group_by(group_cols, use_threads=False).aggregate([(column, op), ("__ts", "max")]))
    keys = grouped.column("__k").to_pylist()
    starts = grouped.column("__w").to_pylist() if "__w" in grouped.column_names else [None] * len(keys)
    batch = grouped.column(f"{column}_{op}").to_pylist()
    get, put = _store_ops(spec, tx)
    old = get(keys, starts)
    if spec.kind == "count" or op == "sum":
        new = [b if o is None else o + b for o, b in zip(old, batch, strict=True)]
    elif op == "min":
        new = [b if o is None else min(o, b) for o, b in zip(old, batch, strict=True)]
    else:
        new = [b if o is None else max(o, b) for o, b in zip(old, batch, strict=True)]
    written = put(keys, starts, new)
    return _result(spec, grouped.column("__k").combine_chunks(), None if spec.windows is None else starts, new,
                   grouped.column("__ts_max").to_numpy(), written)


def _fold_per_key(spec: StatefulSpec, table: pa.Table, group_cols: list[str], tx: TaskTransaction,
                  out: BatchOutput, rows: pa.Table) -> pa.Table:
    """reduce with a function / aggregate: one user call per key (and window) and batch."""
    value_cols = [c for c in table.column_names if not c.startswith("__")]
    aggs = [(c, "list") for c in value_cols] + [("__i", "list"), ("__ts", "max")]
    grouped = _oldest_windows_first(table.group_by(group_cols, use_threads=False).aggregate(aggs))
    keys = grouped.column("__k").to_pylist()
    starts = grouped.column("__w").to_pylist() if "__w" in grouped.column_names else [None] * len(keys)
    lists = {c: grouped.column(f"{c}_list").to_pylist() for c in value_cols}
    row_ids = grouped.column("__i_list").to_pylist()
    get, put = _store_ops(spec, tx)
    old = get(keys, starts)
    new: list[Any] = []
    ok: list[bool] = []
    for i, key in enumerate(keys):
        try:
            if spec.kind == "aggregate":
                assert spec.adder is not None and spec.initializer is not None
                current = old[i] if old[i] is not None else spec.initializer()
                new.append(spec.adder(key, {c: lists[c][i] for c in value_cols}, current))
            else:
                column = spec.column or "value"
                if column not in lists:
                    raise PipelineRuntimeError(f"reduce column {column!r} is not among the rows' columns {value_cols}")
                values = lists[column][i]
                reducer = spec.reducer
                assert callable(reducer)
                new.append(functools.reduce(reducer, values, old[i]) if old[i] is not None
                           else functools.reduce(reducer, values))
            ok.append(True)
        except PipelineRuntimeError:
            raise
        except Exception as e:  # noqa: BLE001 - a user function failed: the policy decides
            err = f"{spec.kind} function failed for key {key!r}: {type(e).__name__}: {e}"
            for r in row_ids[i]:
                out.failed_rows.setdefault(int(r), err)
            new.append(None)
            ok.append(False)
    good = [i for i, flag in enumerate(ok) if flag]
    good_keys = [keys[i] for i in good]
    good_starts = [starts[i] for i in good]
    written = put(good_keys, good_starts, [new[i] for i in good]) if good else []
    stamps = grouped.column("__ts_max").to_numpy()[good] if good else np.zeros(0, dtype=np.int64)
    return _result(spec, grouped.column("__k").combine_chunks().take(pa.array(good, pa.int64())),
                   None if spec.windows is None else good_starts, [new[i] for i in good], stamps, written)


def _ts_array(ms: np.ndarray) -> pa.Array:
    return pa.array(ms.astype(np.int64) * 1000, pa.int64()).cast(TS_TYPE)
