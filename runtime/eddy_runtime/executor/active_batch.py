"""An active task's batch up to its commit (`prepare_batch`: restored, read, decoded, processed),
and the result of one that committed (`committed_result`). The commit between them is the
task runner's (executor/task_runner.py), in the order executor/commit.py states.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from eddy_contract.spec import BadRecordPolicy
from eddy_runtime.dsl.subtopology import SubTopology
from eddy_runtime.executor.tasks import StreamTask
from eddy_runtime.kafka.partitions import TopicPartition
from eddy_runtime.kafka.records import BadRecord, RawRecords, decode_repartition, decode_source, range_reader
from eddy_runtime.kafka.transactions import OutputRecord
from eddy_runtime.processing.bad_records import bad_record_output, failed_row_records
from eddy_runtime.processing.batch import BatchOutput
from eddy_runtime.processing.joins import TableUpdates, table_updates, write_table_updates
from eddy_runtime.processing.operators import process_batch
from eddy_runtime.protocol.work import LATENCY_BUCKETS_S, BadRecordInfo, BatchSettings, ItemResult, ItemStatus, WorkItem
from eddy_runtime.state import ProcessorStateManager, TaskTransaction

__all__ = ["PreparedBatch", "ReadStash", "committed_result", "latency_histogram", "prepare_batch", "stop_at"]

log = logging.getLogger("eddy.runner")


class ReadStash(NamedTuple):
    """What a DataFrame task's read step found, kept for the sink step of the same batch."""

    bad_records: list[BadRecord]
    records_read: int


def latency_histogram(latencies_s: np.ndarray) -> tuple[tuple[int, ...], float]:
    """Counts per `LATENCY_BUCKETS_S` bucket (upper bounds, plus one overflow) and the sum."""
    if latencies_s.size == 0:
        return (), 0.0
    idx = np.searchsorted(np.asarray(LATENCY_BUCKETS_S), latencies_s, side="left")
    counts = np.bincount(idx, minlength=len(LATENCY_BUCKETS_S) + 1)
    return tuple(int(c) for c in counts), float(latencies_s.sum())


@dataclass
class PreparedBatch:
    """An active's item processed and not committed yet (`prepare_batch`)."""

    task: StreamTask
    base: ItemResult
    tx: TaskTransaction
    outputs: list[OutputRecord]
    input_offsets: dict[TopicPartition, int]
    records_in: int
    out: BatchOutput
    bad: list[BadRecord]
    dead: int


def prepare_batch(settings: BatchSettings, sub: SubTopology, item: WorkItem, task: StreamTask,
                  data: pa.Table | BatchOutput | None, base: ItemResult, records: Sequence[RawRecords] | None,
                  take_stash: Callable[[], ReadStash]) -> ItemResult | PreparedBatch:
    """An active's item up to its commit (its lock held): restored, its records read (unless
    given), decoded and processed. What is left to commit, or the item's result if there is
    nothing to. `take_stash`: what the batch's read step found (a DataFrame task's sink step)."""
    mgr = task.state
    if not task.check_restored():
        progress = mgr.restore_chunk(max_records=settings.restore_chunk_records,
                                     max_seconds=settings.restore_chunk_seconds)
        return replace(base, status=ItemStatus.RESTORING, figures=mgr.figures(), restored=progress.restored,
                          restore_remaining=progress.remaining)
    positions = task.read_positions([r.topic_partition for r in item.ranges], item.handed)
    stale = [r for r in item.ranges if positions.get(r.topic_partition, 0) != r.start]
    if stale and not item.restore_only:
        return replace(base, status=ItemStatus.ABORTED, figures=mgr.figures(),
                          message=f"stale plan: {[(r.topic, r.partition, r.start) for r in stale]} but "
                                  f"committed positions are {positions}")
    if item.restore_only or (all(r.empty for r in item.ranges) and not sub.punctuates):
        return replace(base, status=ItemStatus.PROCESSED, figures=mgr.figures())
    bad, records_read = take_stash()
    reader = range_reader(settings.kafka)
    n_sources = len(sub.source.topics)  # a merge read in place has several
    sources = item.ranges[:n_sources]
    raw_sources: list[RawRecords] | None = None
    precomputed: BatchOutput | None = None
    if data is None:
        raw_sources = [records[i] if records is not None
                       else RawRecords(r.topic, r.partition, next_offset=r.start) if r.empty
                       else reader.read(r, settings.read_timeout_s) for i, r in enumerate(sources)]
        rows, bad_rows = _decode(sub, raw_sources)
        bad.extend(bad_rows)
        records_in = sum(len(raw) for raw in raw_sources)
    else:
        # A stateless sub-topology's sink step already ran its sinks (executor_steps.sink_step).
        precomputed = data if isinstance(data, BatchOutput) else None
        rows = pa.table({}) if precomputed is not None else data
        records_in = records_read
    if bad and settings.bad_record_policy == BadRecordPolicy.FAIL:
        return stop_at(base, bad, mgr)
    tx = mgr.transaction()
    updates: TableUpdates | None = None
    if sub.table is not None and len(item.ranges) > n_sources:
        raw_table = (records[n_sources] if records is not None
                     else reader.read(item.ranges[n_sources], settings.read_timeout_s))
        records_in += len(raw_table)
        updates, table_bad = table_updates(sub.table, raw_table)
        for offset, err in table_bad:
            i = raw_table.offsets.index(offset)
            bad.append(BadRecord(raw_table.topic, raw_table.partition, offset, raw_table.timestamps[i],
                                 raw_table.keys[i], raw_table.values[i], err, "deserialize"))
        if bad and settings.bad_record_policy == BadRecordPolicy.FAIL:
            return stop_at(base, bad, mgr)
    if precomputed is not None:
        out = precomputed
    elif rows.num_rows or sub.punctuates or (updates is not None and updates.keys and sub.stateful is not None
                                         and sub.stateful.kind in ("table_join", "stream_join")):
        # a join merges the table's records with the stream's (or the other table's) by timestamp
        out = process_batch(sub, rows, tx, task.processing, updates)
    else:
        out = BatchOutput()
        if updates is not None and sub.table is not None:
            write_table_updates(sub.table, updates, tx)
    if out.failed_rows:
        bad.extend(failed_row_records(sources, rows, raw_sources, out.failed_rows, reader, settings))
        if settings.bad_record_policy == BadRecordPolicy.FAIL:
            return stop_at(base, bad, mgr)
    outputs = out.outputs
    dead = 0
    if bad and settings.bad_record_policy == BadRecordPolicy.DEAD_LETTER:
        outputs = outputs + [bad_record_output(settings, item.task, b) for b in bad]
        dead = len(bad)
    for b in bad:
        log.warning("app %s task %s: bad record %s[%d]@%d (%s): %s", settings.app, item.task, b.topic,
                    b.partition, b.offset, "dead-lettered" if dead else "skipped", b.error)
    input_offsets = {r.topic_partition: r.end for r in item.ranges}
    return PreparedBatch(task, base, tx, outputs, input_offsets, records_in, out, bad, dead)


def _decode(sub: SubTopology, raws: list[RawRecords]) -> tuple[pa.Table, list[BadRecord]]:
    """The rows of a batch's source records, and those that failed to decode. A merge read in
    place takes its topics' rows in timestamp order (a stable sort: each topic's own order kept),
    as Kafka Streams' task picks the record with the lowest timestamp among its partitions."""
    spec = sub.source
    if spec.repartition:
        return decode_repartition(raws[0], spec.key_serde, spec.combined, spec.combined_column)
    if len(raws) == 1:
        return decode_source(raws[0], spec.key_serde, spec.value_serde)
    decoded = [decode_source(raw, spec.key_serde, spec.value_serde) for raw in raws]
    rows = pa.concat_tables([t for t, _ in decoded])
    return rows.take(pc.sort_indices(rows, [("timestamp", "ascending")])), [b for _, bad in decoded for b in bad]


def committed_result(p: PreparedBatch) -> ItemResult:
    """The result of an item whose commit went through (its positions move on)."""
    assert p.task.positions is not None
    p.task.positions.update(p.input_offsets)
    committed_at = time.time() * 1000
    counts: tuple[int, ...] = ()
    total = 0.0
    if p.out.output_timestamps:
        lat = (committed_at - np.concatenate(p.out.output_timestamps)) / 1000.0
        counts, total = latency_histogram(np.maximum(lat, 0.0))
    return replace(
        p.base,
        status=ItemStatus.PROCESSED,
        records_in=p.records_in,
        records_out=len(p.out.outputs),
        committed=dict(p.input_offsets),
        skipped=len(p.bad) - p.dead,
        dead_lettered=p.dead,
        dropped=p.out.dropped,
        bad_records=tuple(BadRecordInfo(b.topic, b.partition, b.offset, b.error) for b in p.bad[:20]),
        latency_counts=counts,
        latency_sum_s=total,
        figures=p.task.state.figures(),
    )


def stop_at(base: ItemResult, bad: Sequence[BadRecord], mgr: ProcessorStateManager) -> ItemResult:
    first = min(bad, key=lambda b: b.offset)
    msg = f"bad record at {first.topic}[{first.partition}] offset {first.offset}: {first.error}"
    log.error("task %s: %s (policy fail: nothing of this batch is committed)", base.task, msg)
    return replace(base, status=ItemStatus.BAD_RECORD, message=msg, figures=mgr.figures(),
                      bad_records=(BadRecordInfo(first.topic, first.partition, first.offset, first.error),))
