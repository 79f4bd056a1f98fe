"""When a runner's rounds start under exactly-once: `CommitCycle` (executor/continuous.py runs the rounds)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple, Protocol

from eddy_runtime.kafka.partitions import TopicPartition

__all__ = ["OWN_OUTPUT_WAIT_S", "CommitCycle", "RoundOutput"]

#: how long a round waits past its due time for the poller to fetch what the round before it
#: committed to partitions this runner reads (`CommitCycle.own_output_fetched`)
OWN_OUTPUT_WAIT_S = 0.05


class RoundOutput(NamedTuple):
    """What the last round committed (partition -> its last offset there), and when (one value,
    so the loop's thread never sees one without the other)."""

    offsets: Mapping[TopicPartition, int]
    committed_at: float


class Fetches(Protocol):
    """What the cycle asks of the input poller (executor/input_poller.py)."""

    def fetched(self, offsets: Mapping[TopicPartition, int]) -> bool: ...

    def reads(self, offsets: Mapping[TopicPartition, int]) -> list[TopicPartition]: ...


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

    A task that has just started running here (taken over from another runner, promoted, or
    restored: `joined`) takes its first round as soon as its records are fetched, without
    waiting for the next cycle: its records have waited since its last owner's last round, a
    hand-over's whole pause, and a commit interval more would only add to it.
    """

    def __init__(self) -> None:
        #: when the next cycle starts (monotonic seconds)
        self.due_at = 0.0
        #: the partitions whose readers may follow up now, and the tasks that did in this cycle
        self._fetched: frozenset[TopicPartition] = frozenset()
        self._followed: set[str] = set()
        #: what the last round committed: the next round first waits for the poller to fetch the
        #: part of it this runner reads
        self.last_output = RoundOutput({}, 0.0)
        #: tasks that started running and have had no round yet
        self._joined: set[str] = set()

    def joined(self, task: str) -> None:
        """`task` started running here: its first round is due at once."""
        self._joined.add(task)

    def due(self, task: str, tps: Iterable[TopicPartition]) -> float:
        """When `task` (reading `tps`) may next take a round, if its records wait."""
        if task in self._joined:
            return 0.0
        if self._fetched and task not in self._followed and not self._fetched.isdisjoint(tps):
            return 0.0
        return self.due_at

    def started(self, tasks: Iterable[str], now: float, interval_s: float) -> None:
        """A round of `tasks` started at `now`: a new cycle if the last one is over, else a follow-up."""
        tasks = list(tasks)
        self._joined.difference_update(tasks)
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

    def round_committed(self, offsets: Mapping[TopicPartition, int], now: float) -> None:
        """A round committed cleanly at `now`, its records' last offsets per partition `offsets`."""
        self.last_output = RoundOutput(offsets, now)

    def own_output_fetched(self, poller: Fetches, now: float) -> bool:
        """Whether the poller fetched what the last round committed to partitions this runner
        reads (a repartition topic between two of its sub-topologies), or waited
        `OWN_OUTPUT_WAIT_S` for it. Those records become readable only once the round's
        transaction commits, a few milliseconds before the loop could start the next round: a
        round started then would leave them to the round after it. Once they are fetched, the
        tasks that read them follow up within the cycle."""
        offsets, since = self.last_output
        if not offsets:
            return True
        if now - since < OWN_OUTPUT_WAIT_S and not poller.fetched(offsets):
            return False
        self.last_output = RoundOutput({}, 0.0)
        self.output_fetched(poller.reads(offsets))
        return True
