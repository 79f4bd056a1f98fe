"""What the assignor knows of its clients, the live executors (Kafka Streams' ClientState): their
zones and cores, each one's lag for every task, and where the previous assignment put every copy.

A leaving executor (its node is being drained) is live but takes no new copy: it is not in `live`
or `cores`, only in `leaving`; an active it holds caught up stays on it (`holding`) until its
target elsewhere has caught up, so it hands each task over to a warm copy.

Lag of an executor for a task = changelog end offset - the offset its volume holds; a copy is
caught up when that is within acceptableRecoveryLag. An active that runs (it took the previous
assignment and is not restoring) has lag 0 whatever the figures say, as in Kafka Streams, where a
running active reports its offsets as "latest": the end offset and the offset held are read at
different moments while it writes, so its figure is noise that, past acceptableRecoveryLag, would
move it away from a balanced assignment and back again (seen at 2,000 records/s with a lag of 100:
six generations in nine seconds).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

from eddy_contract.assignment.model import Executor, TaskAssignment, task_lag


@dataclass(frozen=True)
class ClientState:
    live: tuple[str, ...]  # executor ids that may take copies, sorted
    zone: Mapping[str, str | None]
    cores: Mapping[str, int]
    lags: Mapping[str, Mapping[str, int]]  # executor -> task -> lag
    previous: Mapping[str, TaskAssignment]  # task -> its copies in the previous assignment
    acceptable_recovery_lag: int
    leaving: frozenset[str] = frozenset()  # live executors that keep only what they must hand over

    @classmethod
    def observe(
        cls,
        executors: Sequence[Executor],
        end_offsets: Mapping[str, int],
        held: Mapping[str, Mapping[str, int]],
        previous: Mapping[str, TaskAssignment],
        acceptable_recovery_lag: int,
        leaving: Collection[str] = (),
        running: Collection[tuple[str, str]] = (),
    ) -> ClientState:
        """`held`: per executor, the offset each task's stores hold on its volume; `leaving`: the
        executors to empty (if every executor is leaving, none is: someone has to run the tasks);
        `running`: (executor, task) of actives that run, caught up by definition (lag 0)."""
        gone = frozenset(leaving) & {e.id for e in executors}
        if len(gone) == len(executors):
            gone = frozenset()
        staying = [e for e in executors if e.id not in gone]
        runs = frozenset(running)
        lags = {e.id: {t: 0 if (e.id, t) in runs else task_lag(end, held.get(e.id, {}).get(t))
                       for t, end in end_offsets.items()}
                for e in executors}
        return cls(
            live=tuple(sorted(e.id for e in staying)),
            zone={e.id: e.zone for e in executors},
            cores={e.id: e.cores for e in staying},
            lags=lags,
            previous=previous,
            acceptable_recovery_lag=acceptable_recovery_lag,
            leaving=gone,
        )

    def lag(self, executor: str, task: str) -> int:
        return self.lags[executor][task]

    def caught_up(self, executor: str, task: str) -> bool:
        return self.lag(executor, task) <= self.acceptable_recovery_lag

    def previous_active(self, task: str) -> str | None:
        p = self.previous.get(task)
        return p.active if p is not None else None

    def was_copy(self, executor: str, task: str) -> bool:
        p = self.previous.get(task)
        return p is not None and executor in p.copies

    def was_standby(self, executor: str, task: str) -> bool:
        p = self.previous.get(task)
        return p is not None and executor in p.standbys

    def was_warmup(self, executor: str, task: str) -> bool:
        p = self.previous.get(task)
        return p is not None and executor in p.warmups

    def sticky(self, task: str) -> str | None:
        """The previous active, if it is live and caught up: the task should stay there."""
        p = self.previous_active(task)
        return p if p is not None and p in self.cores and self.caught_up(p, task) else None

    def holding(self, task: str) -> str | None:
        """The previous active, if it is live (leaving or not) and caught up: the task may stay there
        until its target has caught up."""
        p = self.previous_active(task)
        return p if p is not None and (p in self.cores or p in self.leaving) and self.caught_up(p, task) else None

    def as_balanced(self, counts: Mapping[str, int], src: str, dst: str) -> bool:
        """One of `counts` (per executor) may leave `src` for `dst` as balanced: neither one's count
        per core leaves the range the two spanned (with equal cores: they trade counts, or come
        closer)."""
        a, b = counts[src] / self.cores[src], counts[dst] / self.cores[dst]
        return (counts[dst] + 1) / self.cores[dst] <= a and (counts[src] - 1) / self.cores[src] >= b

    def freshest(self, task: str) -> Callable[[str], tuple[bool, int, bool, str]]:
        """Order executors for `task`: caught up, then least lag, then a previous copy, then id."""
        return lambda e: (not self.caught_up(e, task), self.lag(e, task), not self.was_copy(e, task), e)
