"""Where each batch's assignment comes from, and what the driver knows of the executors it may
assign to.

The assignment is the operator's (a file or the ``<app>-assignment`` ConfigMap, driver/channel_io.py)
or, in local mode, the same assignor (`eddy_contract.assignor.assign_app`) run here, fed by what
each executor's volume holds (driver/runtime_state.py). `AssignmentSource` also tracks the
executors' liveness (known, lost, ready to be given tasks), and hands a new generation on at once
when an executor dies mid-batch or the operator's assignment changes (driver/handoff.py).

Liveness is Spark's word, overruled by the operator's: an executor the operator stopped naming
live (its node is down, or it stopped answering) is planned onto no more (`usable`), though
Spark's scheduler may count it alive for minutes after a node died without a word.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence, Set
from typing import TYPE_CHECKING

from eddy_contract.assignor import Assignment, AssignorSettings, Executor, assign_app, running_actives
from eddy_contract.channel import AssignmentMessage, LiveSettings
from eddy_contract.spec import StreamAppSpec
from eddy_runtime.driver.channel_io import AssignmentWatch, ChannelLocation, read_channel
from eddy_runtime.driver.metrics import DriverMetrics
from eddy_runtime.driver.runtime_state import Volumes, probe_inventories
from eddy_runtime.dsl.subtopology import CompiledApp
from eddy_runtime.protocol.placement import ExecutorRef, live_executors
from eddy_runtime.protocol.work import BatchSettings, ItemResult

if TYPE_CHECKING:
    from pyspark import SparkContext

__all__ = ["AssignmentSource", "NewGeneration"]

log = logging.getLogger("eddy.driver")

#: hands a generation to the runners of the given live executors (`GenerationHandoff.push`)
NewGeneration = Callable[[Assignment, Set[str]], None]


class AssignmentSource:
    """The operator's assignment or the local assignor's, the executors' liveness and volumes."""

    def __init__(self, sc: SparkContext, spec: StreamAppSpec, channel: ChannelLocation | None,
                 metrics: DriverMetrics) -> None:
        self.sc = sc
        self.spec = spec
        self.app = spec.application_id
        #: where the operator publishes the assignment (None: the assignor runs here)
        self.channel = channel
        self.metrics = metrics
        #: the assignment the batches run
        self.current: Assignment | None = None
        self.volumes = Volumes()
        #: per task, the changelog ends summed over its stores (as of the last batch's plan)
        self.changelog_ends: dict[str, int] = {}
        self.known: set[str] = set()
        #: executors seen dying (never reassigned: the hand-off keeps a reference to it)
        self.lost: set[str] = set()
        #: of those, the ones no batch report has named yet (`take_losses`)
        self._unreported: list[str] = []
        #: executors whose task runner answered a batch: only those are given tasks (`assignable`)
        self.ready: set[str] = set()
        #: operator mode: the executors an earlier message named live and the newest does not (on
        #: a node that is down, or silent to the operator's probes). Spark may count them alive
        #: for minutes yet: it hears of a dead node's executor only from its pod's deletion or
        #: its heartbeat timeout, and a job pinned to one waits that long. See `usable`.
        self.dropped: frozenset[str] = frozenset()
        self._named: set[str] = set()
        self._compiled: CompiledApp | None = None
        self._hand_on: NewGeneration | None = None
        self._watch: AssignmentWatch | None = None
        #: operator mode: the spec's settings the driver takes in place, as last published
        self.live_settings: LiveSettings | None = None

    def prepare(self, compiled: CompiledApp, hand_on: NewGeneration | None) -> None:
        """Know the app; `hand_on`: where a generation goes at once, when the app runs continuously."""
        self._compiled = compiled
        self._hand_on = hand_on

    def watch(self) -> None:
        """Operator mode: watch the assignment document (see `wait_for_change`)."""
        if self.channel is not None and self._watch is None:
            self._watch = AssignmentWatch(self.channel, self._channel_changed)

    def wait_for_change(self, stop: threading.Event, deadline: float, step_s: float) -> None:
        """Until `deadline` (monotonic), `stop`, or a change that the runners must hear of at once:
        an executor came or went (its tasks move), or the operator's assignment changed (its new
        generation goes out). Looks every `step_s`."""
        known = set(self.known)
        while not stop.wait(max(0.0, min(step_s, deadline - time.monotonic()))):
            if self._watch is not None and self._watch.changed.is_set():
                self._watch.changed.clear()
                return
            if time.monotonic() >= deadline or {e.id for e in live_executors(self.sc)} != known:
                return

    def close(self) -> None:
        if self._watch is not None:
            self._watch.close()
            self._watch = None

    def notice_executors(self, live: Sequence[ExecutorRef],
                         settings: Callable[[Sequence[ExecutorRef]], BatchSettings]) -> None:
        """Count the executors that left; before the first assignment, read the volumes of the
        executors (later newcomers report theirs in their first batch, see `assignable`)."""
        new = [e for e in live if e.id not in self.known]
        for gone in self.known - {e.id for e in live} - self.lost:
            self.executor_lost(gone, "it left the cluster")
        # Before the first assignment (operator mode too: a restarted driver's runtime state then
        # tells the operator what each pod's volume holds under its new executor id).
        if new and self.current is None:
            try:
                found = probe_inventories(self.sc, new, settings(new))
            except Exception as e:  # noqa: BLE001 - placement still works without it, just less sticky
                log.warning("could not read the state inventories of %s: %s", [e.id for e in new], e)
            else:
                for executor, inventory in found:
                    self.volumes.record_inventory(executor, inventory)
        self.known = {e.id for e in live}

    def executor_lost(self, executor: str, what: str) -> None:
        """Count a loss once, whichever way the driver learned of it first."""
        if executor in self.lost:
            return
        self.lost.add(executor)
        self._unreported.append(executor)
        self.ready.discard(executor)
        self.metrics.failovers.labels(self.app).inc()
        log.warning("executor %s died (%s); re-planning on the live executors", executor, what)

    def take_losses(self) -> tuple[str, ...]:
        """The executors lost since the last call, in the order they were found lost."""
        taken, self._unreported = tuple(self._unreported), []
        return taken

    def usable(self, live: Sequence[ExecutorRef]) -> list[ExecutorRef]:
        """`live` (Spark's word) less the executors the operator dropped, each counted lost once:
        no work is planned onto them, and a batch under way on one is cancelled (`BatchWatch`)."""
        for e in sorted(self.dropped & {e.id for e in live}):
            self.executor_lost(e, "the operator found it lost: its node is down or it stopped answering")
        return [e for e in live if e.id not in self.dropped]

    def _heard(self, message: AssignmentMessage) -> None:
        """Note which executors the operator names live (`dropped`)."""
        named = {e.id for e in message.executors}
        self._named |= named
        self.dropped = frozenset(self._named - named)

    def assignable(self, live: Sequence[ExecutorRef]) -> list[ExecutorRef]:
        """The live executors that may be given tasks. An executor that joins later (a replacement
        for a lost one, a scale-up) first runs one batch with nothing assigned: its task runner
        starts, loads the program and reports the volume's inventory, so that tasks moved to it
        do not wait for a cold start while their previous owner has already let them go."""
        if self.current is None:
            return list(live)
        return [e for e in live if e.id in self.ready] or list(live)

    def next_assignment(self, live: Sequence[ExecutorRef]) -> Assignment | None:
        """The operator's assignment as it stands, or the local assignor's over `live`."""
        if self.channel is not None:
            message, live_settings = read_channel(self.channel, {e.id: e.host for e in live_executors(self.sc)})
            if live_settings is not None:
                self.live_settings = live_settings
            if message is None:
                return None
            self._heard(message)
            return message.assignment
        assert self._compiled is not None
        live_ids = {e.id for e in live}
        held = {e: tasks for e, tasks in self.volumes.held.items() if e in live_ids}
        settings = AssignorSettings(
            standby_replicas=self.spec.state.standby_replicas,
            acceptable_recovery_lag=self.spec.state.acceptable_recovery_lag,
            max_warmup_replicas=self.spec.state.max_warmup_replicas,
        )
        executors = [Executor(id=e.id, cores=self.spec.executors.cores) for e in live]
        # the driver runs `current` itself: its actives run but for those still restoring
        running = running_actives(self.current, self.current.generation if self.current else None,
                                  [(e, t) for t, e in self.volumes.restoring.items()])
        return assign_app(executors, self.changelog_ends, held, self.current, settings,
                          self._compiled.stateful_tasks(), running=running)

    def lost_mid_batch(self, executor: str) -> None:
        """On a thread of the batch watch, when an executor dies while a job or a sync over HTTP
        runs: cancelling the job takes seconds on a loaded machine, and the next batch starts
        only after the sync, so the next generation (local mode: the assignor run here, as the
        next batch will) goes to the survivors now."""
        if self._hand_on is None or self.channel is not None or self.current is None:
            return
        live = [e for e in live_executors(self.sc) if e.id != executor]
        assignment = self.next_assignment(self.assignable(live))
        if assignment is not None and assignment.generation != self.current.generation:
            log.info("executor %s died mid-batch: generation %d pushed to the survivors", executor,
                     assignment.generation)
            self._hand_on(assignment, {e.id for e in live})

    def _channel_changed(self) -> None:
        """On the assignment watch's thread: the executors the operator dropped are known now (a
        job under way on one is cancelled), and its new generation goes to the runners now, not
        after that job."""
        if self.channel is None or self.current is None:
            return
        live = live_executors(self.sc)
        message = read_channel(self.channel, {e.id: e.host for e in live})[0]
        if message is None:
            return
        self._heard(message)  # a batch under way on an executor dropped now is cancelled
        if self._hand_on is not None and message.assignment.generation > self.current.generation:
            self._hand_on(message.assignment, {e.id for e in live} - self.dropped)

    def take_inventories(self, results: list[ItemResult]) -> list[ItemResult]:
        """`results` less the volumes' inventories among them, which are recorded."""
        for r in results:
            if r.inventory is not None:
                self.volumes.record_inventory(r.executor, r.inventory)
        return [r for r in results if r.inventory is None]

    def standby_lags(self) -> dict[str, dict[str, int]]:
        """Per stateful task, per standby (or warmup) executor: changelog offsets it lacks."""
        if self.current is None or self._compiled is None:
            return {}
        out: dict[str, dict[str, int]] = {}
        for task in self._compiled.stateful_tasks():
            placement = self.current.tasks.get(task)
            if placement is None:
                continue
            end = self.changelog_ends.get(task, 0)
            out[task] = {e: max(end - self.volumes.held.get(e, {}).get(task, 0), 0)
                         for e in (*placement.standbys, *placement.warmups)}
        return out

