"""The task runner: the work items one executor's runner process runs against the tasks it holds
(docs/DESIGN.md, "One micro-batch", steps 4-5), one item at a time (`run_item`) or, on the
continuous path under exactly-once, a round of them in one transaction (`run_round`).

The tasks are the `TaskManager`'s (executor/task_manager.py); an active's batch up to its commit
is executor/active_batch.py; the commit order is executor/commit.py. executor/runner.py serves
`protocol.runner_messages` requests with a `TaskRunner`.
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, ExitStack
from dataclasses import replace
from typing import TypeVar

import pyarrow as pa

from eddy_contract.tasks import Role, TaskId
from eddy_runtime.dsl.errors import PipelineRuntimeError
from eddy_runtime.dsl.subtopology import SubTopology
from eddy_runtime.executor.active_batch import PreparedBatch, ReadStash, committed_result, prepare_batch
from eddy_runtime.executor.busy_clock import BusyClock
from eddy_runtime.executor.commit import write_stores
from eddy_runtime.executor.continuous import ContinuousLoop
from eddy_runtime.executor.metrics import ExecutorMetrics
from eddy_runtime.executor.task_host import RoundEntry
from eddy_runtime.executor.task_manager import TaskManager
from eddy_runtime.executor.tasks import StandbyTask, StreamTask, Task
from eddy_runtime.kafka.partitions import TopicPartition
from eddy_runtime.kafka.records import BadRecord, RawRecords
from eddy_runtime.kafka.transactions import CommitFailed, CommitPart, PlannedPositions, TaskCommitter, TaskFenced
from eddy_runtime.processing.batch import BatchOutput
from eddy_runtime.protocol.placement import MisplacedTask, ensure_on_executor
from eddy_runtime.protocol.runner_client import runner_outlives_executor
from eddy_runtime.protocol.work import (
    BatchSettings,
    ContinuousWork,
    ItemResult,
    ItemStatus,
    SlotWork,
    StateReset,
    WorkItem,
    volume_inventory,
)
from eddy_runtime.queries.routing import QueryRouting
from eddy_runtime.queries.server import LocalCopy
from eddy_runtime.state import TaskDirectoryLocked

__all__ = ["TaskRunner"]

log = logging.getLogger("eddy.runner")

_R = TypeVar("_R")

#: an active's result after which what it advanced in memory stands (nothing left uncommitted)
_KEEPS_PROCESSOR = frozenset({ItemStatus.PROCESSED, ItemStatus.RESTORING})
#: how long a state reset waits for the steps and rounds holding its tasks, and for their task directories
RESET_WAIT_S = 30.0


class TaskRunner:
    """Runs work items against the tasks it holds; one instance per runner process."""

    def __init__(self, executor_id: str, state_dir: str, metrics: ExecutorMetrics | None = None) -> None:
        self.executor_id = executor_id
        self.state_dir = state_dir
        self.metrics = metrics
        self.tasks = TaskManager(executor_id, metrics)
        #: (batch, task) -> what a read step found, for the sink step
        self._stash: dict[tuple[int, str], ReadStash] = {}
        #: the tasks of sub-topologies that run continuously (executor/continuous.py)
        #: how long this runner's actives spend processing input (an executor's load: executor/busy_clock.py)
        self.busy = BusyClock()
        self.continuous = ContinuousLoop(self)
        #: where this runner serves interactive queries (host:port; "" if it does not), reported
        #: on the first result of every reply; and the newest routing the driver sent (queries/server.py)
        self.query_address = ""
        self.routing: QueryRouting | None = None
        #: a driver's work came at least once (`warm`)
        self._served = False
        #: the state resets carried out here (`reset_state`), one at a time
        self._resets: set[str] = set()
        self._reset_lock = threading.Lock()

    # -- requests -----------------------------------------------------------------------------

    def stash_read(self, batch_id: int, task: str, bad_records: Sequence[BadRecord], records_read: int) -> None:
        """Keep what a DataFrame task's read step found for the sink step of the same batch
        (executor/runner.py serves `protocol.runner_messages.StashRead` with it)."""
        self._stash[(batch_id, task)] = ReadStash(list(bad_records), records_read)
        # Old batches' leftovers (a sink that never came) must not pile up.
        for key in [k for k in self._stash if k[0] < batch_id - 10]:
            del self._stash[key]

    def adopt_executor(self, executor_id: str) -> None:
        """On Kubernetes a runner outlives its executor JVM (`OUTLIVES_EXECUTOR_ENV`): after a driver
        restart, or a JVM restart in the same pod, the pod's new JVM has a new executor id, and
        the runner serves it, its tasks still open (its runner key, and so its transactions, stay
        the same: protocol/fences.py's `runner_key`). Elsewhere a slot for another executor is a
        misplaced task, and nothing changes here."""
        if executor_id == self.executor_id or not runner_outlives_executor():
            return
        log.info("executor %s is now executor %s (a new executor JVM in the same pod)", self.executor_id, executor_id)
        self.executor_id = executor_id
        self.tasks.executor_id = executor_id
        self.continuous.producer.executor_id = executor_id

    def run(self, subs: dict[int, SubTopology], settings: BatchSettings, slot: SlotWork,
            data: pa.Table | BatchOutput | None) -> list[ItemResult]:
        self.adopt_executor(slot.executor)
        self._served = True
        if settings.routing is not None and (self.routing is None
                                             or settings.routing.generation >= self.routing.generation):
            self.routing = settings.routing
        self.reset_state(settings.state_reset, settings)  # before any task of this work opens
        continuous = self.continuous.sync(subs, settings, slot.continuous) if slot.continuous is not None else []
        if slot.held is not None:
            self.tasks.release_unheld(dict(slot.held))
        results = []
        for item in slot.items:
            started = time.monotonic()
            result = self.run_item(subs, settings, slot, item, data)
            results.append(replace(result, duration_s=time.monotonic() - started))
        if self.metrics is not None:
            self.metrics.observe(settings.app, results)
        return self._addressed(results + continuous)

    def collect(self, work: ContinuousWork, inventory: bool = False) -> list[ItemResult]:
        """A sync over HTTP (work_push.SYNC_PATH): the continuous loop takes `work` if it is newer,
        and hands back what it did since the last sync; `inventory`: and what the volume holds."""
        out = self.continuous.collect(work)
        settings = self.continuous.settings()
        if inventory and settings is not None:
            out.append(volume_inventory(settings, self.executor_id))
        return self._addressed(out)

    def _addressed(self, out: list[ItemResult]) -> list[ItemResult]:
        """`out`, each result this executor's (the rounds run before a new JVM's first task
        reached this runner recorded them under its earlier executor's id: `adopt_executor`),
        its first result carrying where this runner serves queries and pushes (the driver learns
        each executor's runner address from it)."""
        out = [r if r.executor == self.executor_id else replace(r, executor=self.executor_id) for r in out]
        if self.query_address and out:
            out[0] = replace(out[0], query_address=self.query_address)
        elif self.query_address:  # a newcomer with nothing to run yet: the driver pushes its first tasks here
            out = [ItemResult("", self.executor_id, Role.ACTIVE, ItemStatus.PROCESSED,
                              query_address=self.query_address)]
        return out

    def reset_state(self, reset: StateReset | None, settings: BatchSettings | None = None) -> None:
        """Drop this runner's copies of a state reset's stores, once per reset (protocol/work.py's
        `StateReset`), before the work that carries it runs: no step or round runs the reset's
        tasks or the held tasks with one of its stores meanwhile; those held (actives and
        standbys, kept across the generation change or not) are closed, and the stores are
        deleted from every task directory of the app on the volume. Each is opened again by the
        work that names it, empty, and rebuilt from its new changelog. Raises when it could not
        be done (the work is not taken; the driver's next sync or batch brings the reset again)."""
        if reset is None or reset.id in self._resets:
            return
        settings = settings or self.continuous.settings()
        if settings is None:
            raise RuntimeError(f"state reset {reset.id}: no settings from a driver yet")
        with self._reset_lock:
            if reset.id in self._resets:
                return
            held = self.tasks.holding(reset.stores)
            with self.continuous.assignment.paused({*reset.tasks, *held}, RESET_WAIT_S):
                for task_id in held:
                    self.tasks.close_now(task_id, f"state reset {reset.id}: its stores start empty")
                wiped = self.tasks.wipe_stores(settings.state_dir_for(self.executor_id), settings.app, reset.stores,
                                               RESET_WAIT_S)
            self._resets.add(reset.id)
        log.info("state reset %s: stores %s dropped here (closed %s, wiped in %s)", reset.id, list(reset.stores),
                 held, wiped)

    # -- what the continuous loop and the queries ask of the tasks ------------------------------

    def release_task(self, task_id: str, why: str, recycle: bool = False) -> None:
        """Let go of a held task, closing it in the background or keeping it for a standby of it
        to recycle (`TaskManager.release`)."""
        self.tasks.release(task_id, why, recycle)

    def release_actives(self, why: str) -> list[str]:
        """Let go of every active held (`TaskManager.release`); the ids let go."""
        actives = self.tasks.actives()
        for task_id in actives:
            self.tasks.release(task_id, why)
        return actives

    def actives_to_hand_over(self) -> list[str]:
        """The actives a stopping pod waits for (executor/handover.py): none once the runner is
        fenced out (`ContinuousLoop.fenced_out`), as their newer owner does not wait for this one."""
        return [] if self.continuous.fenced_out() else self.tasks.actives()

    def reading(self, task_id: str, store: str) -> AbstractContextManager[LocalCopy | None]:
        """A held copy of `task_id`'s `store` for an interactive query (`TaskManager.reading`)."""
        return self.tasks.reading(task_id, store)

    def positions(self, task_id: str) -> dict[TopicPartition, int] | None:
        """A running active's input positions (`TaskManager.positions`)."""
        return self.tasks.positions(task_id)

    def forget_positions(self, task_id: str) -> None:
        """Read the task's committed positions again before it processes more."""
        self.tasks.forget_positions(task_id)

    def warm(self) -> str | None:
        """Why this runner is not warm yet, or None once it is: it has had work from a driver, and
        each continuous copy of that work is open and at most `acceptable_recovery_lag` behind (an
        active restored, a standby that far from its changelog's end). The executor pod's
        readiness (`READY_PATH`): a rolling upgrade of the executor pods waits for every other
        pod's before it replaces the next one (operator/eddy_operator/rollout.py)."""
        current = self.continuous.assignment.current()
        if current is None:  # an app of micro-batches only: warm once it ran a batch
            return None if self._served else "no work from a driver yet"
        behind = []
        for task, role in current.work.tasks:
            lag = self.tasks.lag(task, Role(role))
            if lag is None or lag > current.settings.acceptable_recovery_lag:
                behind.append(f"{task} ({role}, {'not open' if lag is None else f'{lag} behind'})")
        return f"copies not caught up: {', '.join(sorted(behind))}" if behind else None

    def close_all(self) -> None:
        """Stop the continuous loop, then close every task."""
        self.continuous.close()
        self.tasks.close_all()

    # -- one item -------------------------------------------------------------------------------

    def run_item(self, subs: dict[int, SubTopology], settings: BatchSettings, slot: SlotWork, item: WorkItem,
                 data: pa.Table | BatchOutput | None, records: Sequence[RawRecords] | None = None) -> ItemResult:
        """Run one item. `records`: the item's input, already fetched (the continuous path):
        one `RawRecords` per range, each from the task's position. An active's item that processes
        input (or punctuates) reports its share of the runner's busy time (`busy`), from its task
        held to its commit: opening the task, waiting for its lock and an item with no input are
        not processing."""
        base = ItemResult(item.task, slot.executor, item.role, ItemStatus.PROCESSED)  # every reply sets its status
        try:
            if slot.executor != self.executor_id:
                self.adopt_executor(slot.executor)
            if slot.executor != self.executor_id:
                raise MisplacedTask(f"task {item.task} was planned for executor {slot.executor} but reached the "
                                    f"runner of executor {self.executor_id}")
            ensure_on_executor(self.executor_id, f"task {item.task}", unknown_ok=True)
        except MisplacedTask as e:
            return replace(base, status=ItemStatus.MISPLACED, message=str(e))
        sub = subs[TaskId.parse(item.task).subtopology]
        try:
            t = self.tasks.take(settings, sub, item.task, Role(item.role), slot.runner_transactions)
        except TaskDirectoryLocked as e:
            return replace(base, status=ItemStatus.LOCKED, message=str(e))
        except CommitFailed as e:  # init_transactions failed
            return replace(base, status=ItemStatus.FAILED, message=f"opening task {item.task}: {e}")
        except Exception as e:  # noqa: BLE001 - reported to the driver, which decides
            log.exception("opening task %s failed", item.task)
            return replace(base, status=ItemStatus.FAILED, message=f"opening task {item.task}: {type(e).__name__}: {e}")
        with t.lock:
            if t.closed:  # released (a newer generation) or failed since it was looked up
                return replace(base, status=ItemStatus.ABORTED, message=f"task {item.task} was closed meanwhile")
            if item.role == Role.ACTIVE and not item.restore_only and (
                    sub.punctuates or not all(r.empty for r in item.ranges)):
                # the task open and its lock held: from here on the item reads, processes and commits
                with self.busy.busy() as share:
                    result = self._run_held(settings, sub, item, t, data, base, records)
                if result.status != ItemStatus.RESTORING:  # a restore chunk processes no input
                    result = replace(result, busy_s=share.seconds)
            else:
                result = self._run_held(settings, sub, item, t, data, base, records)
            if isinstance(t, StreamTask) and result.status not in _KEEPS_PROCESSOR:
                t.drop_processor()  # what it advanced in memory was not committed
            return result

    def _run_held(self, settings: BatchSettings, sub: SubTopology, item: WorkItem, t: Task,
                  data: pa.Table | BatchOutput | None, base: ItemResult,
                  records: Sequence[RawRecords] | None) -> ItemResult:
        """`run_item`'s work on a task it holds (its lock held): the result, whatever happened."""
        if isinstance(t, StandbyTask):
            standby = t

            def tail() -> ItemResult:
                standby.tailing()
                progress = standby.state.standby_chunk(max_seconds=settings.standby_chunk_seconds)
                return replace(base, status=ItemStatus.STANDBY, figures=standby.state.figures(),
                               restored=progress.restored, restore_remaining=progress.remaining)
            return self._guarded(t, base, tail)
        assert isinstance(t, StreamTask)
        active = t

        def process() -> ItemResult:
            got = prepare_batch(settings, sub, item, active, data, base, records, self._stash_of(settings, item))
            if isinstance(got, ItemResult):
                return got
            active.opened.commit(got.tx, got.outputs, got.input_offsets)
            return committed_result(got)
        return self._guarded(t, base, process)

    def _stash_of(self, settings: BatchSettings, item: WorkItem) -> Callable[[], ReadStash]:
        """What takes the stash of `item`'s batch (empty if its read step left none)."""
        return lambda: self._stash.pop((settings.batch_id, item.task), ReadStash([], 0))

    def _guarded(self, t: Task, base: ItemResult, step: Callable[[], _R]) -> _R | ItemResult:
        """`step()` on a held task, or the result its failure comes to (a fenced or broken task is
        closed; after a failed commit its positions are read again)."""
        try:
            return step()
        except TaskFenced as e:
            self.tasks.close_failed(t)
            return replace(base, status=ItemStatus.FENCED, message=str(e))
        except CommitFailed as e:
            status: ItemStatus = ItemStatus.ABORTED if e.aborted else ItemStatus.FAILED
            if isinstance(t, StreamTask):
                t.forget_positions()
            return replace(base, status=status, message=str(e))
        except PipelineRuntimeError as e:
            return replace(base, status=ItemStatus.FAILED, message=f"pipeline error: {e}")
        except Exception as e:  # noqa: BLE001
            log.exception("task %s failed", t.task_id)
            self.tasks.close_failed(t)
            return replace(base, status=ItemStatus.FAILED,
                           message=f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=8)}")

    def run_round(self, subs: dict[int, SubTopology], settings: BatchSettings,
                  entries: Sequence[RoundEntry], committer: TaskCommitter
                  ) -> list[ItemResult]:
        """The continuous path under exactly-once: one transaction of the runner's `committer`
        (protocol/fences.py) for all entries. Their input positions go to the coordinators first; each
        entry's records are processed on its task and sent as soon as they are, while the next
        entry is (`TaskCommitter.commit_parts`); then the transaction commits, then each task's
        stores are written. A task that fails on its own (a bad record under `fail`, a pipeline
        error) is left out, its positions sent back to where it started; if the commit fails, none
        of them commits, and each reads its positions again. The tasks' locks are held
        throughout, so none is closed between its commit and its stores' write."""
        results: list[ItemResult] = []
        ready: list[PreparedBatch] = []
        with ExitStack() as held:
            tasks: dict[str, StreamTask] = {}
            to: dict[TopicPartition, int] = {}
            back: dict[TopicPartition, int] = {}
            for item, _ in entries:
                base = ItemResult(item.task, self.executor_id, Role.ACTIVE, ItemStatus.PROCESSED)
                t = self.tasks.active(item.task)
                if t is None:
                    results.append(replace(base, status=ItemStatus.ABORTED,
                                           message=f"task {item.task} is not held here"))
                    continue
                held.enter_context(t.lock)
                if t.closed:
                    results.append(replace(base, status=ItemStatus.ABORTED,
                                           message=f"task {item.task} was closed meanwhile"))
                    continue
                tasks[item.task] = t
                positions = t.positions
                if positions is not None and all(positions.get(r.topic_partition) == r.start for r in item.ranges):
                    to.update({r.topic_partition: r.end for r in item.ranges})
                    back.update({r.topic_partition: r.start for r in item.ranges})

            def prepared() -> Iterator[CommitPart]:
                for item, records in entries:
                    t = tasks.get(item.task)
                    if t is None:
                        continue
                    base = ItemResult(item.task, self.executor_id, Role.ACTIVE, ItemStatus.PROCESSED)
                    sub = subs[TaskId.parse(item.task).subtopology]
                    stash = self._stash_of(settings, item)
                    got = self._guarded(t, base, lambda: prepare_batch(settings, sub, item, t, None, base,  # noqa: B023
                                                                        records, stash))  # noqa: B023
                    if isinstance(got, PreparedBatch):
                        ready.append(got)
                        yield CommitPart(got.tx, got.outputs, got.input_offsets)
                        continue
                    if got.status not in _KEEPS_PROCESSOR:
                        t.drop_processor()
                    results.append(got)

            results += self._commit_round(committer, prepared(), ready, PlannedPositions(to, back))
        reached = {r.task for r in results}
        for item, _ in entries:  # the commit failed before their turn: their records were not processed
            if item.task not in reached:
                self.forget_positions(item.task)
                results.append(ItemResult(item.task, self.executor_id, Role.ACTIVE, ItemStatus.ABORTED,
                                          message="the round's transaction failed before this task was processed"))
        return results

    def _commit_round(self, committer: TaskCommitter, parts: Iterable[CommitPart],
                      ready: Sequence[PreparedBatch], planned: PlannedPositions) -> list[ItemResult]:
        """Commit the parts `parts` yields, in the order of executor/commit.py: Kafka (step 1),
        then after a failure nothing is written (step 2), else each task's stores (step 3).
        `ready` holds the batches prepared for the parts (filled as `parts` is read)."""
        started = time.monotonic()
        try:
            commits = committer.commit_parts(parts, planned=planned)
        except Exception as e:  # noqa: BLE001 - nothing of the round counts; each task reads its positions again
            aborted = isinstance(e, CommitFailed) and (e.aborted or isinstance(e, TaskFenced))
            if not isinstance(e, CommitFailed):
                log.exception("committing a round of %d tasks failed", len(ready))
            failed = []
            for p in ready:
                p.task.forget_positions()  # the round is processed again from the committed positions
                p.task.drop_processor()
                if not aborted:  # the outcome in Kafka is unknown: the stores are checked against it
                    p.task.state.recheck_changelogs()
                status = ItemStatus.ABORTED if aborted else ItemStatus.FAILED
                failed.append(replace(p.base, status=status, message=str(e)))
            return failed
        out = []
        for p, kc in zip(ready, commits, strict=True):
            try:
                write_stores(p.task.state, p.tx, kc)
            except Exception as e:  # noqa: BLE001 - committed in Kafka: the next open restores the store's delta
                log.exception("task %s: writing its stores after the commit failed", p.base.task)
                self.tasks.close_failed(p.task)
                out.append(replace(p.base, status=ItemStatus.FAILED, message=f"{type(e).__name__}: {e}"))
                continue
            out.append(replace(committed_result(p), duration_s=time.monotonic() - started))
        return out
