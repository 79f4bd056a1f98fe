"""The task assignor: which executor runs each task's active, its standbys and its warmups
(docs/DESIGN.md, "The operator's part": Assign).

A pure, deterministic function in the manner of Kafka Streams' HighAvailabilityTaskAssignor
(KIP-441) with rack-aware standbys (KIP-708, racks = zones). The operator calls it on every
executor change and publishes the result through `eddy_contract.channel`; the runtime's local
mode imports it directly (`from eddy_contract.assignor import assign, ...`), so this module must
stay free of kopf and the Kubernetes client.

The rules (Kafka Streams' guarantees; "balanced" = per core, loads differ by at most one):

1. Targets: where each stateful active belongs once every copy has caught up - balanced per
   sub-topology and in total, preferring caught-up copies, then the previous actives (those live
   and caught up, lag <= acceptableRecoveryLag), as far as that balance allows. Stateless
   tasks then fill up the least loaded executors (in total, then per sub-topology and kind).
2. An active goes to its target only if the target is caught up; else it stays on its previous
   executor if that is caught up, else on the least loaded caught-up copy, else (nobody caught
   up) on the freshest copy. A target that did not get its active is a planned move.
3. Standbys (stateful tasks only): min(standbyReplicas, executors - 1) each, never two copies on
   one executor, in a zone the task's copies do not use yet (KIP-708), else where stateful copies
   (actives + standbys) stay balanced. A standby that would have to restore gives way to a
   caught-up copy while one exists: the hot copy stays and the new place is a planned move.
4. Warmups: each planned move's destination gets a warmup (a copy that exists only to catch up),
   at most maxWarmupReplicas over the app, warmups under way first, then actives, then
   standbys. Once a warmup has caught up, rules 2 and 3 move the copy onto it.
5. Fixed point: the result, given back as `previous` with the same inputs, gives itself back
   (same generation); the rules are re-applied to their own result until that holds (at most
   _FIXED_POINT_ROUNDS times; the property tests find it within that).

Lag of an executor for a task = changelog end offset - the offset its volume holds (the sum over
the task's stores); an executor that holds nothing for the task has lag = end offset, i.e. a full
restore from the changelog's start. A stateless task has end offset 0 and lag 0 everywhere.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from eddy_contract.assignor_balance import Node, Placement, Plan
from eddy_contract.tasks import task_sort_key

__all__ = [
    "Assignment",
    "AssignmentError",
    "AssignorSettings",
    "Executor",
    "TaskAssignment",
    "TaskMove",
    "assign",
    "assign_app",
    "diff",
    "task_lag",
    "task_sort_key",
]


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


@dataclass(frozen=True)
class TaskMove:
    """One change between two generations, for events and logs.

    kind: `promoted` (a standby or warmup became the active), `moved` (the active went to an
    executor that held no copy), `assigned` (a new task), `standby-added`, `standby-removed`,
    `warmup-added`, `warmup-removed`, `removed` (the task no longer exists)."""

    task: str
    kind: str
    source: str | None
    target: str | None


def task_lag(end_offset: int, held_offset: int | None) -> int:
    """Records an executor must restore before its copy is current; `None`: it holds nothing."""
    if held_offset is None:
        return max(end_offset, 0)
    return max(end_offset - held_offset, 0)


def assign(
    executors: Sequence[Executor],
    end_offsets: Mapping[str, int],
    held: Mapping[str, Mapping[str, int]],
    previous: Assignment | None,
    settings: AssignorSettings,
) -> Assignment:
    """Compute the next assignment, every task treated as stateful (it gets standbys).

    executors: the live executors. end_offsets: every task of the app with its changelog end
    offset (sum over its stores; 0 for a stateless task). held: per executor id, the offset each
    task's stores hold on that executor's volume. previous: the last published assignment, or
    None. The generation stays the same when nothing changed, otherwise goes up by one."""
    return assign_app(executors, end_offsets, held, previous, settings, end_offsets)


def assign_app(
    executors: Sequence[Executor],
    end_offsets: Mapping[str, int],
    held: Mapping[str, Mapping[str, int]],
    previous: Assignment | None,
    settings: AssignorSettings,
    stateful: Collection[str],
) -> Assignment:
    """`assign` for a whole app: `stateful` are the tasks with stores; the others get no standbys
    and are balanced with them in total and apart per kind, as Kafka Streams does."""
    if not executors:
        raise AssignmentError("no live executor to assign tasks to")
    ids = [e.id for e in executors]
    if len(set(ids)) != len(ids):
        raise AssignmentError(f"duplicate executor ids: {sorted(ids)}")
    nodes = [Node(e.id, e.zone, e.cores) for e in executors]
    lag = {(e, t): task_lag(end, held.get(e, {}).get(t)) for e in ids for t, end in end_offsets.items()}
    kinds = set(stateful) & set(end_offsets)
    prev = {t: (a.active, a.standbys, a.warmups) for t, a in previous.tasks.items()} if previous else {}
    seen: list[dict[str, Placement]] = []
    while True:
        plan = Plan(nodes, lag, end_offsets, kinds, prev, settings.standby_replicas,
                    settings.acceptable_recovery_lag, settings.max_warmup_replicas).run()
        if plan == prev or plan in seen or len(seen) == _FIXED_POINT_ROUNDS:
            break
        seen.append(plan)
        prev = plan
    tasks = {t: TaskAssignment(*p) for t, p in plan.items()}
    if previous is not None and dict(previous.tasks) == tasks:
        return previous
    generation = previous.generation + 1 if previous is not None else 1
    return Assignment(generation, MappingProxyType(tasks))


_FIXED_POINT_ROUNDS = 8


def diff(previous: Assignment | None, current: Assignment) -> tuple[TaskMove, ...]:
    """What changed from `previous` to `current`, task by task in task order."""
    moves: list[TaskMove] = []
    before = dict(previous.tasks) if previous is not None else {}
    for task in sorted(set(before) | set(current.tasks), key=task_sort_key):
        old, new = before.get(task), current.tasks.get(task)
        if new is None:
            assert old is not None
            moves.append(TaskMove(task, "removed", old.active, None))
            continue
        if old is None:
            moves.append(TaskMove(task, "assigned", None, new.active))
        elif old.active != new.active:
            kind = "promoted" if new.active in old.standbys or new.active in old.warmups else "moved"
            moves.append(TaskMove(task, kind, old.active, new.active))
        old_standbys = set(old.standbys) if old else set()
        old_warmups = set(old.warmups) if old else set()
        for e in sorted(set(new.standbys) - old_standbys):
            moves.append(TaskMove(task, "standby-added", None, e))
        for e in sorted(old_standbys - set(new.standbys) - {new.active}):
            moves.append(TaskMove(task, "standby-removed", e, None))
        for e in sorted(set(new.warmups) - old_warmups):
            moves.append(TaskMove(task, "warmup-added", None, e))
        for e in sorted(old_warmups - set(new.warmups) - {new.active} - set(new.standbys)):
            moves.append(TaskMove(task, "warmup-removed", e, None))
    return tuple(moves)
