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
   and caught up, lag <= acceptableRecoveryLag), then previous copies, then the copies with the
   least to restore (Kafka Streams ranks by lag), as far as that balance allows. Stateless
   tasks then fill up the least loaded executors (in total, then per sub-topology and kind), and
   stay on their previous executor wherever that is as balanced. So a balanced previous
   assignment with every copy caught up comes back unchanged.
2. An active goes to its target only if the target is caught up; else it stays on its previous
   executor if that is caught up, else on the least loaded caught-up copy, else (nobody caught
   up) on the freshest copy. A target that did not get its active is a planned move.
3. Standbys (stateful tasks only): min(standbyReplicas, executors - 1) each, never two copies on
   one executor, in a zone the task's copies do not use yet (KIP-708), else where stateful copies
   (actives + standbys) stay balanced. A standby that would have to restore gives way to a
   caught-up copy while one exists: the hot copy stays and the new place is a planned move.
4. Warmups: a planned move's destination gets a warmup (a copy that exists only to catch up),
   at most one per task (Kafka Streams' one extra copy) and maxWarmupReplicas over the app,
   warmups under way first, then actives, then standbys; a move left without one waits. Once a
   warmup has caught up, rules 2 and 3 move the copy onto it.
5. Leaving executors (their node is drained) take no new copy: their stateless actives and their
   standbys go elsewhere at once, and each stateful active they hold stays (rule 2's "previous
   caught-up executor") until its target elsewhere has caught up, a warmup there first if need
   be. So a drained executor hands each task to a warm copy, and holds nothing once it has.
6. Fixed point: the result, given back as `previous` with the same inputs, gives itself back
   (same generation); the rules are re-applied to their own result until that holds (at most
   _FIXED_POINT_ROUNDS times; the property tests find it within that).

Lag of an executor for a task = changelog end offset - the offset its volume holds (the sum over
the task's stores); an executor that holds nothing for the task has lag = end offset, i.e. a full
restore from the changelog's start. A stateless task has end offset 0 and lag 0 everywhere. An
active that runs (`running`: the runtime took the previous generation and the active is not
restoring; `running_actives`) has lag 0, as a Kafka Streams active reports its offsets as
"latest": its figures are read while it writes, and judged on them it would flap between two
caught-up executors.

Each rule is a module of `eddy_contract.assignment` (rule 1: `active_targets`, `caught_up_swaps`,
`stateless`; 2 and 4: `task_movement`; 3: `standbys`, `standby_balance`); `plan` runs them once.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from types import MappingProxyType

from eddy_contract.assignment.app_tasks import AppTasks
from eddy_contract.assignment.client_state import ClientState
from eddy_contract.assignment.model import (
    Assignment,
    AssignmentError,
    AssignorSettings,
    Executor,
    TaskAssignment,
    task_lag,
)
from eddy_contract.assignment.moves import MoveKind, TaskMove, diff
from eddy_contract.assignment.plan import plan
from eddy_contract.tasks import task_sort_key

__all__ = [
    "Assignment",
    "AssignmentError",
    "AssignorSettings",
    "Executor",
    "MoveKind",
    "TaskAssignment",
    "TaskMove",
    "assign",
    "assign_app",
    "diff",
    "running_actives",
    "task_lag",
    "task_sort_key",
]


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
    leaving: Collection[str] = (),
    running: Collection[tuple[str, str]] = (),
) -> Assignment:
    """`assign` for a whole app: `stateful` are the tasks with stores; the others get no standbys
    and are balanced with them in total and apart per kind, as Kafka Streams does. `leaving`: live
    executors to empty (rule 5). `running`: (executor, task) of the previous actives that run,
    taken as caught up whatever their figures (`running_actives`)."""
    if not executors:
        raise AssignmentError("no live executor to assign tasks to")
    ids = [e.id for e in executors]
    if len(set(ids)) != len(ids):
        raise AssignmentError(f"duplicate executor ids: {sorted(ids)}")
    tasks = AppTasks.of(end_offsets, stateful)
    prev = dict(previous.tasks) if previous is not None else {}
    clients = ClientState.observe(executors, end_offsets, held, prev, settings.acceptable_recovery_lag, leaving,
                                  running)
    seen: list[dict[str, TaskAssignment]] = []
    while True:
        placed = plan(tasks, clients, settings)
        if placed == prev or placed in seen or len(seen) == _FIXED_POINT_ROUNDS:
            break
        seen.append(placed)
        prev = placed
        clients = replace(clients, previous=prev)
    if previous is not None and dict(previous.tasks) == placed:
        return previous
    generation = previous.generation + 1 if previous is not None else 1
    return Assignment(generation, MappingProxyType(placed))


def running_actives(previous: Assignment | None, generation_run: int | None,
                    restoring: Collection[tuple[str, str]]) -> set[tuple[str, str]]:
    """(executor, task) of `previous`'s actives that run: the runtime runs that generation
    (`generation_run`) and none of them is among `restoring` (executor, task). A generation not
    taken yet has no running actives: the copies it promoted may still have to catch up."""
    if previous is None or generation_run != previous.generation:
        return set()
    gone = set(restoring)
    return {(a.active, t) for t, a in previous.tasks.items() if (a.active, t) not in gone}


# Rule 6: the property tests find the fixed point within this many rounds.
_FIXED_POINT_ROUNDS = 8
