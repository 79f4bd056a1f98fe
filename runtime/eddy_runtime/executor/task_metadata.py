"""Per-task bookkeeping of the continuous loop (Kafka Streams' TaskExecutionMetadata): when each
task is next due, its back-off after a failure, how long a join waits for its other input, and
the step it has under way.
"""

from __future__ import annotations

import time
from concurrent.futures import Future

__all__ = ["MAX_TASK_IDLE_S", "RETRY_AFTER_S", "TaskExecutionMetadata"]

#: a task that failed (or was fenced) waits this long before it is opened again, unless a newer
#: generation names it
RETRY_AFTER_S = 2.0
#: a task with two inputs (a join) waits at most this long for one of them to be fetched
MAX_TASK_IDLE_S = 0.5


class TaskExecutionMetadata:
    """Due times, back-offs, input waits and steps under way, per task (the loop's thread, and the
    steps that back their task off)."""

    def __init__(self) -> None:
        #: task -> monotonic time before which it is not run (failed, fenced, stopped at a bad record)
        self.backed_off: dict[str, float] = {}
        #: task -> when its next open, restore, tail (or, at-least-once, process) step is due
        self.due: dict[str, float] = {}
        #: task -> since when it waits for one of its inputs to be fetched (`InputPoller.ready`)
        self.waiting: dict[str, float] = {}
        #: task -> its step running (or queued) on the pool; a task takes one step at a time
        self.inflight: dict[str, Future[None]] = {}
        #: actives that started running here in this generation: positions handed over with them
        #: (`ContinuousWork.handed`) no longer hold
        self.handed_taken: set[str] = set()

    def back_off(self, task: str) -> None:
        """`task` failed: it is not run for `RETRY_AFTER_S` (unless a new generation comes)."""
        self.backed_off[task] = time.monotonic() + RETRY_AFTER_S

    def new_generation(self) -> None:
        """A new generation: every task may run at once, a standby it promotes too (its next tail
        was up to a commit interval away: that long more of a hand-over's pause)."""
        self.backed_off.clear()
        self.due.clear()
        self.handed_taken.clear()

    def busy(self) -> set[str]:
        """The tasks whose step has not finished (the finished ones forgotten)."""
        for task in [t for t, f in self.inflight.items() if f.done()]:
            del self.inflight[task]
        return set(self.inflight)

    def waits_for_input(self, task: str, now: float) -> bool:
        """Whether `task` (a join whose other input is not fetched yet) still waits for it: for
        at most `MAX_TASK_IDLE_S` since it began to."""
        since = self.waiting.setdefault(task, now)
        return now - since < MAX_TASK_IDLE_S

    def stop_waiting(self, task: str) -> None:
        self.waiting.pop(task, None)
