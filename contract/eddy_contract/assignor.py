"""The task assignor: which executor runs each task's active, its standbys and its warmups
(docs/DESIGN.md, "The operator's part": Assign).

A pure, deterministic function in the manner of Kafka Streams' HighAvailabilityTaskAssignor
(KIP-441) with rack-aware standbys (KIP-708, racks = zones). The operator calls it on every
executor change and publishes the result through `eddy_contract.channel`; the runtime's local
mode imports it directly (`from eddy_contract.assignor import assign, ...`), so this module must
stay free of kopf and the Kubernetes client.

The rules, in the order they are applied:

1. Actives are sticky: a task stays on its previous active executor while that executor is live
   and its copy is caught up (lag <= acceptableRecoveryLag).
2. Any other task (new, orphaned by a dead executor, or whose previous executor lost its state)
   goes to the freshest live copy - for a failover that is the freshest standby - with ties broken
   by the previous owner, then by load, then by executor id.
3. Balance: while one executor has at least two more actives than another, a task moves from the
   most loaded executor to a less loaded one, but only to a copy that is caught up; tasks placed
   in step 2 move before sticky ones.
4. Imbalance that remains is planned away with warmups: for each planned move the destination
   gets a warmup replica (a standby that exists only to catch up), at most maxWarmupReplicas over
   the whole app; previous warmups keep their place first. Once a warmup has caught up, step 3
   moves the active onto it.
5. Standbys: each task gets min(standbyReplicas, executors - 1) of them, never on an executor that
   already holds a copy of the task, preferring in order: a zone the task's copies do not use yet
   (KIP-708), the destination of a planned move (the standby then doubles as its warmup), a
   caught-up copy, the previous copy, the freshest copy, the executor with the fewest standbys.

Lag of an executor for a task = changelog end offset - the offset its volume holds (the sum over
the task's stores); an executor that holds nothing for the task has lag = end offset, i.e. a full
restore from the changelog's start. A stateless task has end offset 0 and lag 0 everywhere.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from eddy_contract.tasks import task_sort_key

__all__ = [
    "Assignment",
    "AssignmentError",
    "AssignorSettings",
    "Executor",
    "TaskAssignment",
    "TaskMove",
    "assign",
    "diff",
    "task_lag",
    "task_sort_key",
]


class AssignmentError(ValueError):
    """The inputs do not allow an assignment (no live executor, duplicate executor ids...)."""


@dataclass(frozen=True)
class Executor:
    """A live executor: its Spark executor id, its pod and the zone of its node (None if unknown)."""

    id: str
    pod: str = ""
    zone: str | None = None


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
    """Compute the next assignment.

    executors: the live executors. end_offsets: every task of the app with its changelog end
    offset (sum over its stores; 0 for a stateless task). held: per executor id, the offset each
    task's stores hold on that executor's volume. previous: the last published assignment, or
    None. The generation stays the same when nothing changed, otherwise goes up by one."""
    return _Assignor(executors, end_offsets, held, previous, settings).run()


def assign_app(
    executors: Sequence[Executor],
    end_offsets: Mapping[str, int],
    held: Mapping[str, Mapping[str, int]],
    previous: Assignment | None,
    settings: AssignorSettings,
    stateful: Collection[str],
) -> Assignment:
    """`assign` for a whole app: stateful and stateless tasks are balanced apart, as Kafka
    Streams does, and stateless tasks get no standbys.

    Balanced together, stateless tasks moving onto a new executor "balance" it, and the stateful
    ones never move back once its standbys have caught up. `stateful`: the tasks with stores.
    The generation stays the same when nothing changed, otherwise goes up by one."""
    tasks: dict[str, TaskAssignment] = {}
    stateless = set(end_offsets) - set(stateful)
    for group, standbys in ((set(end_offsets) & set(stateful), settings.standby_replicas), (stateless, 0)):
        if not group:
            continue
        before = None
        if previous is not None:
            before = Assignment(previous.generation,
                                MappingProxyType({t: a for t, a in previous.tasks.items() if t in group}))
        part = assign(executors, {t: end_offsets[t] for t in group}, held, before,
                      replace(settings, standby_replicas=standbys))
        tasks.update(part.tasks)
    if previous is not None and dict(previous.tasks) == tasks:
        return previous
    generation = previous.generation + 1 if previous is not None else 1
    return Assignment(generation, MappingProxyType(dict(sorted(tasks.items(), key=lambda kv: task_sort_key(kv[0])))))


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


class _Assignor:
    """One run of `assign`; holds the derived tables so the steps stay short."""

    def __init__(
        self,
        executors: Sequence[Executor],
        end_offsets: Mapping[str, int],
        held: Mapping[str, Mapping[str, int]],
        previous: Assignment | None,
        settings: AssignorSettings,
    ) -> None:
        if not executors:
            raise AssignmentError("no live executor to assign tasks to")
        ids = [e.id for e in executors]
        if len(set(ids)) != len(ids):
            raise AssignmentError(f"duplicate executor ids: {sorted(ids)}")
        self.live: tuple[str, ...] = tuple(sorted(ids))
        self.zone: dict[str, str | None] = {e.id: e.zone for e in executors}
        self.tasks: tuple[str, ...] = tuple(sorted(end_offsets, key=task_sort_key))
        self.order = {t: i for i, t in enumerate(self.tasks)}
        self.settings = settings
        self.previous = previous
        self.prev: dict[str, TaskAssignment] = dict(previous.tasks) if previous is not None else {}
        self.lag: dict[tuple[str, str], int] = {}
        for e in self.live:
            holds = held.get(e, {})
            for t in self.tasks:
                self.lag[(e, t)] = task_lag(end_offsets[t], holds.get(t))

    def caught_up(self, executor: str, task: str) -> bool:
        return self.lag[(executor, task)] <= self.settings.acceptable_recovery_lag

    def prev_active(self, task: str) -> str | None:
        p = self.prev.get(task)
        return p.active if p is not None else None

    def was_copy(self, executor: str, task: str) -> bool:
        p = self.prev.get(task)
        return p is not None and executor in p.copies

    def was_warmup(self, executor: str, task: str) -> bool:
        p = self.prev.get(task)
        return p is not None and executor in p.warmups

    def run(self) -> Assignment:
        active, sticky = self.place_actives()
        load = {e: 0 for e in self.live}
        for e in active.values():
            load[e] += 1
        self.balance(active, load, sticky)
        planned = self.plan_moves(active, load, sticky)
        standbys = self.place_standbys(active, planned)
        warmups = self.place_warmups(active, standbys, planned)
        tasks = {
            t: TaskAssignment(active[t], tuple(sorted(standbys[t])), tuple(sorted(warmups.get(t, ()))))
            for t in self.tasks
        }
        if self.previous is not None and dict(self.previous.tasks) == tasks:
            return self.previous
        generation = self.previous.generation + 1 if self.previous is not None else 1
        return Assignment(generation=generation, tasks=MappingProxyType(tasks))

    # Steps 1 and 2
    def place_actives(self) -> tuple[dict[str, str], set[str]]:
        active: dict[str, str] = {}
        sticky: set[str] = set()
        load = {e: 0 for e in self.live}
        for t in self.tasks:
            p = self.prev_active(t)
            if p in load and self.caught_up(p, t):
                active[t] = p
                sticky.add(t)
                load[p] += 1
        for t in self.tasks:
            if t in active:
                continue
            p = self.prev_active(t)

            def freshest(e: str, t: str = t, p: str | None = p) -> tuple[int, bool, int, str]:
                return (self.lag[(e, t)], e != p, load[e], e)

            best = min(self.live, key=freshest)
            active[t] = best
            load[best] += 1
        return active, sticky

    # Step 3
    def balance(self, active: dict[str, str], load: dict[str, int], sticky: set[str]) -> None:
        for t, _ in self._make_best_moves(active, load, sticky, caught_up_only=True, once_each=False):
            sticky.discard(t)

    def _make_best_moves(
        self, active: dict[str, str], load: dict[str, int], sticky: set[str], caught_up_only: bool, once_each: bool
    ) -> Iterator[tuple[str, str]]:
        """Make the best move (`_best_move`) on `active` and `load` until none is left, yielding
        each one; `once_each`: a task moves at most once."""
        moved: set[str] = set()
        while (move := self._best_move(active, load, sticky, caught_up_only, exclude=moved)) is not None:
            t, dst = move
            load[active[t]] -= 1
            load[dst] += 1
            active[t] = dst
            if once_each:
                moved.add(t)
            yield t, dst

    def _best_move(
        self,
        active: Mapping[str, str],
        load: Mapping[str, int],
        sticky: set[str],
        caught_up_only: bool,
        exclude: set[str],
    ) -> tuple[str, str] | None:
        """The move off the most loaded executor that has one; each move lowers the sum of
        squared loads, so repeating it ends."""
        by_executor: dict[str, list[str]] = {e: [] for e in self.live}
        for t in self.tasks:
            if t not in exclude:
                by_executor[active[t]].append(t)
        for src in sorted(self.live, key=lambda e: (-load[e], e)):
            best: tuple[tuple[object, ...], str, str] | None = None
            for dst in self.live:
                if load[dst] + 1 >= load[src]:
                    continue
                for t in by_executor[src]:
                    if caught_up_only and not self.caught_up(dst, t):
                        continue
                    key = (
                        not self.was_warmup(dst, t),
                        load[dst],
                        t in sticky,
                        self.lag[(dst, t)],
                        self.order[t],
                        dst,
                    )
                    if best is None or key < best[0]:
                        best = (key, t, dst)
            if best is not None:
                return best[1], best[2]
        return None

    # Step 4 (the plan; warmups are placed after the standbys)
    def plan_moves(self, active: Mapping[str, str], load: Mapping[str, int], sticky: set[str]) -> list[tuple[str, str]]:
        # Simulated on copies: the actives stay where they are until the warmups caught up.
        planned = list(self._make_best_moves(dict(active), dict(load), sticky, caught_up_only=False, once_each=True))
        # Warmups already under way keep their budget before new ones.
        planned.sort(key=lambda m: not self.was_warmup(m[1], m[0]))
        return planned

    # Step 5
    def place_standbys(self, active: Mapping[str, str], planned: Sequence[tuple[str, str]]) -> dict[str, list[str]]:
        wanted = min(self.settings.standby_replicas, len(self.live) - 1)
        destination = {t: dst for t, dst in planned}
        standby_load = {e: 0 for e in self.live}
        standbys: dict[str, list[str]] = {}
        for t in self.tasks:
            chosen: list[str] = []
            used_zones = {self.zone[active[t]]}
            for _ in range(wanted):
                candidates = [e for e in self.live if e != active[t] and e not in chosen]

                def preference(
                    e: str, t: str = t, used: set[str | None] = used_zones
                ) -> tuple[bool, bool, bool, bool, int, int, str]:
                    return (
                        self.zone[e] in used,
                        e != destination.get(t),
                        not self.caught_up(e, t),
                        not self.was_copy(e, t),
                        self.lag[(e, t)],
                        standby_load[e],
                        e,
                    )

                best = min(candidates, key=preference)
                chosen.append(best)
                used_zones.add(self.zone[best])
                standby_load[best] += 1
            standbys[t] = chosen
        return standbys

    def place_warmups(
        self,
        active: Mapping[str, str],
        standbys: Mapping[str, Iterable[str]],
        planned: Sequence[tuple[str, str]],
    ) -> dict[str, list[str]]:
        budget = self.settings.max_warmup_replicas
        warmups: dict[str, list[str]] = {}
        for t, dst in planned:
            # A standby on the destination catches up just as a warmup would.
            if dst == active[t] or dst in standbys[t] or dst in warmups.get(t, ()):
                continue
            if budget <= 0:
                break
            warmups.setdefault(t, []).append(dst)
            budget -= 1
        return warmups
