"""What one batch of one task carries through its steps: the `BatchOutput` it produces, the
`TaskState` the task keeps between batches besides its stores, and the rows' key column.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from eddy_runtime.dsl.errors import PipelineRuntimeError
from eddy_runtime.kafka.record_collector import OutputRecord
from eddy_runtime.kafka.records import arrow_type
from eddy_runtime.processing.processors import ProcessorTask

__all__ = ["BatchOutput", "TaskState", "key_column"]


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


def key_column(rows: pa.Table, serde: str) -> pa.ChunkedArray:
    """The rows' ``key`` column, cast to the Arrow type of `serde` (JSON keys as they are)."""
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
