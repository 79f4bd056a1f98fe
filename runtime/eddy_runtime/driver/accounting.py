"""Taking in what one batch did (docs/DESIGN.md, "One micro-batch", step 6): its items' figures
go to the volumes' record, the restore progress and the metrics; failures are counted (too many
in a row stop the app); the runtime state is published for the operator.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from eddy_contract.assignor import Assignment
from eddy_contract.tasks import Role
from eddy_runtime.driver.assignment_source import AssignmentSource
from eddy_runtime.driver.channel_io import ChannelLocation, write_runtime_state
from eddy_runtime.driver.executor_load import ExecutorLoads
from eddy_runtime.driver.metrics import DriverMetrics
from eddy_runtime.driver.offsets import OffsetReader, changelog_partitions
from eddy_runtime.driver.outcomes import BatchOutcome, BatchReport, stop_error
from eddy_runtime.driver.progress import CopyProgressTracker
from eddy_runtime.driver.runtime_state import runtime_state
from eddy_runtime.dsl.subtopology import CompiledApp
from eddy_runtime.protocol.placement import ExecutorRef
from eddy_runtime.protocol.work import ItemStatus

__all__ = ["BatchAccounting"]

log = logging.getLogger("eddy.driver")


class BatchAccounting:
    """What the batches did so far: consecutive failures, restore progress, metrics."""

    def __init__(self, app: str, metrics: DriverMetrics, source: AssignmentSource, offsets: OffsetReader,
                 runner_addresses: dict[str, str], runtime_state_target: ChannelLocation | None,
                 max_failed_batches: int) -> None:
        self.app = app
        self.metrics = metrics
        self.source = source
        self.offsets = offsets
        #: executor -> where its runner listens (the generation hand-off's, kept up to date here)
        self.runner_addresses = runner_addresses
        #: where to publish the runtime state for the operator (None: nowhere)
        self.runtime_state_target = runtime_state_target
        self.max_failed_batches = max_failed_batches
        #: batches in a row that failed, or had an item fail
        self.failed_batches = 0
        #: restore progress of every copy catching up (published for the operator's status)
        self.restores = CopyProgressTracker()
        #: each executor's load since this driver started (published for the operator's autoscaler)
        self.loads = ExecutorLoads()

    def account(self, compiled: CompiledApp, report: BatchReport, wall: float, assignment: Assignment,
                live: Sequence[ExecutorRef], lag: Mapping[str, int]) -> None:
        """Metrics, progress, load and the runtime state from a batch; `DriverError` if the app must stop."""
        live_ids = {e.id for e in live}
        self.source.volumes.record_results(report.results, live_ids)
        self.loads.record(report.results, live_ids)
        self.runner_addresses.update((r.executor, r.query_address) for r in report.results if r.query_address)
        self.restores.update(report.results, assignment, live_ids, complete=report.outcome == BatchOutcome.OK)
        restoring = sum(1 for r in report.results if r.role == Role.ACTIVE and r.status == ItemStatus.RESTORING)
        standbys = sum(len(a.standbys) + len(a.warmups) for t, a in assignment.tasks.items()
                       if compiled.subtopology_of(t).stateful_task)
        self.metrics.observe_batch(report.outcome, report.duration_s, report.results, wall)
        self.metrics.observe_tasks(lag, restoring, standbys, len(live), assignment.generation)
        if report.outcome == BatchOutcome.OK and not report.by_status(ItemStatus.FAILED):
            self.failed_batches = 0
        else:
            self.failed_batches += 1
        for r in report.by_status(ItemStatus.FAILED):
            log.error("task %s on executor %s failed: %s", r.task, r.executor, r.message)
        for r in report.results:
            what = ("badRecordPolicy fail: the app stops" if r.status == ItemStatus.BAD_RECORD
                    else "dead-lettered" if r.dead_lettered else "skipped")
            for b in r.bad_records:
                log.warning("app %s task %s: bad record %s (%s)", self.app, r.task, b, what)
        error = stop_error(report, self.failed_batches, self.max_failed_batches)
        if error is not None:
            raise error
        if self.runtime_state_target is not None:
            try:
                self.publish_runtime_state(compiled, report, lag, self.source.assignable(live))
            except Exception as e:  # noqa: BLE001 - the operator reads it again next batch
                log.warning("could not publish the runtime state: %s", e)

    def publish_runtime_state(self, compiled: CompiledApp, report: BatchReport, lag: Mapping[str, int],
                              live: Sequence[ExecutorRef]) -> None:
        """Write the runtime state (changelog ends, volumes, restores, lag, load) where the operator reads it."""
        assert self.runtime_state_target is not None
        changelogs = [tp for tps in changelog_partitions(compiled).values() for tp in tps]
        ends = self.offsets.list_offsets(changelogs, "latest")
        state = runtime_state(compiled, ends, self.source.volumes, live, self.restores.in_progress(), lag,
                              report.generation, report.batch_id, self.loads)
        write_runtime_state(self.runtime_state_target, state)
