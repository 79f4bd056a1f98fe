"""When a runner's rounds start under exactly-once: `CommitCycle` (executor/continuous.py runs the rounds)."""

from __future__ import annotations

from collections.abc import Iterable

from eddy_runtime.kafka.partitions import TopicPartition

__all__ = ["CommitCycle"]


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
