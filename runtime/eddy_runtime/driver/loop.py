"""The Spark driver of a stream app: the micro-batch loop that composes planning, the Spark plan
and accounting (docs/DESIGN.md, "One micro-batch").

One batch:

1. read the assignment: from the operator (a file or the ``<app>-assignment`` ConfigMap) or, in
   local mode, from the same assignor (`eddy_contract.assignor.assign_app`) run here, fed by what
   each executor's volume holds (driver/runtime_state.py);
2. read committed input offsets and last stable offsets (driver/offsets.py), and plan work items on
   live executors only (driver/batch_plan.py): per task ``[committed, end)`` for a running active
   (capped), a restore chunk for an active still catching up, a changelog tail for each standby
   and warmup;
3. run them as one Spark job (driver/spark_plan.py, driver/executor_steps.py); `BatchWatch` cancels the job
   when one of its executors dies, and the next batch re-plans without it; after a failed job,
   find the records that make the user's DataFrame steps fail (driver/poison.py). An app that runs
   only continuously syncs its runners over HTTP instead while nothing changes what they hold
   (`Driver._sync_over_http`, protocol/work_push.py);
4. gather each item's figures: metrics, progress, the runtime state for the operator.

Stopping (SIGTERM, Ctrl-C, `request_stop`): the running batch finishes (it is cancelled if it
outlives the grace period; a cancelled batch leaves no partial commit), then every executor's
task runner closes its stores, which writes their checkpoints.
"""

from __future__ import annotations

import logging
import os
import pickle
import secrets
import threading
import time
from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from eddy_contract.assignor import Assignment, AssignorSettings, Executor, assign_app, diff
from eddy_contract.spec import ProcessingGuarantee, StreamAppSpec
from eddy_runtime.driver.batch_plan import BatchPlan, continuous_copies, plan_batch, task_lags
from eddy_runtime.driver.channel_io import AssignmentWatch, ChannelLocation, read_assignment, write_runtime_state
from eddy_runtime.driver.metrics import DriverMetrics
from eddy_runtime.driver.offsets import OffsetReader, changelog_partitions, input_partitions
from eddy_runtime.driver.outcomes import BatchReport, short_error, stop_error
from eddy_runtime.driver.poison import PoisonIsolation
from eddy_runtime.driver.progress import CopyProgressTracker
from eddy_runtime.driver.runtime_state import Volumes, probe_inventories, runtime_state
from eddy_runtime.driver.spark_plan import (
    BatchJob,
    SlotLayout,
    batch_job,
    close_runners,
    dataframe_item_slots,
    slot_layout,
)
from eddy_runtime.driver.startup import PreparedApp, load_pipeline, prepare_app, ship_by_value
from eddy_runtime.dsl.compiler import CompiledApp
from eddy_runtime.dsl.pipeline import Topology
from eddy_runtime.kafka.client import KafkaClientConfig
from eddy_runtime.protocol.fences import FenceBook
from eddy_runtime.protocol.health import BatchProgress, HealthAndMetricsServer
from eddy_runtime.protocol.placement import BatchWatch, ExecutorRef, executor_hosts, live_executors
from eddy_runtime.protocol.work import BatchSettings, ContinuousWork, ItemResult, ItemStatus, WorkItem
from eddy_runtime.protocol.work_push import push_work, release_tasks, sync_runners
from eddy_runtime.queries.routing import QueryRouting, query_routing
from eddy_runtime.queries.server import StoreQueries

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["Driver", "DriverOptions", "default_state_dir"]

log = logging.getLogger("eddy.driver")

#: every this many batches, executors report what their volumes hold even without a new assignment
INVENTORY_EVERY_BATCHES = 20
#: how long a live runner has to let go of the continuous actives a generation takes from it
#: before it is fenced instead (protocol/fences.py; at least 5 commit intervals)
RELEASE_TIMEOUT_S = 3.0


@dataclass(frozen=True)
class DriverOptions:
    """How the driver runs, beyond what the StreamApp spec says."""

    state_dir: str
    #: local mode: executors share one disk, each gets ``<state_dir>/executor-<id>``
    per_executor_state_dirs: bool = False
    #: records per task and batch at most (bounds a batch's duration and memory)
    max_batch_records: int = 200_000
    metrics_port: int | None = None
    metrics_addr: str = "0.0.0.0"
    #: operator mode: where the operator publishes the assignment (None: the local assignor)
    assignment_source: ChannelLocation | None = None
    #: where to publish the runtime state for the operator (None: nowhere)
    runtime_state_target: ChannelLocation | None = None
    create_output_topics: bool = True
    #: how long a stop waits for the running batch before cancelling it
    stop_grace_s: float = 30.0
    #: consecutive failed batches before the driver gives up
    max_failed_batches: int = 5
    #: an app whose sub-topologies all run continuously: how often the driver hands executors
    #: the assignment and collects figures (sooner when an executor comes or goes)
    sync_interval_s: float = 1.0


def default_state_dir() -> str:
    return os.environ.get("EDDY_STATE_DIR", str(Path.cwd() / ".cache" / "eddy-state"))


class Driver:
    """Runs one stream app's micro-batches on a SparkSession."""

    def __init__(self, spark: SparkSession, spec: StreamAppSpec, options: DriverOptions,
                 topology: Topology | None = None, pipeline_module: ModuleType | None = None) -> None:
        self.spark = spark
        self.sc = spark.sparkContext
        self.spec = spec
        self.app = spec.application_id
        self.options = options
        #: no secrets: every client adds the credentials of the process that creates it
        self.kafka = KafkaClientConfig.from_spec(spec)
        if topology is None:
            topology, pipeline_module = load_pipeline(spec)
        self.topology = topology
        if pipeline_module is not None:
            ship_by_value(pipeline_module)
        self.metrics = DriverMetrics(self.app)
        self.compiled: CompiledApp | None = None
        self.assignment: Assignment | None = None
        self.batch_id = 0
        self.progress = BatchProgress(spec.trigger_interval_s)
        #: per task, input records not committed yet (as of the last batch's plan)
        self.last_lag: dict[str, int] = {}
        self._prepared: PreparedApp | None = None
        self._offsets = OffsetReader(self.kafka, self.app)
        self._layout: SlotLayout | None = None
        self._volumes = Volumes()
        #: restore progress of every copy catching up (published for the operator's status)
        self._progress = CopyProgressTracker()
        self._poison = PoisonIsolation(spark, spec.bad_record_policy.value)
        self._known_executors: set[str] = set()
        self._lost: set[str] = set()
        #: executors whose task runner answered a batch: only those are given tasks (`_assignable`)
        self._ready: set[str] = set()
        #: this batch's DataFrame tasks with their item and executor (what poison isolation probes)
        self._dataframe_items: dict[str, tuple[WorkItem, ExecutorRef]] = {}
        #: the generation whose first batch ran with every copy (see `plan_batch`'s `fresh`)
        self._planned_generation = -1
        #: per task, the changelog ends summed over its stores (as of the last batch's plan)
        self._changelog_ends: dict[str, int] = {}
        self._stop = threading.Event()
        self._health: HealthAndMetricsServer | None = None
        self._assignment_watch: AssignmentWatch | None = None
        self._watch: BatchWatch | None = None
        self._failed_batches = 0
        self._last_batch_end = time.monotonic()
        #: the sub-topologies whose tasks the executors run continuously (executor/continuous.py)
        self._continuous: frozenset[int] = frozenset()
        #: executor -> where its runner serves interactive queries; and the routing built from them
        self._query_addresses: dict[str, str] = {}
        #: what the runners require of a push of a new generation (protocol/work_push.py)
        self._push_token = secrets.token_urlsafe(18)
        self._push_lock = threading.Lock()
        #: the newest assignment pushed to the runners (it may be ahead of `assignment` while a
        #: job runs: an executor died mid-batch, or the operator's new generation came)
        self.pushed: Assignment | None = None
        self.routing: QueryRouting | None = None
        #: exactly-once continuous: the runners' fences (protocol/fences.py)
        self._fences: FenceBook | None = None

    def prepare(self) -> CompiledApp:
        """Compile the pipeline against the topics and create the topics the app needs."""
        self._prepared = prepare_app(self.spark, lambda: self._offsets.admin, self.kafka, self.topology, self.spec,
                                     create_output_topics=self.options.create_output_topics)
        self.compiled = self._prepared.compiled
        if self.spec.execution == "continuous":
            self._continuous = frozenset(s.id for s in self.compiled.subtopologies if not s.uses_dataframe)
        exactly_once = self.spec.processing_guarantee == ProcessingGuarantee.EXACTLY_ONCE
        if self._continuous and exactly_once and self._fences is None:
            self._fences = FenceBook(self.kafka, self.app)
            self._fences.start()
        return self.compiled

    @property
    def continuous_subtopologies(self) -> frozenset[int]:
        """The sub-topologies whose tasks the executors' runners run without micro-batches."""
        return self._continuous

    def _settings(self, live: Sequence[ExecutorRef] = ()) -> BatchSettings:
        return BatchSettings(
            app=self.app,
            batch_id=self.batch_id,
            generation=self.assignment.generation if self.assignment else 0,
            kafka=self.kafka,
            guarantee=self.spec.processing_guarantee,
            bad_record_policy=self.spec.bad_record_policy,
            dead_letter_topic=self.spec.dead_letter_topic,
            state_dir=self.options.state_dir,
            per_executor_state_dirs=self.options.per_executor_state_dirs,
            executor_hosts=executor_hosts(live),
            routing=self._query_routing(live),
            push_token=self._push_token,
        )

    def _query_routing(self, live: Sequence[ExecutorRef]) -> QueryRouting | None:
        """Where the queryable stores' keys live now (queries/server.py); also what the driver's endpoint routes by."""
        if self.compiled is None or self.assignment is None:
            return None
        alive = {e.id for e in live}
        for e in [e for e in self._query_addresses if e not in alive]:
            del self._query_addresses[e]
        self.routing = query_routing(self.compiled, self.assignment, self._query_addresses)
        return self.routing

    # -- executors and assignment ---------------------------------------------------------------

    def _notice_executors(self, live: Sequence[ExecutorRef]) -> None:
        """Count the executors that left; before the first assignment, read the volumes of the
        executors (later newcomers report theirs in their first batch, see `_assignable`)."""
        new = [e for e in live if e.id not in self._known_executors]
        for gone in self._known_executors - {e.id for e in live} - self._lost:
            self._executor_lost(gone, "it left the cluster")
        if new and self.assignment is None and self.options.assignment_source is None:
            try:
                found = probe_inventories(self.sc, new, self._settings(new))
            except Exception as e:  # noqa: BLE001 - placement still works without it, just less sticky
                log.warning("could not read the state inventories of %s: %s", [e.id for e in new], e)
            else:
                for executor, inventory in found:
                    self._volumes.record_inventory(executor, inventory)
        self._known_executors = {e.id for e in live}

    # -- pushing a new generation (protocol/work_push.py) -------------------------------------------------

    def _push(self, assignment: Assignment, live: Set[str]) -> None:
        """Push `assignment`'s continuous work to the runners of `live` (once per generation)."""
        with self._push_lock:
            if (not self._continuous or self.compiled is None
                    or (self.pushed is not None and assignment.generation <= self.pushed.generation)):
                return
            try:
                self._fence_for(assignment)
            except Exception:  # noqa: BLE001 - nothing pushed; the next batch fences and sends it
                log.exception("fencing for generation %d failed; not pushed", assignment.generation)
                return
            self.pushed = assignment
        work = continuous_copies(self.compiled, assignment, live, self._continuous)
        epochs = self.fence_epochs()
        push_work(self._query_addresses,
                  {e: ContinuousWork(assignment.generation, tuple(tasks), self.spec.trigger_interval_s,
                                     epochs.get(e, 0))
                   for e, tasks in work.items()}, self.app, self._push_token)

    def _fence_for(self, assignment: Assignment) -> None:
        """Exactly-once continuous: before any runner hears of `assignment`, the executors that
        lose a continuous active in it let it go, or have their runner transactions fenced
        (protocol/fences.py); only an executor that `assignment` still names is asked to let go."""
        if self._fences is None or self.compiled is None:
            return
        actives = {task: placement.active for sub in self.compiled.subtopologies if sub.id in self._continuous
                   for task in sub.task_ids if (placement := assignment.tasks.get(task)) is not None}
        named = set(assignment.executors()) - self._lost

        def release(losing: Mapping[str, Sequence[str]]) -> set[str]:
            asked = {e: tasks for e, tasks in losing.items() if e in named}
            if not asked:
                return set()
            return release_tasks(self._query_addresses, asked, self.app, self._push_token, assignment.generation,
                                 max(RELEASE_TIMEOUT_S, 5 * self.spec.trigger_interval_s))

        self._fences.before_generation(assignment.generation, actives, release)

    def fence_epochs(self) -> dict[str, int]:
        """Each executor's fence epoch, as every generation's work carries it (protocol/fences.py)."""
        return self._fences.epochs() if self._fences is not None else {}

    def _lost_mid_batch(self, executor: str) -> None:
        """On a thread of the batch watch, when an executor dies while a job or a sync over HTTP
        runs: cancelling the job takes seconds on a loaded machine, and the next batch starts
        only after the sync, so the next generation (local mode: the assignor run here, as the
        next batch will) goes to the survivors now."""
        if not self._continuous or self.options.assignment_source is not None or self.assignment is None:
            return
        live = [e for e in live_executors(self.sc) if e.id != executor]
        assignment = self._next_assignment(self._assignable(live), self._changelog_ends)
        if assignment is not None and assignment.generation != self.assignment.generation:
            log.info("executor %s died mid-batch: generation %d pushed to the survivors", executor,
                     assignment.generation)
            self._push(assignment, {e.id for e in live})

    def _assignment_changed(self) -> None:
        """On the assignment watch's thread: the operator's new generation goes to the runners
        now, not after the job under way."""
        if not self._continuous or self.options.assignment_source is None or self.assignment is None:
            return
        assignment = read_assignment(self.options.assignment_source)
        if assignment is not None and assignment.generation > self.assignment.generation:
            self._push(assignment, {e.id for e in live_executors(self.sc)})

    def _executor_lost(self, executor: str, what: str) -> None:
        self._lost.add(executor)
        self._ready.discard(executor)
        self.metrics.failovers.labels(self.app).inc()
        log.warning("executor %s died (%s); re-planning on the live executors", executor, what)

    def _assignable(self, live: Sequence[ExecutorRef]) -> list[ExecutorRef]:
        """The live executors that may be given tasks. An executor that joins later (a replacement
        for a lost one, a scale-up) first runs one batch with nothing assigned: its task runner
        starts, loads the program and reports the volume's inventory, so that tasks moved to it
        do not wait for a cold start while their previous owner has already let them go."""
        if self.assignment is None:
            return list(live)
        return [e for e in live if e.id in self._ready] or list(live)

    def _next_assignment(self, live: Sequence[ExecutorRef], changelog_ends: Mapping[str, int]) -> Assignment | None:
        if self.options.assignment_source is not None:
            return read_assignment(self.options.assignment_source)
        assert self.compiled is not None
        live_ids = {e.id for e in live}
        held = {e: tasks for e, tasks in self._volumes.held.items() if e in live_ids}
        settings = AssignorSettings(
            standby_replicas=self.spec.state.standby_replicas,
            acceptable_recovery_lag=self.spec.state.acceptable_recovery_lag,
            max_warmup_replicas=self.spec.state.max_warmup_replicas,
        )
        executors = [Executor(id=e.id, cores=self.spec.executors.cores) for e in live]
        return assign_app(executors, changelog_ends, held, self.assignment, settings, self.compiled.stateful_tasks())

    def standby_lags(self) -> dict[str, dict[str, int]]:
        """Per stateful task, per standby (or warmup) executor: changelog offsets it lacks."""
        if self.assignment is None or self.compiled is None:
            return {}
        out: dict[str, dict[str, int]] = {}
        for task in self.compiled.stateful_tasks():
            placement = self.assignment.tasks.get(task)
            if placement is None:
                continue
            end = self._changelog_ends.get(task, 0)
            out[task] = {e: max(end - self._volumes.held.get(e, {}).get(task, 0), 0)
                         for e in (*placement.standbys, *placement.warmups)}
        return out

    # -- one batch ------------------------------------------------------------------------------

    def run_batch(self) -> BatchReport:
        """Plan, run and account for one micro-batch."""
        compiled = self.compiled or self.prepare()
        assert self._prepared is not None
        self.batch_id += 1
        started = time.monotonic()
        live = live_executors(self.sc)
        if not live:
            time.sleep(1)
            return BatchReport(self.batch_id, "failed", 0.0, 0, error="no live executor")
        self._notice_executors(live)
        inputs = input_partitions(compiled)
        changelogs = changelog_partitions(compiled)
        committed = self._offsets.committed(inputs, unsettled_ok=input_partitions(compiled, self._continuous))
        ends = self._offsets.list_offsets(inputs + [tp for tps in changelogs.values() for tp in tps], "latest")
        changelog_ends = {t: sum(ends[tp] for tp in tps) for t, tps in changelogs.items()}
        self._changelog_ends = changelog_ends
        previous = self.assignment
        assignable = self._assignable(live)
        assignment = self._next_assignment(assignable, changelog_ends)
        if assignment is None:
            log.info("waiting for the operator's first assignment")
            # The operator assigns only once it has seen the runtime state: publish it while waiting.
            if self.options.runtime_state_target is not None:
                self._publish_runtime_state(BatchReport(self.batch_id, "failed", 0.0, 0), {}, assignable)
            time.sleep(1)
            return BatchReport(self.batch_id, "failed", 0.0, 0, error="no assignment yet")
        moves = diff(previous, assignment) if previous is None or assignment.generation != previous.generation else ()
        self._fence_for(assignment)  # before any runner hears of it (raises: the batch fails, nothing sent)
        self.assignment = assignment
        for m in moves:
            log.info("assignment %d: task %s %s %s -> %s", assignment.generation, m.task, m.kind, m.source, m.target)
        if previous is not None and assignment.generation != previous.generation:
            # before planning the job (a tenth of a second or more): a task let go waits for it
            self._push(assignment, {e.id for e in live})  # the job below brings it again
        settings = self._settings(live)
        layout = self._layout = slot_layout(self.spark, compiled, assignment, live, self._layout)
        lag = self.last_lag = task_lags(compiled, committed, ends)
        fresh = self._planned_generation != assignment.generation
        plan = plan_batch(compiled, assignment, {e.id for e in layout.executor_slots}, committed=committed, ends=ends,
                          changelog_ends=changelog_ends, held_offsets=self._volumes.held,
                          restoring=self._volumes.restoring, poison=self._poison.found,
                          max_records=self.options.max_batch_records, fresh=fresh, continuous=self._continuous)
        self._planned_generation = assignment.generation
        self._dataframe_items = dataframe_item_slots(layout, plan)
        inventory = fresh or self.batch_id % INVENTORY_EVERY_BATCHES == 0
        warm = {e.id for e in layout.executor_slots} - self._ready
        report = BatchReport(self.batch_id, "ok", 0.0, assignment.generation, moves=moves)
        report.plan_s = time.monotonic() - started
        synced, complete = ([], False) if fresh or warm else self._sync_over_http(
            plan, [e.id for e in layout.executor_slots], inventory)
        if complete:
            report.results, report.over_http = synced, True
        else:  # what runners answered over HTTP is theirs no more: it counts beside the job's
            job = batch_job(compiled, layout, plan, settings, (self._prepared.program_id, self._prepared.program),
                            fresh=fresh, inventory=inventory,
                            commit_interval_s=self.spec.trigger_interval_s if self._continuous else None,
                            fence_epochs=self.fence_epochs(), warm=warm)
            report.results = synced + self._run_job(job, live, settings, report)
        if report.outcome == "ok":
            self._ready.update(e.id for e in layout.executor_slots)
        report.duration_s = time.monotonic() - started
        report.job_s = report.duration_s - report.plan_s
        wall = time.monotonic() - self._last_batch_end
        self._last_batch_end = time.monotonic()
        self._account(report, wall, assignment, live, lag)
        return report

    def _sync_over_http(self, plan: BatchPlan, executors: Sequence[str],
                        inventory: bool) -> tuple[list[ItemResult], bool]:
        """An app that runs only continuously, in a generation its executors already run: what
        the runners did since the last sync (`inventory`: and what their volumes hold), collected
        over HTTP instead of by a Spark job (work_push.SYNC_PATH), and whether every runner
        answered. Nothing is asked when the batch needs its Spark job anyway: the app has other
        work or the last batch failed (the caller also runs one for whatever changes what an
        executor holds)."""
        if (self.compiled is None or self.assignment is None or self._failed_batches
                or len(self._continuous) != len(self.compiled.subtopologies)
                or plan.dataframe_items or any(plan.per_executor.values())):
            return [], False
        epochs = self.fence_epochs()
        work = {e: ContinuousWork(self.assignment.generation, tuple(plan.continuous[e]), self.spec.trigger_interval_s,
                                  epochs.get(e, 0)) for e in executors}
        # watched as a Spark job is: an executor that dies meanwhile has its tasks moved at once
        with BatchWatch(self.sc, f"eddy-{self.app}-sync-{self.batch_id}", executors,
                        description=f"eddy {self.app} sync {self.batch_id}", on_lost=self._lost_mid_batch):
            answers = sync_runners(self._query_addresses, work, self.app, self._push_token, inventory)
        results = self._take_inventories([r for results in answers.values() for r in results])
        return results, answers.keys() == work.keys()

    def _take_inventories(self, results: list[ItemResult]) -> list[ItemResult]:
        """`results` less the volumes' inventories among them, which are recorded."""
        for r in results:
            if r.inventory is not None:
                self._volumes.record_inventory(r.executor, r.inventory)
        return [r for r in results if r.inventory is None]

    def _run_job(self, job: BatchJob, live: Sequence[ExecutorRef], settings: BatchSettings,
                 report: BatchReport) -> list[ItemResult]:
        """Run the batch's Spark job; its items' results (none when it failed, see `report`)."""
        if job.empty:
            return []
        try:
            with BatchWatch(self.sc, f"eddy-{self.app}-batch-{self.batch_id}", [e.id for e in live],
                            description=f"eddy {self.app} batch {self.batch_id}",
                            on_lost=self._lost_mid_batch) as watch:
                self._watch = watch
                rows = job.collect()
            return self._take_inventories([pickle.loads(r) for r in rows])
        except Exception as e:  # noqa: BLE001 - classified below; the next batch re-plans
            # The items of this batch may not all have run: plan every copy again next batch.
            self._planned_generation = -1
            if self._watch is not None and self._watch.lost is not None:
                report.outcome = "cancelled"
                report.lost_executor = self._watch.lost
                self._executor_lost(self._watch.lost, f"batch {self.batch_id} was cancelled")
            elif self._watch is not None and self._watch.cancelled_reason:
                report.outcome = "cancelled"
                report.error = self._watch.cancelled_reason
            else:
                report.outcome = "failed"
                report.error = short_error(e)
                log.error("batch %d failed: %s", self.batch_id, report.error)
                if self._dataframe_items:
                    assert self.compiled is not None
                    self._poison.isolate(settings, self.compiled, self._dataframe_items)
            return []
        finally:
            self._watch = None

    def _account(self, report: BatchReport, wall: float, assignment: Assignment, live: Sequence[ExecutorRef],
                 lag: Mapping[str, int]) -> None:
        """Metrics, progress and the runtime state from a batch; `DriverError` if the app must stop."""
        assert self.compiled is not None
        live_ids = {e.id for e in live}
        self._volumes.record_results(report.results, live_ids)
        self._query_addresses.update((r.executor, r.query_address) for r in report.results if r.query_address)
        self._progress.update(report.results, assignment, live_ids, complete=report.outcome == "ok")
        restoring = sum(1 for r in report.results if r.role == "active" and r.status == "restoring")
        standbys = sum(len(a.standbys) + len(a.warmups) for t, a in assignment.tasks.items()
                       if self.compiled.subtopology_of(t).stateful_task)
        self.metrics.observe_batch(report.outcome, report.duration_s, report.results, wall)
        self.metrics.observe_tasks(lag, restoring, standbys, len(live), assignment.generation)
        if report.outcome == "ok" and not report.by_status(ItemStatus.FAILED):
            self._failed_batches = 0
        else:
            self._failed_batches += 1
        for r in report.by_status(ItemStatus.FAILED):
            log.error("task %s on executor %s failed: %s", r.task, r.executor, r.message)
        for r in report.results:
            for b in r.bad_records:
                log.warning("app %s task %s: bad record %s (%s)", self.app, r.task, b,
                            "dead-lettered" if r.dead_lettered else "skipped")
        error = stop_error(report, self._failed_batches, self.options.max_failed_batches)
        if error is not None:
            raise error
        if self.options.runtime_state_target is not None:
            try:
                self._publish_runtime_state(report, lag, self._assignable(live))
            except Exception as e:  # noqa: BLE001 - the operator reads it again next batch
                log.warning("could not publish the runtime state: %s", e)

    def _publish_runtime_state(self, report: BatchReport, lag: Mapping[str, int],
                               live: Sequence[ExecutorRef]) -> None:
        assert self.options.runtime_state_target is not None and self.compiled is not None
        changelogs = [tp for tps in changelog_partitions(self.compiled).values() for tp in tps]
        state = runtime_state(self.compiled, self._offsets.list_offsets(changelogs, "latest"), self._volumes, live,
                              self._progress.in_progress(), lag, report.generation, report.batch_id)
        write_runtime_state(self.options.runtime_state_target, state)

    # -- the loop ---------------------------------------------------------------------------------

    def request_stop(self) -> None:
        """Stop after the running batch (SIGTERM and Ctrl-C call this)."""
        self._stop.set()
        watch = self._watch
        if watch is not None:
            def cancel_late() -> None:
                if self._watch is watch:
                    watch.cancel("stop requested and the batch outlived the grace period")

            timer = threading.Timer(self.options.stop_grace_s, cancel_late)
            timer.daemon = True
            timer.start()

    def run(self, on_batch: Callable[[BatchReport], None] | None = None, max_batches: int | None = None,
            until: Callable[[BatchReport], bool] | None = None) -> None:
        """Run batches every trigger interval until stopped (or `until` says so)."""
        if self.compiled is None:
            self.prepare()
        interval = self.spec.trigger_interval_s
        self.progress = BatchProgress(interval)
        if self.options.metrics_port:  # /metrics and the liveness probe's /healthz
            self._health = HealthAndMetricsServer(
                self.options.metrics_port, self.options.metrics_addr, self.metrics.registry, self.progress,
                StoreQueries(lambda: self.routing).wsgi)
            log.info("metrics, /healthz and interactive queries on http://%s:%d", self.options.metrics_addr,
                     self.options.metrics_port)
        if self.options.assignment_source is not None:
            self._assignment_watch = AssignmentWatch(self.options.assignment_source, self._assignment_changed)
        n = 0
        try:
            while not self._stop.is_set():
                started = time.monotonic()
                self.progress.batch_started()
                report = self.run_batch()
                self.progress.batch_finished()
                n += 1
                if on_batch is not None:
                    on_batch(report)
                if until is not None and until(report):
                    break
                if max_batches is not None and n >= max_batches:
                    break
                full = any(r.records_in >= self.options.max_batch_records for r in report.results)
                if self.compiled is not None and len(self._continuous) == len(self.compiled.subtopologies):
                    self._wait_for_sync(started)
                elif not full:
                    self._stop.wait(max(0.0, interval - (time.monotonic() - started)))
        finally:
            self.close()

    def _wait_for_sync(self, started: float) -> None:
        """Until the next sync of an app that runs only continuously: the sync interval, or until
        an executor comes or goes (its tasks move at once), or the operator's assignment changed
        (its new generation reaches the executors at once)."""
        known = set(self._known_executors)
        deadline = started + self.options.sync_interval_s
        step = min(self.spec.trigger_interval_s, 0.1)
        watch = self._assignment_watch
        while not self._stop.wait(max(0.0, min(step, deadline - time.monotonic()))):
            if watch is not None and watch.changed.is_set():
                watch.changed.clear()
                return
            if time.monotonic() >= deadline or {e.id for e in live_executors(self.sc)} != known:
                return

    def close(self) -> None:
        """Close every executor's tasks (stores flushed, checkpoints written), then the clients."""
        try:
            live = live_executors(self.sc)
            if live:
                close_runners(self.sc, live, self._settings(live))
        finally:
            if self._assignment_watch is not None:
                self._assignment_watch.close()
                self._assignment_watch = None
            if self._health is not None:
                self._health.close()
                self._health = None
            if self._fences is not None:
                self._fences.close()
            self._offsets.close()
