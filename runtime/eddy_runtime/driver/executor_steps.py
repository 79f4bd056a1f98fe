"""What a batch's Spark partitions run on the executors: read a task's input, hand rows and work
items to the executor's task runner, report the volume's inventory (docs/DESIGN.md, "One
micro-batch", step 3).

Factories return closures; cloudpickle ships them with the batch's work (this module is imported
by reference on the executors). Each partition checks it runs on the executor its work was
planned for (`placement.ensure_on_executor`) before it touches any state.
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from eddy_contract.spec import BadRecordPolicy
from eddy_runtime.kafka.records import decode_source, range_reader
from eddy_runtime.protocol.placement import MisplacedTask, ensure_on_executor
from eddy_runtime.protocol.runner_client import RunnerClient
from eddy_runtime.protocol.runner_messages import Program, StashRead
from eddy_runtime.protocol.work import BatchSettings, ItemResult, ItemStatus, SlotWork, volume_inventory

if TYPE_CHECKING:
    import pyarrow as pa

    from eddy_runtime.dsl.subtopology import SubTopology
    from eddy_runtime.processing.batch import BatchOutput

__all__ = ["RESULT_DDL", "executor_slot_job", "executor_step", "probe_sink", "read_step", "sink_step"]

#: the schema of what every partition returns: pickled `ItemResult`s
RESULT_DDL = "result binary"

#: a mapInArrow function
ArrowFn = Callable[[Iterable["pa.RecordBatch"]], Iterator["pa.RecordBatch"]]


def _misplaced(settings: BatchSettings, work: SlotWork) -> list[ItemResult] | None:
    """None if this process works for the executor `work` was planned for; otherwise a
    "misplaced" result per item (nothing touched)."""
    what = f"task {work.dataframe_task}" if work.dataframe_task is not None else f"executor {work.executor}'s slot"
    try:
        ensure_on_executor(work.executor, what, settings.executor_hosts)
    except MisplacedTask as e:
        return [ItemResult(i.task, work.executor, i.role, ItemStatus.MISPLACED, message=str(e)) for i in work.items]
    return None


def _call_runner(settings: BatchSettings, program: Program, work: SlotWork,
                 data: pa.Table | BatchOutput | None) -> list[ItemResult]:
    """Run `work` in the executor's task runner (sending the program if the runner lacks it)."""
    client = RunnerClient(settings.state_dir_for(work.executor), work.executor)
    try:
        return client.run(program, settings, work, data)
    except Exception as e:  # noqa: BLE001 - other items of the batch still count
        return [ItemResult(i.task, work.executor, i.role, ItemStatus.FAILED,
                           message=f"task runner: {type(e).__name__}: {e}")
                for i in work.items]


def _result_batch(results: Sequence[ItemResult]) -> pa.RecordBatch:
    import pyarrow as pa

    return pa.RecordBatch.from_pydict({"result": pa.array([pickle.dumps(r) for r in results], pa.binary())})


def _slots(batches: Iterable[pa.RecordBatch]) -> list[int]:
    out: list[int] = []
    for b in batches:  # drain: a partly read iterator stops Spark from reusing the worker
        out.extend(b.column(0).to_pylist())
    return out


def _check_partition(offset: int, slot: int) -> None:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is not None and ctx.partitionId() != offset + slot:
        raise RuntimeError(f"slot {slot} runs in partition {ctx.partitionId()}, expected {offset + slot}")


def read_step(settings: BatchSettings, sub: SubTopology, works: list[SlotWork], offset: int,
              probe: bool = False) -> ArrowFn:
    """The first step of a DataFrame sub-topology: a task's input range as Arrow batches.

    `probe`: a run that isolates a record failing the user's steps; nothing goes to the runner.
    """
    key_serde, value_serde = sub.source.key_serde, sub.source.value_serde

    def read(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import numpy as np
        import pyarrow as pa

        from eddy_runtime.kafka.records import BadRecord

        for slot in _slots(batches):
            _check_partition(offset, slot)
            work = works[slot]
            if not work.items or _misplaced(settings, work) is not None:
                continue  # the sink step reports a misplaced slot
            item = work.items[0]
            if item.restore_only or item.ranges[0].empty:
                continue
            raw = range_reader(settings.kafka).read(item.ranges[0], settings.read_timeout_s)
            table, bad = decode_source(raw, key_serde, value_serde)
            if item.poison:
                poison = dict(item.poison)
                offsets = table.column("offset").to_numpy()
                keep = ~np.isin(offsets, list(poison))
                for i in np.flatnonzero(~keep):
                    j = raw.offsets.index(int(offsets[i]))
                    bad.append(BadRecord(raw.topic, raw.partition, raw.offsets[j], raw.timestamps[j], raw.keys[j],
                                         raw.values[j], poison[raw.offsets[j]], "process"))
                table = table.filter(pa.array(keep))
            if not probe:
                # The sink sees rows after the user's steps; the runner needs the records read
                # (for figures) and the bad ones (for the policy).
                client = RunnerClient(settings.state_dir_for(work.executor), work.executor)
                client.call(StashRead(settings.batch_id, item.task, tuple(bad), len(raw)))
                if bad and settings.bad_record_policy == BadRecordPolicy.FAIL:
                    continue
            yield from table.to_batches(max_chunksize=65_536)

    return read


def probe_sink(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The sink of a probe run (driver/poison.py): counts the rows, so that the user's steps run."""
    import pyarrow as pa

    rows = sum(b.num_rows for b in batches)
    yield pa.RecordBatch.from_pydict({"result": pa.array([pickle.dumps(rows)], pa.binary())})


def sink_step(settings: BatchSettings, program: Program, works: list[SlotWork], offset: int,
              stateless: SubTopology | None = None) -> ArrowFn:
    """The last step of a DataFrame sub-topology: hand the task's rows to the task runner.

    `stateless`: the sub-topology has no store, so its sinks (a combined repartition, output
    topics) run here and only the records to commit travel to the runner, not every row.
    """

    def sink(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa
        from pyspark import TaskContext

        from eddy_runtime.processing.batch import TaskState
        from eddy_runtime.processing.operators import process_batch

        started = time.monotonic()
        received = list(batches)  # the read step and the user's steps run as these are pulled
        ctx = TaskContext.get()
        slot = ctx.partitionId() - offset if ctx is not None else 0
        work = works[slot]
        misplaced = _misplaced(settings, work)
        if misplaced is not None:
            yield _result_batch(misplaced)
            return
        rows = pa.Table.from_batches(received) if received else pa.table({})
        data: pa.Table | BatchOutput = rows
        if stateless is not None and rows.num_rows:
            data = process_batch(stateless, rows, None, TaskState())
        results = _call_runner(settings, program, work, data)
        # processing the input the runner counted took the whole partition's time, Spark's steps
        # included (the runner saw only the sink's share); a partition with no input to process
        # is the batch's overhead, and keeps the runner's share
        busy = time.monotonic() - started
        yield _result_batch([replace(r, busy_s=busy) if r.busy_s > 0.0 and r.records_in else r for r in results])

    return sink


def _executor_slot(settings: BatchSettings, program: Program, work: SlotWork) -> list[ItemResult]:
    """An executor slot's work: its items other than DataFrame tasks, its continuous tasks' sync,
    its inventory."""
    misplaced = _misplaced(settings, work)
    if misplaced is not None:
        return misplaced
    runner = work.items or work.held is not None or work.continuous is not None
    results = _call_runner(settings, program, work, None) if runner else []
    if work.inventory:
        results = [*results, volume_inventory(settings, work.executor)]
    return results


def executor_step(settings: BatchSettings, program: Program, works: list[SlotWork], offset: int) -> ArrowFn:
    """The executor slots as the last DataFrame of a batch that has DataFrame tasks."""

    def run(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for slot in _slots(batches):
            _check_partition(offset, slot)
            yield _result_batch(_executor_slot(settings, program, works[slot]))

    return run


def executor_slot_job(settings: BatchSettings, program: Program,
                      works: list[SlotWork]) -> Callable[[int], Iterator[bytes]]:
    """The executor slots alone, for `placement.PinnedSlots.run` (a plain RDD job: no SQL plan to
    build, which is most of what a sync of continuous tasks would otherwise cost)."""

    def run(slot: int) -> Iterator[bytes]:
        for result in _executor_slot(settings, program, works[slot]):
            yield pickle.dumps(result)

    return run
