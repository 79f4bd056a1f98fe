"""The continuous path: an executor's task runner processes the tasks of sub-topologies made of Eddy's
own steps without stopping, as a Kafka Streams stream thread does (docs/DESIGN.md, "The continuous
path").

One thread per task runner (`ContinuousLoop`) polls one read_committed consumer for the input
partitions of its running actives (`InputPoller`), and for each active, once its commit interval
has passed and records are buffered, processes and commits them as one unit (one Kafka transaction
under exactly-once) through the same code as a micro-batch item (`TaskRunner.run_item`). Restoring
actives restore chunk by chunk, standbys tail their changelogs every commit interval. The tasks due
in a round start their step on a small thread pool (a step mostly waits on the broker) and the loop
goes on polling; each task takes one step at a time, its records buffering meanwhile. The driver
keeps owning the assignment: each micro-batch (or, in an app with no DataFrame steps, each sync)
hands every executor the (task, role) pairs of its continuous tasks for the current generation
(`ContinuousWork`), and collects what the loop did since the last time as one `ItemResult` per
task. A new generation's work is also pushed to the runner over HTTP ahead of that job
(protocol/work_push.py, `ContinuousLoop.push`), so a failover does not wait for a Spark job to start.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from typing import TYPE_CHECKING

from eddy_contract.spec import ProcessingGuarantee
from eddy_contract.tasks import Role, TaskId
from eddy_runtime.executor.busy_clock import RoundCost
from eddy_runtime.executor.commit_cycle import CommitCycle
from eddy_runtime.executor.continuous_assignment import CommittingTasks, ContinuousAssignment, Release
from eddy_runtime.executor.input_poller import MAX_BUFFERED_RECORDS, InputPoller
from eddy_runtime.executor.producer import RunnerProducer
from eddy_runtime.executor.results import share_busy
from eddy_runtime.executor.task_host import RoundEntry, TaskHost
from eddy_runtime.executor.task_metadata import RETRY_AFTER_S, TaskExecutionMetadata
from eddy_runtime.kafka.partitions import InputRange, TopicPartition
from eddy_runtime.kafka.records import RawRecords
from eddy_runtime.kafka.transactions import TaskCommitter
from eddy_runtime.protocol.work import (
    BatchSettings,
    ContinuousWork,
    ItemResult,
    ItemStatus,
    Released,
    SlotWork,
    WorkItem,
)

if TYPE_CHECKING:

    from eddy_runtime.dsl.subtopology import SubTopology

__all__ = ["ContinuousLoop"]

log = logging.getLogger("eddy.continuous")

#: tasks whose steps (open, restore, tail, process and commit) run at once
STEP_THREADS = 8
#: a standby's step waits for the actives' step or round under way at most this long past its due time
STANDBY_MAX_DEFER_S = 1.0
#: how long a newcomer's first sync waits for its committer (exactly-once)
NEWCOMER_WAIT_S = 10.0
#: while a round runs, the loop polls this long at a time (a poll returns only when it is up)
ROUND_END_POLL_S = 0.005

#: a task's round result after which it goes on at once (aborted: the round is processed again)
_ROUND_WENT_ON = frozenset({ItemStatus.PROCESSED, ItemStatus.ABORTED})
#: a task's step result after which it goes on at once
_STEP_WENT_ON = frozenset({ItemStatus.PROCESSED, ItemStatus.RESTORING, ItemStatus.STANDBY})


class ContinuousLoop:
    """The runner's stream thread: runs its continuous tasks until the runner closes."""

    def __init__(self, runner: TaskHost) -> None:
        self.runner = runner
        self._tasks = TaskExecutionMetadata()
        #: the work the driver gave, what was released, and what came of it
        self.assignment = ContinuousAssignment(on_new_generation=self._tasks.new_generation)
        self._poller: InputPoller | None = None
        self._pool: ThreadPoolExecutor | None = None
        #: the running actives whose input partitions the poller fetched in the last round
        self._fetching: set[str] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        #: exactly-once: the runner's one committer, one transaction per round for every active
        self.producer = RunnerProducer(runner.executor_id)
        self._synced = False
        #: `producer.made_after_lapse` when the loop last let go of the actives held through a lapse
        self._lapses_seen = 0
        self._cycle = CommitCycle()
        #: the rounds' cost, per round and per record: the part of each round's busy time that is per round
        self._round_cost = RoundCost()
        self._round_future: Future[None] | None = None

    def sync(self, subs: dict[int, SubTopology], settings: BatchSettings, work: ContinuousWork) -> list[ItemResult]:
        """Take the driver's current work (unless an older generation's) and hand back what the
        loop did since the last sync (a state reset it carries first: `TaskHost.reset_state`)."""
        self.runner.reset_state(work.reset, settings)
        results = self.assignment.take_synced(subs, settings, work)
        # Exactly-once: a runner with no continuous active yet (a newcomer's first sync) starts
        # anyway and makes its committer, so the first tasks moved to it need not wait for that;
        # a newcomer's first sync waits for it (the driver gives tasks only to an executor that
        # answered a sync), so that the tasks it is given next are not held up by a cold start.
        eager = settings.guarantee == ProcessingGuarantee.EXACTLY_ONCE
        self._ensure_running(work, eager=eager)
        if eager and not self._synced and not any(role == Role.ACTIVE for _, role in work.tasks):
            self.producer.made.wait(NEWCOMER_WAIT_S)
        self._synced = True
        return results

    def push(self, work: ContinuousWork) -> bool:
        """Take a newer generation's work pushed by the driver ahead of its sync (protocol/work_push.py);
        False if it is not newer, or the loop has had no sync yet (no program to run it with).
        A state reset it carries is carried out first (`TaskHost.reset_state`)."""
        current = self.assignment.current()
        if current is None or work.generation <= current.work.generation:
            return False
        self.runner.reset_state(work.reset)
        if not self.assignment.take_pushed(work):
            return False
        log.info("generation %d pushed: %d tasks here", work.generation, len(work.tasks))
        self._ensure_running(work)
        return True

    def collect(self, work: ContinuousWork) -> list[ItemResult]:
        """A sync over HTTP, between the driver's Spark jobs (work_push.SYNC_PATH): take `work` as a
        push does (only if newer), and hand back what the loop did since the last sync."""
        self.push(work)
        return self.assignment.take_results()

    def release(self, generation: int, tasks: Sequence[str], timeout_s: float) -> Released:
        """Let `tasks` go ahead of `generation`, which takes them away from this runner (protocol/work_push.py):
        no step or round under older work processes them from now on; once the step or round that
        holds one has ended, the runner lets go of them (`TaskHost.release_task`). Clean (no fence
        needed) if that happened within `timeout_s` and each ended cleanly (committed, or had nothing
        to commit), with the input positions each committed last, for their next owners."""
        released = self.assignment.release(generation, tasks, timeout_s)
        if released == Release.TIMED_OUT:
            return Released(False, {})
        clean = released == Release.CLEAN
        # Only its actives: a standby commits nothing, and the driver of a new generation names
        # every task it gives another runner's active (it may not know what this one holds).
        current = self.assignment.current()
        standbys = {t for t, role in current.work.tasks if role != Role.ACTIVE} if current is not None else set()
        let_go = sorted(t for t in tasks if t not in standbys)
        handed = {}
        for task in let_go:
            if clean and (positions := self.runner.positions(task)) is not None:
                handed[task] = dict(positions)  # what its last round committed: no round holds it now
            self.runner.release_task(task, f"released for generation {generation}", recycle=clean)
        log.info("generation %d: released %s%s", generation, let_go,
                 "" if clean else " (a round holding them did not commit cleanly)")
        return Released(clean, handed)

    def _committing_tasks(self, work: ContinuousWork, tasks: Sequence[str],
                          role: Role) -> contextlib.AbstractContextManager[CommittingTasks]:
        """`ContinuousAssignment.committing`: the tasks `work` may still run, committing until the block ends."""
        return self.assignment.committing(work, tasks, role)

    def settings(self) -> BatchSettings | None:
        """The last sync's settings (None before the first)."""
        return self.assignment.settings()

    def fenced_out(self) -> bool:
        """Whether the runner is fenced out of the work it has (`RunnerProducer.stale_for`)."""
        current = self.assignment.current()
        return current is not None and self.producer.stale_for(current.work)

    def app_token(self) -> tuple[str, str] | None:
        """The app and push token of the last sync's settings (None before the first)."""
        settings = self.assignment.settings()
        return (settings.app, settings.push_token) if settings is not None else None

    def _ensure_running(self, work: ContinuousWork, eager: bool = False) -> None:
        with self._start_lock:  # a sync and a push may come at once
            if (self._thread is None or not self._thread.is_alive()) and (work.tasks or eager):
                self._stop.clear()
                self._thread = threading.Thread(target=self._run, name="eddy-continuous", daemon=True)
                self._thread.start()

    def close(self) -> None:
        """Stop the loop (its tasks stay open; the runner closes them)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        if self._pool is not None:  # the steps under way finish before their tasks close
            self._pool.shutdown(wait=True)
            self._pool = None
        self._tasks.inflight.clear()
        self.producer.close()
        if self._poller is not None:
            self._poller.close()
            self._poller = None

    # -- the loop -------------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            current = self.assignment.current()
            if current is None:
                time.sleep(0.05)
                continue
            try:
                self._round(*current)
            except Exception:  # noqa: BLE001 - the loop must go on; tasks report their own errors
                log.exception("continuous round failed")
                if self._poller is not None:  # a new consumer next round
                    with contextlib.suppress(Exception):
                        self._poller.close()
                    self._poller = None
                time.sleep(RETRY_AFTER_S)

    def _round(self, work: ContinuousWork, subs: dict[int, SubTopology], settings: BatchSettings) -> None:
        released = self.assignment.released_from(work)
        tasks = self._tasks
        if self._poller is None:
            self._poller = InputPoller(settings.kafka)
        poller = self._poller
        on_runner_transactions = settings.guarantee == ProcessingGuarantee.EXACTLY_ONCE
        busy = tasks.busy()
        now = time.monotonic()
        processing = any(role == Role.ACTIVE and task in busy for task, role in work.tasks)
        running: dict[str, list[TopicPartition]] = {}
        steps: list[tuple[str, Role, list[RawRecords] | None]] = []
        # actives first: a standby's step waits while theirs run (a newcomer's tasks open beside
        # standbys that restore from scratch)
        for task, role in sorted(work.tasks, key=lambda copy: copy[1] != Role.ACTIVE):
            if tasks.backed_off.get(task, 0.0) > now or (role == Role.ACTIVE and task in released):
                continue
            if role == Role.ACTIVE:
                tps = self._inputs(subs, task)
                if task in busy and task in self._fetching:
                    # mid-step: its positions move when the step commits; its records keep coming
                    running[task] = tps
                    continue
                positions = self.runner.positions(task)
                if positions is not None and task not in busy:
                    poller.ensure({tp: positions[tp] for tp in tps})
                    if task not in self._fetching:  # started running: taken over, promoted or restored
                        self._cycle.joined(task)
                        tasks.handed_taken.add(task)  # from now on this runner moves its positions
                    running[task] = tps
                    continue
            if task not in busy and tasks.due.setdefault(task, now) <= now:  # open, restore, tail: each commit interval
                if role != Role.ACTIVE and processing and now - tasks.due[task] < STANDBY_MAX_DEFER_S:
                    continue  # a standby's tail waits while actives process (Python runs one thread at a time)
                processing = processing or role == Role.ACTIVE
                steps.append((task, role, None))
                tasks.due[task] = now + (0.0 if role == Role.ACTIVE else work.commit_interval_s)
        self._fetching = set(running)
        self._start_steps(work, subs, settings, steps)
        poller.release({tp for tps in running.values() for tp in tps})

        def due(task: str) -> float:
            return self._cycle.due(task, running[task]) if on_runner_transactions else tasks.due.get(task, 0.0)

        # wake for the first task whose records are due; otherwise as records come (20 ms at most);
        # while a round runs or its output is fetched, every few milliseconds (the next round
        # starts soon after), never with no wait at all: a loop spinning on the GIL held back the
        # delivery reports a round's flush serves, for seconds under a backlog (docs/DESIGN.md)
        if bool(self._cycle.last_output.offsets) or (self._round_future is not None and not self._round_future.done()):
            poller.poll(ROUND_END_POLL_S)
        else:
            poller.poll(min([max(due(t) - now, 0.0) for t, tps in running.items()
                             if t not in busy and poller.buffered(tps)] + [0.02]))
        now = time.monotonic()
        busy = tasks.busy()
        if on_runner_transactions:
            ready = self.producer.ready(work, settings, self._step_pool())  # made before the first active comes
            if ready and self.producer.made_after_lapse != self._lapses_seen:
                self._let_go_of_actives_held_through_a_lapse()
                return
            if (running and ready and (self._round_future is None or self._round_future.done())
                    and self._cycle.own_output_fetched(poller, now)):
                batch = [(task, poller.take(tps)) for task, tps in self._due_tasks(subs, running, busy, now, due)]
                if batch:
                    self._cycle.started([task for task, _ in batch], now, work.commit_interval_s)
                    self._start_round(work, subs, settings, batch)
            return
        steps = []
        for task, tps in self._due_tasks(subs, running, busy, now, due):
            steps.append((task, Role.ACTIVE, poller.take(tps)))
            tasks.due[task] = now + work.commit_interval_s
        self._start_steps(work, subs, settings, steps)

    def _due_tasks(self, subs: dict[int, SubTopology], running: Mapping[str, list[TopicPartition]], busy: set[str],
                   now: float, due: Callable[[str], float]) -> list[tuple[str, list[TopicPartition]]]:
        """The running actives to process now: their commit interval is up and records wait (or
        so many wait that they go at once), or they punctuate on wall-clock time."""
        assert self._poller is not None
        poller = self._poller
        out = []
        for task, tps in running.items():
            if task in busy:
                continue
            full = poller.buffered(tps) >= MAX_BUFFERED_RECORDS
            # A process() step runs every commit interval, input or not: its wall-clock punctuations.
            ticks = subs[TaskId.parse(task).subtopology].punctuates and due(task) <= now
            if ((due(task) <= now or full) and poller.buffered(tps)) or ticks:
                # a join: wait for the other input
                if len(tps) > 1 and not full and not poller.ready(tps) and self._tasks.waits_for_input(task, now):
                    continue
                self._tasks.stop_waiting(task)
                out.append((task, tps))
        return out

    # -- exactly-once: one transaction per round (protocol/fences.py) -------------------------------------

    def _let_go_of_actives_held_through_a_lapse(self) -> None:
        """A committer is made after the runner was without a valid one (its last fenced, broken
        or of an older epoch; or one made found stale): before anything commits through it, let
        go of every active held. While the runner could not commit, others could (the driver
        fences a runner before it gives its tasks to another, and may give them back later), so
        what a held active knows of its input positions and stores may be behind, whether it
        read them before the lapse or during it: one held on would process input again that
        another runner committed, and count it twice (docs/reliability.md, finding 16). Let go,
        each is opened anew if it comes back here, from the group's committed positions, its
        stores restoring what their changelogs gained."""
        self._lapses_seen = self.producer.made_after_lapse
        let_go = self.runner.release_actives("held while the runner could not commit")
        if let_go:
            log.warning("let go of %s: held while the runner could not commit, they are opened anew", let_go)

    def _start_round(self, work: ContinuousWork, subs: dict[int, SubTopology], settings: BatchSettings,
                     batch: list[tuple[str, list[RawRecords]]]) -> None:
        assert self.producer.committer is not None
        future = self._step_pool().submit(self._guarded_round, work, subs, settings, batch, self.producer.committer)
        self._round_future = future
        for task, _ in batch:
            self._tasks.inflight[task] = future

    def _guarded_round(self, work: ContinuousWork, subs: dict[int, SubTopology], settings: BatchSettings,
                       batch: list[tuple[str, list[RawRecords]]], committer: TaskCommitter) -> None:
        """Commit the round's tasks together (`TaskRunner.run_round`); a task a newer generation
        took away meanwhile is left out (whoever holds it now fetches its records again)."""
        with self._committing_tasks(work, [task for task, _ in batch], Role.ACTIVE) as committing:
            entries = []
            for task, records in batch:
                item = self._process_item(task, records) if task in committing.allowed else None
                if item is not None:
                    entries.append(RoundEntry(item, records))
            if not entries:
                committing.clean = True
                return
            try:
                # the round's records are in hand: its time is processing and committing, not waiting
                with self.runner.busy.busy() as share:
                    results = self.runner.run_round(subs, settings, entries, committer)
                taken = sum(r.records_in for r in results)
                results = share_busy(results, share.seconds, self._round_cost.fixed_part(taken, share.seconds))
            except Exception:  # noqa: BLE001 - the loop goes on; the tasks read their positions again
                log.exception("a commit round failed")
                for item, _ in entries:  # their records were taken off the poller, and not committed
                    self.runner.forget_positions(item.task)
                results = []
            else:
                committing.clean = committer.usable and all(r.status in _ROUND_WENT_ON for r in results)
                if committing.clean:
                    self._cycle.round_committed(committer.delivered(), time.monotonic())
        self.producer.drop_if(committer)
        for result in results:
            if result.status not in _ROUND_WENT_ON:
                log.warning("task %s: %s %s", result.task, result.status, result.message.splitlines()[:1])
                self._tasks.back_off(result.task)
        if self.runner.metrics is not None:
            self.runner.metrics.observe(settings.app, results)
        self.assignment.add_results(work, results)

    def _step_pool(self) -> ThreadPoolExecutor:
        """The pool the steps, rounds and the committer's making run on (its threads start as needed)."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=STEP_THREADS, thread_name_prefix="eddy-step")
        return self._pool

    def _start_steps(self, work: ContinuousWork, subs: dict[int, SubTopology], settings: BatchSettings,
                     steps: Sequence[tuple[str, Role, list[RawRecords] | None]]) -> None:
        """Start `steps` (one per task) on the pool and go on: each mostly waits on the broker (a
        transaction's commit, `init_transactions` of a task taken over, a changelog fetch), so
        tasks taken over in a failover open together, one task's commit does not hold up the
        next one's, and a standby's tail never delays an active's records. The loop polls while
        they run; a task's next step waits for its last one."""
        for task, role, records in steps:
            self._tasks.inflight[task] = self._step_pool().submit(self._guarded_step, work, subs, settings, task, role,
                                                            records)

    def _guarded_step(self, work: ContinuousWork, subs: dict[int, SubTopology], settings: BatchSettings,
                      task: str, role: Role, records: list[RawRecords] | None) -> None:
        """`_step`, unless a newer generation took the task (or its role) away meanwhile: a step
        queued under the old work must not reopen a task the runner just released. A step that
        raises pauses its task as a failed one does."""
        with self._committing_tasks(work, [task], role) as committing:
            if not committing.allowed:
                committing.clean = True
                return
            try:
                committing.clean = self._step(work, subs, settings, task, role, records)
            except Exception:  # noqa: BLE001 - the loop goes on; this task retries later
                log.exception("task %s (%s): step failed", task, role)
                self._tasks.back_off(task)

    def _process_item(self, task: str, records: Sequence[RawRecords]) -> WorkItem | None:
        """The item that processes `records` (each from the task's position); None if the task
        was closed meanwhile (its records are fetched again)."""
        positions = self.runner.positions(task)
        if positions is None:
            return None
        return WorkItem(task, Role.ACTIVE, tuple(
            InputRange(r.topic, r.partition, positions[r.topic_partition], r.next_offset)
            for r in records))

    def _inputs(self, subs: dict[int, SubTopology], task: str) -> list[TopicPartition]:
        tid = TaskId.parse(task)
        return [TopicPartition(topic, tid.partition) for topic in subs[tid.subtopology].input_topics]

    def _step(self, work: ContinuousWork, subs: dict[int, SubTopology], settings: BatchSettings, task: str,
              role: Role, records: list[RawRecords] | None) -> bool:
        """One unit of a task's work: open/restore/tail (`records` None) or process and commit;
        False if it ended without committing what it processed."""
        ranges: tuple[InputRange, ...] = ()
        if records is not None:
            process = self._process_item(task, records)
            if process is None:
                return True
            ranges = process.ranges
        elif role == Role.ACTIVE:
            ranges = tuple(InputRange(topic, p, -1, -1) for topic, p in self._inputs(subs, task))
        # Positions handed over by the task's last owner hold until this runner first runs it: a
        # round of it here moves them, and a task opened again later reads them from the group.
        handed = work.handed.get(task) if records is None and task not in self._tasks.handed_taken else None
        item = WorkItem(task, role, ranges, restore_only=records is None and role == Role.ACTIVE, handed=handed)
        exactly_once = settings.guarantee == ProcessingGuarantee.EXACTLY_ONCE
        slot = SlotWork(self.runner.executor_id, (item,), runner_transactions=exactly_once)
        started = time.monotonic()
        # its records are in hand: the busy time it reports (`TaskRunner.run_item`) is not the poll's
        result = replace(self.runner.run_item(subs, settings, slot, item, None, records),
                         duration_s=time.monotonic() - started)
        if result.status not in _STEP_WENT_ON:
            log.warning("task %s (%s): %s %s", task, role, result.status, result.message.splitlines()[:1])
            self._tasks.back_off(task)
        if self.runner.metrics is not None:
            self.runner.metrics.observe(settings.app, [result])
        self.assignment.add_results(work, [result])
        return result.status in _STEP_WENT_ON or result.status == ItemStatus.ABORTED
