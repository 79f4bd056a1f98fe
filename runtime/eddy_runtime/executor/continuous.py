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
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

from eddy_contract.spec import ProcessingGuarantee
from eddy_contract.tasks import Role, TaskId
from eddy_runtime.kafka import client as kafka_client
from eddy_runtime.kafka.partitions import InputRange
from eddy_runtime.kafka.records import RawRecords
from eddy_runtime.kafka.transactions import TaskCommitter, runner_transactional_id
from eddy_runtime.protocol.fences import fence_topic, read_epochs
from eddy_runtime.protocol.work import BatchSettings, ContinuousWork, ItemResult, SlotWork, WorkItem

if TYPE_CHECKING:
    import pyarrow as pa

    from eddy_runtime.dsl.subtopology import SubTopology
    from eddy_runtime.executor.metrics import ExecutorMetrics

__all__ = ["CommitCycle", "ContinuousLoop", "InputPoller", "merge_results"]

log = logging.getLogger("eddy.continuous")

#: (topic, partition)
TopicPartition = tuple[str, int]

#: process a task before its commit interval is up once this many records wait; a partition with
#: this many buffered is not fetched until its task takes them (what a round holds stays bounded)
MAX_BUFFERED_RECORDS = 100_000
#: a task that failed (or was fenced) waits this long before it is opened again, unless a newer
#: generation names it
RETRY_AFTER_S = 2.0
#: at most this long per restore chunk, so that the other tasks keep their commit cadence
RESTORE_CHUNK_S = 0.2
STANDBY_CHUNK_S = 0.1
#: tasks whose steps (open, restore, tail, process and commit) run at once
STEP_THREADS = 8
#: a task with two inputs (a join) waits at most this long for one of them to be fetched
MAX_TASK_IDLE_S = 0.5
#: a standby's step waits for the actives' step or round under way at most this long past its due time
STANDBY_MAX_DEFER_S = 1.0
#: how long a newcomer's first sync waits for its committer (exactly-once)
NEWCOMER_WAIT_S = 10.0
#: how long the poller waits for the metadata of a topic it starts fetching
METADATA_TIMEOUT_S = 2.0
#: how long a round waits past its due time for the poller to fetch what the round before it
#: committed to partitions this runner reads (`ContinuousLoop._own_output_fetched`)
OWN_OUTPUT_WAIT_S = 0.05
#: while a round runs, the loop polls this long at a time (a poll returns only when it is up)
ROUND_END_POLL_S = 0.005


class TaskHost(Protocol):
    """What the loop needs of the task runner (task_runner.TaskRunner)."""

    executor_id: str
    metrics: ExecutorMetrics | None

    def positions(self, task_id: str) -> Mapping[TopicPartition, int] | None:
        """A running active's input positions: None unless held open as an active, restored, with
        its committed positions read."""

    def run_item(self, subs: dict[int, SubTopology], settings: BatchSettings, slot: SlotWork, item: WorkItem,
                 data: pa.Table | None, records: Sequence[RawRecords] | None = None) -> ItemResult: ...

    def forget_positions(self, task_id: str) -> None:
        """Read the task's committed positions again before it processes more."""

    def close_task(self, task_id: str, why: str) -> None:
        """Let go of a held task, closing it in the background (it is opened again, and restores
        its delta, if it comes back)."""

    def run_round(self, subs: dict[int, SubTopology], settings: BatchSettings,
                  entries: Sequence[tuple[WorkItem, Sequence[RawRecords]]], committer: TaskCommitter
                  ) -> list[ItemResult]:
        """Process each entry's records and commit them all in one transaction of `committer`."""


class CommitCycle:
    """When a runner's rounds start under exactly-once (one transaction per round for all the
    actives it runs; `ContinuousLoop`).

    A cycle starts once a commit interval has passed since the last one started, with a round of
    every task whose records wait. Once what a round committed to partitions the runner reads
    itself (a repartition topic between two of its sub-topologies) has been fetched, the tasks
    that read those partitions follow up at once in a round of their own, and so on down the
    topology. So a record crosses a repartition topic within the cycle its input came in,
    instead of waiting a commit interval for the next one. A task follows up at most once per
    cycle, so a cycle holds at most one round more than the topology has levels; in a steady
    flow a task fed by the runner's own output has nothing waiting when a cycle starts and
    commits once per cycle, in its follow-up: a commit interval apart, as in Kafka Streams.
    """

    def __init__(self) -> None:
        #: when the next cycle starts (monotonic seconds)
        self.due_at = 0.0
        #: the partitions whose readers may follow up now, and the tasks that did in this cycle
        self._fetched: frozenset[TopicPartition] = frozenset()
        self._followed: set[str] = set()

    def due(self, task: str, tps: Iterable[TopicPartition]) -> float:
        """When `task` (reading `tps`) may next take a round, if its records wait."""
        if self._fetched and task not in self._followed and not self._fetched.isdisjoint(tps):
            return 0.0
        return self.due_at

    def started(self, tasks: Iterable[str], now: float, interval_s: float) -> None:
        """A round of `tasks` started at `now`: a new cycle if the last one is over, else a follow-up."""
        if now >= self.due_at:
            self.due_at = now + interval_s
            self._followed = set()
        else:
            self._followed.update(tasks)
        self._fetched = frozenset()

    def output_fetched(self, partitions: Iterable[TopicPartition]) -> None:
        """What the last round committed to `partitions`, which the runner reads, was fetched (or
        waited for long enough): the tasks that read them may follow up."""
        self._fetched = frozenset(partitions)


class InputPoller:
    """One read_committed consumer for the input partitions of the runner's running actives;
    what it fetched waits in a buffer per partition until its task takes it."""

    def __init__(self, kafka: Any) -> None:
        conf: dict[str, Any] = {
            "group.id": "eddy-continuous",  # never commits: positions live in the tasks' transactions
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "isolation.level": "read_committed",
            "fetch.wait.max.ms": 10,
            "fetch.max.bytes": 64 << 20,
            "max.partition.fetch.bytes": 16 << 20,
        }
        self._consumer = kafka_client.consumer(kafka, conf)
        #: per assigned partition: the offset its buffer starts at (the task's position)
        self._start: dict[TopicPartition, int] = {}
        self._buffers: dict[TopicPartition, RawRecords] = {}
        #: partitions not fetched while their buffer is full (`MAX_BUFFERED_RECORDS`)
        self._full: set[TopicPartition] = set()

    def ensure(self, positions: Mapping[TopicPartition, int]) -> None:
        """Fetch these partitions from these positions (a partition fetched from elsewhere starts over)."""
        from confluent_kafka import TopicPartition as KafkaPartition

        moved = [tp for tp, pos in positions.items() if self._start.get(tp) != pos]
        if not moved:
            return
        self._learn_leaders({t for t, _ in moved} - {t for t, _ in self._start})
        assigned = [tp for tp in moved if tp in self._start]
        if assigned:
            self._consumer.incremental_unassign([KafkaPartition(t, p) for t, p in assigned])
        self._consumer.incremental_assign([KafkaPartition(t, p, positions[(t, p)]) for t, p in moved])
        for tp in moved:
            self._start[tp] = positions[tp]
            self._buffers[tp] = RawRecords(tp[0], tp[1], next_offset=positions[tp])
            self._full.discard(tp)  # assigned anew: fetched (not paused)

    def _learn_leaders(self, topics: set[str]) -> None:
        """Ask for the metadata of topics this consumer fetches none of yet: left to itself, a
        consumer learns their leaders only at its next metadata refresh, about half a second
        after the assign, which a task moved here would spend waiting (a few ms this way)."""
        for topic in sorted(topics):
            try:
                self._consumer.list_topics(topic, timeout=METADATA_TIMEOUT_S)
            except Exception as e:  # noqa: BLE001 - the assign still works, only later
                log.warning("metadata of %s: %s", topic, e)

    def release(self, keep: set[TopicPartition]) -> None:
        """Stop fetching every partition not in `keep`."""
        from confluent_kafka import TopicPartition as KafkaPartition

        gone = [tp for tp in self._start if tp not in keep]
        if gone:
            self._consumer.incremental_unassign([KafkaPartition(t, p) for t, p in gone])
            for tp in gone:
                del self._start[tp]
                del self._buffers[tp]
                self._full.discard(tp)

    def poll(self, timeout_s: float) -> int:
        """Fetch what is there (waiting up to `timeout_s` for a first record); records fetched."""
        from confluent_kafka import TopicPartition as KafkaPartition

        if not self._start:
            time.sleep(timeout_s)
            return 0
        n = 0
        for m in self._consumer.consume(num_messages=10_000, timeout=timeout_s):
            err = m.error()
            if err is not None:
                raise RuntimeError(f"reading {m.topic()}[{m.partition()}]: {err}")
            buf = self._buffers.get((m.topic() or "", m.partition() or 0))
            off = m.offset()
            if buf is None or off is None or off < buf.next_offset:
                continue  # a partition released (or moved) since the fetch
            buf.keys.append(m.key())
            buf.values.append(m.value())
            buf.offsets.append(off)
            buf.timestamps.append(m.timestamp()[1])
            buf.next_offset = off + 1
            n += 1
        if n:  # past the transaction markers after the records too: a position commits them
            for tp in self._consumer.position([KafkaPartition(t, p) for t, p in self._start]):
                buf = self._buffers[(tp.topic, tp.partition)]
                if len(buf) and tp.offset > buf.next_offset:
                    buf.next_offset = tp.offset
            full = [tp for tp, buf in self._buffers.items()
                    if len(buf) >= MAX_BUFFERED_RECORDS and tp not in self._full]
            if full:  # a backlog is fetched as its task takes it, not all into memory at once
                self._consumer.pause([KafkaPartition(t, p) for t, p in full])
                self._full.update(full)
        return n

    def ready(self, tps: Sequence[TopicPartition]) -> bool:
        """Whether every partition of `tps` has records buffered or is read to the end the broker
        last reported (Kafka Streams' ``max.task.idle.ms=0``: a task with two inputs waits for what
        is already on the broker, so it takes their records in timestamp order)."""
        from confluent_kafka import TopicPartition as KafkaPartition

        for tp in tps:
            buf = self._buffers.get(tp)
            if buf is None:
                return False
            if len(buf):
                continue
            _, high = self._consumer.get_watermark_offsets(KafkaPartition(tp[0], tp[1]), cached=True)
            if high < 0 or buf.next_offset < high:
                return False
        return True

    def fetched(self, offsets: Mapping[TopicPartition, int]) -> bool:
        """Whether every partition of `offsets` this poller fetches was fetched past its offset."""
        return all(buf.next_offset > off for tp, off in offsets.items() if (buf := self._buffers.get(tp)) is not None)

    def reads(self, offsets: Mapping[TopicPartition, int]) -> list[TopicPartition]:
        """The partitions of `offsets` this poller fetches."""
        return [tp for tp in offsets if tp in self._buffers]

    def buffered(self, tps: Sequence[TopicPartition]) -> int:
        return sum(len(self._buffers[tp]) for tp in tps if tp in self._buffers)

    def take(self, tps: Sequence[TopicPartition]) -> list[RawRecords]:
        """The buffered records of `tps` (each from its position); the buffers start after them."""
        from confluent_kafka import TopicPartition as KafkaPartition

        out = []
        for tp in tps:
            buf = self._buffers[tp]
            out.append(buf)
            self._buffers[tp] = RawRecords(tp[0], tp[1], next_offset=buf.next_offset)
            self._start[tp] = buf.next_offset
        emptied = [tp for tp in tps if tp in self._full]
        if emptied:
            self._consumer.resume([KafkaPartition(t, p) for t, p in emptied])
            self._full.difference_update(emptied)
        return out

    def close(self) -> None:
        self._consumer.close()


def merge_results(old: ItemResult | None, new: ItemResult) -> ItemResult:
    """What a task did since the last sync: counts added up, the latest status and figures."""
    if old is None:
        return new
    counts = new.latency_counts
    if old.latency_counts and counts:
        counts = tuple(a + b for a, b in zip(old.latency_counts, counts, strict=True))
    elif old.latency_counts:
        counts = old.latency_counts
    return replace(
        new,
        records_in=old.records_in + new.records_in,
        records_out=old.records_out + new.records_out,
        committed={**old.committed, **new.committed},
        skipped=old.skipped + new.skipped,
        dead_lettered=old.dead_lettered + new.dead_lettered,
        dropped=old.dropped + new.dropped,
        bad_records=(old.bad_records + new.bad_records)[:20],
        latency_counts=counts,
        latency_sum_s=old.latency_sum_s + new.latency_sum_s,
        duration_s=old.duration_s + new.duration_s,
        restored=old.restored + new.restored,
        figures=new.figures or old.figures,
        message=new.message or old.message,
    )


class ContinuousLoop:
    """The runner's stream thread: runs its continuous tasks until the runner closes."""

    def __init__(self, runner: TaskHost) -> None:
        self.runner = runner
        self._lock = threading.Lock()
        self._work: ContinuousWork | None = None
        self._subs: dict[int, SubTopology] = {}
        self._settings: BatchSettings | None = None
        self._results: dict[str, ItemResult] = {}
        #: task -> monotonic time before which it is not run (failed, fenced, stopped at a bad record)
        self._paused: dict[str, float] = {}
        self._due: dict[str, float] = {}
        #: task -> since when it waits for one of its inputs to be fetched (`InputPoller.ready`)
        self._waiting: dict[str, float] = {}
        self._poller: InputPoller | None = None
        self._pool: ThreadPoolExecutor | None = None
        #: task -> its step running (or queued) on the pool; a task takes one step at a time
        self._inflight: dict[str, Future[None]] = {}
        #: the running actives whose input partitions the poller fetched in the last round
        self._fetching: set[str] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        # Exactly-once: the runner's own committer, one transaction per round for every active
        # (protocol/fences.py), made on the pool and valid up to the fence epoch it was checked against.
        self._committer: TaskCommitter | None = None
        self._committer_epoch = -1
        self._committer_future: Future[None] | None = None
        #: set once a committer was made (or found stale): what a newcomer's first sync waits for
        self._committer_made = threading.Event()
        self._synced = False
        self._committer_retry_at = 0.0
        #: a committer made under work of this epoch found a newer one in the fence topic
        self._stale_epoch = -1
        self._cycle = CommitCycle()
        self._round_future: Future[None] | None = None
        #: what the last round committed (partition -> its last offset there), and when: the next
        #: round first waits for the poller to fetch the part of it this runner reads
        self._own_output: tuple[dict[TopicPartition, int], float] = ({}, 0.0)
        #: task -> the generation it was released for: not processed under older work (`release`)
        self._released: dict[str, int] = {}
        #: the tasks in a step or round that may commit, and those whose last one did not commit
        #: cleanly; `_changed` (on `_lock`) wakes `release` when a step or round ends
        self._committing: Counter[str] = Counter()
        self._unclean: set[str] = set()
        self._changed = threading.Condition(self._lock)

    def sync(self, subs: dict[int, SubTopology], settings: BatchSettings, work: ContinuousWork) -> list[ItemResult]:
        """Take the driver's current work (unless an older generation's) and hand back what the
        loop did since the last sync."""
        with self._lock:
            if self._work is None or work.generation >= self._work.generation:
                if self._work is None or work.generation > self._work.generation:
                    self._paused.clear()
                # short restore and standby chunks: the other tasks keep their commit cadence
                self._work, self._subs = work, subs
                self._settings = replace(settings, restore_chunk_seconds=RESTORE_CHUNK_S,
                                         standby_chunk_seconds=STANDBY_CHUNK_S)
            results = self._take_results()
        # Exactly-once: a runner with no continuous active yet (a newcomer's first sync) starts
        # anyway and makes its committer, so the first tasks moved to it need not wait for that;
        # a newcomer's first sync waits for it (the driver gives tasks only to an executor that
        # answered a sync), so that the tasks it is given next are not held up by a cold start.
        eager = settings.guarantee == ProcessingGuarantee.EXACTLY_ONCE
        self._ensure_running(work, eager=eager)
        if eager and not self._synced and not any(role == "active" for _, role in work.tasks):
            self._committer_made.wait(NEWCOMER_WAIT_S)
        self._synced = True
        return results

    def push(self, work: ContinuousWork) -> bool:
        """Take a newer generation's work pushed by the driver ahead of its sync (protocol/work_push.py);
        False if it is not newer, or the loop has had no sync yet (no program to run it with)."""
        with self._lock:
            if self._work is None or self._settings is None or work.generation <= self._work.generation:
                return False
            self._paused.clear()
            self._work = work
        log.info("generation %d pushed: %d tasks here", work.generation, len(work.tasks))
        self._ensure_running(work)
        return True

    def collect(self, work: ContinuousWork) -> list[ItemResult]:
        """A sync over HTTP, between the driver's Spark jobs (work_push.SYNC_PATH): take `work` as a
        push does (only if newer), and hand back what the loop did since the last sync."""
        self.push(work)
        with self._lock:
            return self._take_results()

    def _take_results(self) -> list[ItemResult]:
        """What the loop did since the last sync, forgotten here (under `_lock`)."""
        results = list(self._results.values())
        self._results.clear()
        return results

    def release(self, generation: int, tasks: Sequence[str], timeout_s: float) -> bool:
        """Let `tasks` go ahead of `generation`, which takes them away from this runner (protocol/work_push.py):
        no step or round under older work processes them from now on; once the step or round that
        holds one has ended, the runner lets go of them (`TaskHost.close_task`). True if that
        happened within `timeout_s` and every one of them ended cleanly (committed, or had nothing
        to commit), so that the driver need not fence this runner; False otherwise (it fences it)."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            for task in tasks:
                self._released[task] = max(self._released.get(task, -1), generation)
                self._unclean.discard(task)
            while any(self._committing[t] for t in tasks):
                left = deadline - time.monotonic()
                if left <= 0:
                    log.warning("generation %d: %s still committing after %.1fs; not released", generation,
                                sorted(t for t in tasks if self._committing[t]), timeout_s)
                    return False
                self._changed.wait(left)
            clean = not self._unclean.intersection(tasks)
        for task in tasks:
            self.runner.close_task(task, f"released for generation {generation}")
        log.info("generation %d: released %s%s", generation, sorted(tasks),
                 "" if clean else " (a round holding them did not commit cleanly)")
        return clean

    def _held_back(self, work: ContinuousWork, task: str, role: Role) -> bool:
        """Whether `task` (in `role`) was released for a newer generation than `work` (under `_lock`)."""
        return role == "active" and self._released.get(task, -1) > work.generation

    @contextlib.contextmanager
    def _committing_tasks(self, work: ContinuousWork, tasks: Sequence[str],
                          role: Role) -> Iterator[tuple[list[str], list[bool]]]:
        """The tasks of `tasks` that `work` may still run (neither taken away by a newer
        generation nor released), marked as committing until the block ends; the block sets the
        flag it is given to True once what it did committed cleanly (or had nothing to commit)."""
        with self._lock:
            allowed = [t for t in tasks if not self._held_back(work, t, role) and not self._taken(work, t, role)]
            self._committing.update(allowed)
        clean = [False]
        try:
            yield allowed, clean
        finally:
            with self._lock:
                self._committing.subtract(allowed)
                for t in allowed:
                    if self._committing[t] <= 0:
                        del self._committing[t]
                if not clean[0]:
                    self._unclean.update(allowed)
                self._changed.notify_all()

    def settings(self) -> BatchSettings | None:
        """The last sync's settings (None before the first)."""
        with self._lock:
            return self._settings

    def app_token(self) -> tuple[str, str] | None:
        """The app and push token of the last sync's settings (None before the first)."""
        with self._lock:
            settings = self._settings
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
        self._inflight.clear()
        if self._committer is not None:
            with contextlib.suppress(Exception):
                self._committer.close()
            self._committer = None
        if self._poller is not None:
            self._poller.close()
            self._poller = None

    # -- the loop -------------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                work, subs, settings = self._work, self._subs, self._settings
            if work is None or settings is None:
                time.sleep(0.05)
                continue
            try:
                self._round(work, subs, settings)
            except Exception:  # noqa: BLE001 - the loop must go on; tasks report their own errors
                log.exception("continuous round failed")
                if self._poller is not None:  # a new consumer next round
                    with contextlib.suppress(Exception):
                        self._poller.close()
                    self._poller = None
                time.sleep(RETRY_AFTER_S)

    def _round(self, work: ContinuousWork, subs: dict[int, SubTopology], settings: BatchSettings) -> None:
        with self._lock:
            released = {t for t, _ in work.tasks if self._held_back(work, t, Role.ACTIVE)}
        if self._poller is None:
            self._poller = InputPoller(settings.kafka)
        poller = self._poller
        shared = settings.guarantee == ProcessingGuarantee.EXACTLY_ONCE
        busy = self._busy()
        now = time.monotonic()
        processing = any(role == "active" and task in busy for task, role in work.tasks)
        running: dict[str, list[TopicPartition]] = {}
        steps: list[tuple[str, Role, list[RawRecords] | None]] = []
        # actives first: a standby's step waits while theirs run (a newcomer's tasks open beside
        # standbys that restore from scratch)
        for task, role in sorted(work.tasks, key=lambda copy: copy[1] != "active"):
            if self._paused.get(task, 0.0) > now or (role == "active" and task in released):
                continue
            if role == "active":
                tps = self._inputs(subs, task)
                if task in busy and task in self._fetching:
                    # mid-step: its positions move when the step commits; its records keep coming
                    running[task] = tps
                    continue
                positions = self.runner.positions(task)
                if positions is not None and task not in busy:
                    poller.ensure({tp: positions[tp] for tp in tps})
                    running[task] = tps
                    continue
            if task not in busy and self._due.setdefault(task, now) <= now:  # open, restore, tail: each commit interval
                if role != "active" and processing and now - self._due[task] < STANDBY_MAX_DEFER_S:
                    continue  # a standby's tail waits while actives process (Python runs one thread at a time)
                processing = processing or role == "active"
                steps.append((task, role, None))
                self._due[task] = now + (0.0 if role == "active" else work.commit_interval_s)
        self._fetching = set(running)
        self._start_steps(work, subs, settings, steps)
        poller.release({tp for tps in running.values() for tp in tps})
        def due(task: str) -> float:
            return self._cycle.due(task, running[task]) if shared else self._due.get(task, 0.0)

        # wake for the first task whose records are due; otherwise as records come (20 ms at most);
        # while a round runs or its output is fetched, every few milliseconds (the next round
        # starts soon after), never with no wait at all: a loop spinning on the GIL held back the
        # delivery reports a round's flush serves, for seconds under a backlog (docs/DESIGN.md)
        if bool(self._own_output[0]) or (self._round_future is not None and not self._round_future.done()):
            poller.poll(ROUND_END_POLL_S)
        else:
            poller.poll(min([max(due(t) - now, 0.0) for t, tps in running.items()
                             if t not in busy and poller.buffered(tps)] + [0.02]))
        now = time.monotonic()
        busy = self._busy()
        if shared:
            ready = self._committer_ready(work, settings)  # made before the first active comes
            if (running and ready and (self._round_future is None or self._round_future.done())
                    and self._own_output_fetched(poller, now)):
                batch = [(task, poller.take(tps)) for task, tps in self._due_tasks(subs, running, busy, now, due)]
                if batch:
                    self._cycle.started([task for task, _ in batch], now, work.commit_interval_s)
                    self._start_round(work, subs, settings, batch)
            return
        steps = []
        for task, tps in self._due_tasks(subs, running, busy, now, due):
            steps.append((task, Role.ACTIVE, poller.take(tps)))
            self._due[task] = now + work.commit_interval_s
        self._start_steps(work, subs, settings, steps)

    def _own_output_fetched(self, poller: InputPoller, now: float) -> bool:
        """Whether the poller fetched what the last round committed to partitions this runner
        reads (a repartition topic between two of its sub-topologies), or waited
        `OWN_OUTPUT_WAIT_S` for it. Those records become readable only once the round's
        transaction commits, a few milliseconds before the loop could start the next round: a
        round started then would leave them to the round after it. Once they are fetched, the
        tasks that read them follow up within the cycle (`CommitCycle`)."""
        offsets, since = self._own_output
        if not offsets:
            return True
        if now - since < OWN_OUTPUT_WAIT_S and not poller.fetched(offsets):
            return False
        self._own_output = ({}, 0.0)
        self._cycle.output_fetched(poller.reads(offsets))
        return True

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
                if len(tps) > 1 and not full and not poller.ready(tps):  # a join: wait for the other input
                    since = self._waiting.setdefault(task, now)
                    if now - since < MAX_TASK_IDLE_S:
                        continue
                self._waiting.pop(task, None)
                out.append((task, tps))
        return out

    # -- exactly-once: one transaction per round (protocol/fences.py) -------------------------------------

    def _committer_ready(self, work: ContinuousWork, settings: BatchSettings) -> bool:
        """Whether the runner's committer is there and valid for `work`; if not, start making one."""
        if self._committer is not None and self._committer_epoch >= work.fence_epoch:
            return True
        if self._committer is not None:  # the driver fenced this runner since: a new one, checked again
            self._drop_committer()
        future = self._committer_future
        if future is not None:
            if not future.done():
                return False
            self._committer_future = None
            if future.exception() is not None:
                log.error("making the runner's committer failed: %s", future.exception())
                self._committer_retry_at = time.monotonic() + RETRY_AFTER_S
            return self._committer is not None
        if work.fence_epoch > self._stale_epoch and time.monotonic() >= self._committer_retry_at:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=STEP_THREADS, thread_name_prefix="eddy-step")
            self._committer_future = self._pool.submit(self._make_committer, work, settings)
        return False

    def _make_committer(self, work: ContinuousWork, settings: BatchSettings) -> None:
        """A committer for this runner's transactional id (its init_transactions fences an earlier
        one), kept only if the fence topic holds no newer epoch for this executor than `work`'s."""
        executor = self.runner.executor_id
        committer = TaskCommitter(settings.app, runner_transactional_id(executor), settings.kafka,
                                  ProcessingGuarantee.EXACTLY_ONCE)
        try:
            epoch = read_epochs(settings.kafka, fence_topic(settings.app)).get(executor, 0)
        except Exception:
            committer.close()
            raise
        if epoch > work.fence_epoch:
            log.warning("generation %d is stale here (fence epoch %d, the driver's is %d): committing nothing "
                        "until newer work comes", work.generation, work.fence_epoch, epoch)
            committer.close()
            self._stale_epoch = work.fence_epoch
            self._committer_made.set()
            return
        log.info("runner committer ready for generation %d (fence epoch %d)", work.generation, work.fence_epoch)
        self._committer, self._committer_epoch = committer, work.fence_epoch
        self._committer_made.set()

    def _drop_committer(self) -> None:
        committer, self._committer = self._committer, None
        if committer is not None:  # a fenced producer's flush may wait: not on the loop's thread
            threading.Thread(target=_close_quietly, args=(committer,), name="eddy-committer-close",
                             daemon=True).start()

    def _start_round(self, work: ContinuousWork, subs: dict[int, SubTopology], settings: BatchSettings,
                     batch: list[tuple[str, list[RawRecords]]]) -> None:
        assert self._pool is not None and self._committer is not None
        future = self._pool.submit(self._guarded_round, work, subs, settings, batch, self._committer)
        self._round_future = future
        for task, _ in batch:
            self._inflight[task] = future

    def _guarded_round(self, work: ContinuousWork, subs: dict[int, SubTopology], settings: BatchSettings,
                       batch: list[tuple[str, list[RawRecords]]], committer: TaskCommitter) -> None:
        """Commit the round's tasks together (`TaskRunner.run_round`); a task a newer generation
        took away meanwhile is left out (whoever holds it now fetches its records again)."""
        with self._committing_tasks(work, [task for task, _ in batch], Role.ACTIVE) as (allowed, clean):
            entries = []
            for task, records in batch:
                item = self._process_item(task, records) if task in allowed else None
                if item is not None:
                    entries.append((item, records))
            if not entries:
                clean[0] = True
                return
            try:
                results = self.runner.run_round(subs, settings, entries, committer)
            except Exception:  # noqa: BLE001 - the loop goes on; the tasks read their positions again
                log.exception("a commit round failed")
                for item, _ in entries:  # their records were taken off the poller, and not committed
                    self.runner.forget_positions(item.task)
                results = []
            else:
                clean[0] = committer.usable and all(r.status in ("processed", "aborted") for r in results)
                if clean[0]:
                    self._own_output = (committer.delivered(), time.monotonic())
        if not committer.usable and self._committer is committer:
            log.warning("the runner's committer was fenced or broke: a new one is made and checked")
            self._drop_committer()
        for result in results:
            if result.status not in ("processed", "aborted"):
                log.warning("task %s: %s %s", result.task, result.status, result.message.splitlines()[:1])
                self._paused[result.task] = time.monotonic() + RETRY_AFTER_S
        if self.runner.metrics is not None:
            self.runner.metrics.observe(settings.app, results)
        with self._lock:
            if self._work is not None and self._work.generation == work.generation:
                for result in results:
                    self._results[result.task] = merge_results(self._results.get(result.task), result)

    def _busy(self) -> set[str]:
        """The tasks whose step has not finished (the finished ones forgotten)."""
        for task in [t for t, f in self._inflight.items() if f.done()]:
            del self._inflight[task]
        return set(self._inflight)

    def _start_steps(self, work: ContinuousWork, subs: dict[int, SubTopology], settings: BatchSettings,
                     steps: Sequence[tuple[str, Role, list[RawRecords] | None]]) -> None:
        """Start `steps` (one per task) on the pool and go on: each mostly waits on the broker (a
        transaction's commit, `init_transactions` of a task taken over, a changelog fetch), so
        tasks taken over in a failover open together, one task's commit does not hold up the
        next one's, and a standby's tail never delays an active's records. The loop polls while
        they run; a task's next step waits for its last one."""
        if self._pool is None and steps:
            self._pool = ThreadPoolExecutor(max_workers=STEP_THREADS, thread_name_prefix="eddy-step")
        for task, role, records in steps:
            assert self._pool is not None
            self._inflight[task] = self._pool.submit(self._guarded_step, work, subs, settings, task, role, records)

    def _guarded_step(self, work: ContinuousWork, subs: dict[int, SubTopology], settings: BatchSettings,
                      task: str, role: Role, records: list[RawRecords] | None) -> None:
        """`_step`, unless a newer generation took the task (or its role) away meanwhile: a step
        queued under the old work must not reopen a task the runner just released. A step that
        raises pauses its task as a failed one does."""
        with self._committing_tasks(work, [task], role) as (allowed, clean):
            if not allowed:
                clean[0] = True
                return
            try:
                clean[0] = self._step(work, subs, settings, task, role, records)
            except Exception:  # noqa: BLE001 - the loop goes on; this task retries later
                log.exception("task %s (%s): step failed", task, role)
                self._paused[task] = time.monotonic() + RETRY_AFTER_S

    def _taken(self, work: ContinuousWork, task: str, role: Role) -> bool:
        """Whether a newer generation than `work` took `task` (in `role`) from this runner (under `_lock`)."""
        current = self._work
        return current is not None and current.generation != work.generation and (task, role) not in current.tasks

    def _process_item(self, task: str, records: Sequence[RawRecords]) -> WorkItem | None:
        """The item that processes `records` (each from the task's position); None if the task
        was closed meanwhile (its records are fetched again)."""
        positions = self.runner.positions(task)
        if positions is None:
            return None
        return WorkItem(task, Role.ACTIVE, tuple(InputRange(r.topic, r.partition, positions[(r.topic, r.partition)],
                                                         r.next_offset) for r in records))

    def _inputs(self, subs: dict[int, SubTopology], task: str) -> list[TopicPartition]:
        tid = TaskId.parse(task)
        return [(topic, tid.partition) for topic in subs[tid.subtopology].input_topics]

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
        elif role == "active":
            ranges = tuple(InputRange(topic, p, -1, -1) for topic, p in self._inputs(subs, task))
        item = WorkItem(task, role, ranges, restore_only=records is None and role == "active")
        exactly_once = settings.guarantee == ProcessingGuarantee.EXACTLY_ONCE
        slot = SlotWork(self.runner.executor_id, (item,), runner_transactions=exactly_once)
        started = time.monotonic()
        result = replace(self.runner.run_item(subs, settings, slot, item, None, records),
                         duration_s=time.monotonic() - started)
        if result.status not in ("processed", "restoring", "standby"):
            log.warning("task %s (%s): %s %s", task, role, result.status, result.message.splitlines()[:1])
            self._paused[task] = time.monotonic() + RETRY_AFTER_S
        if self.runner.metrics is not None:
            self.runner.metrics.observe(settings.app, [result])
        with self._lock:
            if self._work is not None and self._work.generation == work.generation:
                self._results[task] = merge_results(self._results.get(task), result)
        return result.status in ("processed", "restoring", "standby", "aborted")



def _close_quietly(committer: TaskCommitter) -> None:
    try:
        committer.close()
    except Exception:  # noqa: BLE001 - a fenced or broken producer: nothing more to save
        log.debug("closing a dropped committer failed", exc_info=True)
