"""Planning one micro-batch: the work items of every task copy on the live executors, from the
assignment and the offsets (docs/DESIGN.md, "One micro-batch", step 2).

Pure: data in, data out; the driver (driver/loop.py) turns the plan into Spark partitions
(driver/spark_plan.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass

from eddy_contract.assignor import Assignment, TaskAssignment
from eddy_contract.tasks import Role, TaskId
from eddy_runtime.dsl.subtopology import CompiledApp, SubTopology
from eddy_runtime.kafka.partitions import InputRange, TopicPartition
from eddy_runtime.protocol.work import WorkItem

__all__ = ["BatchPlan", "Offsets", "PoisonOffsets", "continuous_copies", "input_ranges", "plan_batch", "task_lags"]

#: an offset per topic partition
Offsets = Mapping[TopicPartition, int]
#: per topic partition, offset -> error: records that make a task's DataFrame steps fail
PoisonOffsets = Mapping[TopicPartition, Mapping[int, str]]


@dataclass(frozen=True)
class BatchPlan:
    """What each live executor does in one batch."""

    #: per executor: items its executor slot runs (direct processing, restores, standbys)
    per_executor: dict[str, list[WorkItem]]
    #: per executor: every (task, role) it holds in the assignment
    held: dict[str, list[tuple[str, Role]]]
    #: per task whose records go through DataFrame steps: its active's item
    dataframe_items: dict[str, WorkItem]
    #: per executor: the (task, role) pairs it runs continuously (no items for those)
    continuous: dict[str, list[tuple[str, Role]]]


def input_ranges(sub: SubTopology, task: str, committed: Offsets, ends: Offsets, cap: int) -> tuple[InputRange, ...]:
    """The task's input ranges ``[committed, end)``, at most `cap` records each."""
    p = TaskId.parse(task).partition
    out = []
    for topic in sub.input_topics:
        tp = TopicPartition(topic, p)
        start = committed[tp]
        end = max(start, min(ends[tp], start + cap))
        out.append(InputRange(topic, p, start, end))
    return tuple(out)


def task_lags(compiled: CompiledApp, committed: Offsets, ends: Offsets) -> dict[str, int]:
    """Per task, records of its input partitions (the source, and a join's other input) not
    committed yet."""
    lag: dict[str, int] = {}
    for sub in compiled.subtopologies:
        for p, task in enumerate(sub.task_ids):
            inputs = [TopicPartition(t, p) for t in sub.input_topics]
            lag[task] = sum(max(ends[tp] - committed[tp], 0) for tp in inputs)
    return lag


def plan_batch(compiled: CompiledApp, assignment: Assignment, live: Set[str], *, committed: Offsets,
               ends: Offsets, changelog_ends: Mapping[str, int], held_offsets: Mapping[str, Mapping[str, int]],
               restoring: Mapping[str, str], poison: PoisonOffsets, max_records: int, fresh: bool,
               continuous: Set[int] = frozenset()) -> BatchPlan:
    """Work items for the copies of every task on `live` executors.

    `fresh` (the assignment just changed, or the last batch failed): every copy gets an item, so
    that tasks open, promote and restore at once. Otherwise only actives with input, a restore
    under way (`restoring`: task -> executor) or a `process()` step (wall-clock punctuation),
    and standbys behind their changelog (`held_offsets`: executor -> task -> next changelog
    offset its volume holds, summed over stores).
    The tasks of the `continuous` sub-topologies get no items: each executor's runner runs its
    share of them by itself (`BatchPlan.continuous`).
    """
    per_executor: dict[str, list[WorkItem]] = {e: [] for e in live}
    held: dict[str, list[tuple[str, Role]]] = {e: [] for e in live}
    dataframe_items: dict[str, WorkItem] = {}
    on_their_own: dict[str, list[tuple[str, Role]]] = {e: [] for e in live}
    for sub in compiled.subtopologies:
        for task in sub.task_ids:
            placement = assignment.tasks.get(task)
            if placement is None:
                continue
            if sub.id in continuous:
                _continuous_copies(sub, task, placement, live, held, on_their_own)
                continue
            if placement.active in live:
                held[placement.active].append((task, Role.ACTIVE))
                is_restoring = restoring.get(task) == placement.active
                source = input_ranges(sub, task, committed, ends, max_records)
                first = source[0]
                bad = tuple(sorted((o, e) for o, e in poison.get(first.topic_partition, {}).items()
                                   if first.start <= o < first.end))
                item = WorkItem(task, Role.ACTIVE, source, restore_only=is_restoring, poison=bad)
                if fresh or is_restoring or sub.punctuates or not all(r.empty for r in item.ranges):
                    if sub.uses_dataframe:
                        dataframe_items[task] = item
                    else:
                        per_executor[placement.active].append(item)
            if not sub.stateful_task:
                continue
            for e in (*placement.standbys, *placement.warmups):
                if e in live:
                    held[e].append((task, Role.STANDBY))
                    behind = changelog_ends.get(task, 0) - held_offsets.get(e, {}).get(task, 0) > len(sub.stores)
                    if fresh or behind:
                        per_executor[e].append(WorkItem(task, Role.STANDBY))
    return BatchPlan(per_executor, held, dataframe_items, on_their_own)


def continuous_copies(compiled: CompiledApp, assignment: Assignment, live: Set[str],
                      continuous: Set[int]) -> dict[str, list[tuple[str, Role]]]:
    """Per live executor, the (task, role) pairs of the continuous sub-topologies it holds in
    `assignment`: what `plan_batch` puts in `BatchPlan.continuous`, without a batch's offsets."""
    held: dict[str, list[tuple[str, Role]]] = {e: [] for e in live}
    out: dict[str, list[tuple[str, Role]]] = {e: [] for e in live}
    for sub in compiled.subtopologies:
        if sub.id not in continuous:
            continue
        for task in sub.task_ids:
            placement = assignment.tasks.get(task)
            if placement is not None:
                _continuous_copies(sub, task, placement, live, held, out)
    return out


def _continuous_copies(sub: SubTopology, task: str, placement: TaskAssignment, live: Set[str],
                       held: dict[str, list[tuple[str, Role]]], out: dict[str, list[tuple[str, Role]]]) -> None:
    copies: list[tuple[str, Role]] = [(placement.active, Role.ACTIVE)]
    if sub.stateful_task:
        copies += [(e, Role.STANDBY) for e in (*placement.standbys, *placement.warmups)]
    for e, role in copies:
        if e in live:
            held[e].append((task, role))
            out[e].append((task, role))
