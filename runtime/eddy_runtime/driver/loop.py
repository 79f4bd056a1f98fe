"""The Spark driver of a stream app: `Driver` puts the phases of each micro-batch in order
(docs/DESIGN.md, "One micro-batch"); each phase's work is done elsewhere.

One batch:

1. read the assignment (driver/assignment_source.py: the operator's, or the assignor run here in
   local mode) and hand a new generation to the runners ahead of the job (driver/handoff.py);
2. read committed input offsets and last stable offsets (driver/offsets.py), and plan work items on
   live executors only (driver/batch_plan.py): per task ``[committed, end)`` for a running active
   (capped), a restore chunk for an active still catching up, a changelog tail for each standby
   and warmup;
3. run them as one Spark job (driver/spark_plan.py, driver/executor_steps.py); `BatchWatch` cancels
   the job when one of its executors dies, and the next batch re-plans without it; after a failed
   job, find the records that make the user's DataFrame steps fail (driver/poison.py). An app that
   runs only continuously syncs its runners over HTTP instead while nothing changes what they hold
   (`Driver._sync_over_http`, protocol/work_push.py);
4. take in each item's figures (driver/accounting.py): metrics, progress, the runtime state for
   the operator.

Stopping (SIGTERM, Ctrl-C, `request_stop`): the running batch finishes (it is cancelled if it
outlives the grace period; a cancelled batch leaves no partial commit), then every executor's
task runner closes its stores, which writes their checkpoints.
"""

from __future__ import annotations

import logging
import pickle
import threading
import time
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import TYPE_CHECKING

from eddy_contract.assignor import Assignment, diff
from eddy_contract.channel import LiveSettings
from eddy_contract.spec import ProcessingGuarantee, StreamAppSpec
from eddy_contract.upgrade import UpgradeDecision
from eddy_runtime.driver.accounting import BatchAccounting
from eddy_runtime.driver.app_topics import ensure_app_topics
from eddy_runtime.driver.assignment_source import AssignmentSource
from eddy_runtime.driver.batch_plan import BatchPlan, plan_batch, task_lags
from eddy_runtime.driver.handoff import GenerationHandoff
from eddy_runtime.driver.metrics import DriverMetrics
from eddy_runtime.driver.offsets import OffsetReader, changelog_partitions, input_partitions
from eddy_runtime.driver.options import DriverOptions
from eddy_runtime.driver.outcomes import BatchOutcome, BatchReport, short_error
from eddy_runtime.driver.poison import PoisonIsolation
from eddy_runtime.driver.spark_plan import (
    BatchJob,
    SlotLayout,
    batch_job,
    close_runners,
    dataframe_item_slots,
    slot_layout,
)
from eddy_runtime.driver.startup import PreparedApp, load_pipeline, prepare_app, ship_by_value
from eddy_runtime.driver.upgrade_gate import needs_reset, publish_topology, reset_after_topics, reset_before_topics
from eddy_runtime.dsl.pipeline import Topology
from eddy_runtime.dsl.subtopology import CompiledApp
from eddy_runtime.kafka.client import KafkaClientConfig
from eddy_runtime.protocol.health import BatchProgress, HealthAndMetricsServer
from eddy_runtime.protocol.placement import BatchWatch, ExecutorRef, executor_hosts, live_executors
from eddy_runtime.protocol.runner_messages import Program
from eddy_runtime.protocol.work import BatchSettings, ItemResult, StateReset, WorkItem
from eddy_runtime.protocol.work_push import sync_runners
from eddy_runtime.queries.routing import QueryRouting, query_routing
from eddy_runtime.queries.server import StoreQueries

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["Driver"]

log = logging.getLogger("eddy.driver")

#: every this many batches, executors report what their volumes hold even without a new assignment
INVENTORY_EVERY_BATCHES = 20


class Driver:
    """Runs one stream app's micro-batches on a SparkSession: puts each batch's phases in order."""

    def __init__(self, spark: SparkSession, spec: StreamAppSpec, options: DriverOptions,
                 topology: Topology | None = None, pipeline_module: ModuleType | None = None,
                 upgrade: UpgradeDecision | None = None) -> None:
        """`upgrade`: the upgrade gate's decision on this version (driver/upgrade_gate.py), whose
        state reset, if any, `prepare` carries out before the first generation."""
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
        self.batch_id = 0
        self.progress = BatchProgress(spec.trigger_interval_s)
        #: per task, input records not committed yet (as of the last batch's plan)
        self.last_lag: dict[str, int] = {}
        #: where the queryable stores' keys live now (what the driver's query endpoint routes by)
        self.routing: QueryRouting | None = None
        self._source = AssignmentSource(self.sc, spec, options.assignment_source, self.metrics)
        self._handoff = GenerationHandoff(self.app, self.kafka, spec.trigger_interval_s,
                                          lambda: self._source.lost | self._source.dropped,
                                          options.per_executor_state_dirs,
                                          spec.metrics_port if options.assignment_source is not None else None)
        self._prepared: PreparedApp | None = None
        self._offsets = OffsetReader(self.kafka, self.app)
        self._layout: SlotLayout | None = None
        self._poison = PoisonIsolation(spark, spec.bad_record_policy)
        #: this batch's DataFrame tasks with their item and executor (what poison isolation probes)
        self._dataframe_items: dict[str, tuple[WorkItem, ExecutorRef]] = {}
        #: the generation whose first batch ran with every copy (see `plan_batch`'s `fresh`)
        self._planned_generation = -1
        self._stop = threading.Event()
        self._health: HealthAndMetricsServer | None = None
        self._watch: BatchWatch | None = None
        self._accounting = BatchAccounting(self.app, self.metrics, self._source, self._offsets,
                                           self._handoff.runner_addresses, options.runtime_state_target,
                                           options.max_failed_batches)
        self._last_batch_end = time.monotonic()
        #: the sub-topologies whose tasks the executors run continuously (executor/continuous.py)
        self._continuous: frozenset[int] = frozenset()
        self._upgrade = upgrade
        #: the state reset this driver carried out, which all its work carries (protocol/work.py)
        self.state_reset: StateReset | None = None

    def prepare(self) -> CompiledApp:
        """Compile the pipeline against the topics and create the topics the app needs, around the
        upgrade's state reset if it has one (driver/upgrade_gate.py's `reset_before_topics` and
        `reset_after_topics`); only then publish this version's topology."""
        reset = self._upgrade if needs_reset(self._upgrade) else None
        fenced = (reset_before_topics(reset, self._offsets.admin, self.app, self._handoff.fence_earlier_runners)
                  if reset is not None else [])
        self._prepared = prepare_app(self.spark, lambda: self._offsets.admin, self.kafka, self.topology, self.spec,
                                     create_output_topics=self.options.create_output_topics)
        self.compiled = self._prepared.compiled
        if reset is not None:
            self.state_reset = reset_after_topics(reset, self._offsets.admin, self._offsets, self.compiled,
                                                  self.options.runtime_state_target, fenced)
            self._handoff.state_reset = self.state_reset
        publish_topology(self.compiled, self.options.runtime_state_target)  # the running version's, from now on
        if self.spec.execution == "continuous":
            self._continuous = frozenset(s.id for s in self.compiled.subtopologies if not s.uses_dataframe)
        exactly_once = self.spec.processing_guarantee == ProcessingGuarantee.EXACTLY_ONCE
        self._handoff.start(self.compiled, self._continuous, exactly_once)
        self._source.prepare(self.compiled, self._handoff.push if self._continuous else None)
        return self.compiled

    @property
    def continuous_subtopologies(self) -> frozenset[int]:
        """The sub-topologies whose tasks the executors' runners run without micro-batches."""
        return self._continuous

    @property
    def assignment(self) -> Assignment | None:
        """The assignment the batches run."""
        return self._source.current

    @property
    def pushed(self) -> Assignment | None:
        """The newest assignment pushed to the runners (it may be ahead of `assignment`)."""
        return self._handoff.pushed

    @property
    def changelog_ends(self) -> dict[str, int]:
        """Per task, the changelog ends summed over its stores (as of the last batch's plan)."""
        return self._source.changelog_ends

    def standby_lags(self) -> dict[str, dict[str, int]]:
        """Per stateful task, per standby (or warmup) executor: changelog offsets it lacks."""
        return self._source.standby_lags()

    def _settings(self, live: Sequence[ExecutorRef] = ()) -> BatchSettings:
        assignment = self._source.current
        return BatchSettings(
            app=self.app,
            batch_id=self.batch_id,
            generation=assignment.generation if assignment else 0,
            kafka=self.kafka,
            guarantee=self.spec.processing_guarantee,
            bad_record_policy=self.spec.bad_record_policy,
            dead_letter_topic=self.spec.dead_letter_topic,
            state_dir=self.options.state_dir,
            per_executor_state_dirs=self.options.per_executor_state_dirs,
            executor_hosts=executor_hosts(live),
            routing=self._query_routing(live),
            push_token=self._handoff.token,
            acceptable_recovery_lag=self.spec.state.acceptable_recovery_lag,
            state_reset=self.state_reset,
        )

    def _query_routing(self, live: Sequence[ExecutorRef]) -> QueryRouting | None:
        """Where the queryable stores' keys live now (queries/server.py); also what the driver's endpoint routes by."""
        if self.compiled is None or self._source.current is None:
            return None
        self._handoff.forget_runners_except({e.id for e in live})
        self.routing = query_routing(self.compiled, self._source.current, self._handoff.runner_addresses)
        return self.routing

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
            return BatchReport(self.batch_id, BatchOutcome.FAILED, 0.0, 0, error="no live executor")
        self._source.notice_executors(live, self._settings)
        live = self._source.usable(live)
        self._handoff.know_executors(live)
        inputs = input_partitions(compiled)
        changelogs = changelog_partitions(compiled)
        committed = self._offsets.committed(inputs, unsettled_ok=input_partitions(compiled, self._continuous))
        ends = self._offsets.list_offsets(inputs + [tp for tps in changelogs.values() for tp in tps], "latest")
        changelog_ends = {t: sum(ends[tp] for tp in tps) for t, tps in changelogs.items()}
        self._source.changelog_ends = changelog_ends
        previous = self._source.current
        assignable = self._source.assignable(live)
        assignment = self._source.next_assignment(assignable)
        if assignment is None:
            log.info("waiting for the operator's first assignment")
            # The operator assigns only once it has seen the runtime state: publish it while waiting.
            if self.options.runtime_state_target is not None:
                waiting = BatchReport(self.batch_id, BatchOutcome.FAILED, 0.0, 0)
                self._accounting.publish_runtime_state(compiled, waiting, {}, assignable)
            time.sleep(1)
            return BatchReport(self.batch_id, BatchOutcome.FAILED, 0.0, 0, error="no assignment yet")
        if unknown := self._handoff.unknown_hosts(assignment):  # the operator saw them register first
            time.sleep(0.5)
            return BatchReport(self.batch_id, BatchOutcome.FAILED, 0.0, 0,
                               error=f"generation {assignment.generation}: executors {unknown} not registered yet")
        live = self._source.usable(live)  # and those it dropped in the assignment just read
        self._take_live_settings()
        moves = diff(previous, assignment) if previous is None or assignment.generation != previous.generation else ()
        self._handoff.fence(assignment)  # before any runner hears of it (raises: the batch fails, nothing sent)
        self._source.current = assignment
        for m in moves:
            log.info("assignment %d: task %s %s %s -> %s", assignment.generation, m.task, m.kind, m.source, m.target)
        if previous is not None and assignment.generation != previous.generation:
            # before planning the job (a tenth of a second or more): a task let go waits for it
            self._handoff.push(assignment, {e.id for e in live})  # the job below brings it again
        settings = self._settings(live)
        layout = self._layout = slot_layout(self.spark, compiled, assignment, live, self._layout)
        lag = self.last_lag = task_lags(compiled, committed, ends)
        fresh = self._planned_generation != assignment.generation
        plan = plan_batch(compiled, assignment, {e.id for e in layout.executor_slots}, committed=committed, ends=ends,
                          changelog_ends=changelog_ends, held_offsets=self._source.volumes.held,
                          restoring=self._source.volumes.restoring, poison=self._poison.found,
                          max_records=self.options.max_batch_records, fresh=fresh, continuous=self._continuous)
        self._planned_generation = assignment.generation
        self._dataframe_items = dataframe_item_slots(layout, plan)
        inventory = fresh or self.batch_id % INVENTORY_EVERY_BATCHES == 0
        warm = {e.id for e in layout.executor_slots} - self._source.ready
        report = BatchReport(self.batch_id, BatchOutcome.OK, 0.0, assignment.generation, moves=moves)
        report.plan_s = time.monotonic() - started
        synced, complete = ([], False) if fresh or warm else self._sync_over_http(
            plan, [e.id for e in layout.executor_slots], inventory)
        if complete:
            report.results, report.over_http = synced, True
        else:  # what runners answered over HTTP is theirs no more: it counts beside the job's
            job = batch_job(compiled, layout, plan, settings,
                            Program(self._prepared.program_id, self._prepared.program),
                            fresh=fresh, inventory=inventory,
                            continuous_work=self._handoff.continuous_work if self._continuous else None,
                            warm=warm)
            report.results = synced + self._run_job(job, live, settings, report)
        if report.outcome == BatchOutcome.OK:
            self._source.ready.update(e.id for e in layout.executor_slots)
        report.duration_s = time.monotonic() - started
        report.job_s = report.duration_s - report.plan_s
        wall = time.monotonic() - self._last_batch_end
        self._last_batch_end = time.monotonic()
        self._accounting.account(compiled, report, wall, assignment, live, lag)
        return report

    def _take_live_settings(self) -> None:
        """Operator mode: the spec's settings changed in place (triggerInterval, the bad-record
        policy, acceptableRecoveryLag; eddy_contract.channel.LiveSettings) apply from this batch on."""
        live = self._source.live_settings
        if live is None or live == LiveSettings.of(self.spec):
            return
        log.info("settings changed in place: %s", live)
        self.spec = live.applied_to(self.spec)
        self._source.spec = self.spec
        self._handoff.commit_interval_s = self.spec.trigger_interval_s
        self.progress.trigger_interval_s = self.spec.trigger_interval_s
        self._poison.policy = self.spec.bad_record_policy
        if self.spec.dead_letter_topic and self.compiled is not None:  # a dead-letter policy now
            ensure_app_topics(self._offsets.admin, self.compiled, self.spec, create_outputs=False)

    def _sync_over_http(self, plan: BatchPlan, executors: Sequence[str],
                        inventory: bool) -> tuple[list[ItemResult], bool]:
        """An app that runs only continuously, in a generation its executors already run: what
        the runners did since the last sync (`inventory`: and what their volumes hold), collected
        over HTTP instead of by a Spark job (work_push.SYNC_PATH), and whether every runner
        answered. Nothing is asked when the batch needs its Spark job anyway: the app has other
        work or the last batch failed (the caller also runs one for whatever changes what an
        executor holds)."""
        assignment = self._source.current
        if (self.compiled is None or assignment is None or self._accounting.failed_batches
                or len(self._continuous) != len(self.compiled.subtopologies)
                or plan.dataframe_items or any(plan.per_executor.values())):
            return [], False
        work = {e: self._handoff.continuous_work(assignment.generation, e, plan.continuous[e]) for e in executors}
        # watched as a Spark job is: an executor that dies meanwhile has its tasks moved at once
        with BatchWatch(self.sc, f"eddy-{self.app}-sync-{self.batch_id}", executors,
                        description=f"eddy {self.app} sync {self.batch_id}",
                        on_lost=self._source.lost_mid_batch, gone=lambda: self._source.dropped) as watch:
            answers = sync_runners(self._handoff.runner_addresses, work, self.app, self._handoff.token, inventory)
        if watch.lost is not None:
            self._source.executor_lost(watch.lost, f"it died during sync {self.batch_id}")
        results = self._source.take_inventories([r for results in answers.values() for r in results])
        return results, answers.keys() == work.keys()

    def _run_job(self, job: BatchJob, live: Sequence[ExecutorRef], settings: BatchSettings,
                 report: BatchReport) -> list[ItemResult]:
        """Run the batch's Spark job; its items' results (none when it failed, see `report`)."""
        if job.empty:
            return []
        try:
            with BatchWatch(self.sc, f"eddy-{self.app}-batch-{self.batch_id}", [e.id for e in live],
                            description=f"eddy {self.app} batch {self.batch_id}",
                            on_lost=self._source.lost_mid_batch, gone=lambda: self._source.dropped) as watch:
                self._watch = watch
                rows = job.collect()
            return self._source.take_inventories([pickle.loads(r) for r in rows])
        except Exception as e:  # noqa: BLE001 - classified below; the next batch re-plans
            # The items of this batch may not all have run: plan every copy again next batch.
            self._planned_generation = -1
            if self._watch is not None and self._watch.lost is not None:
                report.outcome = BatchOutcome.CANCELLED
                self._source.executor_lost(self._watch.lost, f"batch {self.batch_id} was cancelled")
            elif self._watch is not None and self._watch.cancelled_reason:
                report.outcome = BatchOutcome.CANCELLED
                report.error = self._watch.cancelled_reason
            else:
                report.outcome = BatchOutcome.FAILED
                report.error = short_error(e)
                log.error("batch %d failed: %s", self.batch_id, report.error)
                if self._dataframe_items:
                    assert self.compiled is not None
                    self._poison.isolate(settings, self.compiled, self._dataframe_items)
            return []
        finally:
            self._watch = None

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
        self.progress = BatchProgress(self.spec.trigger_interval_s)
        if self.options.metrics_port:  # /metrics and the liveness probe's /healthz
            self._health = HealthAndMetricsServer(
                self.options.metrics_port, self.options.metrics_addr, self.metrics.registry, self.progress,
                StoreQueries(lambda: self.routing).wsgi)
            log.info("metrics, /healthz and interactive queries on http://%s:%d", self.options.metrics_addr,
                     self.options.metrics_port)
        self._source.watch()
        n = 0
        try:
            while not self._stop.is_set():
                started = time.monotonic()
                self.progress.batch_started()
                report = self.run_batch()
                report.lost_executors = self._source.take_losses()
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
                    # the next sync: at the sync interval, or as soon as what the runners hold changes
                    self._source.wait_for_change(self._stop, started + self.options.sync_interval_s,
                                                 min(self.spec.trigger_interval_s, 0.1))
                elif not full:
                    self._stop.wait(max(0.0, self.spec.trigger_interval_s - (time.monotonic() - started)))
        finally:
            self.close()

    def close(self) -> None:
        """Close every executor's tasks (stores flushed, checkpoints written), then the clients."""
        try:
            # not the executors the operator found lost: a job pinned to a dead one waits an hour
            live = self._source.usable(live_executors(self.sc))
            if live:
                close_runners(self.sc, live, self._settings(live))
        finally:
            self._source.close()
            if self._health is not None:
                self._health.close()
                self._health = None
            self._handoff.close()
            self._offsets.close()
