"""The tasks one runner holds (Kafka Streams' TaskManager): takes them (open, promote, recycle an
active let go of into a standby, reopen as a standby), hands a held copy to interactive queries,
lets go of them, closes them.

The work run on a task is the task runner's (executor/task_runner.py); the tasks themselves are
executor/tasks.py.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager

from eddy_contract.tasks import Role
from eddy_runtime.dsl.subtopology import SubTopology
from eddy_runtime.executor.commit import StateCommitter
from eddy_runtime.executor.metrics import ExecutorMetrics
from eddy_runtime.executor.tasks import StandbyTask, StreamTask, Task
from eddy_runtime.kafka.partitions import TopicPartition
from eddy_runtime.protocol.work import BatchSettings
from eddy_runtime.queries.server import LocalCopy
from eddy_runtime.state import StateDirectory

__all__ = ["TaskManager"]

log = logging.getLogger("eddy.runner")

#: how long an active let go of cleanly stays open for a standby of it here to recycle it (a move's
#: next generation comes 5-20 ms after the release, bench/handover.py)
RECYCLE_WITHIN_S = 10.0


class TaskManager:
    """Owns the tasks of one runner process; safe to use from any thread."""

    def __init__(self, executor_id: str, metrics: ExecutorMetrics | None) -> None:
        self.executor_id = executor_id
        self.metrics = metrics
        self._tasks: dict[str, Task] = {}
        self._lock = threading.Lock()
        #: the closes of tasks let go of in the background (`release`) under way, or timed
        self._closing: list[threading.Thread] = []
        #: actives let go of that a standby taken here may recycle (`release`'s `recycle`)
        self._recyclable: dict[str, StreamTask] = {}

    def get(self, task_id: str) -> Task | None:
        with self._lock:
            return self._tasks.get(task_id)

    def actives(self) -> list[str]:
        """The tasks held as actives."""
        with self._lock:
            return sorted(t for t, task in self._tasks.items() if isinstance(task, StreamTask))

    def active(self, task_id: str) -> StreamTask | None:
        """The held active of `task_id`, if any."""
        task = self.get(task_id)
        return task if isinstance(task, StreamTask) else None

    def take(self, settings: BatchSettings, sub: SubTopology, task_id: str, role: Role,
             runner_transactions: bool = False) -> Task:
        """The held task in `role`: opened, promoted from standby, recycled from an active let go
        of (`release`), or reopened as a standby. `runner_transactions`: it commits through the
        runner's transactions (`SlotWork`)."""
        task = self.get(task_id) or self._recycled(task_id)
        if task is not None and task.role == role:
            return task
        if isinstance(task, StandbyTask) and role == Role.ACTIVE:
            with task.lock:
                log.info("promoting task %s from standby", task_id)
                active = task.promote()  # IllegalTaskTransition if it was closed meanwhile
                with self._lock:
                    if self._tasks.get(task_id) is task:
                        self._tasks[task_id] = active
                return active
        if task is not None:
            self.close_now(task_id, "becomes a standby here")
        opened = StateCommitter.open(
            settings.app,
            task_id,
            list(sub.stores),
            settings.state_dir_for(self.executor_id),
            settings.kafka,
            role=role,
            guarantee=settings.guarantee,
            lock_timeout=5.0,
            fence_task_producer=not runner_transactions,
        )
        log.info("opened task %s as %s", task_id, role)
        task = StreamTask(task_id, opened) if role == Role.ACTIVE else StandbyTask(task_id, opened)
        with self._lock:
            self._tasks[task_id] = task
        return task

    # -- letting go ---------------------------------------------------------------------------

    def release_unheld(self, held: Mapping[str, str]) -> None:
        """Close now every task the driver no longer assigns here (not in `held`)."""
        with self._lock:
            gone = [t for t in [*self._tasks, *self._recyclable] if t not in held]
        for task_id in gone:
            self.close_now(task_id, "no longer assigned here")

    def release(self, task_id: str, why: str, recycle: bool = False) -> None:
        """Let go of a held task now and close it on a thread of its own (it is opened again, and
        restores its delta, if it comes back). From here on a step finds the task not held and
        opens it anew, which waits on the task directory's lock for the close to end; a released
        stateful task so costs the release no flush, checkpoint or Kafka client close.

        `recycle` (an active whose last round committed cleanly): a stateful one stays open for
        `RECYCLE_WITHIN_S` instead, and a standby of it taken here meanwhile is this task,
        recycled in place (`StreamTask.demote`): a move that swaps an active and its standby
        closes and reopens no store (Kafka Streams' recycling of tasks). Closed if not taken."""
        with self._lock:
            task = self._tasks.pop(task_id, None)
            if task is None:
                return
            if recycle and isinstance(task, StreamTask) and task.state.stores:
                self._recyclable[task_id] = task
                closing: threading.Thread = threading.Timer(RECYCLE_WITHIN_S, self._close_unrecycled, (task, why))
            else:
                closing = threading.Thread(target=self._close_let_go, args=(task, why))
            closing.daemon = True
            closing.name = f"eddy-close-{task_id}"
            self._closing = [c for c in self._closing if c.is_alive()] + [closing]
        closing.start()

    def _recycled(self, task_id: str) -> StandbyTask | None:
        """The standby an active let go of with `recycle` becomes, if it is still open (else None)."""
        with self._lock:
            active = self._recyclable.pop(task_id, None)
        if active is None:
            return None
        with active.lock:
            if active.closed:
                return None
            try:
                standby = active.demote(self.metrics)
            except Exception:  # noqa: BLE001 - a copy opened anew instead
                log.exception("recycling task %s into a standby failed; it is opened anew", task_id)
                if not active.closed:
                    active.close(self.metrics)  # its lock is held here (`_close_let_go` would wait for it)
                return None
        with self._lock:
            self._tasks[task_id] = standby
        return standby

    def _close_unrecycled(self, task: StreamTask, why: str) -> None:
        with self._lock:
            if self._recyclable.get(task.task_id) is not task:
                return
            del self._recyclable[task.task_id]
        self._close_let_go(task, f"{why}, not taken back as a standby within {RECYCLE_WITHIN_S:.0f} s")

    def close_now(self, task_id: str, why: str) -> None:
        """Let go of a held task (or one kept open for recycling) and close it on this thread."""
        with self._lock:
            task = self._tasks.pop(task_id, None) or self._recyclable.pop(task_id, None)
        if task is not None:
            self._close_let_go(task, why)

    def _close_let_go(self, task: Task, why: str) -> None:
        """Close a task no longer held (waits for whatever runs on it)."""
        with task.lock:
            log.info("closing task %s (%s): %s", task.task_id, task.role, why)
            if not task.closed:
                task.close(self.metrics)

    def holding(self, stores: Collection[str]) -> list[str]:
        """The held tasks (actives and standbys) with one of `stores`."""
        with self._lock:
            held = [*self._tasks.items(), *self._recyclable.items()]
        return sorted(t for t, task in held if not task.closed and set(task.state.stores) & set(stores))

    def wipe_stores(self, state_dir: str, app: str, stores: Collection[str], lock_timeout_s: float = 30.0) -> list[str]:
        """Delete `stores` from every task directory of `app` under `state_dir` (each under its
        task's lock: a copy open here or in another process is closed first, or this waits for
        it); the task directories that held one. A task closed in the background (`release`)
        holds its lock until its close ends."""
        volume = StateDirectory(state_dir)
        app_dir = volume.path / app
        wiped = []
        for task_id in sorted(p.name for p in app_dir.iterdir() if p.is_dir()) if app_dir.is_dir() else []:
            directory = volume.task_directory(app, task_id)
            doomed = [s for s in directory.stores() if s in stores]
            if not doomed:
                continue
            with directory.lock(timeout=lock_timeout_s):
                for store in doomed:
                    directory.wipe_store(store)
            log.info("task %s: dropped its copies of %s (a state reset)", task_id, doomed)
            wiped.append(task_id)
        return wiped

    def close_failed(self, task: Task) -> None:
        """Close a task that failed or was fenced (its lock held by the caller). Only this copy:
        the runner may hold a newer one of the same task by now."""
        with self._lock:
            if self._tasks.get(task.task_id) is task:
                del self._tasks[task.task_id]
        if not task.closed:
            task.close(self.metrics)

    def close_all(self) -> None:
        """Close every held task, and wait for the closes under way in the background."""
        with self._lock:
            held = [*self._tasks, *self._recyclable]
        for task_id in held:
            self.close_now(task_id, "runner closing")
        with self._lock:
            closing, self._closing = self._closing, []
        for c in closing:  # the tasks let go of before
            if isinstance(c, threading.Timer):
                c.cancel()  # its task was closed above
            else:
                c.join()

    # -- what others read ---------------------------------------------------------------------

    @contextmanager
    def reading(self, task_id: str, store: str) -> Iterator[LocalCopy | None]:
        """A held copy of `task_id`'s `store` for an interactive query, kept open while it reads."""
        task = self.get(task_id)
        if task is None:
            yield None
            return
        with task.read_lock:
            m = task.state
            if task.closed or store not in m.stores:
                yield None
                return
            if task.role == Role.ACTIVE:
                lag = 0 if m.restored else m.progress.remaining
                copy = LocalCopy(task_id, self.executor_id, Role.ACTIVE, lag, m.restored, m.store(store))
            else:
                copy = LocalCopy(task_id, self.executor_id, Role.STANDBY, m.standby_lag or 0, True, m.store(store))
            yield copy

    def lag(self, task_id: str, role: Role) -> int | None:
        """How far the held copy of `task_id` in `role` is behind: an active's records left to
        restore, a standby's changelog records not yet read; None while it is not held (or a
        standby that has not tailed yet)."""
        task = self.get(task_id)
        if task is None or task.closed or task.role != role:
            return None
        m = task.state
        if role == Role.ACTIVE:
            return 0 if m.restored else m.progress.remaining
        return m.standby_lag

    def positions(self, task_id: str) -> dict[TopicPartition, int] | None:
        """A running active's input positions: None unless held open as an active, restored, with
        its committed positions read."""
        task = self.active(task_id)
        if task is None or not task.state.restored:
            return None
        return task.positions

    def forget_positions(self, task_id: str) -> None:
        """Read the task's committed positions again before it processes more (records taken for
        it were not committed)."""
        task = self.active(task_id)
        if task is not None:
            task.forget_positions()
