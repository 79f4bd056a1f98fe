"""The task runner's work: the tasks one executor holds (their state managers, kept open across
batches) and the work items it runs against them (docs/DESIGN.md, "One micro-batch", steps 4-5).

executor/runner.py serves `protocol.runner_messages` requests with a `TaskRunner`.
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from typing import TypeVar

import numpy as np
import pyarrow as pa

from eddy_contract.tasks import Role, TaskId
from eddy_runtime.dsl.subtopology import SubTopology
from eddy_runtime.executor.commit import StateCommitter, write_stores
from eddy_runtime.executor.continuous import ContinuousLoop
from eddy_runtime.executor.metrics import ExecutorMetrics
from eddy_runtime.kafka.partitions import InputRange, TopicPartition
from eddy_runtime.kafka.records import BadRecord, RawRecords, decode_repartition, decode_source, range_reader
from eddy_runtime.kafka.transactions import (
    CommitFailed,
    CommitPart,
    OutputRecord,
    PlannedPositions,
    TaskCommitter,
    TaskFenced,
)
from eddy_runtime.processing.bad_records import bad_record_output, failed_row_records
from eddy_runtime.processing.joins import TableUpdates, table_updates, write_table_updates
from eddy_runtime.processing.operators import BatchOutput, PipelineRuntimeError, TaskState, process_batch
from eddy_runtime.protocol.placement import MisplacedTask, ensure_on_executor
from eddy_runtime.protocol.work import (
    LATENCY_BUCKETS_S,
    BadRecordInfo,
    BatchSettings,
    ContinuousWork,
    ItemResult,
    ItemStatus,
    SlotWork,
    WorkItem,
    volume_inventory,
)
from eddy_runtime.queries.routing import QueryRouting
from eddy_runtime.queries.server import LocalCopy
from eddy_runtime.state import ProcessorStateManager, TaskDirectoryLocked, TaskTransaction

__all__ = ["TaskRunner", "latency_histogram"]

log = logging.getLogger("eddy.runner")


def latency_histogram(latencies_s: np.ndarray) -> tuple[tuple[int, ...], float]:
    """Counts per `LATENCY_BUCKETS_S` bucket (upper bounds, plus one overflow) and the sum."""
    if latencies_s.size == 0:
        return (), 0.0
    idx = np.searchsorted(np.asarray(LATENCY_BUCKETS_S), latencies_s, side="left")
    counts = np.bincount(idx, minlength=len(LATENCY_BUCKETS_S) + 1)
    return tuple(int(c) for c in counts), float(latencies_s.sum())


class _Task:
    """A task the runner holds: its state manager, what it keeps between batches, its lock."""

    def __init__(self, opened: StateCommitter) -> None:
        #: the task's state and the committer its batches commit through
        self.opened = opened
        self.manager = opened.state
        self.state = TaskState()
        self.lock = threading.Lock()
        #: held by interactive queries while they read the stores, and by `close`
        self.read_lock = threading.Lock()
        self.closed = False
        #: input positions this runner committed (or found committed when it opened the task)
        self.positions: dict[TopicPartition, int] | None = None


@dataclass
class _Prepared:
    """An active's item processed and not committed yet (`TaskRunner._prepare`)."""

    task: _Task
    base: ItemResult
    tx: TaskTransaction
    outputs: list[OutputRecord]
    input_offsets: dict[TopicPartition, int]
    records_in: int
    out: BatchOutput
    bad: list[BadRecord]
    dead: int


_R = TypeVar("_R")


class TaskRunner:
    """Runs work items against the tasks it holds; one instance per runner process."""

    def __init__(self, executor_id: str, state_dir: str, metrics: ExecutorMetrics | None = None) -> None:
        self.executor_id = executor_id
        self.state_dir = state_dir
        self.metrics = metrics
        self._tasks: dict[str, _Task] = {}
        self._tasks_lock = threading.Lock()
        #: the closes of tasks let go of (`close_task`) under way
        self._closing: list[threading.Thread] = []
        #: (batch, task) -> bad records and the count of records a read step read for the sink
        self._stash: dict[tuple[int, str], tuple[list[BadRecord], int]] = {}
        #: the tasks of sub-topologies that run continuously (executor/continuous.py)
        self.continuous = ContinuousLoop(self)
        #: where this runner serves interactive queries (host:port; "" if it does not), reported
        #: on the first result of every reply; and the newest routing the driver sent (queries/server.py)
        self.query_address = ""
        self.routing: QueryRouting | None = None

    # -- requests -----------------------------------------------------------------------------

    def stash_read(self, batch_id: int, task: str, bad_records: Sequence[BadRecord], records_read: int) -> None:
        """Keep what a DataFrame task's read step found for the sink step of the same batch
        (executor/runner.py serves `protocol.runner_messages.StashRead` with it)."""
        self._stash[(batch_id, task)] = (list(bad_records), records_read)
        # Old batches' leftovers (a sink that never came) must not pile up.
        for key in [k for k in self._stash if k[0] < batch_id - 10]:
            del self._stash[key]

    def run(self, subs: dict[int, SubTopology], settings: BatchSettings, slot: SlotWork,
            data: pa.Table | BatchOutput | None) -> list[ItemResult]:
        if settings.routing is not None and (self.routing is None
                                             or settings.routing.generation >= self.routing.generation):
            self.routing = settings.routing
        continuous = self.continuous.sync(subs, settings, slot.continuous) if slot.continuous is not None else []
        if slot.held is not None:
            self._release_unheld(dict(slot.held))
        results = []
        for item in slot.items:
            started = time.monotonic()
            result = self.run_item(subs, settings, slot, item, data)
            results.append(_with_duration(result, time.monotonic() - started))
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
        """`out`, its first result carrying where this runner serves queries and pushes."""
        if self.query_address and out:
            out[0] = replace(out[0], query_address=self.query_address)
        elif self.query_address:  # a newcomer with nothing to run yet: the driver pushes its first tasks here
            out = [ItemResult("", self.executor_id, Role.ACTIVE, ItemStatus.PROCESSED,
                              query_address=self.query_address)]
        return out

    # -- tasks --------------------------------------------------------------------------------

    def _release_unheld(self, held: dict[str, str]) -> None:
        with self._tasks_lock:
            gone = [t for t in self._tasks if t not in held]
        for task in gone:
            self._close(task, "no longer assigned here")

    def close_task(self, task_id: str, why: str) -> None:
        """Let go of a held task now and close it on a thread of its own (it is opened again, and
        restores its delta, if it comes back). From here on a step finds the task not held and
        opens it anew, which waits on the task directory's lock for the close to end; a released
        stateful task so costs the release no flush, checkpoint or Kafka client close (0.1-0.2 s
        each on a loaded machine, measured)."""
        with self._tasks_lock:
            t = self._tasks.pop(task_id, None)
            if t is None:
                return
            self._closing = [c for c in self._closing if c.is_alive()]
            closing = threading.Thread(target=self._close_held, args=(task_id, t, why), daemon=True,
                                       name=f"eddy-close-{task_id}")
            self._closing.append(closing)
        closing.start()

    def _close(self, task_id: str, why: str) -> None:
        with self._tasks_lock:
            t = self._tasks.pop(task_id, None)
        if t is not None:
            self._close_held(task_id, t, why)

    def _close_held(self, task_id: str, t: _Task, why: str) -> None:
        """Close a task taken out of `_tasks`."""
        with t.lock:
            log.info("closing task %s (%s): %s", task_id, t.manager.role, why)
            self._shut(task_id, t)

    def _shut(self, task_id: str, t: _Task) -> None:
        """Close a task taken out of `_tasks` (its lock held): no query reads its stores from here on."""
        with t.read_lock:
            t.closed = True
            if self.metrics is not None:
                self.metrics.forget(t.manager.app, task_id, list(t.manager.stores))
            self._drop_processor(task_id, t)
            try:
                t.opened.close()
            except Exception:  # noqa: BLE001 - the lock is released by close() even on errors
                log.exception("closing task %s failed", task_id)

    @staticmethod
    def _drop_processor(task_id: str, t: _Task) -> None:
        """Close and forget a process() step's processor: the next batch makes a new one, which
        reads stream time and its schedules from the committed stores, not from a batch that did
        not commit."""
        held, t.state.processor = t.state.processor, None
        if held is not None:
            try:
                held.processor.close()
            except Exception:  # noqa: BLE001 - the user's close: logged, the task goes on
                log.exception("task %s: the processor's close() raised", task_id)

    def close_all(self) -> None:
        self.continuous.close()
        for task in list(self._tasks):
            self._close(task, "runner closing")
        with self._tasks_lock:
            closing, self._closing = self._closing, []
        for c in closing:  # the tasks let go of before
            c.join()

    @contextmanager
    def reading(self, task_id: str, store: str) -> Iterator[LocalCopy | None]:
        """A held copy of `task_id`'s `store` for an interactive query, kept open while it reads."""
        with self._tasks_lock:
            t = self._tasks.get(task_id)
        if t is None:
            yield None
            return
        with t.read_lock:
            m = t.manager
            if t.closed or store not in m.stores:
                yield None
                return
            if m.role == "active":
                lag = 0 if m.restored else m.progress.remaining
                copy = LocalCopy(task_id, self.executor_id, "active", lag, m.restored, m.store(store))
            else:
                copy = LocalCopy(task_id, self.executor_id, "standby", m.standby_lag or 0, True, m.store(store))
            yield copy

    def positions(self, task_id: str) -> dict[TopicPartition, int] | None:
        """A running active's input positions: None unless held open as an active, restored, with
        its committed positions read."""
        with self._tasks_lock:
            t = self._tasks.get(task_id)
        if t is None or t.manager.role != "active" or not t.manager.restored:
            return None
        return t.positions

    def forget_positions(self, task_id: str) -> None:
        """Read the task's committed positions again before it processes more (records taken for
        it were not committed)."""
        with self._tasks_lock:
            t = self._tasks.get(task_id)
        if t is not None:
            t.positions = None

    def _task(self, settings: BatchSettings, sub: SubTopology, task_id: str, role: str,
              runner_transactions: bool = False) -> _Task:
        """The held task in `role`: opened, promoted from standby, or reopened as a standby.
        `runner_transactions`: it commits through the runner's transactions (`SlotWork`)."""
        with self._tasks_lock:
            t = self._tasks.get(task_id)
        if t is not None and t.manager.role == role:
            return t
        if t is not None and role == "active":
            with t.lock:
                log.info("promoting task %s from standby", task_id)
                t.manager.promote()
                t.positions = None
                return t
        if t is not None:
            self._close(task_id, "becomes a standby here")
        opened = StateCommitter.open(
            settings.app,
            task_id,
            list(sub.stores),
            settings.state_dir_for(self.executor_id),
            settings.kafka,
            role=role,  # type: ignore[arg-type]
            guarantee=settings.guarantee,
            lock_timeout=5.0,
            fence_task_producer=not runner_transactions,
        )
        log.info("opened task %s as %s", task_id, role)
        t = _Task(opened)
        for spec in sub.stores:
            if spec.kind == "window":
                st = opened.state.store(spec.name).offsets.stream_time
                t.state.stream_time = st
        with self._tasks_lock:
            self._tasks[task_id] = t
        return t

    # -- one item -------------------------------------------------------------------------------

    def run_item(self, subs: dict[int, SubTopology], settings: BatchSettings, slot: SlotWork, item: WorkItem,
                 data: pa.Table | BatchOutput | None, records: Sequence[RawRecords] | None = None) -> ItemResult:
        """Run one item. `records`: the item's input, already fetched (the continuous path):
        one `RawRecords` per range, each from the task's position."""
        base = ItemResult(item.task, slot.executor, item.role, ItemStatus.PROCESSED)  # every reply sets its status
        try:
            if slot.executor != self.executor_id:
                raise MisplacedTask(f"task {item.task} was planned for executor {slot.executor} but reached the "
                                    f"runner of executor {self.executor_id}")
            ensure_on_executor(self.executor_id, f"task {item.task}", unknown_ok=True)
        except MisplacedTask as e:
            return replace(base, status=ItemStatus.MISPLACED, message=str(e))
        sub = subs[TaskId.parse(item.task).subtopology]
        try:
            t = self._task(settings, sub, item.task, item.role, slot.runner_transactions)
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
            result = self._run_held(settings, sub, item, t, data, base, records)
            if item.role == "active" and result.status not in ("processed", "restoring"):
                self._drop_processor(item.task, t)  # what it advanced in memory was not committed
            return result

    def _run_held(self, settings: BatchSettings, sub: SubTopology, item: WorkItem, t: _Task,
                  data: pa.Table | BatchOutput | None, base: ItemResult,
                  records: Sequence[RawRecords] | None) -> ItemResult:
        """`run_item`'s work on a task it holds (its lock held): the result, whatever happened."""
        if item.role == "standby":
            def standby() -> ItemResult:
                progress = t.manager.standby_chunk(max_seconds=settings.standby_chunk_seconds)
                return replace(base, status=ItemStatus.STANDBY, figures=t.manager.figures(),
                               restored=progress.restored, restore_remaining=progress.remaining)
            return self._guarded(item.task, t, base, standby)

        def active() -> ItemResult:
            got = self._prepare(settings, sub, item, t, data, base, records)
            if isinstance(got, ItemResult):
                return got
            t.opened.commit(got.tx, got.outputs, got.input_offsets)
            return self._committed_result(got)
        return self._guarded(item.task, t, base, active)

    def _guarded(self, task_id: str, t: _Task, base: ItemResult, step: Callable[[], _R]) -> _R | ItemResult:
        """`step()` on a held task, or the result its failure comes to (a fenced or broken task is
        closed; after a failed commit its positions are read again)."""
        try:
            return step()
        except TaskFenced as e:
            self._close_quietly(task_id, t)
            return replace(base, status=ItemStatus.FENCED, message=str(e))
        except CommitFailed as e:
            status: ItemStatus = ItemStatus.ABORTED if e.aborted else ItemStatus.FAILED
            t.positions = None
            return replace(base, status=status, message=str(e))
        except PipelineRuntimeError as e:
            return replace(base, status=ItemStatus.FAILED, message=f"pipeline error: {e}")
        except Exception as e:  # noqa: BLE001
            log.exception("task %s failed", task_id)
            self._close_quietly(task_id, t)
            return replace(base, status=ItemStatus.FAILED,
                           message=f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=8)}")

    def run_round(self, subs: dict[int, SubTopology], settings: BatchSettings,
                  entries: Sequence[tuple[WorkItem, Sequence[RawRecords]]], committer: TaskCommitter
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
        ready: list[tuple[_Task, _Prepared]] = []
        with ExitStack() as held:
            tasks: dict[str, _Task] = {}
            to: dict[TopicPartition, int] = {}
            back: dict[TopicPartition, int] = {}
            for item, _ in entries:
                base = ItemResult(item.task, self.executor_id, Role.ACTIVE, ItemStatus.PROCESSED)
                with self._tasks_lock:
                    t = self._tasks.get(item.task)
                if t is None or t.manager.role != "active":
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
                    got = self._guarded(item.task, t, base,
                                        lambda: self._prepare(settings, sub, item, t, None, base, records))  # noqa: B023
                    if isinstance(got, _Prepared):
                        ready.append((t, got))
                        yield CommitPart(got.tx, got.outputs, got.input_offsets)
                        continue
                    if got.status not in ("processed", "restoring"):
                        self._drop_processor(item.task, t)
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
                      ready: Sequence[tuple[_Task, _Prepared]], planned: PlannedPositions) -> list[ItemResult]:
        """Commit the parts `parts` yields; `ready` holds the tasks prepared for them (filled as
        `parts` is read)."""
        started = time.monotonic()
        try:
            commits = committer.commit_parts(parts, planned=planned)
        except Exception as e:  # noqa: BLE001 - nothing of the round counts; each task reads its positions again
            aborted = isinstance(e, CommitFailed) and (e.aborted or isinstance(e, TaskFenced))
            if not isinstance(e, CommitFailed):
                log.exception("committing a round of %d tasks failed", len(ready))
            failed = []
            for t, p in ready:
                t.positions = None  # the round is processed again from the committed positions
                self._drop_processor(p.base.task, t)
                if not aborted:  # the outcome in Kafka is unknown: the stores are checked against it
                    t.manager.recheck_changelogs()
                status = ItemStatus.ABORTED if aborted else ItemStatus.FAILED
                failed.append(replace(p.base, status=status, message=str(e)))
            return failed
        out = []
        for (t, p), kc in zip(ready, commits, strict=True):
            try:
                write_stores(t.manager, p.tx, kc)
            except Exception as e:  # noqa: BLE001 - committed in Kafka: the next open restores the store's delta
                log.exception("task %s: writing its stores after the commit failed", p.base.task)
                self._close_quietly(p.base.task, t)
                out.append(replace(p.base, status=ItemStatus.FAILED, message=f"{type(e).__name__}: {e}"))
                continue
            out.append(replace(self._committed_result(p), duration_s=time.monotonic() - started))
        return out

    def _close_quietly(self, task_id: str, t: _Task) -> None:
        """Close a task after it failed or was fenced (run_item holds its lock). Only this copy:
        the runner may hold a newer one of the same task by now."""
        with self._tasks_lock:
            if self._tasks.get(task_id) is t:
                del self._tasks[task_id]
        if not t.closed:
            self._shut(task_id, t)

    def _prepare(self, settings: BatchSettings, sub: SubTopology, item: WorkItem, t: _Task,
                 data: pa.Table | BatchOutput | None, base: ItemResult,
                 records: Sequence[RawRecords] | None) -> ItemResult | _Prepared:
        """An active's item up to its commit: restored, its records read (unless given), decoded
        and processed. What is left to commit, or the item's result if there is nothing to."""
        mgr = t.manager
        if not mgr.restored:
            progress = mgr.restore_chunk(max_records=settings.restore_chunk_records,
                                         max_seconds=settings.restore_chunk_seconds)
            return replace(base, status=ItemStatus.RESTORING, figures=mgr.figures(), restored=progress.restored,
                              restore_remaining=progress.remaining)
        if t.positions is None:
            t.positions = self._committed(t.opened, item.ranges)
        stale = [r for r in item.ranges if t.positions.get(r.topic_partition, 0) != r.start]
        if stale and not item.restore_only:
            return replace(base, status=ItemStatus.ABORTED, figures=mgr.figures(),
                              message=f"stale plan: {[(r.topic, r.partition, r.start) for r in stale]} but "
                                      f"committed positions are {t.positions}")
        if item.restore_only or (all(r.empty for r in item.ranges) and not sub.punctuates):
            return replace(base, status=ItemStatus.PROCESSED, figures=mgr.figures())
        bad, records_read = self._stash.pop((settings.batch_id, item.task), ([], 0))
        reader = range_reader(settings.kafka)
        source = item.ranges[0]
        raw_source: RawRecords | None = None
        precomputed: BatchOutput | None = None
        if data is None:
            raw_source = (records[0] if records is not None
                          else RawRecords(source.topic, source.partition, next_offset=source.start) if source.empty
                          else reader.read(source, settings.read_timeout_s))
            if sub.source.repartition:
                rows, bad_rows = decode_repartition(raw_source, sub.source.key_serde, sub.source.combined,
                                                    sub.source.combined_column)
            else:
                rows, bad_rows = decode_source(raw_source, sub.source.key_serde, sub.source.value_serde)
            bad.extend(bad_rows)
            records_in = len(raw_source)
        else:
            # A stateless sub-topology's sink step already ran its sinks (executor_steps.sink_step).
            precomputed = data if isinstance(data, BatchOutput) else None
            rows = pa.table({}) if precomputed is not None else data
            records_in = records_read
        if bad and settings.bad_record_policy == "fail":
            return self._stop_at(base, bad, mgr)
        tx = mgr.transaction()
        updates: TableUpdates | None = None
        if sub.table is not None and len(item.ranges) > 1:
            raw_table = records[1] if records is not None else reader.read(item.ranges[1], settings.read_timeout_s)
            records_in += len(raw_table)
            updates, table_bad = table_updates(sub.table, raw_table)
            for offset, err in table_bad:
                i = raw_table.offsets.index(offset)
                bad.append(BadRecord(raw_table.topic, raw_table.partition, offset, raw_table.timestamps[i],
                                     raw_table.keys[i], raw_table.values[i], err, "deserialize"))
            if bad and settings.bad_record_policy == "fail":
                return self._stop_at(base, bad, mgr)
        if precomputed is not None:
            out = precomputed
        elif rows.num_rows or sub.punctuates or (updates is not None and updates.keys and sub.stateful is not None
                                             and sub.stateful.kind in ("table_join", "stream_join")):
            # a join merges the table's records with the stream's (or the other table's) by timestamp
            out = process_batch(sub, rows, tx, t.state, updates)
        else:
            out = BatchOutput()
            if updates is not None and sub.table is not None:
                write_table_updates(sub.table, updates, tx)
        if out.failed_rows:
            bad.extend(failed_row_records(source, rows, raw_source, out.failed_rows, reader, settings))
            if settings.bad_record_policy == "fail":
                return self._stop_at(base, bad, mgr)
        outputs = out.outputs
        dead = 0
        if bad and settings.bad_record_policy == "dead-letter":
            outputs = outputs + [bad_record_output(settings, item.task, b) for b in bad]
            dead = len(bad)
        for b in bad:
            log.warning("app %s task %s: bad record %s[%d]@%d (%s): %s", settings.app, item.task, b.topic,
                        b.partition, b.offset, "dead-lettered" if dead else "skipped", b.error)
        input_offsets = {r.topic_partition: r.end for r in item.ranges}
        return _Prepared(t, base, tx, outputs, input_offsets, records_in, out, bad, dead)

    @staticmethod
    def _committed_result(p: _Prepared) -> ItemResult:
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
            figures=p.task.manager.figures(),
        )

    def _stop_at(self, base: ItemResult, bad: Sequence[BadRecord], mgr: ProcessorStateManager) -> ItemResult:
        first = min(bad, key=lambda b: b.offset)
        msg = f"bad record at {first.topic}[{first.partition}] offset {first.offset}: {first.error}"
        log.error("task %s: %s (policy fail: nothing of this batch is committed)", base.task, msg)
        return replace(base, status=ItemStatus.BAD_RECORD, message=msg, figures=mgr.figures(),
                          bad_records=(BadRecordInfo(first.topic, first.partition, first.offset, first.error),))

    @staticmethod
    def _committed(opened: StateCommitter, ranges: Sequence[InputRange]) -> dict[TopicPartition, int]:
        """Input positions committed for the app's group, read once after the task (re)opens.

        A task that commits on its own fenced any older instance when it opened; a task on its
        runner's transactions is moved only after the driver released or fenced its last runner
        (protocol/fences.py). Either way, from here on only this runner moves them.
        """
        return opened.committed_offsets([r.topic_partition for r in ranges])


def _with_duration(result: ItemResult, seconds: float) -> ItemResult:
    return replace(result, duration_s=seconds)
