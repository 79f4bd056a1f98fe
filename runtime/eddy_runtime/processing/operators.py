"""The batch driver of a sub-topology: its steps in order over one batch of one task.

`process_batch` runs in the executor's task runner (executor/task_runner.py) on a
`pyarrow.Table` of rows: the record steps (dsl/record_steps.py), then the stateful step, if any
(an aggregation, processing/aggregations.py; session windows, processing/sessions.py; a join,
processing/joins.py and stream_joins.py; a `process()` step, processing/processors.py), each
reading and writing the task's store transaction (state/task_transaction.py's `TaskTransaction`); a suppressed windowed
table's results through its buffer (processing/suppress.py); the record steps after the stateful
step; and the sinks (processing/sinks.py), which turn the resulting rows into output and
repartition records. Nothing here talks to Kafka: the runner commits what this returns.
"""

from __future__ import annotations

import logging

import pyarrow as pa

from eddy_runtime.dsl.errors import PipelineRuntimeError
from eddy_runtime.dsl.record_steps import apply_record_steps
from eddy_runtime.dsl.subtopology import RepartitionSink, StatefulSpec, SubTopology, TableSpec, TopicSink
from eddy_runtime.processing.aggregations import aggregate
from eddy_runtime.processing.batch import BatchOutput, TaskState, key_column
from eddy_runtime.processing.joins import TableUpdates, stream_table_join, table_table_join
from eddy_runtime.processing.processors import run_processor
from eddy_runtime.processing.sessions import session_aggregate
from eddy_runtime.processing.sinks import repartition, to_topic
from eddy_runtime.processing.stream_joins import stream_stream_join
from eddy_runtime.processing.suppress import suppress_results
from eddy_runtime.state import TaskTransaction

# process_batch's API in one place for the runner: what it takes and returns, and the error it raises
__all__ = ["process_batch"]

log = logging.getLogger("eddy.runner")


def process_batch(sub: SubTopology, rows: pa.Table, tx: TaskTransaction | None, state: TaskState,
                  table: TableUpdates | None = None) -> BatchOutput:
    """Run `sub`'s record steps, stateful step (if any) and sinks over `rows`; returns the records to commit.

    `tx`: the task's store transaction (None for a sub-topology without stores). `table`: a
    stream-table join's table records of the same batch, merged with `rows` by timestamp
    (`_join`) and written to the table's store."""
    out = BatchOutput()
    suppressed: pa.Table | None = None
    steps = apply_record_steps(sub.record_steps, rows)
    result = rows = steps.rows
    if sub.stateful is not None:
        assert tx is not None, f"sub-topology {sub.id} has a stateful step: it runs with its task's stores"
        if sub.stateful.kind == "join":
            assert sub.table is not None
            result = _join(sub.stateful, sub.table, rows, tx, out, table)
        elif sub.stateful.kind in ("table_join", "stream_join"):
            assert sub.table is not None
            two_sided = table_table_join if sub.stateful.kind == "table_join" else stream_stream_join
            joined = two_sided(sub.stateful, sub.table, rows, key_column(rows, sub.stateful.key_serde), tx, table)
            result = joined.rows
            out.dropped += joined.dropped
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
            result = aggregate(sub.stateful, rows, tx, state, out)
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
            to_topic(sink, seen, out)
        else:
            repartition(sink, seen, out)
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


def _sessions(spec: StatefulSpec, rows: pa.Table, tx: TaskTransaction, out: BatchOutput) -> pa.Table:
    """Session windows: processing/sessions.py, record by record."""
    done = session_aggregate(spec, rows, key_column(rows, spec.key_serde), tx)
    out.dropped += done.dropped
    for i, err in done.failed.items():
        out.failed_rows.setdefault(i, err)
    return done.rows


# -- joins ----------------------------------------------------------------------------------------


def _join(spec: StatefulSpec, table: TableSpec, rows: pa.Table, tx: TaskTransaction, out: BatchOutput,
          updates: TableUpdates | None) -> pa.Table:
    joined = stream_table_join(spec, table, rows, key_column(rows, table.key_serde), tx, updates)
    out.dropped += joined.dropped
    return joined.rows
