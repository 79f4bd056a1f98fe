"""The Spark driver of a stream app: the micro-batch loop with pinned placement.

One batch (DESIGN.md, "One micro-batch"):

1. read the assignment: from the operator (a file or the ``<app>-assignment`` ConfigMap) or, in
   local mode, from the same assignor (`eddy_contract.assignor.assign`) run here, fed by what
   each executor's volume holds;
2. read committed input offsets and last stable offsets, and plan work items on live executors
   only: per task ``[committed, end)`` for a running active (capped), a restore chunk for an
   active still catching up, a changelog tail for each standby and warmup;
3. run them as one Spark job: one pinned partition per task of a sub-topology with DataFrame
   steps (read -> the user's steps -> the task runner), plus one pinned partition per executor
   for everything else; `BatchWatch` cancels the job when one of its executors dies, and the
   next batch re-plans without it;
4. gather each item's figures: metrics, progress, the runtime state for the operator.

Stopping (SIGTERM, Ctrl-C, `request_stop`): the running batch finishes (it is cancelled if it
outlives the grace period; a cancelled batch leaves no partial commit), then every executor's
task runner closes its stores, which writes their checkpoints.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import logging
import os
import pickle
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from eddy_contract.assignor import Assignment, AssignorSettings, Executor, assign_app, diff
from eddy_contract.spec import StreamAppSpec
from eddy_runtime import kafka_client
from eddy_runtime.channel_io import ChannelLocation, read_assignment, write_runtime_state
from eddy_runtime.compiler import CompiledApp, SubTopology, compile_topology
from eddy_runtime.health import BatchProgress, HealthAndMetricsServer
from eddy_runtime.kafka_client import KafkaClientConfig, KafkaCredentialsMissing, KafkaUnreachable
from eddy_runtime.metrics import DriverMetrics
from eddy_runtime.pipeline import PipelineError, Topology
from eddy_runtime.placement import (
    BatchWatch,
    ExecutorRef,
    PinnedSlots,
    current_executor_id,
    executor_hosts,
    live_executors,
)
from eddy_runtime.progress import CopyProgressTracker
from eddy_runtime.records import decode_source, range_reader, spark_source_schema
from eddy_runtime.state import changelog_topic_name
from eddy_runtime.topics import TopicError, ensure_app_topics
from eddy_runtime.work import BatchSettings, InputRange, ItemResult, SlotWork, WorkItem

__all__ = ["BatchReport", "Driver", "DriverError", "DriverOptions", "load_pipeline"]

log = logging.getLogger("eddy.driver")

RESULT_DDL = "result binary"


class _NothingToDo(Exception):
    """No work item this batch: no Spark job."""


class DriverError(RuntimeError):
    """The app cannot go on (a bad record under policy fail, a pipeline error...)."""


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


@dataclass
class BatchReport:
    """What one batch did, for progress output and tests."""

    batch_id: int
    outcome: str  # "ok", "cancelled" (an executor died), "failed"
    duration_s: float
    generation: int
    results: list[ItemResult] = field(default_factory=list)
    lost_executor: str | None = None
    error: str | None = None
    moves: tuple[Any, ...] = ()
    #: seconds spent planning (offsets, assignment, plans) and in the Spark job
    plan_s: float = 0.0
    job_s: float = 0.0

    @property
    def records_in(self) -> int:
        return sum(r.records_in for r in self.results)

    @property
    def records_out(self) -> int:
        return sum(r.records_out for r in self.results)

    def by_status(self, status: str) -> list[ItemResult]:
        return [r for r in self.results if r.status == status]


def load_pipeline(spec: StreamAppSpec, search_path: Sequence[str] = ()) -> tuple[Topology, Any]:
    """Import the user's module and call its build function on a fresh `Topology`."""
    for p in search_path:
        if p not in sys.path:
            sys.path.insert(0, p)
    module = importlib.import_module(spec.pipeline.module)
    build = getattr(module, spec.pipeline.function, None)
    if not callable(build):
        raise PipelineError(f"{spec.pipeline.module}.{spec.pipeline.function} is not a function")
    topology = Topology()
    result = build(topology, **dict(spec.pipeline.args))
    if isinstance(result, Topology):
        topology = result
    return topology, module


@dataclass
class _Layout:
    """Pinned partitions for one assignment generation on one set of executors."""

    key: tuple[Any, ...]
    dataframe_slots: dict[int, list[tuple[str, ExecutorRef]]]
    dataframe_bases: dict[int, Any]
    executor_slots: list[ExecutorRef]
    executor_base: Any


class Driver:
    """Runs one stream app's micro-batches on a SparkSession."""

    def __init__(self, spark: Any, spec: StreamAppSpec, options: DriverOptions,
                 topology: Topology | None = None, pipeline_module: Any = None) -> None:
        self.spark = spark
        self.sc = spark.sparkContext
        self.spec = spec
        self.app = spec.application_id
        self.options = options
        self.bootstrap = spec.kafka.bootstrap_servers
        #: no secrets: every client adds the credentials of the process that creates it
        self.kafka = KafkaClientConfig.from_spec(spec)
        if topology is None:
            topology, pipeline_module = load_pipeline(spec)
        self.topology = topology
        if pipeline_module is not None:
            # The user's functions travel by value: executors need not import the module.
            from pyspark import cloudpickle

            with contextlib.suppress(ValueError):
                cloudpickle.register_pickle_by_value(pipeline_module)
        self.metrics = DriverMetrics(self.app)
        self.compiled: CompiledApp | None = None
        self.assignment: Assignment | None = None
        self.batch_id = 0
        self._program: bytes = b""
        self._program_id = ""
        self._layout: _Layout | None = None
        #: per executor, per task: the next changelog offset its volume holds (summed over stores)
        self._held: dict[str, dict[str, int]] = {}
        self._held_stores: dict[str, dict[str, dict[str, int]]] = {}
        self._restoring: dict[str, str] = {}
        #: restore progress of every copy catching up (published for the operator's status)
        self._progress = CopyProgressTracker()
        self._known_executors: set[str] = set()
        self._lost: set[str] = set()
        #: (topic, partition) -> offset -> error: records that make the user's DataFrame steps fail
        self._poison: dict[tuple[str, int], dict[int, str]] = {}
        self._dataframe_items: dict[str, tuple[WorkItem, ExecutorRef]] = {}
        #: the generation whose first batch ran with every copy (see `_frames`)
        self._planned_generation = -1
        self._earliest: dict[tuple[str, int], int] = {}
        self._stop = threading.Event()
        self._health: HealthAndMetricsServer | None = None
        self.progress = BatchProgress(spec.trigger_interval_s)
        self._watch: BatchWatch | None = None
        self._failed_batches = 0
        self._last_batch_end = time.monotonic()
        self.last_lag: dict[str, int] = {}
        self._changelog_ends: dict[str, int] = {}
        self._admin: Any = None
        self._offsets_consumer: Any = None

    # -- setup ----------------------------------------------------------------------------------

    @property
    def admin(self) -> Any:
        if self._admin is None:
            self._admin = kafka_client.admin(self.kafka)
        return self._admin

    def prepare(self) -> CompiledApp:
        """Compile the pipeline against the topics and create the topics the app needs."""
        from pyspark import cloudpickle

        sources = self._source_topics()
        try:
            # A wrong password or CA fails here, naming the reason, instead of timing out later.
            kafka_client.check_connection(self.kafka)
        except (KafkaUnreachable, KafkaCredentialsMissing) as e:
            raise DriverError(str(e)) from e
        meta = self.admin.list_topics(timeout=30).topics
        partitions = {t: len(meta[t].partitions) for t in sources if t in meta and meta[t].error is None}
        missing = [t for t in sources if t not in partitions]
        if missing:
            raise DriverError(f"input topics do not exist: {missing} (create them, or check spec.kafka)")
        compiled = compile_topology(self.topology, self.app, partitions)
        self._check_dataframe_steps(compiled)
        self._create_topics(compiled)
        self.compiled = compiled
        self._program = cloudpickle.dumps([s.for_executor() for s in compiled.subtopologies])
        import hashlib

        self._program_id = hashlib.sha256(self._program).hexdigest()[:20]
        subs = ", ".join(
            f"{s.id}: {s.source.topic} -> {len(s.steps)} step(s)"
            + (f" -> {s.stateful.kind}" if s.stateful else "")
            + f" -> {', '.join(getattr(k, 'topic', '?') for k in s.sinks)} ({s.partitions} tasks)"
            for s in compiled.subtopologies
        )
        log.info("app %s: sub-topologies %s", self.app, subs)
        return compiled

    def _source_topics(self) -> list[str]:
        from eddy_runtime.pipeline import Join, Node

        out: list[str] = [s.topic for s in self.topology.sources]
        seen: set[int] = set()
        for sink in self.topology.sinks:
            n: Node | None = sink
            while n is not None and id(n) not in seen:
                seen.add(id(n))
                if isinstance(n, Join) and n.table.topic not in out:
                    out.append(n.table.topic)
                n = n.parent
        return out

    def _create_topics(self, compiled: CompiledApp) -> None:
        try:
            ensure_app_topics(self.admin, compiled, self.spec, create_outputs=self.options.create_output_topics)
        except TopicError as e:
            raise DriverError(str(e)) from e

    def _check_dataframe_steps(self, compiled: CompiledApp) -> None:
        """Reject DataFrame steps that shuffle: they would move records off their task's executor."""
        for sub in compiled.subtopologies:
            if not sub.steps:
                continue
            base = self.spark.createDataFrame(self.sc.parallelize([(0,)], 1), "slot int")
            df = base.mapInArrow(lambda it: it, spark_source_schema(sub.source.key_serde, sub.source.value_serde))
            for step in sub.steps:
                df = step(df)
                if df is None or not hasattr(df, "_jdf"):
                    raise PipelineError(f"a transform step of sub-topology {sub.id} did not return a DataFrame")
            plan = df._jdf.queryExecution().executedPlan().toString()
            reasons = [line.strip() for line in plan.splitlines()
                       if ("Exchange" in line and "BroadcastExchange" not in line) or "Coalesce" in line]
            if reasons:
                raise PipelineError(
                    f"a transform step of sub-topology {sub.id} (reading {sub.source.topic}) shuffles or merges "
                    f"partitions ({reasons[0][:120]}): a task's records must stay on its executor. Re-key with "
                    "group_by(...) instead of groupBy/join/orderBy/repartition/distinct in transform()"
                )

    # -- offsets --------------------------------------------------------------------------------

    def _input_partitions(self) -> list[tuple[str, int]]:
        assert self.compiled is not None
        return [(t, p) for s in self.compiled.subtopologies for t in s.input_topics for p in range(s.partitions)]

    def _changelog_partitions(self) -> dict[str, list[tuple[str, int]]]:
        assert self.compiled is not None
        out: dict[str, list[tuple[str, int]]] = {}
        for s in self.compiled.subtopologies:
            for p in range(s.partitions):
                out[f"{s.id}_{p}"] = [(changelog_topic_name(self.app, st.name), p) for st in s.stores]
        return out

    def _list_offsets(self, tps: Sequence[tuple[str, int]], spec: str) -> dict[tuple[str, int], int]:
        from confluent_kafka import IsolationLevel, KafkaException, TopicPartition
        from confluent_kafka.admin import OffsetSpec

        if not tps:
            return {}
        which = OffsetSpec.latest() if spec == "latest" else OffsetSpec.earliest()
        request = {TopicPartition(t, p): which for t, p in tps}
        def list_offsets() -> dict[tuple[str, int], int]:
            futures = self.admin.list_offsets(request, isolation_level=IsolationLevel.READ_COMMITTED,
                                              request_timeout=30)
            try:
                return {(tp.topic, tp.partition): f.result().offset for tp, f in futures.items()}
            except KafkaException as e:
                if "LEADER_EPOCH" in str(e):
                    # After a partition leader moved (a broker stopped or came back), librdkafka's
                    # admin client kept sending its cached leader epoch until its retries ran out
                    # (seen with 2.16): a new client starts from fresh metadata.
                    self._admin = None
                raise

        return kafka_client.retrying(list_offsets, "listing offsets")

    def _committed(self, tps: Sequence[tuple[str, int]]) -> dict[tuple[str, int], int]:
        from confluent_kafka import TopicPartition

        if self._offsets_consumer is None:
            self._offsets_consumer = kafka_client.consumer(self.kafka, {"group.id": self.app,
                                                                        "enable.auto.commit": False})
        found = kafka_client.retrying(lambda: self._offsets_consumer.committed([TopicPartition(t, p) for t, p in tps],
                                                                 timeout=30), "reading committed offsets")
        out = {}
        missing = []
        for tp in found:
            if tp.offset >= 0:
                out[(tp.topic, tp.partition)] = tp.offset
            else:
                missing.append((tp.topic, tp.partition))
        need = [tp for tp in missing if tp not in self._earliest]
        if need:
            self._earliest.update(self._list_offsets(need, "earliest"))
        for tp in missing:
            out[tp] = self._earliest[tp]
        return out

    # -- assignment -----------------------------------------------------------------------------

    def _next_assignment(self, live: Sequence[ExecutorRef], changelog_ends: Mapping[str, int]) -> Assignment | None:
        if self.options.assignment_source is not None:
            return read_assignment(self.options.assignment_source)
        assert self.compiled is not None
        live_ids = {e.id for e in live}
        held = {e: tasks for e, tasks in self._held.items() if e in live_ids}
        executors = [Executor(id=e.id) for e in live]
        settings = AssignorSettings(
            standby_replicas=self.spec.state.standby_replicas,
            acceptable_recovery_lag=self.spec.state.acceptable_recovery_lag,
            max_warmup_replicas=self.spec.state.max_warmup_replicas,
        )
        return assign_app(executors, changelog_ends, held, self.assignment, settings,
                          self.compiled.stateful_tasks())

    def _probe_inventories(self, executors: Sequence[ExecutorRef]) -> None:
        """What the volumes of executors new to this driver hold, before placing tasks on them."""
        if not executors:
            return
        settings = self._settings(executors)
        app = self.app

        def inventory(slot: int) -> Iterator[tuple[str, Any]]:
            from eddy_runtime.state import StateDirectory

            me = current_executor_id(settings.executor_hosts) or ""
            yield me, StateDirectory(settings.state_dir_for(me)).inventory(app)

        try:
            found = PinnedSlots(self.sc, executors).run(inventory)
        except Exception as e:  # noqa: BLE001 - placement still works without it, just less sticky
            log.warning("could not read the state inventories of %s: %s", [e.id for e in executors], e)
            return
        for executor, tasks in found:
            self._held[executor], self._held_stores[executor] = _held_offsets(tasks)

    # -- layout -----------------------------------------------------------------------------------

    def _layout_for(self, assignment: Assignment, live: Sequence[ExecutorRef]) -> _Layout:
        assert self.compiled is not None
        by_id = {e.id: e for e in live}
        key = (assignment.generation, tuple(sorted(assignment.tasks.items())), tuple(live))
        if self._layout is not None and self._layout.key == key:
            return self._layout
        dataframe_slots: dict[int, list[tuple[str, ExecutorRef]]] = {}
        for sub in self.compiled.subtopologies:
            if not sub.uses_dataframe:
                continue
            slots = [(t, by_id[assignment.tasks[t].active]) for t in sub.task_ids
                     if t in assignment.tasks and assignment.tasks[t].active in by_id]
            if slots:
                dataframe_slots[sub.id] = slots
        bases = {sid: PinnedSlots(self.sc, [e for _, e in slots]).dataframe(self.spark)
                 for sid, slots in dataframe_slots.items()}
        executor_slots = list(live)
        self._layout = _Layout(key, dataframe_slots, bases, executor_slots,
                               PinnedSlots(self.sc, executor_slots).dataframe(self.spark))
        return self._layout

    # -- one batch ------------------------------------------------------------------------------

    def _settings(self, live: Sequence[ExecutorRef] = ()) -> BatchSettings:
        return BatchSettings(
            app=self.app,
            batch_id=self.batch_id,
            generation=self.assignment.generation if self.assignment else 0,
            kafka=self.kafka,
            guarantee=self.spec.processing_guarantee.value,  # type: ignore[arg-type]
            bad_record_policy=self.spec.bad_record_policy.value,  # type: ignore[arg-type]
            dead_letter_topic=self.spec.dead_letter_topic,
            state_dir=self.options.state_dir,
            per_executor_state_dirs=self.options.per_executor_state_dirs,
            executor_hosts=executor_hosts(live),
        )

    def run_batch(self) -> BatchReport:
        """Plan, run and account for one micro-batch."""
        if self.compiled is None:
            self.prepare()
        assert self.compiled is not None
        self.batch_id += 1
        started = time.monotonic()
        live = live_executors(self.sc)
        if not live:
            time.sleep(1)
            return BatchReport(self.batch_id, "failed", 0.0, 0, error="no live executor")
        new = [e for e in live if e.id not in self._known_executors]
        for gone in self._known_executors - {e.id for e in live} - self._lost:
            self._executor_lost(gone, "it left the cluster")
        if new and self.options.assignment_source is None:
            self._probe_inventories(new)
        self._known_executors = {e.id for e in live}
        inputs = self._input_partitions()
        changelogs = self._changelog_partitions()
        all_changelog = [tp for tps in changelogs.values() for tp in tps]
        committed = self._committed(inputs)
        ends = self._list_offsets(inputs + all_changelog, "latest")
        changelog_ends = {t: sum(ends[tp] for tp in tps) for t, tps in changelogs.items()}
        self._changelog_ends = changelog_ends
        previous = self.assignment
        assignment = self._next_assignment(live, changelog_ends)
        if assignment is None:
            log.info("waiting for the operator's first assignment")
            # The operator assigns only once it has seen the runtime state: publish it while waiting.
            if self.options.runtime_state_target is not None:
                self._publish_runtime_state(BatchReport(self.batch_id, "failed", 0.0, 0), {}, live)
            time.sleep(1)
            return BatchReport(self.batch_id, "failed", 0.0, 0, error="no assignment yet")
        moves = diff(previous, assignment) if previous is None or assignment.generation != previous.generation else ()
        self.assignment = assignment
        for m in moves:
            log.info("assignment %d: task %s %s %s -> %s", assignment.generation, m.task, m.kind, m.source, m.target)
        settings = self._settings(live)
        layout = self._layout_for(assignment, live)
        lag: dict[str, int] = {}
        for sub in self.compiled.subtopologies:
            for p, task in enumerate(sub.task_ids):
                lag[task] = max(ends[(sub.source.topic, p)] - committed[(sub.source.topic, p)], 0)
        self.last_lag = lag
        frames = self._frames(settings, assignment, layout, committed, ends, changelog_ends)
        results: list[ItemResult] = []
        report = BatchReport(self.batch_id, "ok", 0.0, assignment.generation, moves=moves)
        group = f"eddy-{self.app}-batch-{self.batch_id}"
        report.plan_s = time.monotonic() - started
        try:
            if not frames:
                raise _NothingToDo
            with BatchWatch(self.sc, group, [e.id for e in live],
                            description=f"eddy {self.app} batch {self.batch_id}") as watch:
                self._watch = watch
                union = functools.reduce(lambda a, b: a.union(b), frames)
                rows = union.collect()
            results = [pickle.loads(r.result) for r in rows]
            for r in results:
                if r.inventory is not None:
                    self._held[r.executor], self._held_stores[r.executor] = _held_offsets(r.inventory)
            results = [r for r in results if r.inventory is None]
        except _NothingToDo:
            pass
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
                report.error = _short_error(e)
                log.error("batch %d failed: %s", self.batch_id, report.error)
                if self._dataframe_items:
                    self._isolate_poison(settings)
        finally:
            self._watch = None
        report.results = results
        report.duration_s = time.monotonic() - started
        report.job_s = report.duration_s - report.plan_s
        wall = time.monotonic() - self._last_batch_end
        self._last_batch_end = time.monotonic()
        self._account(report, wall, assignment, live, lag)
        return report

    def _frames(self, settings: BatchSettings, assignment: Assignment, layout: _Layout,
                committed: Mapping[tuple[str, int], int], ends: Mapping[tuple[str, int], int],
                changelog_ends: Mapping[str, int]) -> list[Any]:
        """The batch's Spark plan: one DataFrame per sub-topology with DataFrame steps and work,
        plus one over the executor slots; empty when there is nothing to do.

        Right after an assignment changes every copy gets an item (tasks open, promote and
        restore at once, runners close what moved away, volumes report their inventory); after
        that only actives with input or a restore under way, and standbys behind their changelog.
        """
        assert self.compiled is not None
        live_ids = {e.id for e in layout.executor_slots}
        cap = self.options.max_batch_records
        fresh = self._planned_generation != assignment.generation
        inventory = fresh or self.batch_id % 20 == 0

        def ranges(sub: SubTopology, task: str) -> tuple[InputRange, ...]:
            p = int(task.split("_")[1])
            out = []
            for topic in sub.input_topics:
                start = committed[(topic, p)]
                end = max(start, min(ends[(topic, p)], start + cap))
                out.append(InputRange(topic, p, start, end))
            return tuple(out)

        per_executor: dict[str, list[WorkItem]] = {e: [] for e in live_ids}
        held: dict[str, list[tuple[str, str]]] = {e: [] for e in live_ids}
        dataframe_items: dict[str, WorkItem] = {}
        for sub in self.compiled.subtopologies:
            for task in sub.task_ids:
                placement = assignment.tasks.get(task)
                if placement is None:
                    continue
                if placement.active in live_ids:
                    held[placement.active].append((task, "active"))
                    restoring = self._restoring.get(task) == placement.active
                    source = ranges(sub, task)
                    poison = tuple(sorted((o, e) for o, e in self._poison.get((source[0].topic, source[0].partition),
                                                                              {}).items()
                                          if source[0].start <= o < source[0].end))
                    item = WorkItem(task, "active", source, restore_only=restoring, poison=poison)
                    if fresh or restoring or not all(r.empty for r in item.ranges):
                        if sub.uses_dataframe:
                            dataframe_items[task] = item
                        else:
                            per_executor[placement.active].append(item)
                if not sub.stateful_task:
                    continue
                for e in (*placement.standbys, *placement.warmups):
                    if e in live_ids:
                        held[e].append((task, "standby"))
                        behind = changelog_ends.get(task, 0) - self._held.get(e, {}).get(task, 0) > len(sub.stores)
                        if fresh or behind:
                            per_executor[e].append(WorkItem(task, "standby"))
        self._planned_generation = assignment.generation
        slot_of = {t: e for slots in layout.dataframe_slots.values() for t, e in slots}
        self._dataframe_items = {t: (item, slot_of[t]) for t, item in dataframe_items.items() if t in slot_of}
        frames = []
        offset = 0
        program = (self._program_id, self._program)
        for sub_id, slots in layout.dataframe_slots.items():
            if not any(t in dataframe_items for t, _ in slots):
                continue
            sub = self.compiled.subtopologies[sub_id]
            works = [SlotWork(e.id, (dataframe_items[t],) if t in dataframe_items else (), dataframe_task=t)
                     for t, e in slots]
            df = layout.dataframe_bases[sub_id].mapInArrow(
                _read_step(settings, sub, works, offset), spark_source_schema(sub.source.key_serde,
                                                                             sub.source.value_serde))
            for step in sub.steps:
                df = step(df)
            stateless = sub.for_executor() if sub.stateful is None else None
            frames.append(df.mapInArrow(_sink_step(settings, program, works, offset, stateless), RESULT_DDL))
            offset += len(slots)
        works = [SlotWork(e.id, tuple(per_executor[e.id]), held=tuple(held[e.id]) if fresh else None,  # type: ignore[arg-type]
                          inventory=inventory)
                 for e in layout.executor_slots]
        if frames or not all(w.idle for w in works):
            frames.append(layout.executor_base.mapInArrow(_executor_step(settings, program, works, offset),
                                                          RESULT_DDL))
        return frames

    def _account(self, report: BatchReport, wall: float, assignment: Assignment, live: Sequence[ExecutorRef],
                 lag: Mapping[str, int]) -> None:
        live_ids = {e.id for e in live}
        for r in report.results:
            if r.figures is not None:
                stores = {s.store: s.changelog_offset + 1 for s in r.figures.stores if s.changelog_offset is not None}
                if stores:
                    self._held.setdefault(r.executor, {})[r.task] = sum(stores.values())
                    self._held_stores.setdefault(r.executor, {})[r.task] = stores
            if r.role == "active":
                if r.status == "restoring":
                    self._restoring[r.task] = r.executor
                elif r.status == "processed":
                    self._restoring.pop(r.task, None)
        for e in list(self._held):
            if e not in live_ids:
                del self._held[e]
                self._held_stores.pop(e, None)
        self._progress.update(report.results, assignment, live_ids, complete=report.outcome == "ok")
        restoring = sum(1 for r in report.results if r.role == "active" and r.status == "restoring")
        assert self.compiled is not None
        standbys = sum(len(a.standbys) + len(a.warmups) for t, a in assignment.tasks.items()
                       if self.compiled.subtopology_of(t).stateful_task)
        self.metrics.observe_batch(report.outcome, report.duration_s, report.results, wall)
        self.metrics.observe_tasks(lag, restoring, standbys, len(live), assignment.generation)
        if report.outcome == "ok" and not report.by_status("failed"):
            self._failed_batches = 0
        else:
            self._failed_batches += 1
        for r in report.by_status("bad-record"):
            raise DriverError(f"task {r.task}: {r.message} (badRecordPolicy: fail)")
        for r in report.by_status("failed"):
            log.error("task %s on executor %s failed: %s", r.task, r.executor, r.message)
            if r.message.startswith("pipeline error"):
                raise DriverError(f"task {r.task}: {r.message}")
        for r in report.results:
            for b in r.bad_records:
                log.warning("app %s task %s: bad record %s (%s)", self.app, r.task, b,
                            "dead-lettered" if r.dead_lettered else "skipped")
        if self._failed_batches >= self.options.max_failed_batches:
            raise DriverError(f"{self._failed_batches} batches in a row failed; last error: "
                              f"{report.error or [r.message for r in report.by_status('failed')][:1]}")
        if self.options.runtime_state_target is not None:
            try:
                self._publish_runtime_state(report, lag, live)
            except Exception as e:  # noqa: BLE001 - the operator reads it again next batch
                log.warning("could not publish the runtime state: %s", e)

    def _publish_runtime_state(self, report: BatchReport, lag: Mapping[str, int],
                               live: Sequence[ExecutorRef]) -> None:
        from datetime import UTC, datetime

        from eddy_contract.channel import ExecutorInventory, RestoreProgress, RuntimeState

        assert self.options.runtime_state_target is not None and self.compiled is not None
        ends = self._list_offsets([tp for tps in self._changelog_partitions().values() for tp in tps], "latest")
        per_task = {
            f"{s.id}_{p}": {st.name: ends[(changelog_topic_name(self.app, st.name), p)] for st in s.stores}
            for s in self.compiled.subtopologies for p in range(s.partitions)
        }
        executors = {
            e.id: ExecutorInventory(e.id, host=e.host, stores=self._held_stores.get(e.id, {})) for e in live
        }
        restores = tuple(RestoreProgress(c.task, c.executor, c.role, c.restored, c.restored + c.remaining)
                         for c in self._progress.in_progress())
        state = RuntimeState(self.app, datetime.now(UTC).isoformat(), report.generation, per_task, executors,
                             restores, dict(lag), report.batch_id)
        write_runtime_state(self.options.runtime_state_target, state)

    # -- records that make DataFrame steps fail ------------------------------------------------

    def _probe(self, settings: BatchSettings, sub: SubTopology, task: str, executor: ExecutorRef,
               rng: InputRange, poison: tuple[tuple[int, str], ...]) -> str | None:
        """Run `sub`'s DataFrame steps over `rng` alone (nothing committed); the error, if any."""
        work = [SlotWork(executor.id, (WorkItem(task, "active", (rng,), poison=poison),), dataframe_task=task)]
        df = PinnedSlots(self.sc, [executor]).dataframe(self.spark).mapInArrow(
            _read_step(settings, sub, work, 0, probe=True),
            spark_source_schema(sub.source.key_serde, sub.source.value_serde))
        for step in sub.steps:
            df = step(df)
        try:
            df.mapInArrow(_probe_sink, RESULT_DDL).collect()
        except Exception as e:  # noqa: BLE001 - the error is what the probe looks for
            return _short_error(e)
        return None

    def _isolate_poison(self, settings: BatchSettings) -> None:
        """After a failed batch: find, by bisection over each task's range, the records that make
        the user's DataFrame steps fail, so the bad-record policy handles them next batch."""
        assert self.compiled is not None
        for task, (item, executor) in self._dataframe_items.items():
            if item.restore_only or item.ranges[0].empty:
                continue
            sub = self.compiled.subtopology_of(task)
            rng = item.ranges[0]
            error = self._probe(settings, sub, task, executor, rng, item.poison)
            if error is None:
                continue
            lo, hi = rng.start, rng.end  # the first failing offset is in [lo, hi)
            while hi - lo > 1:
                mid = (lo + hi) // 2
                found = self._probe(settings, sub, task, executor, replace(rng, start=lo, end=mid), item.poison)
                if found is not None:
                    hi, error = mid, found
                else:
                    lo = mid
            last = self._probe(settings, sub, task, executor, replace(rng, start=lo, end=lo + 1), item.poison)
            if last is None:
                log.warning("task %s: steps fail on %s[%d] [%d, %d) but on no single record", task, rng.topic,
                            rng.partition, rng.start, rng.end)
                continue
            message = f"a DataFrame step failed on this record: {last[:500]}"
            self._poison.setdefault((rng.topic, rng.partition), {})[lo] = message
            log.warning("task %s: %s[%d] offset %d makes the pipeline's steps fail: %s", task, rng.topic,
                        rng.partition, lo, last[:300])
            if self.spec.bad_record_policy.value == "fail":
                raise DriverError(f"task {task}: bad record at {rng.topic}[{rng.partition}] offset {lo}: "
                                  f"{message} (badRecordPolicy: fail)")

    def _executor_lost(self, executor: str, what: str) -> None:
        self._lost.add(executor)
        self.metrics.failovers.labels(self.app).inc()
        log.warning("executor %s died (%s); re-planning on the live executors", executor, what)

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
            out[task] = {e: max(end - self._held.get(e, {}).get(task, 0), 0)
                         for e in (*placement.standbys, *placement.warmups)}
        return out

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

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def run(self, on_batch: Callable[[BatchReport], None] | None = None, max_batches: int | None = None,
            until: Callable[[BatchReport], bool] | None = None) -> None:
        """Run batches every trigger interval until stopped (or `until` says so)."""
        if self.compiled is None:
            self.prepare()
        interval = self.spec.trigger_interval_s
        self.progress = BatchProgress(interval)
        if self.options.metrics_port:  # /metrics and the liveness probe's /healthz
            self._health = HealthAndMetricsServer(
                self.options.metrics_port, self.options.metrics_addr, self.metrics.registry, self.progress)
            log.info("metrics and /healthz on http://%s:%d", self.options.metrics_addr, self.options.metrics_port)
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
                if not full:
                    self._stop.wait(max(0.0, interval - (time.monotonic() - started)))
        finally:
            self.close()

    def close(self) -> None:
        """Close every executor's tasks (stores flushed, checkpoints written), then the clients."""
        try:
            self.close_tasks()
        finally:
            self.metrics.close()
            if self._health is not None:
                self._health.close()
                self._health = None
            if self._offsets_consumer is not None:
                self._offsets_consumer.close()
                self._offsets_consumer = None

    def close_tasks(self) -> None:
        live = live_executors(self.sc)
        if not live:
            return
        settings = self._settings(live)

        def close(slot: int) -> Iterator[tuple[str, str]]:
            from eddy_runtime.runner import RunnerClient

            me = current_executor_id(settings.executor_hosts) or ""
            client = RunnerClient(settings.state_dir_for(me), me)
            try:
                yield me, str(client.call(("shutdown",), timeout_s=60, start=False))
            except ConnectionRefusedError:
                yield me, "no task runner"
            except Exception as e:  # noqa: BLE001
                yield me, f"close failed: {e}"

        try:
            for executor, outcome in PinnedSlots(self.sc, live).run(close):
                log.info("executor %s closed its tasks: %s", executor, outcome)
        except Exception as e:  # noqa: BLE001 - stopping anyway; the runners exit with their executors
            log.warning("closing the tasks failed: %s", _short_error(e))


def _held_offsets(inventory: Sequence[Any]) -> tuple[dict[str, int], dict[str, dict[str, int]]]:
    """Per task, the next changelog offset its volume holds: summed over stores, and per store."""
    totals: dict[str, int] = {}
    per_store: dict[str, dict[str, int]] = {}
    for t in inventory:
        stores = {s.name: s.changelog_offset + 1 for s in t.stores if s.changelog_offset is not None}
        if stores:
            totals[t.task_id] = sum(stores.values())
            per_store[t.task_id] = stores
    return totals, per_store


def _short_error(e: BaseException) -> str:
    """The gist of a Spark/py4j error: its message lines without the JVM stack."""
    lines = [ln for ln in str(e).splitlines() if ln.strip() and not ln.strip().startswith("at ")]
    return " | ".join(lines[:6])[:1500]


# -- what runs on the executors ---------------------------------------------------------------------
# Factories return closures; cloudpickle ships them with the batch's work (and the module is
# imported by reference on the executors).


def _misplaced(work: SlotWork, here: str | None) -> list[ItemResult]:
    return [ItemResult(i.task, work.executor, i.role, "misplaced",
                       message=f"planned for executor {work.executor}, ran on executor {here}") for i in work.items]


def _call_runner(settings: BatchSettings, program: tuple[str, bytes], work: SlotWork, data: Any) -> list[ItemResult]:
    from eddy_runtime.runner import RunnerClient

    here = current_executor_id(settings.executor_hosts)
    if here != work.executor:
        return _misplaced(work, here)
    program_id, program_bytes = program
    client = RunnerClient(settings.state_dir_for(work.executor), work.executor)
    try:
        reply = client.call(("run", program_id, None, settings, work, data))
        if reply == "need-program":
            reply = client.call(("run", program_id, program_bytes, settings, work, data))
    except Exception as e:  # noqa: BLE001 - other items of the batch still count
        return [ItemResult(i.task, work.executor, i.role, "failed", message=f"task runner: {type(e).__name__}: {e}")
                for i in work.items]
    return list(reply)


def _result_batch(results: Sequence[ItemResult]) -> Any:
    import pyarrow as pa

    return pa.RecordBatch.from_pydict({"result": pa.array([pickle.dumps(r) for r in results], pa.binary())})


def _slots(batches: Any) -> list[int]:
    out: list[int] = []
    for b in batches:  # drain: a partly read iterator stops Spark from reusing the worker
        out.extend(b.column(0).to_pylist())
    return out


def _check_partition(offset: int, slot: int) -> None:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is not None and ctx.partitionId() != offset + slot:
        raise RuntimeError(f"slot {slot} runs in partition {ctx.partitionId()}, expected {offset + slot}")


def _read_step(settings: BatchSettings, sub: SubTopology, works: list[SlotWork], offset: int,
               probe: bool = False) -> Callable[..., Any]:
    """The first step of a DataFrame sub-topology: a task's input range as Arrow batches.

    `probe`: a run that isolates a record failing the user's steps; nothing goes to the runner.
    """
    key_serde, value_serde = sub.source.key_serde, sub.source.value_serde

    def read(batches: Any) -> Iterator[Any]:
        import numpy as np
        import pyarrow as pa

        from eddy_runtime.records import BadRecord
        from eddy_runtime.runner import RunnerClient

        for slot in _slots(batches):
            _check_partition(offset, slot)
            work = works[slot]
            if not work.items or current_executor_id(settings.executor_hosts) != work.executor:
                continue
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
                client.call(("stash", settings.batch_id, item.task, bad, len(raw)))
                if bad and settings.bad_record_policy == "fail":
                    continue
            yield from table.to_batches(max_chunksize=65_536)

    return read


def _probe_sink(batches: Any) -> Iterator[Any]:
    import pyarrow as pa

    rows = sum(b.num_rows for b in batches)
    yield pa.RecordBatch.from_pydict({"result": pa.array([pickle.dumps(rows)], pa.binary())})


def _sink_step(settings: BatchSettings, program: tuple[str, bytes], works: list[SlotWork],
               offset: int, stateless: SubTopology | None = None) -> Callable[..., Any]:
    """The last step of a DataFrame sub-topology: hand the task's rows to the task runner.

    `stateless`: the sub-topology has no store, so its sinks (a combined repartition, output
    topics) run here and only the records to commit travel to the runner, not every row.
    """

    def sink(batches: Any) -> Iterator[Any]:
        import pyarrow as pa
        from pyspark import TaskContext

        from eddy_runtime.operators import TaskState, process_batch

        received = list(batches)
        ctx = TaskContext.get()
        slot = ctx.partitionId() - offset if ctx is not None else 0
        work = works[slot]
        data: Any = pa.Table.from_batches(received) if received else pa.table({})
        if stateless is not None and data.num_rows and current_executor_id(settings.executor_hosts) == work.executor:
            data = process_batch(stateless, data, None, TaskState())
        yield _result_batch(_call_runner(settings, program, work, data))

    return sink


def _executor_step(settings: BatchSettings, program: tuple[str, bytes], works: list[SlotWork],
                   offset: int) -> Callable[..., Any]:
    def run(batches: Any) -> Iterator[Any]:
        from eddy_runtime.state import StateDirectory

        for slot in _slots(batches):
            _check_partition(offset, slot)
            work = works[slot]
            results = _call_runner(settings, program, work, None) if work.items or work.held is not None else []
            if work.inventory and current_executor_id(settings.executor_hosts) == work.executor:
                inventory = tuple(StateDirectory(settings.state_dir_for(work.executor)).inventory(settings.app))
                results = [*results, ItemResult("", work.executor, "active", "processed", inventory=inventory)]
            yield _result_batch(results)

    return run


def default_state_dir() -> str:
    return os.environ.get("EDDY_STATE_DIR", str(Path.cwd() / ".cache" / "eddy-state"))


if __name__ == "__main__":  # python -m eddy_runtime.driver [options]: same as `eddy driver`
    from eddy_runtime.cli import main

    sys.exit(main(["driver", *sys.argv[1:]]))
