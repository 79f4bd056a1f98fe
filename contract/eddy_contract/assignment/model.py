"""The assignor's inputs and output: live executors, the settings, and one generation's
assignment (where each task's active, standbys and warmups live).

Shared by the operator, which publishes an assignment through `eddy_contract.channel`, and the
runtime, which carries it out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType


class AssignmentError(ValueError):
    """The inputs do not allow an assignment (no live executor, duplicate executor ids...)."""


@dataclass(frozen=True)
class Executor:
    """A live executor: its Spark executor id, its pod, the zone of its node (None if unknown)
    and its cores, which weight its share of the load (Kafka Streams weights by stream threads)."""

    id: str
    pod: str = ""
    zone: str | None = None
    cores: int = 1

    def __post_init__(self) -> None:
        if self.cores < 1:
            raise AssignmentError(f"executor {self.id} has {self.cores} cores; it needs at least 1")


@dataclass(frozen=True)
class AssignorSettings:
    standby_replicas: int = 1
    acceptable_recovery_lag: int = 10000
    max_warmup_replicas: int = 2

    def __post_init__(self) -> None:
        if self.standby_replicas < 0 or self.acceptable_recovery_lag < 0 or self.max_warmup_replicas < 0:
            raise AssignmentError(f"settings must not be negative: {self}")


@dataclass(frozen=True)
class TaskAssignment:
    """Where one task's copies live: the active, hot standbys, and warmups that are catching up."""

    active: str
    standbys: tuple[str, ...] = ()
    warmups: tuple[str, ...] = ()

    @property
    def copies(self) -> tuple[str, ...]:
        return (self.active, *self.standbys, *self.warmups)


@dataclass(frozen=True)
class Assignment:
    """One generation of the app's assignment. `tasks` maps task id (`S_P`) to its placement."""

    generation: int
    tasks: Mapping[str, TaskAssignment] = field(default_factory=lambda: MappingProxyType({}))

    def active_tasks(self, executor: str) -> tuple[str, ...]:
        return tuple(t for t, a in self.tasks.items() if a.active == executor)

    def standby_tasks(self, executor: str) -> tuple[str, ...]:
        return tuple(t for t, a in self.tasks.items() if executor in a.standbys)

    def warmup_tasks(self, executor: str) -> tuple[str, ...]:
        return tuple(t for t, a in self.tasks.items() if executor in a.warmups)

    def executors(self) -> tuple[str, ...]:
        """Every executor named by this assignment, sorted."""
        return tuple(sorted({e for a in self.tasks.values() for e in a.copies}))


def task_lag(end_offset: int, held_offset: int | None) -> int:
    """Records an executor must restore before its copy is current; `None`: it holds nothing."""
    if held_offset is None:
        return max(end_offset, 0)
    return max(end_offset - held_offset, 0)
