"""The task's side of a `process()` step: the user's `Processor` (dsl/processors.py) run over a batch.

`run_processor` makes the task's processor on first use, feeds it the batch's records one at a
time, fires stream-time punctuations after each record that reaches them and wall-clock ones
after the batch, and returns what it forwarded. `TaskProcessorContext` is the context the
processor holds, with what the task does to it between records and batches (Kafka Streams'
``ProcessorContextImpl`` behind the ``ProcessorContext`` a user sees).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from eddy_runtime.dsl.processors import (
    STREAM_TIME,
    STREAM_TIME_KEY,
    TIME_VALUE,
    WALL_CLOCK_TIME,
    Cancellable,
    ForwardedRecord,
    Processor,
    ProcessorContext,
    PunctuationType,
    Record,
    schedule_key,
)
from eddy_runtime.dsl.subtopology import StatefulSpec
from eddy_runtime.kafka.records import TS_TYPE, timestamps_ms
from eddy_runtime.state import TaskTransaction

__all__ = ["ProcessorTask", "TaskProcessorContext", "run_processor"]


class TaskProcessorContext(ProcessorContext):
    """A processor's context as its task drives it: a batch's transaction, stream time, punctuation."""

    def begin(self, tx: TaskTransaction) -> None:
        self._bind(tx)
        self.forwarded = []
        if self.stream_time is None:
            stored = tx.key_value(self.time_store).get(STREAM_TIME_KEY)
            self.stream_time = None if stored is None else TIME_VALUE.unpack(stored)[0]

    @property
    def schedules(self) -> list[Cancellable]:
        """The processor's schedules: the list itself, which `schedule` appends to."""
        return self._schedules

    def record_seen(self, timestamp: int) -> None:
        self._current_ts = timestamp
        if self.stream_time is None or timestamp > self.stream_time:
            self.stream_time = timestamp

    def punctuate(self, type: PunctuationType, now: int) -> None:  # noqa: A002
        """Fire every due schedule of `type` at `now` (stream time or wall-clock ms)."""
        for s in list(self._schedules):
            if s.type != type or s.cancelled or s.next_time > now:
                continue
            self._current_ts = now
            s.callback(now)
            s.advance(now)

    def punctuate_stream_time(self) -> None:
        if self.stream_time is not None:
            self.punctuate(STREAM_TIME, self.stream_time)

    def punctuate_wall_clock(self) -> None:
        self.punctuate(WALL_CLOCK_TIME, self._now_ms())

    def end(self) -> list[ForwardedRecord]:
        """Keep stream time and the stream-time schedules' next times with the batch; the
        batch's forwarded records."""
        kv = self._transaction().key_value(self.time_store)
        if self.stream_time is not None:
            kv.put(STREAM_TIME_KEY, TIME_VALUE.pack(self.stream_time))
        for s in self._schedules:
            if s.type == STREAM_TIME:
                kv.put(schedule_key(s.index), TIME_VALUE.pack(s.next_time))
        self._bind(None)
        return self.forwarded


@dataclass
class ProcessorTask:
    """A task's processor and its context, kept between batches (processing/batch.py's `TaskState`)."""

    processor: Processor
    context: TaskProcessorContext


def run_processor(spec: StatefulSpec, rows: pa.Table, tx: TaskTransaction, held: ProcessorTask | None
                  ) -> tuple[ProcessorTask, pa.Table, dict[int, str]]:
    """Run a batch's `rows` through the task's processor (made and initialised on first use):
    stream-time punctuations after each record that reaches them, wall-clock ones after the
    batch. Returns the processor, the forwarded records as rows (``key``, ``value``,
    ``timestamp``), and the rows whose `process` raised (row index -> error)."""
    names = tuple(s.name for s in spec.process_stores)
    if held is None:
        context = TaskProcessorContext(names[:-1], names[-1])
        context.begin(tx)
        assert spec.processor is not None
        processor = spec.processor()
        processor.init(context)
        held = ProcessorTask(processor, context)
    else:
        held.context.begin(tx)
    context = held.context
    failed: dict[int, str] = {}
    n = rows.num_rows
    if n:
        keys, values = _column(rows, "key", None), _column(rows, "value", None)
        stamps = timestamps_ms(rows)
        times = [0] * n if stamps is None else stamps.tolist()
        topics, partitions, offsets = _column(rows, "topic", ""), _column(rows, "partition", -1), \
            _column(rows, "offset", -1)
        process, schedules = held.processor.process, context.schedules
        for i in range(n):
            ts = times[i]
            context.record_seen(ts)
            try:
                process(Record(keys[i], values[i], ts, topics[i], partitions[i], offsets[i]))
            except Exception as e:  # noqa: BLE001 - a bad record: the policy applies
                failed[i] = f"process() raised {type(e).__name__}: {e}"
            if schedules:  # the processor's schedules, added to in place
                context.punctuate_stream_time()
    context.punctuate_wall_clock()
    forwarded = context.end()
    try:
        out = pa.table({
            "key": pa.array([f.key for f in forwarded]),
            "value": pa.array([f.value for f in forwarded]),
            "timestamp": pa.array([f.timestamp * 1000 for f in forwarded], pa.int64()).cast(TS_TYPE),
        })
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        raise ValueError(f"process(): the forwarded keys or values of one batch must each be of one type: {e}"
                         ) from e
    return held, out, failed


def _column(rows: pa.Table, name: str, missing: Any) -> list[Any]:
    """A column's values, `missing` where it has none, or for every row without the column (the
    rows came from a step that dropped it)."""
    if name not in rows.column_names:
        return [missing] * rows.num_rows
    values = rows.column(name).to_pylist()
    return values if missing is None else [missing if x is None else x for x in values]
