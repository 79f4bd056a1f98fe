"""A batch's Spark plan: pinned partitions for the assignment (`SlotLayout`) and the DataFrames that
run a `BatchPlan` on them (docs/DESIGN.md, "One micro-batch", step 3, and "Placement facts").

Per assignment, one pinned partition per task of a sub-topology with DataFrame steps (read ->
the user's steps -> the task runner) and one per live executor for everything else; the batch's
work travels in the closures of driver/executor_steps.py.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator, Sequence, Set
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from eddy_contract.assignor import Assignment
from eddy_contract.tasks import Role
from eddy_runtime.driver.batch_plan import BatchPlan
from eddy_runtime.driver.executor_steps import (
    RESULT_DDL,
    executor_slot_job,
    executor_step,
    read_step,
    sink_step,
)
from eddy_runtime.driver.outcomes import short_error
from eddy_runtime.dsl.subtopology import CompiledApp
from eddy_runtime.kafka.records import spark_source_schema
from eddy_runtime.protocol.placement import ExecutorRef, PinnedSlots, current_executor_id
from eddy_runtime.protocol.runner_client import RunnerClient
from eddy_runtime.protocol.runner_messages import Program, Shutdown
from eddy_runtime.protocol.work import BatchSettings, ContinuousWork, SlotWork, WorkItem

if TYPE_CHECKING:
    from pyspark import SparkContext
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["BatchJob", "SlotLayout", "batch_job", "close_runners", "dataframe_item_slots", "slot_layout"]

log = logging.getLogger("eddy.driver")

#: (generation, executor, its continuous (task, role) pairs) -> its runner's `ContinuousWork`
ContinuousWorkOf = Callable[[int, str, Sequence[tuple[str, Role]]], ContinuousWork]


@dataclass(frozen=True)
class SlotLayout:
    """Pinned partitions for one assignment generation on one set of executors."""

    key: tuple[Any, ...]
    #: per sub-topology with DataFrame steps: its tasks with a live active, and that executor
    dataframe_slots: dict[int, list[tuple[str, ExecutorRef]]]
    #: per such sub-topology: the pinned DataFrame its batches start from
    dataframe_bases: dict[int, DataFrame]
    executor_slots: list[ExecutorRef]
    #: the executor slots' pinned RDD (what `executor_base` is built on)
    executor_pins: PinnedSlots
    spark: SparkSession

    @functools.cached_property
    def executor_base(self) -> DataFrame:
        """The executor slots as a DataFrame, built on first use: only a batch with DataFrame
        tasks needs it (a sync of continuous tasks runs on `executor_pins` alone)."""
        base: DataFrame = self.executor_pins.dataframe(self.spark)
        return base


@dataclass(frozen=True)
class BatchJob:
    """A batch's Spark job: DataFrames when DataFrame tasks have work (one SQL job), otherwise the
    executor slots alone on their pinned RDD."""

    frames: list[DataFrame]
    slots: tuple[PinnedSlots, Callable[[int], Iterator[bytes]]] | None = None

    @property
    def empty(self) -> bool:
        return not self.frames and self.slots is None

    def collect(self) -> list[bytes]:
        """Run it: every item's pickled `ItemResult`."""
        if self.frames:
            return [r.result for r in functools.reduce(lambda a, b: a.union(b), self.frames).collect()]
        if self.slots is not None:
            pins, fn = self.slots
            return pins.run(fn)
        return []


def slot_layout(spark: SparkSession, compiled: CompiledApp, assignment: Assignment, live: Sequence[ExecutorRef],
                previous: SlotLayout | None) -> SlotLayout:
    """The layout for `assignment` on `live` executors: `previous` if it is for the same ones
    (building pinned partitions costs py4j round trips)."""
    by_id = {e.id: e for e in live}
    key = (assignment.generation, tuple(sorted(assignment.tasks.items())), tuple(live))
    if previous is not None and previous.key == key:
        return previous
    dataframe_slots: dict[int, list[tuple[str, ExecutorRef]]] = {}
    for sub in compiled.subtopologies:
        if not sub.uses_dataframe:
            continue
        slots = [(t, by_id[assignment.tasks[t].active]) for t in sub.task_ids
                 if t in assignment.tasks and assignment.tasks[t].active in by_id]
        if slots:
            dataframe_slots[sub.id] = slots
    sc = spark.sparkContext
    bases = {sid: PinnedSlots(sc, [e for _, e in slots]).dataframe(spark) for sid, slots in dataframe_slots.items()}
    executor_slots = list(live)
    return SlotLayout(key, dataframe_slots, bases, executor_slots, PinnedSlots(sc, executor_slots), spark)


def dataframe_item_slots(layout: SlotLayout, plan: BatchPlan) -> dict[str, tuple[WorkItem, ExecutorRef]]:
    """Per DataFrame task with an item this batch: the item and the executor its slot is pinned to."""
    slot_of = {t: e for slots in layout.dataframe_slots.values() for t, e in slots}
    return {t: (item, slot_of[t]) for t, item in plan.dataframe_items.items() if t in slot_of}


def batch_job(compiled: CompiledApp, layout: SlotLayout, plan: BatchPlan, settings: BatchSettings,
              program: Program, *, fresh: bool, inventory: bool,
              continuous_work: ContinuousWorkOf | None = None,
              warm: Set[str] = frozenset()) -> BatchJob:
    """The batch's Spark job: one DataFrame per sub-topology with DataFrame steps and work plus one
    over the executor slots, or, with no DataFrame work, the executor slots alone as a plain RDD
    job; empty when there is nothing to do. `fresh`: send each executor what it holds (its
    runner closes the rest); `inventory`: executors report what their volumes hold;
    `continuous_work` (an app with continuous sub-topologies): every executor slot carries what
    its runner runs continuously (`GenerationHandoff.continuous_work`: with its runner key and fence
    epoch, protocol/fences.py), and brings back what that did; `warm`: executors whose task
    runner has not answered yet: their slot calls it even with nothing to run, so that it is up
    (process started, program loaded) before it is given tasks, and report their volume's inventory."""
    frames = []
    offset = 0
    items = plan.dataframe_items
    for sub_id, slots in layout.dataframe_slots.items():
        if not any(t in items for t, _ in slots):
            continue
        sub = compiled.subtopologies[sub_id]
        works = [SlotWork(e.id, (items[t],) if t in items else (), dataframe_task=t) for t, e in slots]
        df = layout.dataframe_bases[sub_id].mapInArrow(
            read_step(settings, sub, works, offset), spark_source_schema(sub.source.key_serde, sub.source.value_serde))
        for step in sub.steps:
            df = step(df)
        stateless = sub.for_executor() if sub.stateful is None else None
        frames.append(df.mapInArrow(sink_step(settings, program, works, offset, stateless), RESULT_DDL))
        offset += len(slots)
    works = [SlotWork(e.id, tuple(plan.per_executor[e.id]),
                      held=tuple(plan.held[e.id]) if fresh or e.id in warm else None,
                      inventory=inventory or e.id in warm,
                      continuous=None if continuous_work is None else continuous_work(
                          settings.generation, e.id, plan.continuous[e.id]))
             for e in layout.executor_slots]
    if frames:
        frames.append(layout.executor_base.mapInArrow(executor_step(settings, program, works, offset), RESULT_DDL))
        return BatchJob(frames)
    if all(w.idle for w in works):
        return BatchJob([])
    return BatchJob([], (layout.executor_pins, executor_slot_job(settings, program, works)))


def close_runners(sc: SparkContext, live: Sequence[ExecutorRef], settings: BatchSettings) -> None:
    """Ask every live executor's task runner to close its tasks (stores flushed, checkpoints
    written) and exit."""

    def close(slot: int) -> Iterator[tuple[str, str]]:
        me = current_executor_id(settings.executor_hosts) or ""
        client = RunnerClient(settings.state_dir_for(me), me)
        try:
            yield me, str(client.call(Shutdown(), timeout_s=60, start=False))
        except ConnectionRefusedError:
            yield me, "no task runner"
        except Exception as e:  # noqa: BLE001
            yield me, f"close failed: {e}"

    try:
        for executor, outcome in PinnedSlots(sc, live).run(close):
            log.info("executor %s closed its tasks: %s", executor, outcome)
    except Exception as e:  # noqa: BLE001 - stopping anyway; the runners exit with their executors
        log.warning("closing the tasks failed: %s", short_error(e))
