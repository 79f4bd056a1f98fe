"""The tasks a runner holds (Kafka Streams' StreamTask and StandbyTask), each with a checked
lifecycle.

A `StreamTask` is an active: its state and committer (`StateCommitter`), what its processing keeps
between batches, and the input positions it committed. A `StandbyTask` tails its changelogs and
is promoted into a `StreamTask` that keeps its stores; an active let go of cleanly is demoted
into a `StandbyTask` that keeps them too. `TaskLifecycle` is the state of either;
every transition is checked, and an illegal one raises `IllegalTaskTransition`. The tasks are
owned by the `TaskManager` (executor/task_manager.py).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from enum import Enum
from typing import ClassVar

from eddy_contract.tasks import Role
from eddy_runtime.executor.commit import StateCommitter
from eddy_runtime.executor.metrics import ExecutorMetrics
from eddy_runtime.kafka.partitions import TopicPartition
from eddy_runtime.processing.batch import TaskState
from eddy_runtime.state import ProcessorStateManager

__all__ = ["IllegalTaskTransition", "StandbyTask", "StreamTask", "Task", "TaskLifecycle"]

log = logging.getLogger("eddy.runner")


class TaskLifecycle(Enum):
    """Where a held task is (Kafka Streams' ``Task.State``, without SUSPENDED: a task let go of is
    closed, or an active recycled into a standby: `StreamTask.demote`)."""

    #: opened (its directory locked, its stores open), nothing run yet
    CREATED = "created"
    #: an active whose stores are behind their changelogs
    RESTORING = "restoring"
    #: an active that processes, or a standby that tails its changelogs
    RUNNING = "running"
    #: closed (or, a standby, promoted into a `StreamTask`): nothing runs on it any more
    CLOSED = "closed"


_TRANSITIONS: dict[TaskLifecycle, frozenset[TaskLifecycle]] = {
    TaskLifecycle.CREATED: frozenset({TaskLifecycle.RESTORING, TaskLifecycle.RUNNING, TaskLifecycle.CLOSED}),
    # and back: a commit whose outcome in Kafka is unknown has the stores checked again
    TaskLifecycle.RESTORING: frozenset({TaskLifecycle.RUNNING, TaskLifecycle.CLOSED}),
    TaskLifecycle.RUNNING: frozenset({TaskLifecycle.RESTORING, TaskLifecycle.CLOSED}),
    TaskLifecycle.CLOSED: frozenset(),
}


class IllegalTaskTransition(RuntimeError):
    """A task was asked to go where its lifecycle does not lead (a bug in the runner)."""


class Task:
    """What an active and a standby share: the opened state, the locks, the lifecycle."""

    role: ClassVar[Role]

    def __init__(self, task_id: str, opened: StateCommitter, *, lock: threading.Lock | None = None,
                 read_lock: threading.Lock | None = None) -> None:
        self.task_id = task_id
        #: the task's state and the committer its batches commit through
        self.opened = opened
        #: held by whatever runs on the task (a step, a round, its close)
        self.lock = lock or threading.Lock()
        #: held by interactive queries while they read the stores, and by `close`
        self.read_lock = read_lock or threading.Lock()
        self.lifecycle = TaskLifecycle.CREATED
        #: what processing keeps between batches (stream time, a process() step's processor),
        #: stream time starting from what the window stores hold
        self.processing = TaskState()
        for store in opened.state.stores.values():
            if store.spec.kind == "window":
                self.processing.stream_time = store.offsets.stream_time

    @property
    def state(self) -> ProcessorStateManager:
        return self.opened.state

    @property
    def closed(self) -> bool:
        return self.lifecycle == TaskLifecycle.CLOSED

    def transition(self, to: TaskLifecycle) -> None:
        """Go to `to`; raises `IllegalTaskTransition` unless the lifecycle leads there."""
        if to not in _TRANSITIONS[self.lifecycle]:
            raise IllegalTaskTransition(f"task {self.task_id} ({self.role}): {self.lifecycle.value} -> {to.value}")
        self.lifecycle = to

    def close(self, metrics: ExecutorMetrics | None) -> None:
        """Close the task (its `lock` held): no query reads its stores from here on."""
        with self.read_lock:
            self.transition(TaskLifecycle.CLOSED)
            if metrics is not None:
                metrics.forget(self.state.app, self.task_id, list(self.state.stores))
            self.drop_processor()
            try:
                self.opened.close()
            except Exception:  # noqa: BLE001 - the lock is released by close() even on errors
                log.exception("closing task %s failed", self.task_id)

    def drop_processor(self) -> None:
        """Close and forget a process() step's processor: the next batch makes a new one, which
        reads stream time and its schedules from the committed stores, not from a batch that did
        not commit."""
        held, self.processing.processor = self.processing.processor, None
        if held is not None:
            try:
                held.processor.close()
            except Exception:  # noqa: BLE001 - the user's close: logged, the task goes on
                log.exception("task %s: the processor's close() raised", self.task_id)


class StreamTask(Task):
    """An active task: restores, then processes and commits its batches."""

    role = Role.ACTIVE

    def __init__(self, task_id: str, opened: StateCommitter, *, lock: threading.Lock | None = None,
                 read_lock: threading.Lock | None = None) -> None:
        super().__init__(task_id, opened, lock=lock, read_lock=read_lock)
        #: input positions this runner committed (or found committed when it opened the task);
        #: None until read (`read_positions`), and again after a batch that did not commit
        self.positions: dict[TopicPartition, int] | None = None

    def check_restored(self) -> bool:
        """Whether the stores hold everything their changelogs have; the task goes RUNNING if
        so, else RESTORING (its lock held)."""
        restored = self.state.restored
        now = TaskLifecycle.RUNNING if restored else TaskLifecycle.RESTORING
        if self.lifecycle != now:
            self.transition(now)
        return restored

    def read_positions(self, partitions: Iterable[TopicPartition],
                       handed: Mapping[TopicPartition, int] | None = None) -> dict[TopicPartition, int]:
        """The positions, read from the group's committed offsets unless known, or `handed` over
        by the task's last owner when it let go of it (protocol/work.py's `ContinuousWork.handed`:
        what it committed last, which the group holds once that transaction's markers are
        written); `handed` must name every partition.

        A task that commits on its own fenced any older instance when it opened; a task on its
        runner's transactions is moved only after the driver released or fenced its last runner
        (protocol/fences.py). Either way, from here on only this runner moves them."""
        if self.positions is None:
            partitions = list(partitions)
            if handed is not None and all(tp in handed for tp in partitions):
                self.positions = {tp: handed[tp] for tp in partitions}
            else:
                self.positions = self.opened.committed_offsets(partitions)
        return self.positions

    def forget_positions(self) -> None:
        """Read the positions again before the task processes more (what it took did not commit)."""
        self.positions = None

    def demote(self, metrics: ExecutorMetrics | None) -> StandbyTask:
        """The standby this active becomes once let go of cleanly (its lock held; Kafka Streams
        recycles a task so): the same stores, restore consumer and locks, its committer closed,
        tailing its changelogs from what its stores hold (`ProcessorStateManager.demote`). This
        active is CLOSED from here on; its state lives on in the standby returned, which reads
        its positions afresh if it is promoted again."""
        if self.closed:
            raise IllegalTaskTransition(f"task {self.task_id}: a closed active is not recycled")
        if metrics is not None:
            metrics.forget(self.state.app, self.task_id, list(self.state.stores))
        self.drop_processor()
        self.opened.demote()
        standby = StandbyTask(self.task_id, self.opened, lock=self.lock, read_lock=self.read_lock)
        with self.read_lock:
            self.transition(TaskLifecycle.CLOSED)
        return standby


class StandbyTask(Task):
    """A standby task: tails its changelogs; `promote` turns it into the active."""

    role = Role.STANDBY

    def tailing(self) -> None:
        """The standby tails (RUNNING from its first tail on)."""
        if self.lifecycle == TaskLifecycle.CREATED:
            self.transition(TaskLifecycle.RUNNING)

    def promote(self) -> StreamTask:
        """The active this standby becomes (its lock held): the same stores and locks, its
        committer made first (it fences zombies), then only the delta restored. This standby is
        CLOSED from here on; its state lives on in the task returned."""
        if self.closed:
            raise IllegalTaskTransition(f"task {self.task_id}: a closed standby is not promoted")
        self.state.promote()
        active = StreamTask(self.task_id, self.opened, lock=self.lock, read_lock=self.read_lock)
        active.processing = self.processing
        with self.read_lock:
            self.transition(TaskLifecycle.CLOSED)
        return active
