"""Rules 2 and 4, moving a copy without a gap (Kafka Streams' TaskMovement): an active goes to its
target only once the target has caught up; meanwhile the target gets a warmup, a copy that
exists only to catch up. The same holds for a standby that would have to restore (`standbys`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

from eddy_contract.assignment.client_state import ClientState
from eddy_contract.tasks import Role, task_sort_key


class PlannedMove(NamedTuple):
    """A copy of `task` in `role` belongs on `executor`, which has to catch up first."""

    task: str
    executor: str
    role: Role


def actual_actives(target: Mapping[str, str], clients: ClientState) -> dict[str, str]:
    """An active moves to its target only if the target is caught up; else it stays on a
    caught-up copy (its previous one first) and the target warms up; if no copy is caught
    up, the freshest copy takes it."""
    active: dict[str, str] = {}
    pending = []
    for t in target:
        if clients.caught_up(target[t], t):
            active[t] = target[t]
        elif (p := clients.holding(t)) is not None:
            active[t] = p
        else:
            pending.append(t)
    load = {e: 0 for e in clients.live}
    for e in active.values():
        if e in load:  # not a leaving executor
            load[e] += 1
    for t in pending:
        ups = [e for e in clients.live if clients.caught_up(e, t)]
        p, d = clients.previous_active(t), target[t]
        if ups:
            best = min(ups, key=lambda e: ((load[e] + 1) / clients.cores[e], clients.lag(e, t), e))  # noqa: B023
        else:
            best = min(clients.live, key=lambda e: (clients.lag(e, t), e != p, e != d, e))  # noqa: B023
        active[t] = best
        load[best] += 1
    return active


def place_warmups(
    moves: Sequence[PlannedMove],
    active: Mapping[str, str],
    standbys: Mapping[str, Sequence[str]],
    clients: ClientState,
    max_warmup_replicas: int,
) -> dict[str, list[str]]:
    """A warmup on a planned move's executor, at most one per task (Kafka Streams places one
    extra copy per task) and maxWarmupReplicas over the app: warmups under way keep their budget
    first, then actives' moves, then standbys'. A move left without a warmup waits: the copy
    stays where it is, and the move gets its warmup once the task's warmup has done its work."""
    order = sorted(moves, key=lambda m: (not clients.was_warmup(m.executor, m.task), m.role != Role.ACTIVE,
                                         task_sort_key(m.task), m.executor))
    budget = max_warmup_replicas
    warmups: dict[str, list[str]] = {}
    for t, e, _ in order:
        if e == active[t] or e in standbys.get(t, ()) or t in warmups:
            continue
        if budget <= 0:
            break
        warmups.setdefault(t, []).append(e)
        budget -= 1
    return warmups
