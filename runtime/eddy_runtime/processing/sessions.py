"""Session-windowed aggregations over one batch of one task: Kafka Streams'
``KStreamSessionWindowAggregate``, run by processing/operators.py's `process_batch` on both paths.

Each record, in offset order, looks up its key's sessions within the inactivity gap of its
timestamp (`SessionTransaction.find_sessions(key, t - gap, t + gap)`), merges them with itself
into one session (`merged_window`), folds their aggregates into ``initializer()`` with the
merger, adds the record, removes the merged sessions and writes the merged one. A record whose
merged session ends before ``stream time - grace`` is late: dropped and counted. Stream time is
the task's newest record timestamp, kept in the session store (state/session_store.py) so it survives
restarts and restores.

What goes downstream, once per batch (Kafka Streams with its record cache, flushed at commit):
each session's last value, and a tombstone for each session of the store merged away; a
session made and merged away within the batch was never seen outside, so nothing is written for
it. Rows have the columns ``key``, ``value`` (None for a tombstone), ``window_start``,
``window_end`` and ``timestamp`` (the session's end, as Kafka Streams stamps them).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from eddy_runtime.dsl.errors import PipelineRuntimeError
from eddy_runtime.dsl.subtopology import METADATA_COLUMNS, StatefulSpec
from eddy_runtime.kafka.records import TS_TYPE, timestamps_ms
from eddy_runtime.state import TaskTransaction

__all__ = ["SessionFold", "SessionResult", "merged_window", "session_aggregate", "session_fold", "windowed_rows"]

log = logging.getLogger("eddy.runner")

_REDUCE_OPS: dict[str, Callable[[Any, Any], Any]] = {"sum": lambda a, b: a + b, "min": min, "max": max}


def merged_window(timestamp: int, sessions: Iterable[tuple[int, int]]) -> tuple[int, int]:
    """The session a record at `timestamp` makes with the (start, end) `sessions` it falls
    within the gap of: from the oldest start to the newest end, itself included."""
    start = end = timestamp
    for s, e in sessions:
        start, end = min(start, s), max(end, e)
    return start, end


@dataclass(frozen=True)
class SessionFold:
    """How one aggregation folds records into a session: Kafka Streams' initializer,
    aggregator (here given the record's row index) and merger."""

    initializer: Callable[[], Any]
    add: Callable[[Any, int, Any], Any]
    merge: Callable[[Any, Any, Any], Any]


def session_fold(spec: StatefulSpec, columns: dict[str, list[Any]]) -> SessionFold:
    """The fold of `spec` (count, reduce, aggregate) over a batch's value `columns`."""
    if spec.kind == "count":
        return SessionFold(lambda: 0, lambda _k, _i, agg: agg + 1, lambda _k, a, b: a + b)
    if spec.kind == "reduce":
        column = spec.column or "value"
        if column not in columns:
            raise PipelineRuntimeError(f"reduce column {column!r} is not among the rows' columns {list(columns)}")
        values = columns[column]
        op = _REDUCE_OPS[spec.reducer] if isinstance(spec.reducer, str) else spec.reducer
        assert callable(op)
        # Kafka Streams' session reduce: no initial value; the merger is the reducer
        return SessionFold(lambda: None, lambda _k, i, agg: values[i] if agg is None else op(agg, values[i]),
                           lambda _k, a, b: b if a is None else (a if b is None else op(a, b)))
    assert spec.kind == "aggregate" and spec.initializer is not None and spec.adder is not None
    assert spec.merger is not None  # the pipeline refuses a session aggregate without one
    adder = spec.adder
    return SessionFold(spec.initializer, lambda k, i, agg: adder(k, {c: [v[i]] for c, v in columns.items()}, agg),
                       spec.merger)


@dataclass
class SessionResult:
    """What a batch's session aggregation produced."""

    rows: pa.Table
    #: records dropped: null keys and late records
    dropped: int = 0
    #: row index -> error, for rows whose user function raised (the bad-record policy decides)
    failed: dict[int, str] = field(default_factory=dict)


def session_aggregate(spec: StatefulSpec, rows: pa.Table, keys: pa.ChunkedArray, tx: TaskTransaction
                      ) -> SessionResult:
    """Fold `rows` (keys in `keys`) into their sessions in the task's session store; see the module."""
    assert spec.store is not None and spec.session_windows is not None
    windows = spec.session_windows
    sessions = tx.session(spec.store.name)
    n = rows.num_rows
    stamps = timestamps_ms(rows)
    if stamps is None:  # no timestamp column left after the user's steps: the time of processing
        stamps = np.full(n, int(time.time() * 1000), dtype=np.int64)
    columns = {c: rows.column(c).to_pylist() for c in rows.column_names if c not in ("key", *METADATA_COLUMNS)}
    fold = session_fold(spec, columns)
    result = SessionResult(windowed_rows(keys.type, [], [], [], []))
    #: (key, start, end) -> (value or None for a tombstone, timestamp), in the order of their last change
    changes: dict[tuple[Any, int, int], tuple[Any, int]] = {}
    stream_time = sessions.stream_time
    for i, (key, ts) in enumerate(zip(keys.to_pylist(), stamps.tolist(), strict=True)):
        if key is None:
            result.dropped += 1
            continue
        stream_time = ts if stream_time is None else max(stream_time, ts)
        found = sessions.find_sessions(key, ts - windows.gap_ms, ts + windows.gap_ms)
        start, end = merged_window(ts, (w for w, _ in found))
        if end < stream_time - windows.grace_ms:
            log.debug("dropped a late record of key %r at %d: its session [%d, %d] closed at stream time %d - grace %d",
                      key, ts, start, end, stream_time, windows.grace_ms)
            result.dropped += 1
            continue
        try:
            agg = fold.initializer()
            for _, value in found:
                agg = fold.merge(key, agg, value)
            agg = fold.add(key, i, agg)
        except PipelineRuntimeError:
            raise
        except Exception as err:  # noqa: BLE001 - a user function failed: the policy decides
            result.failed[i] = f"{spec.kind} function failed for key {key!r}: {type(err).__name__}: {err}"
            continue
        if (start, end) != (ts, ts):
            for (old_start, old_end), _ in found:
                sessions.remove(key, old_start, old_end)
                changes.pop((key, old_start, old_end), None)
                if sessions.in_store(key, old_start, old_end):
                    changes[(key, old_start, old_end)] = (None, old_end)
        if sessions.put(key, start, end, agg):
            changes.pop((key, start, end), None)
            changes[(key, start, end)] = (agg, end)
    if stream_time is not None:
        sessions.observe(stream_time)
    if changes:
        ks, starts, ends = zip(*changes, strict=True)
        values, times = zip(*changes.values(), strict=True)
        result.rows = windowed_rows(keys.type, list(ks), list(values), list(starts), list(ends), list(times))
    return result


def windowed_rows(key_type: pa.DataType, keys: list[Any], values: list[Any], starts: Sequence[int],
                  ends: Sequence[int], times: Sequence[int] | None = None) -> pa.Table:
    """Rows of windowed results: ``key``, ``value`` (None: a tombstone), ``window_start``,
    ``window_end`` and ``timestamp`` (ms; the window's end when `times` is None)."""
    ends_ms = np.asarray(ends, dtype=np.int64)
    stamps = np.asarray(times if times is not None else ends, dtype=np.int64)
    return pa.table({
        "key": pa.array(keys, key_type),
        "value": pa.array(values) if values else pa.array([], pa.null()),
        "window_start": pa.array(np.asarray(starts, dtype=np.int64)),
        "window_end": pa.array(ends_ms),
        "timestamp": pa.array(stamps * 1000, pa.int64()).cast(TS_TYPE),
    })
