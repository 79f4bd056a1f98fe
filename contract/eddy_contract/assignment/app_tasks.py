"""The app's tasks as the assignor's rules see them: in task order, which have stores, and the
stateful ones grouped by sub-topology (Kafka Streams balances actives per sub-topology)."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from eddy_contract.tasks import task_sort_key


class TaskGroup(NamedTuple):
    """The tasks balanced together: those of one sub-topology. A task id that is not of the form
    `S_P` has no sub-topology and is a group of its own, named by `odd_id`."""

    subtopology: int
    odd_id: str

    @classmethod
    def of(cls, task: str) -> TaskGroup:
        subtopology, _, odd_id = task_sort_key(task)
        return cls(subtopology, odd_id)


@dataclass(frozen=True)
class AppTasks:
    ordered: tuple[str, ...]
    stateful: frozenset[str]
    groups: Mapping[TaskGroup, tuple[str, ...]]  # the stateful tasks only, each group in task order

    @classmethod
    def of(cls, tasks: Collection[str], stateful: Collection[str]) -> AppTasks:
        """`stateful`: the tasks with stores (names that are not tasks of the app are ignored)."""
        ordered = tuple(sorted(tasks, key=task_sort_key))
        with_stores = frozenset(stateful) & frozenset(tasks)
        groups: dict[TaskGroup, list[str]] = {}
        for t in ordered:
            if t in with_stores:
                groups.setdefault(TaskGroup.of(t), []).append(t)
        return cls(ordered, with_stores, {g: tuple(ts) for g, ts in groups.items()})

    def stateful_in_order(self) -> list[str]:
        return [t for t in self.ordered if t in self.stateful]
