"""The stateful steps and sinks of a sub-topology, vectorized over one batch of one task.

`process_batch` runs in the executor's task runner (executor/task_runner.py) on a `pyarrow.Table` of rows:
a stateful step first pre-aggregates the batch per key (or per key and window) with Arrow's
group-by, then does one read-modify-write per distinct key through the task's store
transaction (state/manager.py's `TaskTransaction`); a suppressed windowed table's results go
through its buffer (processing/suppress.py) first; the sinks turn the resulting rows into output and
repartition records. Nothing here talks to Kafka: the runner commits what this
returns.

User functions (a reduce function, an aggregate's initializer/adder) run once per key and
batch; if one raises, that key's rows become bad records and the app's policy decides.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from eddy_runtime.dsl.errors import PipelineRuntimeError
from eddy_runtime.dsl.record_steps import GROUP_KEY_COLUMN, apply_record_steps
from eddy_runtime.dsl.subtopology import (
    METADATA_COLUMNS,
    RepartitionSink,
    StatefulSpec,
    SubTopology,
    TableSpec,
    TopicSink,
)
from eddy_runtime.kafka.records import (
    _INT64,
    TS_TYPE,
    arrow_type,
    encode_column,
    encode_rows,
    output_records,
    timestamps_ms,
)
from eddy_runtime.kafka.transactions import OutputRecord
from eddy_runtime.processing.joins import TableUpdates, stream_stream_join, stream_table_join, table_table_join
from eddy_runtime.processing.processors import ProcessorTask, run_processor
from eddy_runtime.processing.sessions import session_aggregate
from eddy_runtime.processing.suppress import suppress_results

__all__ = ["BatchOutput", "PipelineRuntimeError", "TaskState", "process_batch"]

log = logging.getLogger("eddy.runner")


@dataclass
class TaskState:
    """What a task keeps between batches besides its stores (lives in the task runner)."""

    #: newest record timestamp seen by a windowed aggregation (Kafka Streams' stream time)
    stream_time: int | None = None
    #: a process() step's processor and its context (processing/processors.py)
    processor: ProcessorTask | None = None


@dataclass
class BatchOutput:
    """What a batch of one task produces."""

    outputs: list[OutputRecord] = field(default_factory=list)
    #: row indices (into the input table) whose user function failed, with the error
    failed_rows: dict[int, str] = field(default_factory=dict)
    #: rows ignored as Kafka Streams ignores them (null keys, late for their window)
    dropped: int = 0
    #: timestamps (ms) of the records written to output topics: the end-to-end latency sample
    output_timestamps: list[np.ndarray] = field(default_factory=list)


def _ts_array(ms: np.ndarray) -> pa.Array:
    return pa.array(ms.astype(np.int64) * 1000, pa.int64()).cast(TS_TYPE)


def _key_column(rows: pa.Table, serde: str) -> pa.ChunkedArray:
    if "key" not in rows.column_names:
        raise PipelineRuntimeError(f"an aggregation needs a 'key' column; the rows have {rows.column_names}")
    col = rows.column("key")
    want = arrow_type(serde)
    if serde != "json" and col.type != want:
        try:
            col = pc.cast(col, want)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            raise PipelineRuntimeError(f"key column of type {col.type} does not fit key serde {serde}: {e}") from e
    return col


def process_batch(sub: SubTopology, rows: pa.Table, tx: Any, state: TaskState,
                  table: TableUpdates | None = None) -> BatchOutput:
    """Run `sub`'s record steps, stateful step (if any) and sinks over `rows`; returns the records to commit.

    `table`: a stream-table join's table records of the same batch, merged with `rows` by timestamp
    (`_join`) and written to the table's store."""
    out = BatchOutput()
    suppressed: pa.Table | None = None
    steps = apply_record_steps(sub.record_steps, rows)
    result = rows = steps.rows
    if sub.stateful is not None:
        if sub.stateful.kind == "join":
            assert sub.table is not None
            result = _join(sub.stateful, sub.table, rows, tx, out, table)
        elif sub.stateful.kind in ("table_join", "stream_join"):
            assert sub.table is not None
            dropped = [0]
            two_sided = table_table_join if sub.stateful.kind == "table_join" else stream_stream_join
            result = two_sided(sub.stateful, sub.table, rows, _key_column(rows, sub.stateful.key_serde), tx, table,
                               dropped)
            out.dropped += dropped[0]
        elif sub.stateful.kind == "process":
            try:
                state.processor, result, failed = run_processor(sub.stateful, rows, tx, state.processor)
            except ValueError as e:
                raise PipelineRuntimeError(str(e)) from e
            for i, err in failed.items():
                out.failed_rows.setdefault(i, err)
        elif sub.stateful.session_windows is not None:
            result = _sessions(sub.stateful, rows, tx, out)
        else:
            result = _aggregate(sub.stateful, rows, tx, state, out)
        if sub.stateful.suppress is not None:  # what the suppression buffer lets out
            suppressed = suppress_results(sub.stateful, result, tx)
            if not any(sink.suppressed for sink in sub.sinks):  # in the main chain: all that goes on
                result = suppressed
        if sub.post_steps:
            result = _post_steps(sub, result, out)
    for sink in sub.sinks:
        seen = rows if sink.before_stateful else suppressed if sink.suppressed else result
        if sink.steps:  # its branch's own record steps
            seen = _branch_steps(sub, sink, seen, out)
        if isinstance(sink, TopicSink):
            _to_topic(sink, seen, out)
        else:
            _repartition(sink, seen, out)
    out.failed_rows = steps.failures_in_input(out.failed_rows)
    return out


def _branch_steps(sub: SubTopology, sink: TopicSink | RepartitionSink, rows: pa.Table, out: BatchOutput) -> pa.Table:
    """A branch's record steps over the rows its sink sees. Before the stateful step, a row they
    fail on is a bad record (the policy applies; the other branches still saw it, as in Kafka
    Streams); after it, a result they fail on is dropped and logged (see `_post_steps`)."""
    steps = apply_record_steps(sink.steps, rows)
    if sink.before_stateful:
        for i, err in steps.failed.items():
            out.failed_rows.setdefault(i, err)
    else:
        for i, err in sorted(steps.failed.items()):
            log.warning("sub-topology %d: dropped the result for key %r on its way to %s: %s", sub.id,
                        rows.column("key")[i].as_py(), sink.topic, err)
        out.dropped += len(steps.failed)
    return steps.rows


def _post_steps(sub: SubTopology, result: pa.Table, out: BatchOutput) -> pa.Table:
    """The record steps after the stateful step, over its results. A result a step fails on is
    dropped and logged (Kafka Streams' log-and-continue): it is no input record the bad-record
    policy could skip or dead-letter, and the state already holds what it came from."""
    steps = apply_record_steps(sub.post_steps, result)
    for i, err in sorted(steps.failed.items()):
        log.warning("sub-topology %d: dropped the result for key %r: %s", sub.id, result.column("key")[i].as_py(), err)
    out.dropped += len(steps.failed)
    return steps.rows


# -- aggregations ---------------------------------------------------------------------------------


def _aggregate(spec: StatefulSpec, rows: pa.Table, tx: Any, state: TaskState, out: BatchOutput) -> pa.Table:
    assert spec.store is not None
    n = rows.num_rows
    keys = _key_column(rows, spec.key_serde)
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


def _store_ops(spec: StatefulSpec, tx: Any) -> tuple[Callable[[list[Any], list[Any]], list[Any]],
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


def _fold_vectorized(spec: StatefulSpec, table: pa.Table, group_cols: list[str], tx: Any,
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


def _fold_per_key(spec: StatefulSpec, table: pa.Table, group_cols: list[str], tx: Any,
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


def _sessions(spec: StatefulSpec, rows: pa.Table, tx: Any, out: BatchOutput) -> pa.Table:
    """Session windows: processing/sessions.py, record by record."""
    done = session_aggregate(spec, rows, _key_column(rows, spec.key_serde), tx)
    out.dropped += done.dropped
    for i, err in done.failed.items():
        out.failed_rows.setdefault(i, err)
    return done.rows


# -- joins ----------------------------------------------------------------------------------------


def _join(spec: StatefulSpec, table: TableSpec, rows: pa.Table, tx: Any, out: BatchOutput,
          updates: TableUpdates | None) -> pa.Table:
    joined, dropped = stream_table_join(spec, table, rows, _key_column(rows, table.key_serde), tx, updates)
    out.dropped += dropped
    return joined


# -- sinks ----------------------------------------------------------------------------------------


def _column(rows: pa.Table, name: str, sink: str) -> pa.ChunkedArray:
    if name not in rows.column_names:
        shown = [c for c in rows.column_names if not c.startswith("__")]
        raise PipelineRuntimeError(f"{sink}: column {name!r} is not among the rows' columns {shown}")
    return rows.column(name)


def _to_topic(sink: TopicSink, rows: pa.Table, out: BatchOutput) -> None:
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


def _repartition(sink: RepartitionSink, rows: pa.Table, out: BatchOutput) -> None:
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
    skip = {sink.key_column, GROUP_KEY_COLUMN, *METADATA_COLUMNS}
    value_cols = [c for c in rows.column_names if c not in skip]
    values = encode_rows(rows, value_cols)
    out.outputs.extend(output_records(sink.topic, key_bytes, values, stamps))
